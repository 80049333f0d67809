package relay

import (
	"net/url"
	"strings"
	"testing"
)

func TestRelayPath(t *testing.T) {
	for escaped, want := range map[string]checkedPath{
		"/mod/events":                  {"events", "events"},
		"/mod/sessions/42/commands":    {"sessions/42/commands", "sessions/42/commands"},
		"/mod/files/a%20b":             {"files/a b", "files/a%20b"},
		"/mod/files/%61bc":             {"files/abc", "files/abc"},
		"/mod/files/a;b":               {"files/a;b", "files/a%3Bb"},
		"/mod/files/%C3%A9t%C3%A9.txt": {"files/été.txt", "files/%C3%A9t%C3%A9.txt"},
	} {
		got, err := relayPath(escaped, "/mod/")
		if err != nil || got != want {
			t.Errorf("relayPath(%q) = %+v, %v; want %+v", escaped, got, err, want)
		}
	}
	for _, escaped := range []string{
		"/mod/", "/mod", "/other/events", "/mod//events", "/mod/events/", "/mod/./events", "/mod/../admin",
		"/mod/%2e%2e/admin", "/mod/%2E%2E", "/mod/a%2fb", "/mod/a%2Fb", "/mod/a%5cb", "/mod/a\\b", "/mod/a%00b",
		"/mod/a%0d%0aX-Injected:%201", "/mod/%zz", "/mod/a%7f",
	} {
		got, err := relayPath(escaped, "/mod/")
		if err == nil {
			t.Errorf("relayPath(%q) accepted: %+v", escaped, got)
		} else if !strings.HasPrefix(err.Error(), "cproxy: ") {
			t.Errorf("relayPath(%q): %v", escaped, err)
		}
	}
}

// FuzzRelayPath checks the relay path check on any input: an accepted path
// has only non-empty segments that are not "." or "..", holds no backslash
// or control character, and its escaped form decodes back to it.
func FuzzRelayPath(f *testing.F) {
	for _, s := range []string{"/mod/events", "/mod/a%2fb", "/mod/%2e%2e/x", "/mod/a;b", "/mod//x", "/mod/a%00", "/mod/%C3%A9"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, escaped string) {
		p, err := relayPath(escaped, "/mod/")
		if err != nil {
			return
		}
		for _, seg := range strings.Split(p.path, "/") {
			if seg == "" || seg == "." || seg == ".." || strings.ContainsAny(seg, "\\") || strings.IndexFunc(seg, isControl) >= 0 {
				t.Fatalf("%q accepted as %q", escaped, p.path)
			}
		}
		dec, err := url.PathUnescape(p.raw)
		if err != nil || dec != p.path || strings.Count(p.raw, "/") != strings.Count(p.path, "/") {
			t.Fatalf("%q: raw %q does not decode to %q", escaped, p.raw, p.path)
		}
	})
}

// A relay path segment that is not UTF-8 is refused: %c0%af is an overlong
// '/', which an upstream that decodes it leniently would take as a path
// separator, so the path it serves would not be the one cproxy checked.
// (Found by the core's TestAdversarialPaths: such segments used to be forwarded.)
func TestAdversarialPathsRelayInvalidUTF8(t *testing.T) {
	for _, escaped := range []string{"/mod/%c0%af", "/mod/a%c0%af..%c0%afadmin", "/mod/%c0%ae%c0%ae/x", "/mod/%ff", "/mod/a%e2%82"} {
		if p, err := relayPath(escaped, "/mod/"); err == nil {
			t.Errorf("relayPath(%q) accepted: %+v", escaped, p)
		}
	}
	if p, err := relayPath("/mod/%C3%A9t%C3%A9", "/mod/"); err != nil || p.path != "été" {
		t.Errorf("valid UTF-8 refused: %+v %v", p, err)
	}
}
