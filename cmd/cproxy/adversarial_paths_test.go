package main

// The adversarial suite's paths, tokens and faults: the real
// `cproxy serve` with raw sockets, so every request target reaches cproxy
// byte for byte as written here (Go's client would clean some of them), and
// loopback upstreams that record what they receive. docs/security-tests.md
// lists every case and what it must get; the routes-level half (store
// look-ups, goroutines) is routes/adversarial_test.go.

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cproxy/cproxy/internal/fakes"
	"github.com/cproxy/cproxy/internal/testutil"
	"github.com/cproxy/cproxy/tokens"
)

// advRecorder is a loopback upstream for every route at once (each route's
// base URL is a different path on it) that records each request target
// exactly as it arrived and answers 200 with an empty JSON object.
type advRecorder struct {
	srv *httptest.Server
	mu  sync.Mutex
	got []string // "METHOD request-target"
	hdr []http.Header
}

func newAdvRecorder(t *testing.T) *advRecorder {
	r := &advRecorder{}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		io.Copy(io.Discard, req.Body)
		r.mu.Lock()
		r.got = append(r.got, req.Method+" "+req.RequestURI)
		r.hdr = append(r.hdr, req.Header.Clone())
		r.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, "{}")
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *advRecorder) requests() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.got...)
}

// advNoSecrets fails the test if s holds a canary credential, raw, base64 or
// URL-encoded, as checkNoSecrets does for scripts.
func advNoSecrets(t *testing.T, where, s string) {
	t.Helper()
	for _, c := range []string{canaryAPIKey, canaryOAuth, canaryOAuth2, canaryGitHub, canaryNPM, canaryHub, canaryMod} {
		for _, form := range []string{c, base64.StdEncoding.EncodeToString([]byte(c)), url.QueryEscape(c), c[len(c)-24:]} {
			if strings.Contains(s, form) {
				t.Errorf("%s holds a canary credential (%.8s…)", where, c)
			}
		}
	}
}

// advWrite writes the files of a serve directory: credentials as 0600
// files, the config with its extra sections, and the policy.
func advWrite(t *testing.T, dir, config, pol string) {
	t.Helper()
	for name, v := range map[string]string{"anthropic.key": canaryAPIKey, "github.key": canaryGitHub, "npm.key": canaryNPM, "hub.key": canaryHub} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(v+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// Relay header credentials are not resolved against the config's
	// directory as upstream ones are: an absolute path for them.
	config = strings.ReplaceAll(config, "file:hub.key", "file:"+filepath.Join(dir, "hub.key"))
	cfg := `policy = "policy.toml"

[listen]
proxy = "127.0.0.1:0"
admin = "127.0.0.1:0"
ready_file = "ready.json"
drain = "2s"

[store]
path = "cproxy.db"
` + config
	for name, v := range map[string]string{"cproxy.toml": cfg, "policy.toml": pol} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// advServeAll starts serve with every route (model, github, githubapi, npm
// and the relay mod) in front of one recorder.
func advServeAll(t *testing.T) (*served, *advRecorder, string) {
	rec := newAdvRecorder(t)
	dir := t.TempDir()
	advWrite(t, dir, fmt.Sprintf(`
[upstream.anthropic]
url = "%[1]s/anthropic"
credential = "file:anthropic.key"

[upstream.github]
url = "%[1]s/gh"
credential = "file:github.key"

[upstream.npm]
url = "%[1]s/reg"
credential = "file:npm.key"

[upstream.githubapi]
url = "%[1]s/ghapi"
credential = "file:github.key"

[relay.mod]
prefix = "/mod/"
url = "%[1]s/hub/"
methods = ["GET", "POST"]
paths = ["events", "sessions/*/commands"]

[relay.mod.headers]
Authorization = { credential = "file:hub.key", prefix = "Bearer " }
`, rec.srv.URL), `
[profile.default]
models = ["claude-*"]
repos = [{ repo = "acme/app", access = "read", api = ["read"] }]
packages = ["left-pad", "@acme/*"]
relays = ["mod"]
`)
	return startServe(t, dir), rec, dir
}

type advResponse struct {
	status int
	header http.Header
	body   string
	err    error // reading the body
}

// advRaw sends raw, byte for byte, on a new connection to addr and reads
// one response. Every part of the answer is checked for the canaries.
func advRaw(t *testing.T, addr, raw string) advResponse {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no response to %q: %v", raw, err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	r := advResponse{status: resp.StatusCode, header: resp.Header, body: string(b), err: err}
	advNoSecrets(t, "a response", fmt.Sprint(resp.Header)+r.body)
	if strings.Contains(r.body, "cpx_") || strings.Contains(fmt.Sprint(resp.Header), "cpx_") {
		t.Errorf("a response holds a sandbox token")
	}
	return r
}

func advRequest(method, target, token, body string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: cproxy.test\r\nConnection: close\r\nAnthropic-Version: 2023-06-01\r\n", method, target)
	if token != "" {
		fmt.Fprintf(&b, "Authorization: Bearer %s\r\n", token)
	}
	if body != "" {
		fmt.Fprintf(&b, "Content-Type: application/json\r\nContent-Length: %d\r\n", len(body))
	}
	b.WriteString("\r\n" + body)
	return b.String()
}

func advAddr(u string) string { return strings.TrimPrefix(u, "http://") }

// advPathCase is one request target. upstream, when set, is the one request
// target the upstream must receive (cproxy accepted it, in canonical form);
// otherwise cproxy must answer status and forward nothing.
type advPathCase struct {
	method, target string
	status         int
	upstream       string
}

const advHello = `{"model":"claude-sonnet-4-5","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}`

// advTricks are the encodings every route gets, each spliced into the
// route's canonical path; each must be refused.
func advTricks(prefix, seg, rest string) []string {
	// prefix "/npm/", seg "left-pad", rest "" → /npm/../left-pad, …
	return []string{
		prefix + "../" + seg + rest,
		prefix + "%2e%2e/" + seg + rest,
		prefix + "%2E%2e/" + seg + rest,
		prefix + "x/../" + seg + rest,
		prefix + "x/%2e%2e/" + seg + rest,
		prefix + "./" + seg + rest,
		prefix + "%2e/" + seg + rest,
		prefix + seg + "/." + rest,
		strings.TrimSuffix(prefix, "/") + "%2f" + seg + rest,
		strings.TrimSuffix(prefix, "/") + "%2F" + seg + rest,
		prefix + seg + "%2f.." + rest,
		prefix + seg + "%2F..%2F" + rest,
		prefix + seg + "%5c.." + rest,
		prefix + seg + `\..` + rest,
		prefix + `..\` + seg + rest,
		"/" + prefix + seg + rest,
		prefix + "/" + seg + rest,
		prefix + seg + "//" + rest,
		prefix + seg + ";x" + rest,
		prefix + seg + ";" + rest,
		prefix + seg + "%00" + rest,
		prefix + seg + "%00.json" + rest,
		prefix + seg + "%0d%0aX-Injected:%201" + rest,
		prefix + seg + "%0D%0A" + rest,
		prefix + "%c0%af" + seg + rest,
		prefix + seg + "%c0%af..%c0%af" + rest,
		prefix + "%c0%ae%c0%ae/" + seg + rest,
		strings.ToUpper(prefix) + seg + rest,
		strings.ToUpper(prefix[:2]) + prefix[2:] + seg + rest,
		prefix + seg + "/" + rest + "/",
		prefix + seg + rest + "/",
		prefix + seg + rest + "/.",
		prefix + seg + rest + "/..",
		prefix + seg + rest + "%2f",
		prefix + seg + rest + "%20",
		prefix + seg + rest + "#frag",
	}
}

// advRelayAccepts are the tricks a relay accepts: with paths =
// ["sessions/*/commands"], a segment "42;x" is just a segment.
var advRelayAccepts = map[string]string{
	"/mod/sessions/42;x/commands": "GET /hub/sessions/42%3Bx/commands",
	"/mod/sessions/42;/commands":  "GET /hub/sessions/42%3B/commands",
}

// TestAdversarialPaths sends every encoding trick against every route on a
// raw socket: each is refused with nothing forwarded, or, where cproxy
// canonicalises a harmless encoding, the upstream receives exactly the
// canonical path cproxy checked.
func TestAdversarialPaths(t *testing.T) {
	s, rec, _ := advServeAll(t)
	tok := s.mint("conv-1")
	addr := advAddr(s.proxy)

	// Accepted, and what the upstream receives.
	cases := []advPathCase{
		{"GET", "/v1/models", 200, "GET /anthropic/v1/models"},
		{"GET", "/v1/models?beta=true", 200, "GET /anthropic/v1/models?beta=true"},
		{"POST", "/v1/messages", 200, "POST /anthropic/v1/messages"},
		{"GET", "/github/acme/app.git/info/refs?service=git-upload-pack", 200, "GET /gh/acme/app.git/info/refs?service=git-upload-pack"},
		{"GET", "/github/acme/app/info/refs?service=git-upload-pack", 200, "GET /gh/acme/app.git/info/refs?service=git-upload-pack"},
		{"GET", "/npm/left-pad", 200, "GET /reg/left-pad"},
		{"GET", "/npm/left-pad/-/left-pad-1.3.0.tgz", 200, "GET /reg/left-pad/-/left-pad-1.3.0.tgz"},
		{"GET", "/npm/@acme/pkg", 200, "GET /reg/@acme%2fpkg"},
		{"GET", "/npm/@acme%2fpkg", 200, "GET /reg/@acme%2fpkg"},
		{"GET", "/npm/@acme%2Fpkg", 200, "GET /reg/@acme%2fpkg"},
		{"GET", "/npm/left%2dpad", 200, "GET /reg/left-pad"},
		{"GET", "/npm/@acme/pkg/-/pkg-2.0.0.tgz", 200, "GET /reg/@acme/pkg/-/pkg-2.0.0.tgz"},
		{"GET", "/mod/events", 200, "GET /hub/events"},
		{"GET", "/api/v3/repos/acme/app", 200, "GET /ghapi/repos/acme/app"},
		{"GET", "/api/v3/repos/acme/app/pulls?state=open&per_page=5", 200, "GET /ghapi/repos/acme/app/pulls?per_page=5&state=open"},
		{"GET", "/mod/ev%65nts", 200, "GET /hub/events"},
		{"GET", "/mod/sessions/42/commands", 200, "GET /hub/sessions/42/commands"},
		{"GET", "/mod/sessions/a%20b/commands", 200, "GET /hub/sessions/a%20b/commands"},
	}
	// The model API's other endpoints: batches, files, the legacy
	// completion API, none of which the policy can see into.
	for _, mt := range []string{
		"POST /v1/messages/batches", "GET /v1/messages/batches", "GET /v1/messages/batches/x",
		"GET /v1/messages/batches/x/results", "POST /v1/messages/batches/x/cancel", "DELETE /v1/messages/batches/x",
		"POST /v1/files", "GET /v1/files", "GET /v1/files/x/content", "DELETE /v1/files/x",
		"POST /v1/complete", "GET /v1/organizations/me", "POST /v1/messages?batch=true", "GET /v1/models/../files",
		"GET /v1/messages", "PUT /v1/messages", "POST /v1/models",
	} {
		m, p, _ := strings.Cut(mt, " ")
		cases = append(cases, advPathCase{method: m, target: p, status: 403})
	}
	for _, r := range []struct{ method, prefix, seg, rest string }{
		{"GET", "/v1/", "models", ""},
		{"POST", "/v1/", "messages", ""},
		{"GET", "/github/", "acme", "/app.git/info/refs?service=git-upload-pack"},
		{"GET", "/github/acme/", "app.git", "/info/refs?service=git-upload-pack"},
		{"GET", "/npm/", "left-pad", ""},
		{"GET", "/npm/", "@acme", "/pkg"},
		{"GET", "/npm/left-pad/-/", "left-pad-1.3.0.tgz", ""},
		{"GET", "/mod/", "events", ""},
		{"GET", "/mod/sessions/", "42", "/commands"},
		{"GET", "/api/v3/repos/", "acme", "/app/pulls"},
		{"GET", "/api/v3/repos/acme/", "app", ""},
		{"GET", "/api/", "v3", "/repos/acme/app"},
	} {
		rest, query, _ := strings.Cut(r.rest, "?")
		for _, target := range advTricks(r.prefix, r.seg, rest) {
			if query != "" {
				if p, frag, ok := strings.Cut(target, "#"); ok {
					target = p + "?" + query + "#" + frag
				} else {
					target += "?" + query
				}
			}
			c := advPathCase{method: r.method, target: target, status: -1}
			// A relay segment may hold ';': the relay's path rules see
			// it, and the upstream gets it encoded, not as a parameter.
			if up, ok := advRelayAccepts[target]; ok {
				c.status, c.upstream = 200, up
			}
			cases = append(cases, c)
		}
	}

	for _, c := range cases {
		body := ""
		if c.method == "POST" {
			body = advHello
		}
		before := len(rec.requests())
		r := advRaw(t, addr, advRequest(c.method, c.target, tok, body))
		got := rec.requests()[before:]
		switch {
		case c.upstream != "":
			if r.status != c.status || len(got) != 1 || got[0] != c.upstream {
				t.Errorf("%s %s: %d, upstream got %q; want %d and %q\n%s", c.method, c.target, r.status, got, c.status, c.upstream, r.body)
			}
		case len(got) != 0:
			t.Errorf("%s %s: %d, and the upstream got %q", c.method, c.target, r.status, got)
		case c.status > 0 && r.status != c.status:
			t.Errorf("%s %s: %d, want %d\n%s", c.method, c.target, r.status, c.status, r.body)
		case r.status != 400 && r.status != 403 && r.status != 404:
			t.Errorf("%s %s: %d, want a refusal\n%s", c.method, c.target, r.status, r.body)
		}
	}
	// Bytes a client cannot percent-encode away: a raw NUL, a raw tab and a
	// bare CR in the request target never reach a route.
	for _, target := range []string{"/v1/models\x00", "/npm/left-pad\x00", "/mod/events\x00", "/github/acme/app.git/info/refs\x00?service=git-upload-pack", "/mod/ev\rents", "/npm/left\tpad"} {
		before := len(rec.requests())
		r := advRaw(t, addr, advRequest("GET", target, tok, ""))
		if r.status != 400 || len(rec.requests()) != before {
			t.Errorf("GET %q: %d, upstream got %d requests", target, r.status, len(rec.requests())-before)
		}
	}
	// Every forwarded request had the real credential and never the token.
	rec.mu.Lock()
	for i, h := range rec.hdr {
		for k, vs := range h {
			if strings.Contains(strings.Join(vs, " "), "cpx_") {
				t.Errorf("%s: the upstream got the sandbox token in %s", rec.got[i], k)
			}
		}
	}
	rec.mu.Unlock()
	advNoSecrets(t, "serve's log", s.stderr.String())
}

// TestAdversarialTokensMalformedVsUnknown: a token whose checksum is wrong
// is refused as malformed (no store look-up: routes'
// TestAdversarialTokensMalformedNeverLooksUp counts them), a well-formed
// token the store does not know as unknown; neither reaches an upstream.
func TestAdversarialTokensMalformedVsUnknown(t *testing.T) {
	s, rec, _ := advServeAll(t)
	tok := s.mint("conv-1")
	bad := tok[:len(tok)-1] + map[bool]string{true: "1", false: "0"}[strings.HasSuffix(tok, "0")]
	unknown, err := tokens.New()
	if err != nil {
		t.Fatal(err)
	}
	addr := advAddr(s.proxy)
	for _, target := range []string{"/v1/models", "/github/acme/app.git/info/refs?service=git-upload-pack", "/npm/left-pad", "/mod/events"} {
		for tk, want := range map[string]string{bad: "malformed sandbox token", unknown.Reveal(): "unknown sandbox token"} {
			r := advRaw(t, addr, advRequest("GET", target, tk, ""))
			if r.status != 401 || !strings.Contains(r.body, want) {
				t.Errorf("GET %s with a %s: %d %s", target, want, r.status, r.body)
			}
		}
	}
	if got := rec.requests(); len(got) != 0 {
		t.Fatalf("the upstream got %q", got)
	}
}

// TestAdversarialTokensListenersKeptApart: the proxy listener serves none of
// the admin API (no token is minted, none revoked, nothing listed), and the
// admin listener proxies nothing, whatever token comes with the request.
func TestAdversarialTokensListenersKeptApart(t *testing.T) {
	s, rec, _ := advServeAll(t)
	tok := s.mint("conv-1")
	proxy, admin := advAddr(s.proxy), advAddr(s.admin)
	for _, mt := range []string{
		"POST /tokens?sandbox=conv-9", "POST /tokens?sandbox=conv-9&ttl=1h", "DELETE /tokens?sandbox=conv-1", "GET /tokens",
		"GET /healthz", "GET /readyz", "GET /metrics", "POST //tokens?sandbox=conv-9", "POST /v1/../tokens?sandbox=conv-9",
		"POST /v1/%2e%2e/tokens?sandbox=conv-9", "POST /Tokens?sandbox=conv-9", "POST /mod/../tokens?sandbox=conv-9",
		"POST http://" + admin + "/tokens?sandbox=conv-9",
	} {
		m, target, _ := strings.Cut(mt, " ")
		for _, auth := range []string{"", tok} {
			r := advRaw(t, proxy, advRequest(m, target, auth, ""))
			if r.status != 403 && r.status != 404 && r.status != 401 {
				t.Errorf("%s on the proxy listener: %d %s", mt, r.status, r.body)
			}
			if strings.Contains(r.body, `"token"`) || strings.Contains(r.body, "conv-1") {
				t.Errorf("%s on the proxy listener answered with admin data: %s", mt, r.body)
			}
		}
	}
	resp, err := http.Get(s.admin + "/tokens")
	if err != nil {
		t.Fatal(err)
	}
	var out struct {
		Tokens []struct{ Sandbox, State string }
	}
	json.NewDecoder(resp.Body).Decode(&out)
	resp.Body.Close()
	if list := out.Tokens; len(list) != 1 || list[0].Sandbox != "conv-1" || list[0].State != "live" {
		t.Fatalf("after the proxy-listener attempts the store holds %+v", list)
	}
	// The admin listener proxies nothing, token or not.
	for _, mt := range []string{"GET /v1/models", "POST /v1/messages", "GET /github/acme/app.git/info/refs?service=git-upload-pack", "GET /npm/left-pad", "GET /mod/events"} {
		m, target, _ := strings.Cut(mt, " ")
		body := ""
		if m == "POST" {
			body = advHello
		}
		r := advRaw(t, admin, advRequest(m, target, tok, body))
		if r.status != 404 {
			t.Errorf("%s on the admin listener: %d %s", mt, r.status, r.body)
		}
	}
	if got := rec.requests(); len(got) != 0 {
		t.Fatalf("the upstream got %q", got)
	}
	// And the sandbox token still works where it belongs.
	if r := advRaw(t, proxy, advRequest("GET", "/v1/models", tok, "")); r.status != 200 {
		t.Fatalf("the token after all that: %d %s", r.status, r.body)
	}
}

// advServeFails runs serve in dir expecting it to refuse to start.
func advServeFails(t *testing.T, dir string) string {
	t.Helper()
	cmd := exec.Command("cproxy", "serve", "--config", filepath.Join(dir, "cproxy.toml"))
	cmd.Env = append(os.Environ(), "ANTHROPIC_API_KEY=")
	var stderr testutil.Buffer
	cmd.Stderr = &stderr
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatalf("serve exited 0 on a corrupt store:\n%s", stderr.String())
		}
	case <-time.After(15 * time.Second):
		cmd.Process.Kill()
		<-done
		t.Fatalf("serve started on a corrupt store:\n%s", stderr.String())
	}
	if _, err := os.Stat(filepath.Join(dir, "ready.json")); err == nil {
		t.Errorf("serve wrote its ready file before refusing")
	}
	advNoSecrets(t, "serve's stderr", stderr.String())
	return stderr.String()
}

// TestAdversarialTokensCorruptStore: garbage written into the bbolt file
// while serve is stopped, whole or past its meta pages, stops serve before
// it listens, with a message that names the file and the way out.
func TestAdversarialTokensCorruptStore(t *testing.T) {
	for _, tc := range []struct {
		name string
		at   int64 // where the garbage starts; the rest of the file is kept
	}{
		{"whole file", 0},
		{"data pages", 2 * int64(os.Getpagesize())},
		{"both meta pages", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _, dir := advServeAll(t)
			s.mint("conv-1")
			s.cmd.Process.Signal(syscall.SIGTERM)
			if err := <-s.done; err != nil {
				t.Fatalf("serve: %v", err)
			}
			s.done <- nil
			db := filepath.Join(dir, "cproxy.db")
			fi, err := os.Stat(db)
			if err != nil {
				t.Fatal(err)
			}
			garbage := make([]byte, fi.Size()-tc.at)
			rng := rand.NewChaCha8([32]byte{7})
			rng.Read(garbage)
			f, err := os.OpenFile(db, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			if tc.name == "both meta pages" {
				// With one left, bbolt would rightly fall back to it.
				garbage = garbage[:2*os.Getpagesize()]
			}
			f.WriteAt(garbage, tc.at)
			f.Close()
			stderr := advServeFails(t, dir)
			if !strings.Contains(stderr, "cproxy.db is not a usable cproxy token store") || !strings.Contains(stderr, "move it aside") {
				t.Fatalf("serve's message on a corrupt store:\n%s", stderr)
			}
		})
	}
}

// TestAdversarialTokensStoreWritesFailReal makes the store's writes fail in
// the running binary: prlimit(1) drops its RLIMIT_FSIZE to 0, so every
// write to the bbolt file fails with EFBIG (Go ignores SIGXFSZ), as writes
// fail on a full disk. Mints must answer 503 with no token; a revocation
// must answer 503 and say it may not have been recorded; once writes work
// again the retried revocation holds.
func TestAdversarialTokensStoreWritesFailReal(t *testing.T) {
	if _, err := exec.LookPath("prlimit"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI=true but prlimit(1) is not installed (Debian's util-linux has it)")
		}
		t.Skip("no prlimit(1): covered by routes/admin's TestAdversarialTokensStoreWritesFail")
	}
	s, _, _ := advServeAll(t)
	tok := s.mint("conv-1")
	pid := strconv.Itoa(s.cmd.Process.Pid)
	if out, err := exec.Command("prlimit", "--pid", pid, "--fsize=0:").CombinedOutput(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("prlimit cannot lower the file size limit: %v %s", err, out)
		}
		t.Skipf("prlimit cannot lower the file size limit here: %v %s", err, out)
	}
	resp, err := http.Post(s.admin+"/tokens?sandbox=conv-2", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 503 || strings.Contains(string(b), "cpx_") {
		t.Errorf("mint with failing writes: %s %s", resp.Status, b)
	}
	req, _ := http.NewRequest("DELETE", s.admin+"/tokens?sandbox=conv-1", nil)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 503 || !strings.Contains(string(b), "may not have been recorded") {
		t.Errorf("revoke with failing writes: %s %s", resp.Status, b)
	}
	if !strings.Contains(s.stderr.String(), "file too large") {
		t.Errorf("the write failure is not in serve's log:\n%s", s.stderr.String())
	}
	if out, err := exec.Command("prlimit", "--pid", pid, "--fsize=unlimited:").CombinedOutput(); err != nil {
		t.Fatalf("prlimit: %v %s", err, out)
	}
	s.revoke("conv-1")
	if r := advRaw(t, advAddr(s.proxy), advRequest("GET", "/v1/models", tok, "")); r.status != 401 || !strings.Contains(r.body, "revoked") {
		t.Fatalf("after the retried revocation: %d %s", r.status, r.body)
	}
	// The store survived the failed writes: a restart reads it.
	s.cmd.Process.Signal(syscall.SIGTERM)
	if err := <-s.done; err != nil {
		t.Fatalf("serve: %v\n%s", err, s.stderr.String())
	}
	s.done <- nil
}

// advFaults are the misbehaving upstreams of TestAdversarialFaults.
type advFaults struct {
	dead, rst string
	// slow never answers a request under /hang; under /disc it sends one
	// event, then waits for the request's context to end and reports it on
	// cancelled.
	slow      *httptest.Server
	cancelled chan string
}

func newAdvFaults(t *testing.T) *advFaults {
	f := &advFaults{cancelled: make(chan string, 8)}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.dead = "http://" + ln.Addr().String()
	ln.Close() // nothing listens there now: connections are refused

	// A raw TCP upstream: the status line, headers and one chunk of a
	// stream, then a reset (SO_LINGER 0), not a clean close.
	ln, err = net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.rst = "http://" + ln.Addr().String()
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if req, err := http.ReadRequest(bufio.NewReader(c)); err == nil {
				io.Copy(io.Discard, req.Body)
				ev := "event: tick\ndata: {\"n\":1}\n\n"
				fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n", len(ev), ev)
				time.Sleep(50 * time.Millisecond) // the chunk goes out before the reset
			}
			c.(*net.TCPConn).SetLinger(0)
			c.Close()
		}
	})
	t.Cleanup(func() { ln.Close(); wg.Wait() })

	f.slow = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/disc/") {
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, "event: tick\ndata: {\"n\":1}\n\n")
			w.(http.Flusher).Flush()
		}
		<-r.Context().Done()
		if strings.HasPrefix(r.URL.Path, "/disc/") {
			f.cancelled <- r.URL.Path
		}
	}))
	t.Cleanup(f.slow.Close)
	return f
}

// TestAdversarialFaults: upstreams that refuse, hang, stall, reset or lose
// their client, through the real binary. Refusals and time-outs are
// answered in the route's format; a stream the upstream breaks off reaches
// the client as far as it went and then as broken, never as a clean end; a
// client that hangs up cancels the upstream request. SIGTERM with live
// streams is TestSIGTERMDrainsOpenStream's; routes'
// TestAdversarialFaultsNoGoroutineLeak checks nothing is left running.
func TestAdversarialFaults(t *testing.T) {
	fake := fakes.NewAnthropic(fakes.AnthropicOptions{APIKey: canaryAPIKey})
	t.Cleanup(fake.Close)
	f := newAdvFaults(t)
	dir := t.TempDir()
	relay := func(name, u string) string {
		return fmt.Sprintf(`
[relay.%s]
prefix = "/%[1]s/"
url = "%s/%[1]s/"
methods = ["GET"]
paths = ["**"]
header_timeout = "1s"

[relay.%[1]s.headers]
Authorization = { credential = "file:hub.key", prefix = "Bearer " }
`, name, u)
	}
	advWrite(t, dir, fmt.Sprintf(`
[upstream.anthropic]
url = %q
credential = "file:anthropic.key"
header_timeout = "1s"
`, fake.URL)+relay("dead", f.dead)+relay("rst", f.rst)+relay("hang", f.slow.URL)+relay("disc", f.slow.URL), `
[profile.default]
models = ["claude-*"]
relays = ["dead", "rst", "hang", "disc"]
`)
	s := startServe(t, dir)
	tok := s.mint("conv-1")
	addr := advAddr(s.proxy)
	stream := `{"model":"claude-sonnet-4-5","max_tokens":16,"stream":true,"messages":[{"role":"user","content":"hi"}]}`

	t.Run("refused", func(t *testing.T) {
		r := advRaw(t, addr, advRequest("GET", "/dead/x", tok, ""))
		if r.status != 502 || !strings.Contains(r.body, "could not be reached") {
			t.Fatalf("%d %s", r.status, r.body)
		}
	})
	t.Run("no headers", func(t *testing.T) {
		start := time.Now()
		r := advRaw(t, addr, advRequest("GET", "/hang/x", tok, ""))
		if r.status != 504 || !strings.Contains(r.body, "header_timeout") || time.Since(start) > 8*time.Second {
			t.Fatalf("%d after %s: %s", r.status, time.Since(start), r.body)
		}
		gate := fake.HoldHeaders()
		defer gate.Release()
		r = advRaw(t, addr, advRequest("POST", "/v1/messages", tok, stream))
		if r.status != 504 || r.header.Get("Content-Type") != "application/json" || !strings.Contains(r.body, `"type":"api_error"`) {
			t.Fatalf("model: %d %s", r.status, r.body)
		}
	})
	t.Run("reset mid-stream", func(t *testing.T) {
		r := advRaw(t, addr, advRequest("GET", "/rst/x", tok, ""))
		if r.status != 200 || !strings.Contains(r.body, `data: {"n":1}`) || r.err == nil {
			t.Fatalf("%d, body %q, read error %v: want the first event, then an error", r.status, r.body, r.err)
		}
	})
	t.Run("client gone mid-stream", func(t *testing.T) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(c, advRequest("GET", "/disc/x", tok, ""))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		line, err := bufio.NewReader(resp.Body).ReadString('\n')
		if resp.StatusCode != 200 || err != nil || line != "event: tick\n" {
			t.Fatalf("%d %q %v", resp.StatusCode, line, err)
		}
		c.Close()
		select {
		case p := <-f.cancelled:
			if p != "/disc/x" {
				t.Fatalf("cancelled %s", p)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the upstream request went on after its client hung up")
		}
	})
	// Last: closing the fake is what cuts its stalled stream.
	t.Run("stall then cut mid-stream", func(t *testing.T) {
		gate := fake.StallStreams(3)
		defer gate.Release()
		got := make(chan advResponse, 1)
		go func() {
			defer close(got)
			got <- advRaw(t, addr, advRequest("POST", "/v1/messages", tok, stream))
		}()
		select {
		case <-gate.Reached():
		case r, ok := <-got:
			t.Fatalf("the stream did not stall: %v %d %s", ok, r.status, r.body)
		}
		fake.Close()
		r, ok := <-got
		if !ok {
			t.FailNow()
		}
		if r.status != 200 || !strings.Contains(r.body, "event: ping") || r.err == nil {
			t.Fatalf("%d, body %q, read error %v: want three events, then an error", r.status, r.body, r.err)
		}
		if strings.Contains(r.body, "message_stop") {
			t.Fatal("the cut stream looks complete")
		}
	})
	s.cmd.Process.Signal(syscall.SIGTERM)
	if err := <-s.done; err != nil {
		t.Fatalf("serve: %v", err)
	}
	s.done <- nil
	logs := s.stderr.String()
	advNoSecrets(t, "serve's log", logs)
	for _, want := range []string{"status=502", "status=504", "response cut off before its end"} {
		if !strings.Contains(logs, want) {
			t.Errorf("serve's log has no %q", want)
		}
	}
}
