package model

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/cproxy/cproxy/internal/fakes"
	"github.com/cproxy/cproxy/routes"
	"github.com/cproxy/cproxy/routes/routetest"
	"github.com/cproxy/cproxy/secrets"
)

// newModelEnv serves the model route, forwarding to a fake Anthropic API
// that the canary API key reaches; set, if not nil, changes the route's
// upstream first.
func newModelEnv(t *testing.T, set func(*routes.Upstream), opts ...routetest.Option) (*routetest.Env, *fakes.Anthropic) {
	t.Helper()
	fake, up := routetest.Anthropic(t)
	if set != nil {
		set(&up)
	}
	return routetest.New(t, append([]routetest.Option{routetest.Serve(Kind, up)}, opts...)...), fake
}

// bearer is the header Claude Code sends: tok as a Bearer token, and the
// API version.
func bearer(tok string) map[string]string {
	return routetest.With(routetest.Bearer(tok), "Anthropic-Version", "2023-06-01")
}

// errorType is the type and message of r's body, failing the test if it
// is not an error in Anthropic's shape.
func errorType(t *testing.T, r routetest.Reply) (string, string) {
	t.Helper()
	var e struct {
		Type  string `json:"type"`
		Error struct{ Type, Message string }
	}
	if err := json.Unmarshal([]byte(r.Body), &e); err != nil || e.Type != "error" {
		t.Fatalf("not an Anthropic error (%d): %q", r.Status, r.Body)
	}
	return e.Error.Type, e.Error.Message
}

func TestModelRequestSwapsTheCredential(t *testing.T) {
	e, fake := newModelEnv(t, nil)
	tok := e.Token("conv-42")
	for _, h := range []map[string]string{bearer(tok), {"X-Api-Key": tok}} {
		h["anthropic-version"] = "2023-06-01"
		h["anthropic-beta"] = "prompt-caching-2024-07-31"
		h["X-Forwarded-For"] = "6.6.6.6"
		r := e.Do("POST", "/v1/messages?beta=true", h, hello)
		if r.Status != 200 || !strings.Contains(r.Body, fakes.DefaultReply) {
			t.Fatalf("got %d %s", r.Status, r.Body)
		}
		if r.Header.Get("anthropic-ratelimit-requests-limit") == "" {
			t.Error("anthropic-ratelimit-* response headers did not pass")
		}
	}
	reqs := fake.Requests()
	if len(reqs) != 2 {
		t.Fatalf("upstream got %d requests", len(reqs))
	}
	for _, r := range reqs {
		if r.Header.Get("X-Api-Key") != routetest.CanaryKey || r.Header.Get("Authorization") != "" {
			t.Errorf("upstream credential headers: x-api-key set=%v authorization=%q", r.Header.Get("X-Api-Key") != "", r.Header.Get("Authorization"))
		}
		if r.Header.Get("Anthropic-Version") != "2023-06-01" || r.Header.Get("Anthropic-Beta") != "prompt-caching-2024-07-31" {
			t.Errorf("anthropic headers changed: %v", r.Header)
		}
		if r.Header.Get("X-Forwarded-For") != "" {
			t.Error("X-Forwarded-For from the client was forwarded")
		}
		if r.Path != "/v1/messages" || r.RawQuery != "beta=true" || string(r.Body) != hello {
			t.Errorf("upstream got %s?%s %q", r.Path, r.RawQuery, r.Body)
		}
	}
}

func TestOAuthUpstream(t *testing.T) {
	e, fake := newModelEnv(t, func(up *routes.Upstream) {
		up.Credential = secrets.New(routetest.CanaryOAuth)
		up.Auth = "oauth"
	})
	h := bearer(e.Token("conv-1"))
	h["anthropic-beta"] = "claude-code-20250219, interleaved-thinking-2025-05-14"
	if r := e.Do("POST", "/v1/messages", h, hello); r.Status != 200 {
		t.Fatalf("got %d %s", r.Status, r.Body)
	}
	r := fake.Requests()[0]
	if r.Header.Get("Authorization") != "Bearer "+routetest.CanaryOAuth || r.Header.Get("X-Api-Key") != "" {
		t.Error("upstream did not get the OAuth bearer alone")
	}
	if got := r.Header.Get("Anthropic-Beta"); got != "claude-code-20250219,interleaved-thinking-2025-05-14,oauth-2025-04-20" {
		t.Errorf("anthropic-beta = %q", got)
	}
}

func TestAPIKeyUpstreamDropsOAuthBeta(t *testing.T) {
	e, fake := newModelEnv(t, nil)
	h := bearer(e.Token("conv-1"))
	h["anthropic-beta"] = "oauth-2025-04-20"
	if r := e.Do("POST", "/v1/messages", h, hello); r.Status != 200 {
		t.Fatalf("got %d %s", r.Status, r.Body)
	}
	if got := fake.Requests()[0].Header.Values("Anthropic-Beta"); len(got) != 0 {
		t.Errorf("anthropic-beta = %q", got)
	}
}

// TestExpiredClaudeCodeToken: an expired claude-code token is not sent; the
// client gets 503 in Anthropic's shape, with the reason and no retry.
func TestExpiredClaudeCodeToken(t *testing.T) {
	if runtime.GOOS == "darwin" {
		t.Skip("claude-code reads the macOS Keychain first; not tested there")
	}
	dir := t.TempDir()
	t.Setenv("CLAUDE_CONFIG_DIR", dir)
	body := fmt.Sprintf(`{"claudeAiOauth":{"accessToken":%q,"expiresAt":%d}}`, routetest.CanaryOAuth, time.Now().Add(-time.Minute).UnixMilli())
	os.WriteFile(filepath.Join(dir, ".credentials.json"), []byte(body), 0o600)
	live, err := new(secrets.Loader).Live("anthropic", "claude-code", nil)
	if err != nil {
		t.Fatal(err)
	}
	e, fake := newModelEnv(t, func(up *routes.Upstream) { *up = routes.Upstream{URL: up.URL, Live: live, Auth: "oauth"} })
	r := e.Do("POST", "/v1/messages", bearer(e.Token("conv-1")), hello)
	typ, msg := errorType(t, r)
	if r.Status != 503 || typ != "api_error" || r.Header.Get("X-Should-Retry") != "false" ||
		!strings.HasPrefix(msg, "cproxy: claude-code: Claude Code's login on the cproxy host expired") || strings.Contains(msg, dir) {
		t.Fatalf("got %d %s %s", r.Status, typ, msg)
	}
	if n := len(fake.Requests()); n != 0 {
		t.Fatalf("the expired token was sent: %d requests upstream", n)
	}
}

func TestRefusedWithoutForwarding(t *testing.T) {
	e, fake := newModelEnv(t, nil, routetest.WithPolicy(t, `
[profile.web]
models = ["claude-sonnet-*"]

[[sandbox]]
match = "conv-*"
profile = "web"
`))
	h := bearer(e.Token("conv-42"))
	tests := []struct {
		name, method, path, body string
		status                   int
		want                     string
	}{
		{"model not allowed", "POST", "/v1/messages", `{"model":"claude-opus-4-1","max_tokens":1,"messages":[]}`, 403, "model claude-opus-4-1 is not allowed for sandbox conv-42"},
		{"count_tokens checks the model too", "POST", "/v1/messages/count_tokens", `{"model":"claude-opus-4-1","messages":[]}`, 403, "not allowed"},
		{"batches", "POST", "/v1/messages/batches", hello, 403, "not a model API call"},
		{"files", "GET", "/v1/files", "", 403, "not a model API call"},
		{"legacy complete", "POST", "/v1/complete", hello, 403, "not a model API call"},
		{"wrong method", "GET", "/v1/messages", "", 403, "not a model API call"},
		{"dot segments", "POST", "/v1/messages/../models", hello, 403, "not a model API call"},
		{"encoded slash", "POST", "/v1/messages%2fcount_tokens", hello, 403, "non-canonical"},
		{"encoded dot", "POST", "/v1/%2e%2e/v1/messages", hello, 403, "non-canonical"},
		{"trailing slash", "POST", "/v1/messages/", hello, 403, "not a model API call"},
		{"double slash", "POST", "/v1//messages", hello, 403, "not a model API call"},
		{"case", "POST", "/V1/Messages", hello, 403, "no such route"},
		{"unknown query", "POST", "/v1/messages?beta=true&evil=1", hello, 403, `query parameter \"evil\"`},
		{"repeated query", "POST", "/v1/messages?beta=true&beta=false", hello, 400, "more than once"},
		{"duplicate model key", "POST", "/v1/messages", `{"model":"claude-sonnet-4-5","model":"claude-opus-4-1","max_tokens":1,"messages":[]}`, 400, "twice"},
		{"model key case", "POST", "/v1/messages", `{"MODEL":"claude-sonnet-4-5","max_tokens":1,"messages":[]}`, 400, "another casing"},
		{"model key in two casings", "POST", "/v1/messages", `{"model":"claude-sonnet-4-5","MODEL":"claude-opus-4-1","max_tokens":1,"messages":[]}`, 400, `another casing of \"model\"`},
		{"max_tokens key in two casings", "POST", "/v1/messages", `{"model":"claude-sonnet-4-5","max_tokens":1,"MAX_TOKENS":64000,"messages":[]}`, 400, `another casing of \"max_tokens\"`},
		{"not JSON", "POST", "/v1/messages", `model=claude`, 400, "not a JSON object"},
		{"trailing data", "POST", "/v1/messages", hello + `{}`, 400, "after its JSON"},
		{"model not a string", "POST", "/v1/messages", `{"model":["claude-sonnet-4-5"]}`, 400, "must be a string"},
		{"models with a body", "GET", "/v1/models", "x", 400, "takes no body"},
		{"other route", "GET", "/tokens", "", 403, "no such route"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := e.Do(tc.method, tc.path, h, tc.body)
			if r.Status != tc.status || !strings.Contains(r.Body, tc.want) {
				t.Fatalf("got %d %s", r.Status, r.Body)
			}
		})
	}
	if n := len(fake.Requests()); n != 0 {
		t.Fatalf("upstream got %d requests", n)
	}
	if r := e.Do("POST", "/v1/messages", h, hello); r.Status != 200 {
		t.Fatalf("allowed model: %d %s", r.Status, r.Body)
	}
	if r := e.Do("GET", "/v1/models?limit=5", h, ""); r.Status != 200 {
		t.Fatalf("models: %d %s", r.Status, r.Body)
	}
}

func TestCompressedBodyRefused(t *testing.T) {
	e, _ := newModelEnv(t, nil)
	h := bearer(e.Token("conv-1"))
	h["Content-Encoding"] = "gzip"
	r := e.Do("POST", "/v1/messages", h, hello)
	if r.Status != 400 || !strings.Contains(r.Body, "Content-Encoding") {
		t.Fatalf("got %d %s", r.Status, r.Body)
	}
}

func TestBodyLimit(t *testing.T) {
	e, _ := newModelEnv(t, nil)
	h := bearer(e.Token("conv-1"))
	big := `{"model":"claude-sonnet-4-5","pad":"` + strings.Repeat("x", 32<<20) + `"}`
	r := e.Do("POST", "/v1/messages", h, big)
	if typ, _ := errorType(t, r); r.Status != 413 || typ != "request_too_large" {
		t.Fatalf("got %d %s", r.Status, typ)
	}
	// Without a Content-Length the limit holds too.
	pr, pw := io.Pipe()
	go func() { pw.Write([]byte(big)); pw.Close() }()
	req, _ := http.NewRequest("POST", e.Proxy.URL+"/v1/messages", pr)
	req.Header.Set("Authorization", h["Authorization"])
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 413 || resp.Request.ContentLength != -1 && resp.Request.ContentLength != 0 {
		t.Fatalf("chunked: got %d", resp.StatusCode)
	}
}

// answerFirst is an audit log that takes a request's line only once the
// client has its whole answer (got is closed), and says whether it had to
// give up waiting: the line was written before the answer was sent.
type answerFirst struct {
	got, written chan struct{}
	gaveUp       bool
}

func (w *answerFirst) Write(p []byte) (int, error) {
	select {
	case <-w.got:
	case <-time.After(30 * time.Second): // a bound for a broken build, not a measure
		w.gaveUp = true
	}
	close(w.written)
	return len(p), nil
}

// TestAnswerBeforeAuditLine: a non-streaming answer, of declared length,
// reaches the client whole before its audit line is written, so the
// client does not wait for the log.
func TestAnswerBeforeAuditLine(t *testing.T) {
	log := &answerFirst{got: make(chan struct{}), written: make(chan struct{})}
	e, _ := newModelEnv(t, nil, func(o *routetest.Options) { o.AuditLog = log })
	h := routetest.With(routetest.Bearer(e.Token("conv-1")), "Anthropic-Version", "2023-06-01")
	r := e.Do("POST", "/v1/messages", h, `{"model":"claude-sonnet-4-5","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`)
	close(log.got)
	<-log.written
	if r.Status != 200 || r.Header.Get("Content-Length") == "" {
		t.Fatalf("got %d, Content-Length %q: %q", r.Status, r.Header.Get("Content-Length"), r.Body)
	}
	if log.gaveUp {
		t.Fatal("the audit line was written before the client had its answer")
	}
}
