package gitcred

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const testToken = "cpx_sandbox"

func TestGitCredential(t *testing.T) {
	dir := t.TempDir()
	file := func(name, content string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	rotated := file("rotated", "cpx_fromfile\n", 0o600)
	crlf := file("crlf", "cpx_fromfile\r\n", 0o600)
	shared := file("shared", "cpx_fromfile", 0o644)
	twoLines := file("twolines", "cpx_fromfile\nsecret-second-line\n", 0o600)
	spaced := file("spaced", "cpx from file\n", 0o600)
	empty := file("empty", "\n", 0o600)
	huge := file("huge", strings.Repeat("x", tokenFileLimit+1), 0o600)
	missing := filepath.Join(dir, "missing")

	basic := "username=cproxy\npassword=" + testToken + "\n"
	bearer := "capability[]=authtype\nauthtype=Bearer\ncredential=" + testToken + "\n"
	tests := []struct {
		name     string
		env      map[string]string // added to CPROXY_URL=http://10.20.30.4:8080, CPROXY_TOKEN=cpx_sandbox
		op, in   string
		code     int
		out, err string
	}{
		{name: "ours", op: "get", in: "protocol=http\nhost=10.20.30.4:8080\n\n", out: basic},
		{name: "ours with path, no blank line", op: "get", in: "protocol=http\nhost=10.20.30.4:8080\npath=github/acme/app.git\n", out: basic},
		{name: "CRLF lines", op: "get", in: "protocol=http\r\nhost=10.20.30.4:8080\r\n\r\n", out: basic},
		{name: "stops at the blank line", op: "get", in: "protocol=http\nhost=10.20.30.4:8080\n\nhost=github.com\n", out: basic},
		{name: "host case", op: "get", in: "protocol=HTTP\nhost=10.20.30.4:8080\n\n", out: basic},
		{name: "url attribute", op: "get", in: "url=http://10.20.30.4:8080/github/acme/app.git\n\n", out: basic},
		{name: "unknown attributes ignored", op: "get", in: "protocol=http\nhost=10.20.30.4:8080\nwwwauth[]=Basic realm=\"cproxy\"\nstate[]=x\nusername=someone\n\n", out: basic},

		// git 2.46 and later.
		{name: "authtype capability", op: "get", in: "capability[]=authtype\ncapability[]=state\nprotocol=http\nhost=10.20.30.4:8080\n\n", out: bearer},
		{name: "capability list cleared", op: "get", in: "capability[]=authtype\ncapability[]=\nprotocol=http\nhost=10.20.30.4:8080\n\n", out: basic},
		{name: "other capability only", op: "get", in: "capability[]=state\nprotocol=http\nhost=10.20.30.4:8080\n\n", out: basic},

		// Not ours: silent, status 1.
		{name: "github.com", op: "get", in: "protocol=https\nhost=github.com\n\n", code: 1},
		{name: "other port", op: "get", in: "protocol=http\nhost=10.20.30.4:9001\n\n", code: 1},
		{name: "no port", op: "get", in: "protocol=http\nhost=10.20.30.4\n\n", code: 1},
		{name: "https to our host", op: "get", in: "protocol=https\nhost=10.20.30.4:8080\n\n", code: 1},
		{name: "no protocol", op: "get", in: "host=10.20.30.4:8080\n\n", code: 1},
		{name: "empty input", op: "get", in: "", code: 1},
		{name: "no CPROXY_URL", env: map[string]string{"CPROXY_URL": ""}, op: "get", in: "protocol=http\nhost=10.20.30.4:8080\n\n", code: 1},
		{name: "CPROXY_URL not a URL", env: map[string]string{"CPROXY_URL": "10.20.30.4:8080"}, op: "get", in: "protocol=http\nhost=10.20.30.4:8080\n\n", code: 1},
		{name: "no token", env: map[string]string{"CPROXY_TOKEN": ""}, op: "get", in: "protocol=http\nhost=10.20.30.4:8080\n\n", code: 1},

		// Default ports.
		{name: "default port in CPROXY_URL", env: map[string]string{"CPROXY_URL": "http://proxy:80"}, op: "get", in: "protocol=http\nhost=proxy\n\n", out: basic},
		{name: "default port in request", env: map[string]string{"CPROXY_URL": "https://proxy"}, op: "get", in: "protocol=https\nhost=proxy:443\n\n", out: basic},

		// cproxy under a path prefix.
		{name: "under the prefix", env: map[string]string{"CPROXY_URL": "https://gw.internal/cproxy/"}, op: "get", in: "protocol=https\nhost=gw.internal\npath=cproxy/github/acme/app.git\n\n", out: basic},
		{name: "the prefix itself", env: map[string]string{"CPROXY_URL": "https://gw.internal/cproxy"}, op: "get", in: "protocol=https\nhost=gw.internal\npath=cproxy\n\n", out: basic},
		{name: "no path sent", env: map[string]string{"CPROXY_URL": "https://gw.internal/cproxy"}, op: "get", in: "protocol=https\nhost=gw.internal\n\n", out: basic},
		{name: "outside the prefix", env: map[string]string{"CPROXY_URL": "https://gw.internal/cproxy"}, op: "get", in: "protocol=https\nhost=gw.internal\npath=other/acme/app.git\n\n", code: 1},
		{name: "prefix of a segment", env: map[string]string{"CPROXY_URL": "https://gw.internal/cproxy"}, op: "get", in: "protocol=https\nhost=gw.internal\npath=cproxy2/github\n\n", code: 1},
		{name: "dot-dot out of the prefix", env: map[string]string{"CPROXY_URL": "https://gw.internal/cproxy"}, op: "get", in: "protocol=https\nhost=gw.internal\npath=cproxy/../admin\n\n", code: 1},
		{name: "empty path sent", env: map[string]string{"CPROXY_URL": "https://gw.internal/cproxy"}, op: "get", in: "protocol=https\nhost=gw.internal\npath=\n\n", code: 1},

		// CPROXY_TOKEN_FILE, read at each call, wins over CPROXY_TOKEN.
		{name: "token file", env: map[string]string{"CPROXY_TOKEN_FILE": rotated}, op: "get", in: "protocol=http\nhost=10.20.30.4:8080\n\n", out: "username=cproxy\npassword=cpx_fromfile\n"},
		{name: "token file with CRLF", env: map[string]string{"CPROXY_TOKEN_FILE": crlf}, op: "get", in: "protocol=http\nhost=10.20.30.4:8080\n\n", out: "username=cproxy\npassword=cpx_fromfile\n"},
		{name: "token file readable by others", env: map[string]string{"CPROXY_TOKEN_FILE": shared, "CPROXY_TOKEN": ""}, op: "get", in: "capability[]=authtype\nprotocol=http\nhost=10.20.30.4:8080\n\n", out: "capability[]=authtype\nauthtype=Bearer\ncredential=cpx_fromfile\n"},
		{name: "token file not read for another host", env: map[string]string{"CPROXY_TOKEN_FILE": missing}, op: "get", in: "protocol=https\nhost=github.com\n\n", code: 1},
		{name: "token file missing", env: map[string]string{"CPROXY_TOKEN_FILE": missing}, op: "get", in: "protocol=http\nhost=10.20.30.4:8080\n\n", code: 1,
			err: "git-credential-cproxy: CPROXY_TOKEN_FILE: open " + missing + ": no such file or directory\n"},
		{name: "token file two lines", env: map[string]string{"CPROXY_TOKEN_FILE": twoLines}, op: "get", in: "protocol=http\nhost=10.20.30.4:8080\n\n", code: 1,
			err: "git-credential-cproxy: CPROXY_TOKEN_FILE " + twoLines + ": not a token (want one line of printable ASCII)\n"},
		{name: "token file with spaces", env: map[string]string{"CPROXY_TOKEN_FILE": spaced}, op: "get", in: "protocol=http\nhost=10.20.30.4:8080\n\n", code: 1,
			err: "git-credential-cproxy: CPROXY_TOKEN_FILE " + spaced + ": not a token (want one line of printable ASCII)\n"},
		{name: "token file empty", env: map[string]string{"CPROXY_TOKEN_FILE": empty}, op: "get", in: "protocol=http\nhost=10.20.30.4:8080\n\n", code: 1,
			err: "git-credential-cproxy: CPROXY_TOKEN_FILE " + empty + " is empty\n"},
		{name: "token file huge", env: map[string]string{"CPROXY_TOKEN_FILE": huge}, op: "get", in: "protocol=http\nhost=10.20.30.4:8080\n\n", code: 1,
			err: "git-credential-cproxy: CPROXY_TOKEN_FILE " + huge + ": not a token (over 4096 bytes)\n"},
		{name: "token file is a directory", env: map[string]string{"CPROXY_TOKEN_FILE": dir}, op: "get", in: "protocol=http\nhost=10.20.30.4:8080\n\n", code: 1,
			err: "git-credential-cproxy: CPROXY_TOKEN_FILE: read " + dir + ": is a directory\n"},
		{name: "token with a line break", env: map[string]string{"CPROXY_TOKEN": "cpx_a\nhost=evil"}, op: "get", in: "protocol=http\nhost=10.20.30.4:8080\n\n", code: 1,
			err: "git-credential-cproxy: CPROXY_TOKEN is not a token (want one word of printable ASCII)\n"},

		// Malformed input; the line is not quoted back.
		{name: "line without =", op: "get", in: "protocol=http\npassword secret\n\n", code: 1,
			err: "git-credential-cproxy: malformed credential line (want key=value)\n"},
		{name: "line too long", op: "get", in: "protocol=http\npath=" + strings.Repeat("a", credentialLineLimit) + "\n\n", code: 1,
			err: "git-credential-cproxy: credential line over 16384 bytes\n"},

		// store and erase do nothing; unknown operations are ignored.
		{name: "store is a no-op", op: "store", in: "protocol=http\nhost=10.20.30.4:8080\nusername=cproxy\npassword=x\n\n"},
		{name: "erase is a no-op", op: "erase", in: "protocol=http\nhost=10.20.30.4:8080\n\n"},
		{name: "store for another host", op: "store", in: "protocol=https\nhost=github.com\nusername=u\npassword=p\n\n"},
		{name: "unknown operation", op: "capability", in: "x=y\n"},
		{name: "unknown operation, junk input", op: "frobnicate", in: "junk without equals\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{"CPROXY_URL": "http://10.20.30.4:8080", "CPROXY_TOKEN": testToken}
			for k, v := range tc.env {
				env[k] = v
			}
			var stdout, stderr bytes.Buffer
			code := run([]string{tc.op}, strings.NewReader(tc.in), &stdout, &stderr, func(k string) string { return env[k] })
			if code != tc.code || stdout.String() != tc.out || stderr.String() != tc.err {
				t.Errorf("got status %d, stdout %q, stderr %q\nwant status %d, stdout %q, stderr %q",
					code, stdout.String(), stderr.String(), tc.code, tc.out, tc.err)
			}
			if strings.Contains(stderr.String(), "secret") || strings.Contains(stderr.String(), testToken) {
				t.Errorf("stderr quotes a secret: %q", stderr.String())
			}
		})
	}
}

// TestGitCredentialRereadsTokenFile pins rotation: a harness that rewrites
// the file between two git commands gets the new token to the second.
func TestGitCredentialRereadsTokenFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	env := map[string]string{"CPROXY_URL": "http://h:1", "CPROXY_TOKEN": "cpx_stale", "CPROXY_TOKEN_FILE": path}
	for _, token := range []string{"cpx_first", "cpx_second"} {
		if err := os.WriteFile(path, []byte(token+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		if err := Answer("get", strings.NewReader("protocol=http\nhost=h:1\n\n"), &out, func(k string) string { return env[k] }); err != nil {
			t.Fatal(err)
		}
		if want := "username=cproxy\npassword=" + token + "\n"; out.String() != want {
			t.Fatalf("got %q, want %q", out.String(), want)
		}
	}
}

func TestGitCredentialMainUsage(t *testing.T) {
	for _, args := range [][]string{nil, {"get", "extra"}} {
		var stdout, stderr bytes.Buffer
		code := run(args, strings.NewReader(""), &stdout, &stderr, func(string) string { return "" })
		want := "git-credential-cproxy: usage: git-credential-cproxy get|store|erase (git runs this; see gitcredentials(7))\n"
		if code != 2 || stdout.Len() != 0 || stderr.String() != want {
			t.Errorf("%q: status %d, stdout %q, stderr %q", args, code, stdout.String(), stderr.String())
		}
	}
}

func FuzzGitCredential(f *testing.F) {
	f.Add("get", "protocol=http\nhost=h:1\n\n")
	f.Add("get", "capability[]=authtype\nprotocol=http\nhost=h:1\npath=p/github/x\n\n")
	f.Add("get", "url=http://h:1/p/../q\n")
	f.Add("get", "=\n\x00\r\n")
	f.Add("store", "protocol=http\nhost=h:1\n\n")
	f.Fuzz(func(t *testing.T, op, in string) {
		var out bytes.Buffer
		env := map[string]string{"CPROXY_URL": "http://h:1/p", "CPROXY_TOKEN": "cpx_t"}
		err := Answer(op, strings.NewReader(in), &out, func(k string) string { return env[k] })
		switch out.String() {
		case "":
		case "username=cproxy\npassword=cpx_t\n", "capability[]=authtype\nauthtype=Bearer\ncredential=cpx_t\n":
			if err != nil {
				t.Fatalf("wrote %q and failed: %v", out.String(), err)
			}
			if op != "get" {
				t.Fatalf("%q answered %q", op, out.String())
			}
			req, _ := readCredentialRequest(strings.NewReader(in))
			if !strings.EqualFold(req.protocol, "http") || !strings.EqualFold(hostPort("http", req.host), "h:1") {
				t.Fatalf("answered for %q://%q", req.protocol, req.host)
			}
			if p := strings.Trim(req.path, "/"); req.hasPath && (p != "p" && !strings.HasPrefix(p, "p/") || strings.Contains("/"+p+"/", "/../")) {
				t.Fatalf("answered for path %q", req.path)
			}
		default:
			t.Fatalf("unexpected output %q", out.String())
		}
	})
}
