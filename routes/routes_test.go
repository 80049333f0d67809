package routes

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cproxy/cproxy/client"
	"github.com/cproxy/cproxy/internal/fakes"
	"github.com/cproxy/cproxy/internal/testutil"
	"github.com/cproxy/cproxy/policy"
	"github.com/cproxy/cproxy/secrets"
	"github.com/cproxy/cproxy/tokens"
)

const (
	canaryKey   = "sk-ant-api03-CANARYroutes0123456789abcdefghijklmnopqrstuvwxyz"
	canaryOAuth = "sk-ant-oat01-CANARYroutes0123456789abcdefghijklmnopqrstuvwxyz"
)

type env struct {
	t     *testing.T
	fake  *fakes.Anthropic
	srv   *Server
	proxy *httptest.Server
	admin *httptest.Server
	logs  *testutil.Buffer
}

type envOpt func(*testOptions)

// testOptions are a Server's Options with its routes' upstreams, from
// which newEnv builds the routes as cproxy serve does.
type testOptions struct {
	Options
	Anthropic Upstream
	PublicURL string
	// Extra are routes served after the kinds: a test's own, such as a
	// valuesRoute in a relay's place.
	Extra []Route
}

// TestKinds are the routes the core's tests serve: the core is tested with
// a real route in front of it, the model route. Package routes cannot
// import a route package, so an external test file (kinds_test.go, package
// routes_test) adds it here when the test binary starts.
var TestKinds []Kind

// TestAdmin is the admin API (routes/admin.Handler) that the core's tests
// mint and revoke tokens through, as the harness does. Package routes
// cannot import routes/admin, which imports it; kinds_test.go sets it, as
// TestKinds.
var TestAdmin func(*Server) http.Handler

// build builds o's routes into o.Routes, and returns its Options.
func (o *testOptions) build() Options {
	ups := map[string]Upstream{"anthropic": o.Anthropic}
	env := Env{PublicURL: o.PublicURL, Log: o.Logger, Now: o.Now}
	o.Routes = nil
	for _, k := range TestKinds {
		env.Upstream = ups[k.Upstream]
		o.Routes = append(o.Routes, k.Build(env))
	}
	o.Routes = append(o.Routes, o.Extra...)
	return o.Options
}

func newEnv(t *testing.T, opts ...envOpt) *env {
	t.Helper()
	fake := fakes.NewAnthropic(fakes.AnthropicOptions{APIKey: canaryKey, OAuthToken: canaryOAuth})
	t.Cleanup(fake.Close)
	store, err := tokens.OpenBolt(filepath.Join(t.TempDir(), "cproxy.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	u, _ := url.Parse(fake.URL)
	logs := &testutil.Buffer{}
	o := testOptions{
		Options: Options{
			Store:  store,
			Policy: policy.DefaultPolicy(),
			Logger: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		},
		Anthropic: Upstream{URL: u, Credential: secrets.New(canaryKey), Auth: "api-key", HeaderTimeout: 10 * time.Second},
	}
	for _, f := range opts {
		f(&o)
	}
	srv := New(o.build())
	e := &env{t: t, fake: fake, srv: srv, logs: logs}
	e.proxy = httptest.NewServer(srv.ProxyHandler())
	e.admin = httptest.NewServer(TestAdmin(srv))
	t.Cleanup(func() {
		e.proxy.Close()
		e.admin.Close()
		srv.Close()
		for _, c := range []string{canaryKey, canaryOAuth} {
			if strings.Contains(logs.String(), c) {
				t.Errorf("a log line holds the real credential")
			}
		}
		if strings.Contains(logs.String(), "cpx_") {
			t.Errorf("a log line holds a sandbox token:\n%s", logs.String())
		}
	})
	return e
}

func (e *env) token(sandbox string, query ...string) string {
	e.t.Helper()
	q := "sandbox=" + sandbox
	for _, x := range query {
		q += "&" + x
	}
	resp, err := http.Post(e.admin.URL+"/tokens?"+q, "", nil)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	var out tokenCreated
	json.NewDecoder(resp.Body).Decode(&out)
	if resp.StatusCode != http.StatusCreated || out.Value == "" {
		e.t.Fatalf("POST /tokens?%s: %s", q, resp.Status)
	}
	return out.Value
}

// tokenCreated is the admin API's answer to POST /tokens
// (routes/admin.TokenCreated).
type tokenCreated struct {
	Value string `json:"token"`
	client.Token
}

type reply struct {
	status int
	header http.Header
	body   string
}

func (e *env) do(method, path string, header map[string]string, body string) reply {
	e.t.Helper()
	return e.doAt(e.proxy.URL, method, path, header, body)
}

// doAt is do through the proxy at base (another server's).
func (e *env) doAt(base, method, path string, header map[string]string, body string) reply {
	e.t.Helper()
	req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, c := range []string{canaryKey, canaryOAuth} {
		if strings.Contains(string(b), c) {
			e.t.Fatalf("a response holds the real credential")
		}
	}
	return reply{resp.StatusCode, resp.Header, string(b)}
}

func bearer(tok string) map[string]string {
	return map[string]string{"Authorization": "Bearer " + tok, "Anthropic-Version": "2023-06-01"}
}

const hello = `{"model":"claude-sonnet-4-5","max_tokens":64,"messages":[{"role":"user","content":"hi"}]}`

func errorType(t *testing.T, r reply) (string, string) {
	t.Helper()
	var e struct {
		Type  string `json:"type"`
		Error struct{ Type, Message string }
	}
	if err := json.Unmarshal([]byte(r.body), &e); err != nil || e.Type != "error" {
		t.Fatalf("not an Anthropic error (%d): %q", r.status, r.body)
	}
	return e.Error.Type, e.Error.Message
}

func TestAuthentication(t *testing.T) {
	e := newEnv(t)
	tok := e.token("conv-1")
	other := e.token("conv-2")
	fake, _ := tokens.New() // well-formed, never stored
	bad := tok[:len(tok)-1] + map[bool]string{true: "A", false: "B"}[tok[len(tok)-1] != 'A']
	tests := []struct {
		name   string
		header map[string]string
		want   string
	}{
		{"none", nil, "no sandbox token"},
		{"bad checksum", bearer(bad), "malformed"},
		{"unknown", bearer(fake.Reveal()), "unknown sandbox token"},
		{"real credential is not a token", bearer(canaryKey), "looks like a real Anthropic key (sk-ant-…), which must not be in the sandbox"},
		{"two different tokens", map[string]string{"Authorization": "Bearer " + tok, "X-Api-Key": other}, "two different"},
		{"unsupported scheme", map[string]string{"Authorization": "Digest " + tok}, "unsupported"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := e.do("POST", "/v1/messages", tc.header, hello)
			typ, msg := errorType(t, r)
			if r.status != 401 || typ != "authentication_error" || !strings.Contains(msg, tc.want) {
				t.Fatalf("got %d %s %q", r.status, typ, msg)
			}
			if strings.Contains(r.body, tok) || strings.Contains(r.body, "cpx_") {
				t.Fatal("the error echoes a token")
			}
			if strings.Contains(r.body, canaryKey[:len("sk-ant-")+1]) {
				t.Fatal("the error echoes the real key past its prefix")
			}
		})
	}
	basic := map[string]string{"Authorization": "Basic " + b64("x-access-token:"+tok), "Anthropic-Version": "2023-06-01"}
	if r := e.do("POST", "/v1/messages", basic, hello); r.status != 200 {
		t.Errorf("Basic password: got %d %s", r.status, r.body)
	}
	// gh and Octokit send "token", GitHub's older scheme.
	ghStyle := map[string]string{"Authorization": "token " + tok, "Anthropic-Version": "2023-06-01"}
	if r := e.do("POST", "/v1/messages", ghStyle, hello); r.status != 200 {
		t.Errorf("token scheme: got %d %s", r.status, r.body)
	}
	if n := len(e.fake.Requests()); n != 2 {
		t.Errorf("upstream got %d requests; refused ones must not reach it", n)
	}
}

func b64(s string) string {
	return base64Std(s)
}

func TestRevocationIsImmediate(t *testing.T) {
	e := newEnv(t)
	tok := e.token("conv-1")
	keep := e.token("conv-2")
	if r := e.do("POST", "/v1/messages", bearer(tok), hello); r.status != 200 {
		t.Fatalf("before revocation: %d", r.status)
	}
	req, _ := http.NewRequest("DELETE", e.admin.URL+"/tokens?sandbox=conv-1", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 204 {
		t.Fatalf("DELETE: %v %v", err, resp.Status)
	}
	r := e.do("POST", "/v1/messages", bearer(tok), hello)
	if _, msg := errorType(t, r); r.status != 401 || !strings.Contains(msg, "revoked") {
		t.Fatalf("after revocation: %d %s", r.status, msg)
	}
	if r := e.do("POST", "/v1/messages", bearer(keep), hello); r.status != 200 {
		t.Fatalf("another sandbox's token: %d", r.status)
	}
}

func TestExpiredToken(t *testing.T) {
	now := time.Now()
	e := newEnv(t, func(o *testOptions) { o.Now = func() time.Time { return now } })
	tok := e.token("conv-1", "ttl=1m")
	now = now.Add(2 * time.Minute)
	r := e.do("POST", "/v1/messages", bearer(tok), hello)
	if _, msg := errorType(t, r); r.status != 401 || !strings.Contains(msg, "expired") {
		t.Fatalf("got %d %s", r.status, msg)
	}
}

func TestUnauthenticatedBodyIsNotRead(t *testing.T) {
	e := newEnv(t)
	conn, err := net.Dial("tcp", e.proxy.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// Expect: 100-continue with a bad token: the answer is 401 and no
	// 100 Continue, so a client never sends the body.
	fmt.Fprintf(conn, "POST /v1/messages HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer cpx_bad\r\nContent-Length: 1000000\r\nExpect: 100-continue\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 401 {
		t.Fatalf("got %d, want 401 before any 100 Continue", resp.StatusCode)
	}
}

func TestAbsoluteFormRefused(t *testing.T) {
	e := newEnv(t)
	tok := e.token("conv-1")
	conn, err := net.Dial("tcp", e.proxy.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST http://evil.example/v1/messages HTTP/1.1\r\nHost: evil.example\r\nAuthorization: Bearer %s\r\nContent-Length: %d\r\n\r\n%s", tok, len(hello), hello)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 403 {
		t.Fatalf("got %d", resp.StatusCode)
	}
	if len(e.fake.Requests()) != 0 {
		t.Fatal("forwarded")
	}
}

// stalledStream starts a streamed model request of sandbox conv-1 that the
// fake holds after its first three events until the gate is released, and
// returns its response, headers read; both are closed when the test ends.
func (e *env) stalledStream() (*http.Response, *fakes.Gate) {
	e.t.Helper()
	gate := e.fake.StallStreams(3)
	e.t.Cleanup(gate.Release)
	body := strings.Replace(hello, `"max_tokens":64`, `"max_tokens":64,"stream":true`, 1)
	req, _ := http.NewRequest("POST", e.proxy.URL+"/v1/messages", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+e.token("conv-1"))
	req.Header.Set("Anthropic-Version", "2023-06-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { resp.Body.Close() })
	return resp, gate
}

func TestStreamingPassesEventByEvent(t *testing.T) {
	e := newEnv(t)
	resp, gate := e.stalledStream()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream; charset=utf-8" && ct != "text/event-stream" {
		t.Fatalf("content-type %q", ct)
	}
	// The first events arrive while the upstream is still holding the rest:
	// nothing is buffered.
	sc := bufio.NewScanner(resp.Body)
	if !sc.Scan() || sc.Text() != "event: message_start" {
		t.Fatalf("first line %q", sc.Text())
	}
	gate.Release()
	rest, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(rest), "event: message_stop") {
		t.Fatalf("stream did not finish: %s", rest)
	}
}

func TestClientDisconnectCancelsUpstream(t *testing.T) {
	e := newEnv(t)
	gate := e.fake.HoldHeaders()
	defer gate.Release()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", e.proxy.URL+"/v1/messages", strings.NewReader(hello))
	req.Header.Set("Authorization", "Bearer "+e.token("conv-1"))
	done := make(chan error)
	go func() {
		_, err := http.DefaultClient.Do(req)
		done <- err
	}()
	<-gate.Reached()
	cancel()
	<-done
	// The fake's handler sees its request context end once cproxy cancels
	// the upstream request; Close waits for every handler.
	closed := make(chan struct{})
	go func() { e.fake.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("the upstream request was not cancelled")
	}
}

func TestUpstreamFailures(t *testing.T) {
	t.Run("no headers in time", func(t *testing.T) {
		e := newEnv(t, func(o *testOptions) { o.Anthropic.HeaderTimeout = 200 * time.Millisecond })
		gate := e.fake.HoldHeaders()
		defer gate.Release()
		r := e.do("POST", "/v1/messages", bearer(e.token("conv-1")), hello)
		if _, msg := errorType(t, r); r.status != 504 || !strings.Contains(msg, "no response within") {
			t.Fatalf("got %d %s", r.status, msg)
		}
	})
	t.Run("unreachable", func(t *testing.T) {
		ln, _ := net.Listen("tcp", "127.0.0.1:0")
		addr := ln.Addr().String()
		ln.Close()
		e := newEnv(t, func(o *testOptions) { o.Anthropic.URL = &url.URL{Scheme: "http", Host: addr} })
		r := e.do("POST", "/v1/messages", bearer(e.token("conv-1")), hello)
		if _, msg := errorType(t, r); r.status != 502 || !strings.Contains(msg, "could not be reached") {
			t.Fatalf("got %d %s", r.status, msg)
		}
	})
	t.Run("upstream errors pass unchanged", func(t *testing.T) {
		e := newEnv(t, func(o *testOptions) { o.Anthropic.Credential = secrets.New("sk-ant-wrong") })
		r := e.do("POST", "/v1/messages", bearer(e.token("conv-1")), hello)
		if _, msg := errorType(t, r); r.status != 401 || strings.Contains(msg, "cproxy") {
			t.Fatalf("got %d %s", r.status, msg)
		}
	})
	t.Run("no credential configured", func(t *testing.T) {
		e := newEnv(t, func(o *testOptions) {
			o.Anthropic.Credential = secrets.Secret{}
			o.Anthropic.Missing = "set ANTHROPIC_API_KEY and restart cproxy"
		})
		r := e.do("POST", "/v1/messages", bearer(e.token("conv-1")), hello)
		if _, msg := errorType(t, r); r.status != 503 || !strings.Contains(msg, "ANTHROPIC_API_KEY") {
			t.Fatalf("got %d %s", r.status, msg)
		}
	})
}

func TestAuditLine(t *testing.T) {
	e := newEnv(t)
	h := bearer(e.token("conv-7"))
	h["X-Claude-Code-Session-Id"] = "sess-123"
	e.do("POST", "/v1/messages", h, hello)
	// The audit line is written once the handler returns, which may be just
	// after the client has the whole response.
	var line map[string]any
	for deadline := time.Now().Add(10 * time.Second); line["msg"] != "request" && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		for l := range strings.SplitSeq(strings.TrimSpace(e.logs.String()), "\n") {
			line = nil
			json.Unmarshal([]byte(l), &line)
		}
	}
	want := map[string]any{"msg": "request", "route": "model", "sandbox": "conv-7", "session_id": "sess-123", "target": "claude-sonnet-4-5", "status": float64(200)}
	for k, v := range want {
		if line[k] != v {
			t.Errorf("%s = %v, want %v (line %v)", k, line[k], v, line)
		}
	}
	if id, _ := line["token_id"].(string); !strings.HasPrefix(id, "tok_") {
		t.Errorf("token_id = %v", line["token_id"])
	}
}

func mustPolicy(t testing.TB, src string) *policy.Policy {
	t.Helper()
	path := filepath.Join(t.TempDir(), "policy.toml")
	if err := writeFile(path, src); err != nil {
		t.Fatal(err)
	}
	p, err := policy.LoadPolicy(path)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// WaitRequests waits for a request in flight, and returns once the request,
// cut when its connection closed, has ended and written its audit line: a
// cproxy that exits after it loses no audit line.
func TestWaitRequestsUntilAudited(t *testing.T) {
	e := newEnv(t)
	_, gate := e.stalledStream()
	<-gate.Reached()
	open, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	if err := e.srv.WaitRequests(open); err == nil {
		t.Fatal("WaitRequests returned while a stream was open")
	}
	e.proxy.CloseClientConnections()
	if err := e.srv.WaitRequests(t.Context()); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(e.logs.String(), "response cut off before its end") {
		t.Fatalf("no audit line of the cut stream once WaitRequests returned:\n%s", e.logs.String())
	}
}

// valuesRoute is a route of the core's tests with what the core reads of a
// relay: the per-token values its requests use (Valued) and the sources of
// its credentials (Sourced). It refuses every request.
type valuesRoute struct {
	values  []string
	sources []Source
}

func (valuesRoute) Name() string   { return "values" }
func (valuesRoute) Prefix() string { return "/values/" }
func (valuesRoute) Close()         {}
func (valuesRoute) Serve(c *Call) {
	c.Fail(Refuse(ErrForbidden, "the values route serves nothing"))
}
func (valuesRoute) WriteError(w http.ResponseWriter, err error) int { return WriteJSONError(w, err) }
func (v valuesRoute) ValueNames() []string                          { return v.values }
func (v valuesRoute) Sources() []Source                             { return v.sources }

// carelessRoute forwards every request to its upstream without asking the
// policy anything: a route with a defect, which the core must catch.
type carelessRoute struct{ fwd *Forwarder }

func (carelessRoute) Name() string                                    { return "careless" }
func (carelessRoute) Prefix() string                                  { return "/careless/" }
func (r carelessRoute) Close()                                        { r.fwd.Close() }
func (carelessRoute) WriteError(w http.ResponseWriter, err error) int { return WriteJSONError(w, err) }
func (r carelessRoute) Serve(c *Call)                                 { r.fwd.Forward(c, c.Request(), Target{Path: "/v1/models"}) }

// A route that forwards without asking the policy has its request refused
// by the core, and the upstream never sees it: deny by default does not
// rest on every route remembering to ask.
func TestForwardWithoutDecisionRefused(t *testing.T) {
	e := newEnv(t, func(o *testOptions) {
		env := Env{Upstream: Upstream{URL: o.Anthropic.URL, Credential: secrets.New(canaryKey), HeaderTimeout: 10 * time.Second}, Log: o.Logger}
		o.Extra = append(o.Extra, carelessRoute{fwd: env.NewForwarder("careless", "/careless/", func(http.Header, secrets.Secret) {}, nil)})
	})
	r := e.do("GET", "/careless/x", bearer(e.token("conv-1")), "")
	if r.status != 403 || !strings.Contains(r.body, "asked no policy question") {
		t.Errorf("got %d %s; want 403 naming the missing policy question", r.status, r.body)
	}
	if n := len(e.fake.Requests()); n != 0 {
		t.Errorf("the upstream got %d requests", n)
	}
	if !strings.Contains(e.logs.String(), "without asking the policy") {
		t.Errorf("no error logged for the route's defect:\n%s", e.logs.String())
	}
}
