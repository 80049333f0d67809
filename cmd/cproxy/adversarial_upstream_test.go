package main

// The adversarial suite's header spellings and doubled Locations: the real
// `cproxy serve`, every route in front of recording upstreams, and real
// clients (git, curl) where the client's choice is the point.

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// advInjected marks every value a request below smuggles in a header
// spelling cproxy must drop: no upstream may receive it.
const advInjected = "INJECTED"

// advSpelledHeaders are dropped headers in the spellings a server that
// folds '_' into '-' (CGI, WSGI, Rack) reads as the real ones, in mixed
// case, and with a dot; the credential look-alikes carry the sandbox token.
func advSpelledHeaders(tok string) []string {
	v := advInjected
	return []string{
		"X_HTTP_METHOD_OVERRIDE: DELETE " + v, "X_Http_Method_Override: DELETE " + v, "x_method_override: DELETE " + v,
		"X_HTTP_Method: DELETE " + v, "X_Original_Method: DELETE " + v, "X_Forwarded_Method: DELETE " + v,
		"X_Original_URL: /admin " + v, "X_ORIGINAL_URI: /admin " + v, "x_rewrite_url: /admin " + v, "X_Forwarded_Uri: /admin " + v,
		"X_Forwarded_For: 10.0.0.1 " + v, "X_FORWARDED_HOST: evil.example " + v, "x_forwarded_proto: https " + v,
		"X-Forwarded-Port: 443 " + v, "X-Forwarded-Server: evil.example " + v, "X.Forwarded.For: 10.0.0.1 " + v,
		"X_Real_IP: 10.0.0.1 " + v, "True_Client_IP: 10.0.0.1 " + v, "Cf_Connecting_Ip: 10.0.0.1 " + v,
		"X_Original_Forwarded_For: 10.0.0.1 " + v,
		"X_Api_Key: " + tok + " " + v, "X_API_KEY: " + tok + " " + v, "Proxy_Authorization: Bearer " + tok + " " + v,
	}
}

// TestAdversarialHeaderSpellings: on every route that forwards, a request
// carrying the headers cproxy drops in underscore, mixed-case and dotted
// spellings reaches its upstream without any of them, and without the
// sandbox token, while an ordinary header with an underscore passes.
func TestAdversarialHeaderSpellings(t *testing.T) {
	t.Parallel()
	s, rec, _ := advServeAll(t)
	t.Cleanup(func() { advNoSecrets(t, "serve's log", s.stderr.String()) })
	tok := s.mint("conv-1")
	for _, c := range []struct {
		route, method, target, body string
		upstream                    string // the request target the upstream must receive
	}{
		{"model", "POST", "/v1/messages", advHello, "POST /anthropic/v1/messages"},
		{"github", "GET", "/github/acme/app.git/info/refs?service=git-upload-pack", "", "GET /gh/acme/app.git/info/refs?service=git-upload-pack"},
		{"githubapi", "GET", "/api/v3/repos/acme/app", "", "GET /ghapi/repos/acme/app"},
		{"npm", "GET", "/npm/left-pad", "", "GET /reg/left-pad"},
		{"relay", "GET", "/mod/events", "", "GET /hub/events"},
	} {
		t.Run(c.route, func(t *testing.T) {
			raw := advRequest(c.method, c.target, tok, c.body)
			head, rest, _ := strings.Cut(raw, "\r\n\r\n")
			raw = head + "\r\n" + strings.Join(advSpelledHeaders(tok), "\r\n") + "\r\nX_Kept_Header: kept\r\n\r\n" + rest
			n := len(rec.requests())
			r := advRaw(t, advAddr(s.proxy), raw)
			got := rec.requests()[n:]
			if len(got) != 1 || got[0] != c.upstream {
				t.Fatalf("answered %d %q; the upstream received %q, want %q", r.status, r.body, got, c.upstream)
			}
			rec.mu.Lock()
			h := rec.hdr[n]
			rec.mu.Unlock()
			for k, vs := range h {
				for _, v := range vs {
					if strings.Contains(v, advInjected) || strings.Contains(v, "cpx_") {
						t.Errorf("the upstream received %s: %s", k, v)
					}
				}
			}
			if v := h.Get("X_kept_header"); v != "kept" {
				t.Errorf("the upstream received X_Kept_Header %q, want kept: an ordinary header was dropped", v)
			}
		})
	}
}

// advTwoLocations is an upstream that answers every request 302 with two
// Location headers: an empty one, then one to another host. curl, and so
// git, skips the empty one and follows the other.
func advTwoLocations(t *testing.T, other string) *advRecorder {
	r := &advRecorder{}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		r.got = append(r.got, req.Method+" "+req.RequestURI)
		r.mu.Unlock()
		w.Header()["Location"] = []string{"", other}
		w.WriteHeader(http.StatusFound)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

// TestAdversarialTwoLocations: an upstream's redirect with two Location
// headers, an empty one then one to another host, is refused on the github
// route (real git, which would follow the second), on a relay (curl -L,
// likewise) and on the model route, which keeps no redirect on cproxy: the
// client gets cproxy's 502 naming the problem, and the other host hears
// nothing.
func TestAdversarialTwoLocations(t *testing.T) {
	t.Parallel()
	other, otherLog := rawHTTPOtherHost(t)
	up := advTwoLocations(t, other.URL+"/steal")
	dir := t.TempDir()
	advWrite(t, dir, fmt.Sprintf(`
[upstream.anthropic]
url = "%[1]s/anthropic"
credential = "file:anthropic.key"

[upstream.github]
url = "%[1]s/gh"
credential = "file:github.key"

[relay.mod]
prefix = "/mod/"
url = "%[1]s/hub/"
methods = ["GET"]
paths = ["events"]
`, up.srv.URL), `
[profile.default]
models = ["claude-*"]
repos = [{ repo = "acme/app", access = "read" }]
relays = ["mod"]
`)
	s := startServe(t, dir)
	t.Cleanup(func() { advNoSecrets(t, "serve's log", s.stderr.String()) })
	tok := s.mint("conv-1")
	want := "the upstream " + strings.TrimPrefix(up.srv.URL, "http://") + " answered 302 with 2 Location headers, which cproxy does not pass on"

	t.Run("git", func(t *testing.T) {
		work := t.TempDir()
		cmd := exec.Command("git", "-c", "http.extraHeader=Authorization: Bearer "+tok, "clone", s.proxy+"/github/acme/app.git", filepath.Join(work, "app"))
		cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1", "HOME="+work, "GIT_TERMINAL_PROMPT=0")
		out, err := cmd.CombinedOutput()
		advNoSecrets(t, "git's output", string(out))
		if err == nil {
			t.Fatalf("git clone succeeded:\n%s", out)
		}
		if !strings.Contains(string(out), "cproxy: github route: "+want) {
			t.Errorf("git did not print cproxy's refusal:\n%s", out)
		}
	})
	t.Run("relay", func(t *testing.T) {
		out, err := exec.Command("curl", "-sS", "-L", "-H", "Authorization: Bearer "+tok, "-w", "\nHTTP %{http_code}\n", s.proxy+"/mod/events").CombinedOutput()
		advNoSecrets(t, "curl's output", string(out))
		if err != nil {
			t.Fatalf("curl: %v\n%s", err, out)
		}
		if !strings.Contains(string(out), "\nHTTP 502\n") || !strings.Contains(string(out), "relay mod route: "+want) {
			t.Errorf("curl did not get cproxy's 502 refusal:\n%s", out)
		}
	})
	// The model route passes its upstream's redirects as sent, but not an
	// answer with two Locations: the refusal is the Forwarder's, for every
	// route, whatever it does with redirects.
	t.Run("model", func(t *testing.T) {
		out, err := exec.Command("curl", "-sS", "-L", "-H", "Authorization: Bearer "+tok, "-H", "Anthropic-Version: 2023-06-01",
			"-H", "Content-Type: application/json", "--data-binary", advHello, "-w", "\nHTTP %{http_code}\n", s.proxy+"/v1/messages").CombinedOutput()
		advNoSecrets(t, "curl's output", string(out))
		if err != nil {
			t.Fatalf("curl: %v\n%s", err, out)
		}
		if !strings.Contains(string(out), "\nHTTP 502\n") || !strings.Contains(string(out), "cproxy: "+want) {
			t.Errorf("curl did not get cproxy's 502 refusal:\n%s", out)
		}
	})
	if got := up.requests(); len(got) != 3 {
		t.Errorf("the upstream received %q, want git's info/refs, the relay's events and the model's messages", got)
	}
	if n := otherLog.len(); n != 0 {
		t.Errorf("the other host received %d requests: %v", n, otherLog.all())
	}
}
