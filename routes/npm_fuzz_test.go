package routes

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// FuzzParseNPMPath checks the npm path parser's promises on any input: an
// accepted request names a valid package, its upstream path is canonical
// (no dot segments, no encoding but the scope's %2f) and parsing cproxy's
// own path for it gives the same request back.
func FuzzParseNPMPath(f *testing.F) {
	for _, s := range []string{
		"/npm/react", "/npm/@types%2fnode", "/npm/@types/node", "/npm/@types%2Fnode",
		"/npm/react/-/react-18.2.0.tgz", "/npm/@a/b/-/b-1.0.0-rc.1.tgz", "/npm/-/ping",
		"/npm/%2e%2e", "/npm/@a%2f..%2f..", "/npm/a/-/a-1.0.0.tgz%2f..", "/npm/-/v1/search",
		"/npm/@a%252fb", "/npm/react/-rev/1",
	} {
		f.Add("GET", s)
	}
	f.Add("PUT", "/npm/react")
	f.Fuzz(func(t *testing.T, method, path string) {
		n, err := parseNPMPath(method, path, "")
		if err != nil {
			if !strings.HasPrefix(err.Error(), "cproxy: ") {
				t.Fatalf("refusal without cproxy's prefix: %q", err)
			}
			return
		}
		if method != http.MethodGet {
			t.Fatalf("%s %s accepted", method, path)
		}
		if n.kind == npmPing {
			return
		}
		if !validNPMName(n.name) {
			t.Fatalf("%s: invalid name %q accepted", path, n.name)
		}
		tg := n.target()
		for _, seg := range strings.Split(tg.path, "/") {
			if seg == "." || seg == ".." {
				t.Fatalf("%s: dot segment upstream: %q", path, tg.path)
			}
		}
		if strings.ContainsAny(tg.path, "%?#\\ ") {
			t.Fatalf("%s: upstream path %q holds an unsafe character", path, tg.path)
		}
		if tg.rawPath != "" {
			if p, err := url.PathUnescape(tg.rawPath); err != nil || p != tg.path {
				t.Fatalf("%s: raw path %q is not path %q encoded", path, tg.rawPath, tg.path)
			}
		}
		again, err := parseNPMPath(http.MethodGet, n.proxyPath(), "")
		if err != nil || again != n {
			t.Fatalf("%s: own path %q parses to %+v, %v; want %+v", path, n.proxyPath(), again, err, n)
		}
		if n.kind == npmTarball && !strings.HasPrefix(n.file, n.baseName()+"-") {
			t.Fatalf("%s: tarball %q not of %s", path, n.file, n.name)
		}
	})
}
