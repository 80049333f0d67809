// Package routetest starts a real routes.Server, with the routes a test
// names, for the tests of a route's own package (routes/model, routes/github,
// routes/npm, routes/relay): a request goes through the proxy listener's
// authentication, policy, audit and metrics as under cproxy serve, and the
// test ends by checking that no log line holds a real credential or a
// sandbox token.
//
// Only tests import it. The core's own tests (package routes) keep their
// internal harness: they cannot import a package that imports routes.
package routetest

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cproxy/cproxy/client"
	"github.com/cproxy/cproxy/internal/fakes"
	"github.com/cproxy/cproxy/internal/testutil"
	"github.com/cproxy/cproxy/policy"
	"github.com/cproxy/cproxy/routes"
	"github.com/cproxy/cproxy/routes/admin"
	"github.com/cproxy/cproxy/routes/mcp"
	"github.com/cproxy/cproxy/routes/relay"
	"github.com/cproxy/cproxy/secrets"
	"github.com/cproxy/cproxy/tokens"
)

// The canaries: real-looking Anthropic credentials that a test may give
// an upstream (Anthropic does). Every Env fails its test if a log line or
// a response holds one, as for the route's own (Options.Canaries).
const (
	CanaryKey   = "sk-ant-api03-CANARYroutetest0123456789abcdefghijklmnopqrstuvwx"
	CanaryOAuth = "sk-ant-oat01-CANARYroutetest0123456789abcdefghijklmnopqrstuvwx"
)

// Options are a Server's Options with the routes to build from them, as
// cproxy serve builds them (routes/builtin.Routes).
type Options struct {
	routes.Options
	// Kinds are the registered routes the Server serves, in order; a
	// route's package names its own Kind.
	Kinds []routes.Kind
	// Upstreams are the kinds' upstreams, by Kind.Upstream; a kind whose
	// upstream is absent (or has no URL) is Unserved.
	Upstreams map[string]routes.Upstream
	// Relays are built after the kinds.
	Relays []relay.Relay
	// MCP, when not empty, are served by the MCP route, after the relays.
	MCP []mcp.Server
	// PublicURL is the routes' Env.PublicURL; empty means each request's
	// Host.
	PublicURL string
	// Canaries are the real credentials the test's upstreams hold: the
	// test fails if a log line or a response holds one. CanaryKey and
	// CanaryOAuth are always checked.
	Canaries []string
}

// An Option changes the Options of New.
type Option func(*Options)

// Env is a running Server with its listeners, closed when the test ends.
type Env struct {
	t      testing.TB
	Server *routes.Server
	// Proxy serves the proxy listener; Admin the admin API
	// (routes/admin.Handler), as cproxy serve does.
	Proxy, Admin *httptest.Server
	// Logs holds the Server's log lines, audit lines included unless
	// Options.Audit or AuditLog sends them elsewhere, as JSON.
	Logs     *testutil.Buffer
	canaries []string
}

// New starts a Server with opts applied to these defaults: a bolt token
// store in the test's temporary folder, the default policy, and a JSON
// logger at debug level writing to Env.Logs.
func New(t testing.TB, opts ...Option) *Env {
	t.Helper()
	store, err := tokens.OpenBolt(filepath.Join(t.TempDir(), "cproxy.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	logs := &testutil.Buffer{}
	o := Options{Options: routes.Options{
		Store:  store,
		Policy: policy.DefaultPolicy(),
		Logger: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}}
	for _, f := range opts {
		f(&o)
	}
	srv := routes.New(o.build())
	e := &Env{t: t, Server: srv, Logs: logs, canaries: append([]string{CanaryKey, CanaryOAuth}, o.Canaries...)}
	e.Proxy = httptest.NewServer(srv.ProxyHandler())
	e.Admin = httptest.NewServer(admin.Handler(srv, client.Serving{}))
	t.Cleanup(func() {
		e.Proxy.Close()
		e.Admin.Close()
		srv.Close()
		for _, c := range e.canaries {
			if strings.Contains(logs.String(), c) {
				t.Errorf("a log line holds a real credential")
			}
		}
		if strings.Contains(logs.String(), "cpx_") {
			t.Errorf("a log line holds a sandbox token:\n%s", logs.String())
		}
	})
	return e
}

// build builds o's routes into its Options.Routes, and returns them.
func (o *Options) build() routes.Options {
	env := routes.Env{PublicURL: o.PublicURL, Log: o.Logger, Now: o.Now}
	o.Routes = nil
	for _, k := range o.Kinds {
		env.Upstream = o.Upstreams[k.Upstream]
		o.Routes = append(o.Routes, k.Build(env))
	}
	env.Upstream = routes.Upstream{}
	for _, rl := range o.Relays {
		o.Routes = append(o.Routes, relay.New(rl, env))
	}
	if len(o.MCP) > 0 {
		o.Routes = append(o.Routes, mcp.New(o.MCP, env))
	}
	return o.Options
}

// Serve is the Option that serves kind with up as its upstream, up's
// credential a canary when it has one.
func Serve(kind routes.Kind, up routes.Upstream) Option {
	return func(o *Options) {
		o.Kinds = append(o.Kinds, kind)
		if o.Upstreams == nil {
			o.Upstreams = map[string]routes.Upstream{}
		}
		o.Upstreams[kind.Upstream] = up
		if !up.Credential.IsZero() {
			o.Canaries = append(o.Canaries, up.Credential.Reveal())
		}
	}
}

// WithPolicy is the Option that puts the policy src in force.
func WithPolicy(t testing.TB, src string) Option {
	p := MustPolicy(t, src)
	return func(o *Options) { o.Policy = p }
}

// Anthropic starts a fake Anthropic API holding the canaries, closed when
// the test ends, and returns it with the upstream that reaches it with
// CanaryKey.
func Anthropic(t testing.TB) (*fakes.Anthropic, routes.Upstream) {
	fake := fakes.NewAnthropic(fakes.AnthropicOptions{APIKey: CanaryKey, OAuthToken: CanaryOAuth})
	t.Cleanup(fake.Close)
	u, err := url.Parse(fake.URL)
	if err != nil {
		t.Fatal(err)
	}
	return fake, routes.Upstream{URL: u, Credential: secrets.New(CanaryKey), Auth: "api-key", HeaderTimeout: 10 * time.Second}
}

// Token mints a token for sandbox through the admin API; query adds
// POST /tokens parameters ("ttl=1m").
func (e *Env) Token(sandbox string, query ...string) string {
	e.t.Helper()
	q := "sandbox=" + sandbox
	for _, x := range query {
		q += "&" + x
	}
	resp, err := http.Post(e.Admin.URL+"/tokens?"+q, "", nil)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	var out admin.TokenCreated
	json.NewDecoder(resp.Body).Decode(&out)
	if resp.StatusCode != http.StatusCreated || out.Value == "" {
		e.t.Fatalf("POST /tokens?%s: %s", q, resp.Status)
	}
	return out.Value
}

// Revoke revokes sandbox's tokens through the admin API.
func (e *Env) Revoke(sandbox string) {
	e.t.Helper()
	if status, body := e.admin(http.MethodDelete, "/tokens?sandbox="+url.QueryEscape(sandbox)); status != http.StatusNoContent {
		e.t.Fatalf("DELETE /tokens?sandbox=%s: %d %s", sandbox, status, body)
	}
}

// Usage is what sandbox's token has spent in its budget's window, as the
// admin API lists it (GET /tokens); the test fails unless sandbox has one
// token and it has a budget.
func (e *Env) Usage(sandbox string) tokens.Usage {
	e.t.Helper()
	var page client.TokenPage
	if status, body := e.admin(http.MethodGet, "/tokens?sandbox="+url.QueryEscape(sandbox)); status != http.StatusOK {
		e.t.Fatalf("GET /tokens?sandbox=%s: %d %s", sandbox, status, body)
	} else if err := json.Unmarshal([]byte(body), &page); err != nil {
		e.t.Fatal(err)
	}
	if len(page.Tokens) != 1 || page.Tokens[0].Usage == nil {
		e.t.Fatalf("sandbox %s has no one token with a budget: %+v", sandbox, page.Tokens)
	}
	u := page.Tokens[0].Usage
	return tokens.Usage{Requests: u.Requests, Input: u.InputTokens, Output: u.OutputTokens, CacheRead: u.CacheReadTokens, CacheWrite: u.CacheWriteTokens,
		MCPCalls: u.MCPCalls}
}

// Metrics is the admin API's GET /metrics, in Prometheus's text format.
func (e *Env) Metrics() string {
	e.t.Helper()
	status, body := e.admin(http.MethodGet, "/metrics")
	if status != http.StatusOK {
		e.t.Fatalf("GET /metrics: %d %s", status, body)
	}
	return body
}

// admin sends a request with no body to the admin API, and returns its
// answer's status and body.
func (e *Env) admin(method, path string) (int, string) {
	e.t.Helper()
	req, err := http.NewRequest(method, e.Admin.URL+path, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// Reply is a response, read whole.
type Reply struct {
	Status int
	Header http.Header
	Body   string
}

// Do sends a request through the proxy listener, with header's fields set.
func (e *Env) Do(method, path string, header map[string]string, body string) Reply {
	e.t.Helper()
	return e.DoAt(e.Proxy.URL, method, path, header, body)
}

// DoAt is Do through the proxy at base (another server's); it fails the
// test if the response holds a canary.
func (e *Env) DoAt(base, method, path string, header map[string]string, body string) Reply {
	e.t.Helper()
	req, err := http.NewRequest(method, base+path, strings.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, c := range e.canaries {
		if strings.Contains(string(b), c) {
			e.t.Fatalf("a response holds a real credential")
		}
	}
	return Reply{resp.StatusCode, resp.Header, string(b)}
}

// Bearer is the header that sends tok as a Bearer token.
func Bearer(tok string) map[string]string {
	return map[string]string{"Authorization": "Bearer " + tok}
}

// With is h with the header fields kv (name, value, …) added.
func With(h map[string]string, kv ...string) map[string]string {
	out := map[string]string{}
	for k, v := range h {
		out[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i]] = kv[i+1]
	}
	return out
}

// MustPolicy loads the policy file src, failing the test if it does not
// load.
func MustPolicy(t testing.TB, src string) *policy.Policy {
	t.Helper()
	path := filepath.Join(t.TempDir(), "policy.toml")
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := policy.LoadPolicy(path)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
