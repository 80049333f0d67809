package github

import (
	"bytes"
	"compress/gzip"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"testing/iotest"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/pktline"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp/sideband"

	"github.com/cproxy/cproxy/internal/testutil"
	"github.com/cproxy/cproxy/routes"
	"github.com/cproxy/cproxy/routes/routetest"
	"github.com/cproxy/cproxy/secrets"
)

const canaryGitHub = "ghs_CANARYroutes0123456789abcdefghijklmn"

// gitUpstream records what reaches the GitHub upstream, bodies included,
// and answers every request the way a git server would (200, the service's
// content type); onRequest, if set, answers instead.
type gitUpstream struct {
	srv       *httptest.Server
	mu        sync.Mutex
	reqs      []gitSeen
	onRequest func(w http.ResponseWriter, r *http.Request)
}

type gitSeen struct {
	method, path, query string
	header              http.Header
	chunked             bool
	body                []byte
}

func newGitUpstream(t *testing.T) *gitUpstream {
	u := &gitUpstream{}
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u.onRequest != nil {
			u.onRequest(w, r)
			return
		}
		b, _ := io.ReadAll(r.Body)
		u.mu.Lock()
		u.reqs = append(u.reqs, gitSeen{r.Method, r.URL.Path, r.URL.RawQuery, r.Header.Clone(), len(r.TransferEncoding) > 0, b})
		u.mu.Unlock()
		w.Header().Set("Content-Type", "application/x-git-upload-pack-result")
		io.WriteString(w, "0008NAK\n")
	}))
	t.Cleanup(u.srv.Close)
	return u
}

func (u *gitUpstream) seen() []gitSeen {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]gitSeen(nil), u.reqs...)
}

const gitPolicy = `
[profile.default]
models = ["claude-*"]
repos = [
  { repo = "acme/app", access = "push", refs = ["refs/heads/agent/*", "refs/tags/v*"] },
  { repo = "acme/docs", access = "read" },
]
`

// newGitEnv serves the github route with gitPolicy in force, forwarding
// to up under /base with the canary credential.
func newGitEnv(t *testing.T, up *gitUpstream, opts ...routetest.Option) *routetest.Env {
	u, _ := url.Parse(up.srv.URL + "/base")
	return gitEnv(t, routes.Upstream{URL: u, Credential: secrets.New(canaryGitHub), HeaderTimeout: 10 * time.Second}, opts...)
}

// gitEnv serves the github route with gitPolicy in force, forwarding to up.
func gitEnv(t *testing.T, up routes.Upstream, opts ...routetest.Option) *routetest.Env {
	return routetest.New(t, append([]routetest.Option{routetest.WithPolicy(t, gitPolicy), routetest.Serve(Kind, up)}, opts...)...)
}

func basic(tok string) map[string]string {
	return map[string]string{"Authorization": "Basic " + base64.StdEncoding.EncodeToString([]byte("cproxy:"+tok))}
}

func TestParseGitPath(t *testing.T) {
	ok := []struct {
		method, path, query string
		repo, upstream      string
	}{
		{"GET", "/github/acme/app/info/refs", "service=git-upload-pack", "acme/app", "/acme/app.git/info/refs?service=git-upload-pack"},
		{"GET", "/github/acme/app.git/info/refs", "service=git-receive-pack", "acme/app", "/acme/app.git/info/refs?service=git-receive-pack"},
		{"GET", "/github/Acme/App.GIT/info/refs", "service=git-upload-pack", "Acme/App", "/Acme/App.git/info/refs?service=git-upload-pack"},
		{"POST", "/github/acme/app.git/git-upload-pack", "", "acme/app", "/acme/app.git/git-upload-pack"},
		{"POST", "/github/acme/app/git-receive-pack", "", "acme/app", "/acme/app.git/git-receive-pack"},
		{"POST", "/github/a-b-c/.github/git-upload-pack", "", "a-b-c/.github", "/a-b-c/.github.git/git-upload-pack"},
		{"POST", "/github/x/..../git-upload-pack", "", "x/....", "/x/.....git/git-upload-pack"},
		{"POST", "/github/x/a_b.c-d/git-upload-pack", "", "x/a_b.c-d", "/x/a_b.c-d.git/git-upload-pack"},
		{"POST", "/github/" + strings.Repeat("o", 39) + "/" + strings.Repeat("r", 100) + ".git/git-upload-pack", "", strings.Repeat("o", 39) + "/" + strings.Repeat("r", 100), ""},
	}
	for _, tc := range ok {
		g, err := parseGitPath(tc.method, tc.path, tc.query)
		if err != nil {
			t.Errorf("%s %s?%s: %v", tc.method, tc.path, tc.query, err)
			continue
		}
		tg := g.target()
		got := tg.Path
		if tg.Query != "" {
			got += "?" + tg.Query
		}
		if g.repo() != tc.repo || (tc.upstream != "" && got != tc.upstream) {
			t.Errorf("%s %s: repo %q upstream %q", tc.method, tc.path, g.repo(), got)
		}
	}
	bad := []struct{ method, path, query string }{
		{"GET", "/github/acme/app/info/refs", ""},
		{"GET", "/github/acme/app/info/refs", "service=git-upload-archive"},
		{"GET", "/github/acme/app/info/refs", "service=git-upload-pack&x=1"},
		{"GET", "/github/acme/app/info/refs", "x=1&service=git-upload-pack"},
		{"GET", "/github/acme/app/info/refs", "service=git-upload-pack&service=git-receive-pack"},
		{"GET", "/github/acme/app/info/refs", "service=git-upload-pack;"},
		{"GET", "/github/acme/app/info/refs", "SERVICE=git-upload-pack"},
		{"POST", "/github/acme/app/info/refs", "service=git-upload-pack"},
		{"GET", "/github/acme/app/git-upload-pack", ""},
		{"PUT", "/github/acme/app/git-receive-pack", ""},
		{"POST", "/github/acme/app/git-upload-pack", "service=git-upload-pack"},
		{"POST", "/github/acme/app/git-upload-pack/", ""},
		{"GET", "/github/acme/app/info/refs/", "service=git-upload-pack"},
		{"GET", "/github/acme/app/HEAD", ""},
		{"GET", "/github/acme/app/objects/info/packs", ""},
		{"GET", "/github/acme/app/objects/12/3456", ""},
		{"POST", "/github/acme/app.git/info/lfs/objects/batch", ""},
		{"GET", "/github/acme/app", ""},
		{"GET", "/github/acme", ""},
		{"GET", "/github/", ""},
		{"GET", "/github/acme/app/archive/main.zip", ""},
		{"GET", "/github/acme/app/blob/main/README.md", ""},
		{"POST", "/github/acme/../secret/git-upload-pack", ""},
		{"POST", "/github/acme/app/../../acme/secret/git-upload-pack", ""},
		{"POST", "/github/../acme/app/git-upload-pack", ""},
		{"POST", "/github/acme/./git-upload-pack", ""},
		{"POST", "/github/acme/../git-upload-pack", ""},
		{"POST", "/github/acme/.git/git-upload-pack", ""},
		{"POST", "/github//acme/app/git-upload-pack", ""},
		{"POST", "/github/acme//app/git-upload-pack", ""},
		{"POST", "/github/acme/app//git-upload-pack", ""},
		{"POST", "/github/acme/app.git.git/git-upload-pack", ""},
		{"POST", "/github/acme/app.Git.git/git-upload-pack", ""},
		{"POST", "/github/-acme/app/git-upload-pack", ""},
		{"POST", "/github/ac_me/app/git-upload-pack", ""},
		{"POST", "/github/ac.me/app/git-upload-pack", ""},
		{"POST", "/github/" + strings.Repeat("o", 40) + "/app/git-upload-pack", ""},
		{"POST", "/github/acme/" + strings.Repeat("r", 101) + "/git-upload-pack", ""},
		{"POST", "/github/acme/a b/git-upload-pack", ""},
		{"POST", "/github/acme/a%2fb/git-upload-pack", ""},
		{"POST", "/github/acme/app\x00/git-upload-pack", ""},
		{"POST", "/github/acme/äpp/git-upload-pack", ""},
		{"POST", "/github/acme/app;x/git-upload-pack", ""},
		{"POST", "/github/acme/app/git-upload-pack\x00", ""},
		{"POST", "/github/acme/app/GIT-UPLOAD-PACK", ""},
		{"POST", "/github/acme/app/git-upload-pack.git", ""},
		{"POST", "/github/acme/app/git-upload-pack/../git-receive-pack", ""},
	}
	for _, tc := range bad {
		if g, err := parseGitPath(tc.method, tc.path, tc.query); err == nil {
			t.Errorf("%s %q?%s accepted as %+v", tc.method, tc.path, tc.query, g)
		}
	}
}

// TestGitHubRefusedWithoutForwarding sends what git never sends, and
// encodings of what it does: every one is refused, nothing reaches the
// upstream.
func TestGitHubRefusedWithoutForwarding(t *testing.T) {
	up := newGitUpstream(t)
	e := newGitEnv(t, up)
	h := basic(e.Token("conv-42"))
	upload := routetest.With(h, "Content-Type", "application/x-git-upload-pack-request")
	receive := routetest.With(h, "Content-Type", "application/x-git-receive-pack-request")
	tests := []struct {
		name, method, target string
		header               map[string]string
		body                 string
		status               int
		want                 string
	}{
		{"dumb HTTP", "GET", "/github/acme/app.git/info/refs", h, "", 403, "smart HTTP"},
		{"HEAD file", "GET", "/github/acme/app.git/HEAD", h, "", 403, "not a git smart-HTTP request"},
		{"LFS", "POST", "/github/acme/app.git/info/lfs/objects/batch", h, "{}", 403, "not a git smart-HTTP request"},
		{"web page", "GET", "/github/acme/app", h, "", 403, "not a git smart-HTTP request"},
		{"archive", "GET", "/github/acme/app/archive/refs/heads/main.tar.gz", h, "", 403, "not a git smart-HTTP request"},
		{"upload-archive", "GET", "/github/acme/app.git/info/refs?service=git-upload-archive", h, "", 403, "smart HTTP"},
		{"encoded slash", "GET", "/github/acme%2Fapp/info/refs?service=git-upload-pack", h, "", 403, "non-canonical"},
		{"encoded slash lower", "GET", "/github/acme/app%2finfo/refs?service=git-upload-pack", h, "", 403, "non-canonical"},
		{"encoded letter", "GET", "/github/acme/%61pp/info/refs?service=git-upload-pack", h, "", 403, "non-canonical"},
		{"encoded dots", "GET", "/github/acme/%2e%2e/acme/app/info/refs?service=git-upload-pack", h, "", 403, "non-canonical"},
		{"encoded dot git", "POST", "/github/acme/app%2Egit/git-upload-pack", upload, "0000", 403, "non-canonical"},
		{"double encoded", "GET", "/github/acme/app%252F/info/refs?service=git-upload-pack", h, "", 403, "non-canonical"},
		{"encoded NUL", "GET", "/github/acme/app%00/info/refs?service=git-upload-pack", h, "", 403, "non-canonical"},
		{"encoded space", "GET", "/github/acme/a%20b/info/refs?service=git-upload-pack", h, "", 403, "non-canonical"},
		{"dot segments", "GET", "/github/acme/app/../secret/info/refs?service=git-upload-pack", h, "", 403, ""},
		{"dot segment", "GET", "/github/acme/./app/info/refs?service=git-upload-pack", h, "", 403, ""},
		{"empty segment", "GET", "/github/acme//app/info/refs?service=git-upload-pack", h, "", 403, ""},
		{"backslash", "GET", "/github/acme\\app/info/refs?service=git-upload-pack", h, "", 403, ""},
		{"encoded query", "GET", "/github/acme/app/info/refs?service=git%2Dupload-pack", h, "", 403, "smart HTTP"},
		{"repo not allowed", "POST", "/github/acme/secret/git-upload-pack", upload, "0000", 403, "repository acme/secret is not allowed for sandbox conv-42"},
		{"push to read-only", "POST", "/github/acme/docs/git-receive-pack", receive, "0000", 403, "push to repository acme/docs is not allowed"},
		{"no content type", "POST", "/github/acme/app/git-upload-pack", h, "0000", 400, "Content-Type"},
		{"wrong content type", "POST", "/github/acme/app/git-receive-pack", upload, "0000", 400, "Content-Type"},
		{"gzip push", "POST", "/github/acme/app/git-receive-pack", routetest.With(receive, "Content-Encoding", "gzip"), "0000", 400, "Content-Encoding"},
		{"deflate fetch", "POST", "/github/acme/app/git-upload-pack", routetest.With(upload, "Content-Encoding", "deflate"), "0000", 400, "Content-Encoding"},
		{"info/refs with a body", "GET", "/github/acme/app/info/refs?service=git-upload-pack", h, "0000", 400, "takes no body"},
		{"push not decodable", "POST", "/github/acme/app/git-receive-pack", receive, "0032garbage", 400, "the push cannot be read"},
		{"push empty", "POST", "/github/acme/app/git-receive-pack", receive, "", 400, "the push cannot be read"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := e.Do(tc.method, tc.target, tc.header, tc.body)
			if r.Status != tc.status || !strings.Contains(r.Body, tc.want) {
				t.Fatalf("got %d %q", r.Status, r.Body)
			}
			if ct := r.Header.Get("Content-Type"); ct != "text/plain; charset=utf-8" {
				t.Errorf("Content-Type %q", ct)
			}
		})
	}
	if n := len(up.seen()); n != 0 {
		t.Fatalf("the upstream got %d requests", n)
	}
}

// TestGitHubRawTargets sends request targets as bytes on the wire, where an
// HTTP client would have cleaned or re-encoded them.
func TestGitHubRawTargets(t *testing.T) {
	up := newGitUpstream(t)
	e := newGitEnv(t, up)
	tok := e.Token("conv-42")
	for _, target := range []string{
		"/github/acme/app/../secret/info/refs?service=git-upload-pack",
		"/github/acme/app/%2e%2e/info/refs?service=git-upload-pack",
		"/github/acme/APP%2Fx/info/refs?service=git-upload-pack",
		"/github/acme/app/info/refs?service=git-upload-pack#frag",
		"/github/acme/app/info%2Frefs?service=git-upload-pack",
		"/github/acme/app/./info/refs?service=git-upload-pack",
		"//github/acme/app/info/refs?service=git-upload-pack",
		"/github/acme/app/info/refs?service=git-upload-pack&",
		"http://evil.example/github/acme/app/info/refs?service=git-upload-pack",
	} {
		req := httptest.NewRequest("GET", target, nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		w := httptest.NewRecorder()
		e.Server.ProxyHandler().ServeHTTP(w, req)
		if w.Code != 403 {
			t.Errorf("%s: %d %s", target, w.Code, w.Body)
		}
	}
	if n := len(up.seen()); n != 0 {
		t.Fatalf("the upstream got %d requests", n)
	}
}

func TestGitHubAuthentication(t *testing.T) {
	up := newGitUpstream(t)
	e := newGitEnv(t, up)
	tok := e.Token("conv-42")
	const path = "/github/acme/app.git/info/refs?service=git-upload-pack"
	for name, h := range map[string]map[string]string{
		"none":      nil,
		"malformed": basic("cpx_nope"),
		"real-ish":  {"Authorization": "Basic " + base64.StdEncoding.EncodeToString([]byte("x-access-token:"+canaryGitHub))},
	} {
		r := e.Do("GET", path, h, "")
		if r.Status != 401 || r.Header.Get("WWW-Authenticate") != `Basic realm="cproxy"` {
			t.Errorf("%s: %d %q %q", name, r.Status, r.Header.Get("WWW-Authenticate"), r.Body)
		}
	}
	// 401 comes before the path is looked at: nothing to learn about routes.
	if r := e.Do("GET", "/github/acme/app/HEAD", nil, ""); r.Status != 401 {
		t.Errorf("unauthenticated dumb HTTP: %d", r.Status)
	}
	// The token as the Basic password (git's credential helper) and as a
	// Bearer (http.extraHeader) both work; git's username is ignored.
	for _, h := range []map[string]string{basic(tok), {"Authorization": "Bearer " + tok}} {
		if r := e.Do("GET", path, h, ""); r.Status != 200 {
			t.Errorf("%v: %d %s", h, r.Status, r.Body)
		}
	}
	e.Revoke("conv-42")
	if r := e.Do("GET", path, basic(tok), ""); r.Status != 401 || !strings.Contains(r.Body, "revoked") {
		t.Errorf("revoked: %d %s", r.Status, r.Body)
	}
	if n := len(up.seen()); n != 2 {
		t.Fatalf("the upstream got %d requests, want 2", n)
	}
}

// TestGitHubForwarding: the upstream gets the real token as Basic
// x-access-token, a path rebuilt under its base with .git, git's headers,
// and the body byte for byte, gzip included; never the sandbox token.
func TestGitHubForwarding(t *testing.T) {
	up := newGitUpstream(t)
	e := newGitEnv(t, up)
	tok := e.Token("conv-42")
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte("0032want 0000000000000000000000000000000000000001\n00000009done\n"))
	zw.Close()
	h := routetest.With(basic(tok), "Git-Protocol", "version=2", "Content-Type", "application/x-git-upload-pack-request",
		"Content-Encoding", "gzip", "X-Api-Key", tok, "Cookie", "c=1", "Proxy-Authorization", "Bearer "+tok)
	r := e.Do("POST", "/github/ACME/App/git-upload-pack", h, gz.String())
	if r.Status != 200 || r.Body != "0008NAK\n" {
		t.Fatalf("got %d %q", r.Status, r.Body)
	}
	r = e.Do("GET", "/github/acme/app.git/info/refs?service=git-receive-pack", basic(tok), "")
	if r.Status != 200 {
		t.Fatalf("info/refs: %d %q", r.Status, r.Body)
	}
	seen := up.seen()
	if len(seen) != 2 {
		t.Fatalf("upstream got %d requests", len(seen))
	}
	want := "Basic " + base64.StdEncoding.EncodeToString([]byte("x-access-token:"+canaryGitHub))
	for _, s := range seen {
		if s.header.Get("Authorization") != want {
			t.Errorf("%s: Authorization is not the real token", s.path)
		}
		for k, vs := range s.header {
			for _, v := range vs {
				if strings.Contains(v, "cpx_") || strings.Contains(v, tok) {
					t.Errorf("%s: the sandbox token reached the upstream in %s", s.path, k)
				}
			}
		}
		if s.header.Get("Cookie") != "" || s.header.Get("X-Api-Key") != "" || s.header.Get("Proxy-Authorization") != "" {
			t.Errorf("%s: client credential headers passed: %v", s.path, s.header)
		}
	}
	if s := seen[0]; s.method != "POST" || s.path != "/base/ACME/App.git/git-upload-pack" || s.query != "" ||
		!bytes.Equal(s.body, gz.Bytes()) || s.header.Get("Content-Encoding") != "gzip" || s.header.Get("Git-Protocol") != "version=2" {
		t.Errorf("upload-pack: %s %s?%s %v body equal %v", s.method, s.path, s.query, s.header, bytes.Equal(s.body, gz.Bytes()))
	}
	if s := seen[1]; s.method != "GET" || s.path != "/base/acme/app.git/info/refs" || s.query != "service=git-receive-pack" || len(s.body) != 0 {
		t.Errorf("info/refs: %s %s?%s", s.method, s.path, s.query)
	}
}

// TestGitHubRepoDenialIsAnAdvertisement: info/refs for a refused repository
// answers with a smart-HTTP advertisement holding an ERR packet, which git
// prints as "fatal: remote error: …".
func TestGitHubRepoDenialIsAnAdvertisement(t *testing.T) {
	up := newGitUpstream(t)
	e := newGitEnv(t, up)
	h := basic(e.Token("conv-42"))
	for _, tc := range []struct{ path, service, want string }{
		{"/github/acme/secret.git", "git-upload-pack", "cproxy: repository acme/secret is not allowed for sandbox conv-42 (allowed: acme/app, acme/docs)"},
		{"/github/Acme/Secret", "git-receive-pack", "cproxy: push to repository Acme/Secret is not allowed for sandbox conv-42 (allowed for push: acme/app)"},
		{"/github/acme/docs", "git-receive-pack", "cproxy: push to repository acme/docs is not allowed for sandbox conv-42 (allowed for push: acme/app)"},
	} {
		r := e.Do("GET", tc.path+"/info/refs?service="+tc.service, h, "")
		if r.Status != 200 || r.Header.Get("Content-Type") != "application/x-"+tc.service+"-advertisement" {
			t.Fatalf("%s: %d %q", tc.path, r.Status, r.Header.Get("Content-Type"))
		}
		sc := pktline.NewScanner(strings.NewReader(r.Body))
		var lines []string
		for sc.Scan() {
			lines = append(lines, string(sc.Bytes()))
		}
		if len(lines) != 2 || lines[0] != "# service="+tc.service+"\n" || lines[1] != "" {
			t.Errorf("%s: lines %q", tc.path, lines)
		}
		if !strings.HasSuffix(r.Body, fmt.Sprintf("%04xERR %s\n", 4+4+len(tc.want)+1, tc.want)) {
			t.Errorf("%s: body %q, want an ERR packet with %q", tc.path, r.Body, tc.want)
		}
	}
	if n := len(up.seen()); n != 0 {
		t.Fatalf("the upstream got %d requests", n)
	}
}

// pkt encodes one pkt-line.
func pkt(s string) string { return fmt.Sprintf("%04x%s", len(s)+4, s) }

const (
	zeroID = "0000000000000000000000000000000000000000"
	oldID  = "1111111111111111111111111111111111111111"
	newID  = "2222222222222222222222222222222222222222"
)

// pushBody is a receive-pack request as git sends it: commands, the first
// with capabilities after a NUL, a flush-pkt, then the pack.
func pushBody(caps string, pack []byte, cmds ...string) []byte {
	var b bytes.Buffer
	for i, c := range cmds {
		if i == 0 {
			c += "\x00" + caps
		}
		b.WriteString(pkt(c))
	}
	b.WriteString("0000")
	b.Write(pack)
	return b.Bytes()
}

func fakePack(n int) []byte {
	p := make([]byte, n)
	rand.Read(p)
	copy(p, "PACK\x00\x00\x00\x02")
	return p
}

// TestReadPushForwardsTheExactBytes: whatever the decoder reads, and
// however the body arrives, the body to forward is the original, byte for
// byte; only the commands were held in memory.
func TestReadPushForwardsTheExactBytes(t *testing.T) {
	pack := fakePack(200 << 10)
	bodies := map[string][]byte{
		"one command": pushBody("report-status side-band-64k agent=git/2.39.5", pack, oldID+" "+newID+" refs/heads/agent/x"),
		"three commands": pushBody("report-status-v2 side-band-64k quiet atomic object-format=sha1 agent=git/2.39.5", pack,
			zeroID+" "+newID+" refs/heads/agent/new", oldID+" "+zeroID+" refs/heads/agent/old", oldID+" "+newID+" refs/tags/v1"),
		"shallow":              []byte(pkt("shallow "+oldID) + string(pushBody("report-status", pack, oldID+" "+newID+" refs/heads/agent/x"))),
		"delete only, no pack": pushBody("report-status delete-refs", nil, oldID+" "+zeroID+" refs/heads/agent/x"),
		"push options follow":  pushBody("report-status push-options", []byte(pkt("ci.skip")+"0000"+string(pack)), oldID+" "+newID+" refs/heads/agent/x"),
		"newline after ref":    pushBody("report-status", pack, oldID+" "+newID+" refs/heads/agent/x\n"),
	}
	readers := map[string]func([]byte) io.Reader{
		"whole":    func(b []byte) io.Reader { return bytes.NewReader(b) },
		"one byte": func(b []byte) io.Reader { return iotest.OneByteReader(bytes.NewReader(b)) },
		"half":     func(b []byte) io.Reader { return iotest.HalfReader(bytes.NewReader(b)) },
		"data+EOF": func(b []byte) io.Reader { return iotest.DataErrReader(bytes.NewReader(b)) },
	}
	for name, body := range bodies {
		for how, rd := range readers {
			src := rd(body)
			p, err := readPush(src)
			if err != nil {
				t.Fatalf("%s, %s: %v", name, how, err)
			}
			if len(p.commands) == 0 || !p.report {
				t.Errorf("%s, %s: %d commands, report %v", name, how, len(p.commands), p.report)
			}
			got, err := io.ReadAll(p.body)
			if err != nil || !bytes.Equal(got, body) {
				t.Fatalf("%s, %s: forwarded %d bytes (%v), want the original %d", name, how, len(got), err, len(body))
			}
		}
	}
	// A refused body is also given back whole, so it can be drained.
	for _, body := range [][]byte{[]byte("0032garbage"), []byte("00"), []byte("0000extra")} {
		p, err := readPush(bytes.NewReader(body))
		if err == nil {
			t.Fatalf("%q accepted", body)
		}
		if got, _ := io.ReadAll(p.body); !bytes.Equal(got, body) {
			t.Fatalf("%q: body given back as %q", body, got)
		}
	}
}

func TestReadPushProbe(t *testing.T) {
	p, err := readPush(strings.NewReader("0000"))
	if err != nil || !p.probe {
		t.Fatalf("probe: %+v %v", p, err)
	}
	if got, _ := io.ReadAll(p.body); string(got) != "0000" {
		t.Fatalf("probe forwarded as %q", got)
	}
}

func TestReadPushRefusesWhatReceivePackWouldReadDifferently(t *testing.T) {
	for name, body := range map[string][]byte{
		"trailing word":   pushBody("report-status", nil, oldID+" "+newID+" refs/heads/agent/x refs/heads/main"),
		"tab":             pushBody("report-status", nil, oldID+"\t"+newID+"\trefs/heads/agent/x"),
		"two spaces":      pushBody("report-status", nil, oldID+"  "+newID+" refs/heads/agent/x"),
		"nbsp in ref":     pushBody("report-status", nil, oldID+" "+newID+" refs/heads/agent/x\u00a0main"),
		"no caps NUL":     []byte(pkt(oldID+" "+newID+" refs/heads/agent/x") + "0000"),
		"not refs/":       pushBody("report-status", nil, oldID+" "+newID+" heads/agent/x"),
		"dot dot":         pushBody("report-status", nil, oldID+" "+newID+" refs/heads/agent/../../main"),
		"lock":            pushBody("report-status", nil, oldID+" "+newID+" refs/heads/agent/x.lock"),
		"upper hex":       pushBody("report-status", nil, strings.ToUpper("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa")+" "+newID+" refs/heads/agent/x"),
		"both zero":       pushBody("report-status", nil, zeroID+" "+zeroID+" refs/heads/agent/x"),
		"short id":        pushBody("report-status", nil, "1111 "+newID+" refs/heads/agent/x"),
		"sha256 ids":      pushBody("report-status object-format=sha256", nil, strings.Repeat("1", 64)+" "+strings.Repeat("2", 64)+" refs/heads/agent/x"),
		"ERR line":        []byte(pkt("ERR nope") + "0000"),
		"no flush":        []byte(pkt(oldID + " " + newID + " refs/heads/agent/x\x00report-status")),
		"push-cert":       []byte(pkt("push-cert\x00report-status") + "0000"),
		"EOF for a flush": []byte(pkt(oldID+" "+newID+" refs/heads/agent/x\x00report-status") + pkt(oldID+" "+newID+" refs/heads/agent/y")),
	} {
		if p, err := readPush(bytes.NewReader(body)); err == nil {
			t.Errorf("%s: accepted %v", name, p.commands)
		}
	}
	// An endless command section stops at the limit.
	endless := io.MultiReader(strings.NewReader(pkt(oldID+" "+newID+" refs/heads/agent/x\x00report-status")),
		&repeatReader{s: pkt(oldID + " " + newID + " refs/heads/agent/y")})
	if _, err := readPush(endless); err == nil || !strings.Contains(err.Error(), "MiB") {
		t.Errorf("endless commands: %v", err)
	}
}

// repeatReader yields s over and over, without end.
type repeatReader struct {
	s   string
	off int
}

func (r *repeatReader) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		c := copy(p[n:], r.s[r.off:])
		n += c
		r.off = (r.off + c) % len(r.s)
	}
	return n, nil
}

func TestPushDenials(t *testing.T) {
	prof := gitProfile(t)
	cmd := func(old, new, ref string) *packp.Command {
		c := &packp.Command{}
		c.Name = plumbingRef(ref)
		c.Old, c.New = hash(old), hash(new)
		return c
	}
	tests := []struct {
		name string
		cmds []*packp.Command
		want []string // nil: allowed
	}{
		{"create", []*packp.Command{cmd(zeroID, newID, "refs/heads/agent/x")}, nil},
		{"update", []*packp.Command{cmd(oldID, newID, "refs/heads/agent/x")}, nil},
		{"tag allowed by no rule with tags", []*packp.Command{cmd(zeroID, newID, "refs/tags/v1")}, []string{"cproxy: push of tag refs/tags/v1 is not allowed for sandbox conv-42 (its profile allows pushing no tags to acme/app)"}},
		{"tag delete where tags may not be pushed", []*packp.Command{cmd(oldID, zeroID, "refs/tags/v1")}, []string{"cproxy: deleting refs/tags/v1 is not allowed for sandbox conv-42 (its profile allows pushing no deletions to acme/app)"}},
		{"tag outside refs", []*packp.Command{cmd(zeroID, newID, "refs/tags/release")}, []string{"cproxy: push to refs/tags/release is not allowed for sandbox conv-42 (allowed: none)"}},
		{"main", []*packp.Command{cmd(oldID, newID, "refs/heads/main")}, []string{"cproxy: push to refs/heads/main is not allowed for sandbox conv-42 (allowed: refs/heads/agent/*, refs/tags/v*)"}},
		{"delete", []*packp.Command{cmd(oldID, zeroID, "refs/heads/agent/x")}, []string{"cproxy: deleting refs/heads/agent/x is not allowed for sandbox conv-42 (its profile allows pushing no deletions to acme/app)"}},
		{"nested", []*packp.Command{cmd(oldID, newID, "refs/heads/agent/x/y")}, []string{"cproxy: push to refs/heads/agent/x/y is not allowed for sandbox conv-42 (allowed: refs/heads/agent/*, refs/tags/v*)"}},
		{"notes", []*packp.Command{cmd(oldID, newID, "refs/notes/commits")}, []string{"cproxy: push to refs/notes/commits is not allowed for sandbox conv-42 (allowed: refs/heads/agent/*, refs/tags/v*)"}},
		{"mixed", []*packp.Command{cmd(zeroID, newID, "refs/heads/agent/a"), cmd(oldID, newID, "refs/heads/main"), cmd(oldID, zeroID, "refs/heads/agent/b")}, []string{
			"cproxy: not pushed: refs/heads/main in the same push is not allowed",
			"cproxy: push to refs/heads/main is not allowed for sandbox conv-42 (allowed: refs/heads/agent/*, refs/tags/v*)",
			"cproxy: deleting refs/heads/agent/b is not allowed for sandbox conv-42 (its profile allows pushing no deletions to acme/app)",
		}},
	}
	for _, tc := range tests {
		ans := askPush(prof, "acme/app", tc.cmds)
		got, rule := pushDenials(ans, tc.cmds, pusher{prof, "conv-42", "acme/app"}), ans.Rule
		if fmt.Sprint(got) != fmt.Sprint(tc.want) || rule == "" {
			t.Errorf("%s: got %q (%s), want %q", tc.name, got, rule, tc.want)
		}
	}
	// A repository the profile may only read allows no ref at all.
	docs := []*packp.Command{cmd(oldID, newID, "refs/heads/agent/x")}
	if got := pushDenials(askPush(prof, "acme/docs", docs), docs, pusher{prof, "conv-42", "acme/docs"}); got == nil {
		t.Error("push to a read-only repository allowed")
	}
}

// TestGitHubPushAllowed: an allowed push is forwarded whole, byte for byte,
// streaming (the upstream reads the start before the client has sent the
// end), chunked when the client streams it.
func TestGitHubPushAllowed(t *testing.T) {
	up := newGitUpstream(t)
	first := make(chan struct{})
	var got bytes.Buffer
	up.onRequest = func(w http.ResponseWriter, r *http.Request) {
		buf := make([]byte, 64<<10)
		var once sync.Once
		for {
			n, err := r.Body.Read(buf)
			got.Write(buf[:n])
			if got.Len() >= 100 {
				once.Do(func() { close(first) })
			}
			if err != nil {
				break
			}
		}
		w.Header().Set("Content-Type", "application/x-git-receive-pack-result")
		io.WriteString(w, pkt("unpack ok\n")+pkt("ok refs/heads/agent/x\n")+"0000")
	}
	e := newGitEnv(t, up)
	tok := e.Token("conv-42")
	pack := fakePack(1 << 20)
	body := pushBody("report-status agent=git/2.39.5", pack, oldID+" "+newID+" refs/heads/agent/x")
	pr, pw := io.Pipe()
	go func() {
		// Send all but the last KiB, wait until the upstream has the
		// start, then the rest: a proxy that buffered would deadlock.
		pw.Write(body[:len(body)-1024])
		select {
		case <-first:
		case <-time.After(10 * time.Second):
			pw.CloseWithError(fmt.Errorf("the upstream saw nothing before the body ended"))
			return
		}
		pw.Write(body[len(body)-1024:])
		pw.Close()
	}()
	req, _ := http.NewRequest("POST", e.Proxy.URL+"/github/acme/app.git/git-receive-pack", pr)
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Content-Type", "application/x-git-receive-pack-request")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(out), "ok refs/heads/agent/x") {
		t.Fatalf("got %d %q", resp.StatusCode, out)
	}
	if !bytes.Equal(got.Bytes(), body) {
		t.Fatalf("the upstream got %d bytes, not the %d sent", got.Len(), len(body))
	}
}

// TestGitHubPushRefused: a refused push is answered with git's own push
// report, each command "ng" with its reason, in side band 1 when asked for;
// the body is read to its end first and nothing reaches the upstream.
func TestGitHubPushRefused(t *testing.T) {
	up := newGitUpstream(t)
	e := newGitEnv(t, up)
	h := routetest.With(basic(e.Token("conv-42")), "Content-Type", "application/x-git-receive-pack-request")
	pack := fakePack(300 << 10)
	cmds := []string{zeroID + " " + newID + " refs/heads/agent/ok", oldID + " " + newID + " refs/heads/main"}
	wantReport := pkt("unpack ok\n") +
		pkt("ng refs/heads/agent/ok cproxy: not pushed: refs/heads/main in the same push is not allowed\n") +
		pkt("ng refs/heads/main cproxy: push to refs/heads/main is not allowed for sandbox conv-42 (allowed: refs/heads/agent/*, refs/tags/v*)\n") + "0000"

	r := e.Do("POST", "/github/acme/app/git-receive-pack", h, string(pushBody("report-status agent=git/2.39.5", pack, cmds...)))
	if r.Status != 200 || r.Header.Get("Content-Type") != "application/x-git-receive-pack-result" || r.Body != wantReport {
		t.Fatalf("plain report: %d %q", r.Status, r.Body)
	}
	var rs packp.ReportStatus
	if err := rs.Decode(strings.NewReader(r.Body)); err != nil || rs.Error() == nil || len(rs.CommandStatuses) != 2 {
		t.Fatalf("go-git reads the report as %+v, %v", rs, err)
	}

	r = e.Do("POST", "/github/acme/app/git-receive-pack", h, string(pushBody("report-status side-band-64k agent=git/2.39.5", pack, cmds...)))
	if r.Status != 200 {
		t.Fatalf("side-band report: %d %q", r.Status, r.Body)
	}
	demux := sideband.NewDemuxer(sideband.Sideband64k, strings.NewReader(r.Body))
	inner, err := io.ReadAll(demux)
	if err != nil || string(inner) != wantReport {
		t.Fatalf("side band 1 holds %q (%v), want %q", inner, err, wantReport)
	}

	// Without report-status there is no report to put reasons in: a 403.
	r = e.Do("POST", "/github/acme/app/git-receive-pack", h, string(pushBody("agent=git/2.39.5", pack, cmds...)))
	if r.Status != 403 || !strings.Contains(r.Body, "push to refs/heads/main is not allowed") {
		t.Fatalf("no report-status: %d %q", r.Status, r.Body)
	}
	if n := len(up.seen()); n != 0 {
		t.Fatalf("the upstream got %d requests", n)
	}
	logs := e.Logs.String()
	if !strings.Contains(logs, `"target":"acme/app refs/heads/agent/ok,refs/heads/main"`) || !strings.Contains(logs, `"bytes_in":`) {
		t.Errorf("audit: %s", logs)
	}
}

func TestGitHubProbeIsForwarded(t *testing.T) {
	up := newGitUpstream(t)
	e := newGitEnv(t, up)
	h := routetest.With(basic(e.Token("conv-42")), "Content-Type", "application/x-git-receive-pack-request")
	if r := e.Do("POST", "/github/acme/app/git-receive-pack", h, "0000"); r.Status != 200 {
		t.Fatalf("probe: %d %q", r.Status, r.Body)
	}
	if s := up.seen(); len(s) != 1 || string(s[0].body) != "0000" {
		t.Fatalf("upstream got %+v", s)
	}
}

// TestGitHubUpstreamRefusesCredential: a 401 from the upstream is about
// cproxy's token, not the sandbox's; git must not be told to ask its
// credential helper again.
func TestGitHubUpstreamRefusesCredential(t *testing.T) {
	up := newGitUpstream(t)
	up.onRequest = func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("WWW-Authenticate", `Basic realm="GitHub"`)
		w.WriteHeader(401)
	}
	e := newGitEnv(t, up)
	r := e.Do("GET", "/github/acme/app/info/refs?service=git-upload-pack", basic(e.Token("conv-42")), "")
	if r.Status != 502 || r.Header.Get("WWW-Authenticate") != "" || !strings.Contains(r.Body, "refused cproxy's GitHub credential") {
		t.Fatalf("got %d %q %q", r.Status, r.Header.Get("WWW-Authenticate"), r.Body)
	}
}

// TestGitHubMissingCredential: with no GitHub credential, a request the
// policy allows is answered 503 (the operator must set one), but one it
// refuses gets the policy's refusal first: a sandbox is told "not allowed",
// not to wait for an operator, for what it may never do.
func TestGitHubMissingCredential(t *testing.T) {
	up := newGitUpstream(t)
	u, _ := url.Parse(up.srv.URL)
	e := gitEnv(t, routes.Upstream{URL: u, Missing: "the operator must set GITHUB_TOKEN"})
	h := basic(e.Token("conv-42"))
	r := e.Do("GET", "/github/acme/app/info/refs?service=git-upload-pack", h, "")
	if r.Status != 503 || !strings.Contains(r.Body, "no GitHub credential is configured: the operator must set GITHUB_TOKEN") {
		t.Fatalf("allowed: got %d %q", r.Status, r.Body)
	}
	r = e.Do("GET", "/github/acme/secret/info/refs?service=git-upload-pack", h, "")
	if want := "ERR cproxy: repository acme/secret is not allowed for sandbox conv-42 (allowed: acme/app, acme/docs)\n"; r.Status != 200 || !strings.HasSuffix(r.Body, want) {
		t.Fatalf("refused info/refs: got %d %q, want an advertisement ending %q", r.Status, r.Body, want)
	}
	r = e.Do("POST", "/github/acme/secret/git-upload-pack", map[string]string{"Authorization": h["Authorization"], "Content-Type": "application/x-git-upload-pack-request"}, "0000")
	if r.Status != 403 || !strings.Contains(r.Body, "repository acme/secret is not allowed for sandbox conv-42") {
		t.Fatalf("refused upload-pack: got %d %q", r.Status, r.Body)
	}
	if n := len(up.seen()); n != 0 {
		t.Fatalf("the upstream got %d requests", n)
	}
}

func plumbingRef(s string) plumbing.ReferenceName { return plumbing.ReferenceName(s) }
func hash(s string) plumbing.Hash                 { return plumbing.NewHash(s) }

// TestHeaderTimeoutStartsAfterTheBody: a push that takes longer to upload
// than header_timeout is not cut off; the upstream owes its answer only
// once it has the whole body. One that then answers too late still is.
func TestHeaderTimeoutStartsAfterTheBody(t *testing.T) {
	up := newGitUpstream(t)
	var hold time.Duration
	up.onRequest = func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		time.Sleep(hold)
		w.Header().Set("Content-Type", "application/x-git-receive-pack-result")
		io.WriteString(w, pkt("unpack ok\n")+"0000")
	}
	u, _ := url.Parse(up.srv.URL)
	e := gitEnv(t, routes.Upstream{URL: u, Credential: secrets.New(canaryGitHub), HeaderTimeout: 300 * time.Millisecond})
	tok := e.Token("conv-42")
	push := func() int {
		body := pushBody("report-status", fakePack(64<<10), oldID+" "+newID+" refs/heads/agent/x")
		pr, pw := io.Pipe()
		go func() {
			// Four pieces, 200ms apart: 600ms of upload.
			for i := range 4 {
				pw.Write(body[i*len(body)/4 : (i+1)*len(body)/4])
				if i < 3 {
					time.Sleep(200 * time.Millisecond)
				}
			}
			pw.Close()
		}()
		req, _ := http.NewRequest("POST", e.Proxy.URL+"/github/acme/app/git-receive-pack", pr)
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("Content-Type", "application/x-git-receive-pack-request")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := push(); code != 200 {
		t.Fatalf("slow upload, prompt answer: %d", code)
	}
	hold = time.Second
	if code := push(); code != 504 {
		t.Fatalf("slow answer: %d, want 504", code)
	}
}

// A push from a shallow clone starts with newline-terminated "shallow" lines,
// one per shallow commit; they are forwarded as sent and do not hide the
// commands from the policy.
func TestReadPushFromShallowClone(t *testing.T) {
	body := []byte(pkt("shallow "+oldID+"\n") + pkt("shallow "+newID+"\n") +
		string(pushBody("report-status side-band-64k", []byte("PACK-bytes"), zeroID+" "+newID+" refs/heads/agent/x", oldID+" "+newID+" refs/heads/main")))
	p, err := readPush(bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if len(p.commands) != 2 || p.commands[0].Name != "refs/heads/agent/x" || p.commands[1].Name != "refs/heads/main" || !p.report || !p.sideband {
		t.Fatalf("decoded %+v", p)
	}
	got, _ := io.ReadAll(p.body)
	if !bytes.Equal(got, body) {
		t.Fatalf("forwarded body differs from the one received")
	}
}

// With no credential configured (anonymous access), a 401 from the upstream
// says that one is needed, not that cproxy's was refused.
func TestGitHubUpstreamWantsACredential(t *testing.T) {
	up := newGitUpstream(t)
	up.onRequest = func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "" {
			t.Errorf("an anonymous upstream got Authorization")
		}
		w.Header().Set("WWW-Authenticate", `Basic realm="GitHub"`)
		w.WriteHeader(401)
	}
	u, _ := url.Parse(up.srv.URL)
	e := gitEnv(t, routes.Upstream{URL: u, HeaderTimeout: 10 * time.Second})
	r := e.Do("GET", "/github/acme/app/info/refs?service=git-upload-pack", basic(e.Token("conv-42")), "")
	if r.Status != 502 || !strings.Contains(r.Body, "asks for a credential and cproxy has none") {
		t.Fatalf("got %d %q", r.Status, r.Body)
	}
}

// TestGitHubPushAudit: a push's audit record lists its ref updates; a
// refused one is a denial with the rule and reason.
func TestGitHubPushAudit(t *testing.T) {
	sink := &testutil.Buffer{}
	u := newGitEnv(t, newGitUpstream(t), func(o *routetest.Options) { o.AuditLog = sink })
	h := routetest.With(basic(u.Token("conv-42")), "Content-Type", "application/x-git-receive-pack-request")
	ok := pushBody("report-status", fakePack(64), oldID+" "+newID+" refs/heads/agent/x")
	if r := u.Do("POST", "/github/acme/app/git-receive-pack", h, string(ok)); r.Status != 200 {
		t.Fatalf("push: %d %s", r.Status, r.Body)
	}
	bad := pushBody("report-status", fakePack(64), zeroID+" "+newID+" refs/heads/agent/y", oldID+" "+newID+" refs/heads/main")
	if r := u.Do("POST", "/github/acme/app/git-receive-pack", h, string(bad)); r.Status != 200 || !strings.Contains(r.Body, "ng refs/heads/main") {
		t.Fatalf("refused push: %d %s", r.Status, r.Body)
	}
	// Without report-status the refusal is a 403, recorded alike.
	plain := pushBody("agent=git/2.39.5", fakePack(64), oldID+" "+newID+" refs/heads/main")
	if r := u.Do("POST", "/github/acme/app/git-receive-pack", h, string(plain)); r.Status != 403 {
		t.Fatalf("refused push without a report: %d %s", r.Status, r.Body)
	}
	u.Proxy.Close()
	var recs []map[string]any
	for line := range strings.Lines(sink.String()) {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("%v: %q", err, line)
		}
		recs = append(recs, rec)
	}
	if len(recs) != 3 {
		t.Fatalf("%d records:\n%s", len(recs), sink.String())
	}
	refs, _ := json.Marshal(recs[0]["refs"])
	if recs[0]["decision"] != "allow" || recs[0]["target"] != "acme/app refs/heads/agent/x" ||
		string(refs) != `[{"new":"`+newID+`","old":"`+oldID+`","ref":"refs/heads/agent/x"}]` {
		t.Errorf("allowed push: %v", recs[0])
	}
	refs, _ = json.Marshal(recs[1]["refs"])
	if recs[1]["decision"] != "deny" || recs[1]["target"] != "acme/app refs/heads/agent/y,refs/heads/main" ||
		recs[1]["reason"] != "cproxy: push to refs/heads/main is not allowed for sandbox conv-42 (allowed: refs/heads/agent/*, refs/tags/v*)" || recs[1]["code"] != "cproxy-ref-not-allowed" || !strings.Contains(recs[1]["rule"].(string), "no refs entry matches") ||
		string(refs) != `[{"new":"`+newID+`","old":"`+zeroID+`","ref":"refs/heads/agent/y"},{"new":"`+newID+`","old":"`+oldID+`","ref":"refs/heads/main"}]` {
		t.Errorf("refused push: %v", recs[1])
	}
	if recs[2]["decision"] != "deny" || recs[2]["status"] != 403.0 || recs[2]["reason"] != "cproxy: push to refs/heads/main is not allowed for sandbox conv-42 (allowed: refs/heads/agent/*, refs/tags/v*)" || recs[2]["code"] != "cproxy-ref-not-allowed" ||
		!strings.Contains(recs[2]["rule"].(string), "no refs entry matches") {
		t.Errorf("refused push without a report: %v", recs[2])
	}
}

// TestGitHubRenamedRepository: the upstream's redirect to another
// repository (how github.com answers for a renamed one) is refused with
// the new name; one within the same repository is rewritten onto cproxy.
func TestGitHubRenamedRepository(t *testing.T) {
	up := newGitUpstream(t)
	up.onRequest = func(w http.ResponseWriter, r *http.Request) {
		to := "/base/acme/new-app.git/info/refs?service=git-upload-pack"
		if strings.HasPrefix(r.URL.Path, "/base/acme/app.git/") {
			to = "/base/acme/App.git/info/refs?service=git-upload-pack"
		}
		http.Redirect(w, r, to, http.StatusMovedPermanently)
	}
	e := newGitEnv(t, up, routetest.WithPolicy(t, "[profile.default]\nrepos = [{ repo = \"acme/*\", access = \"read\" }]\n"))
	h := basic(e.Token("conv-42"))
	r := e.Do("GET", "/github/acme/old-app/info/refs?service=git-upload-pack", h, "")
	if r.Status != 502 || !strings.Contains(r.Body, "repository acme/old-app has moved to acme/new-app") {
		t.Fatalf("moved: got %d %q", r.Status, r.Body)
	}
	req, _ := http.NewRequest("GET", e.Proxy.URL+"/github/acme/app/info/refs?service=git-upload-pack", nil)
	req.Header.Set("Authorization", h["Authorization"])
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if want := e.Proxy.URL + "/github/acme/App.git/info/refs?service=git-upload-pack"; resp.StatusCode != 301 || resp.Header.Get("Location") != want {
		t.Fatalf("same repository: got %d %q, want %q", resp.StatusCode, resp.Header.Get("Location"), want)
	}
}
