package admin_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cproxy/cproxy/client"
	"github.com/cproxy/cproxy/policy"
	"github.com/cproxy/cproxy/routes/admin"
	"github.com/cproxy/cproxy/routes/model"
	"github.com/cproxy/cproxy/routes/relay"
	"github.com/cproxy/cproxy/routes/routetest"
	"github.com/cproxy/cproxy/tokens"
)

// The admin API's tests serve it beside the model route, as cproxy serve
// does (routetest), and call it over HTTP as the harness does.

const hello = `{"model":"claude-sonnet-4-5","max_tokens":64,"messages":[{"role":"user","content":"hi"}]}`

// modelRequest sends hello to the model route with tok and returns the
// answer.
func modelRequest(e *routetest.Env, tok string) routetest.Reply {
	return e.Do("POST", "/v1/messages", routetest.With(routetest.Bearer(tok), "Anthropic-Version", "2023-06-01"), hello)
}

// newEnv serves the model route, on a fake Anthropic API, and the admin
// API, with opts applied.
func newEnv(t *testing.T, opts ...routetest.Option) *routetest.Env {
	t.Helper()
	_, up := routetest.Anthropic(t)
	return routetest.New(t, append([]routetest.Option{routetest.Serve(model.Kind, up)}, opts...)...)
}

// call sends method path, with body as JSON when it is not empty, to the
// admin API and returns the status, the Allow header and the body.
func call(t *testing.T, e *routetest.Env, method, path, body string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequest(method, e.Admin.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Allow"), string(b)
}

// mint calls POST /tokens?query and returns the status and the decoded
// answer (or the error message).
func mint(t *testing.T, e *routetest.Env, query string) (int, admin.TokenCreated, string) {
	t.Helper()
	code, _, body := call(t, e, "POST", "/tokens?"+query, "")
	var out admin.TokenCreated
	var fail struct{ Error string }
	json.Unmarshal([]byte(body), &out)
	json.Unmarshal([]byte(body), &fail)
	return code, out, fail.Error
}

const bindingPolicy = `[profile.default]
models = ["*"]

[profile.lan]
models = ["*"]
sources = ["10.20.0.0/16"]

[profile.sock]
models = ["*"]
bind = "socket"

[[sandbox]]
match = "vm-*"
profile = "sock"
`

func TestMintBinding(t *testing.T) {
	e := newEnv(t, routetest.WithPolicy(t, bindingPolicy))
	for _, tt := range []struct{ query, want string }{
		{"sandbox=conv-1&source=10.20.0.0/33", `cproxy: invalid source: "10.20.0.0/33" is not an IP address or CIDR prefix`},
		{"sandbox=conv-1&source=10.20.30.5/16", `cproxy: invalid source: "10.20.30.5/16" has bits set past its length: write "10.20.0.0/16"`},
		{"sandbox=conv-1&profile=lan&source=10.0.0.0/8", "cproxy: source 10.0.0.0/8 is outside the sources of profile lan: a token bound to it could never be used"},
		{"sandbox=conv-1&profile=lan&source=192.168.1.1", "cproxy: source 192.168.1.1 is outside the sources of profile lan"},
		{"sandbox=conv-1&bind=vsock", `cproxy: invalid bind "vsock": the only binding is "socket"`},
		{"sandbox=conv-1&bind=socket", "cproxy: bind=socket needs listen.sandbox_sockets in cproxy's config"},
		{"sandbox=vm-1", "cproxy: bind=socket needs listen.sandbox_sockets"}, // its profile binds it
		{"sandbox=conv-1&source=10.1.2.3&bind=socket", "cproxy: source cannot be combined with bind=socket"},
	} {
		code, _, msg := mint(t, e, tt.query)
		if code != http.StatusBadRequest || !strings.HasPrefix(msg, tt.want) {
			t.Errorf("POST /tokens?%s: %d %q, want 400 %q", tt.query, code, msg, tt.want)
		}
	}
	code, out, _ := mint(t, e, "sandbox=conv-1&profile=lan&source=10.20.30.0/24")
	if code != http.StatusCreated || out.Source != "10.20.30.0/24" || out.Bind != "" || out.Socket != "" {
		t.Errorf("mint with source: %d %+v", code, out)
	}
	if _, out, _ = mint(t, e, "sandbox=conv-1&source=::ffff:10.1.2.3"); out.Source != "10.1.2.3" {
		t.Errorf("source kept as %q, want 10.1.2.3", out.Source)
	}
	if _, _, b := call(t, e, "GET", "/tokens?sandbox=conv-1", ""); !strings.Contains(b, `"source":"10.20.30.0/24"`) {
		t.Errorf("GET /tokens does not show the source: %s", b)
	}
}

// canaryValue is a per-token value: no log line or listing may hold it.
const canaryValue = "modtok-CANARY-0123456789"

// newValuesEnv serves, beside the model route, a relay whose header takes
// the per-token value mod_token.
func newValuesEnv(t *testing.T) *routetest.Env {
	t.Helper()
	e := newEnv(t, func(o *routetest.Options) {
		o.Relays = []relay.Relay{{Rules: &policy.Relay{Name: "mod"}, Prefix: "/mod/", Headers: []relay.Header{{Name: "X-Mod-Token", Value: "mod_token"}}}}
	})
	t.Cleanup(func() {
		if strings.Contains(e.Logs.String(), canaryValue) {
			t.Errorf("a log line holds a per-token value")
		}
	})
	return e
}

// A token is minted with the values a route names, and the answer names
// them without their values.
func TestTokenValuesMinted(t *testing.T) {
	e := newValuesEnv(t)
	status, _, body := call(t, e, "POST", "/tokens?sandbox=conv-1", `{"values": {"mod_token": "`+canaryValue+`"}}`)
	var created admin.TokenCreated
	json.Unmarshal([]byte(body), &created)
	if status != 201 || len(created.Values) != 1 || created.Values[0] != "mod_token" || strings.Contains(body, canaryValue) {
		t.Fatalf("mint = %d %s", status, body)
	}
}

func TestTokenValuesRefused(t *testing.T) {
	e := newValuesEnv(t)
	for _, c := range []struct {
		ct, body string
		status   int
		msg      string
	}{
		{"application/json", `{"values": {"hub_token": "x"}}`, 400, `no relay uses a value named \"hub_token\" (the config's relays use: mod_token)`},
		{"application/json", `{"values": {"mod_token": "a\r\nX-Evil: 1"}}`, 400, "holds a control character"},
		{"application/json", `{"values": {"mod_token": ""}}`, 400, "must be 1 to 4096 bytes"},
		{"application/json", `{"values": {"mod_token": 7}}`, 400, `the body is not {\"values\"`},
		{"application/json", `{"values": {}, "extra": 1}`, 400, "no other keys"},
		{"text/plain", `{"values": {"mod_token": "x"}}`, 415, "must be JSON"},
	} {
		resp, err := http.Post(e.Admin.URL+"/tokens?sandbox=conv-1", c.ct, strings.NewReader(c.body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.status || !strings.Contains(string(b), c.msg) {
			t.Errorf("%s = %d %s, want %d %q", c.body, resp.StatusCode, b, c.status, c.msg)
		}
	}
	// Nothing was minted by a refused request, and the list never shows a value.
	if _, _, b := call(t, e, "GET", "/tokens", ""); strings.Contains(b, "conv-1") {
		t.Errorf("a refused mint left a token: %s", b)
	}
	call(t, e, "POST", "/tokens?sandbox=conv-9", `{"values": {"mod_token": "`+canaryValue+`"}}`)
	if _, _, b := call(t, e, "GET", "/tokens", ""); strings.Contains(b, canaryValue) || !strings.Contains(b, "conv-9") {
		t.Errorf("GET /tokens: %s", b)
	}
}

// failingStore is a real store whose writes fail, while fail is set, the
// way a full disk fails them.
type failingStore struct {
	tokens.Store
	fail atomic.Bool
}

var errDiskFull = fmt.Errorf("write cproxy.db: %w", syscall.ENOSPC)

func (s *failingStore) Create(ctx context.Context, h tokens.Hash, r tokens.Record) error {
	if s.fail.Load() {
		return errDiskFull
	}
	return s.Store.Create(ctx, h, r)
}

func (s *failingStore) RevokeSandbox(ctx context.Context, sandbox string, at time.Time) (int, error) {
	if s.fail.Load() {
		return 0, errDiskFull
	}
	return s.Store.RevokeSandbox(ctx, sandbox, at)
}

func (s *failingStore) RevokeToken(ctx context.Context, id string, at time.Time) ([]tokens.Record, error) {
	if s.fail.Load() {
		return nil, errDiskFull
	}
	return s.Store.RevokeToken(ctx, id, at)
}

// A store whose writes fail (a full disk) must fail closed: no token
// handed out that is not stored, and a revocation that may not have been
// recorded reported as a failure the harness sees and retries.
func TestAdversarialTokensStoreWritesFail(t *testing.T) {
	var st *failingStore
	e := newEnv(t, func(o *routetest.Options) {
		st = &failingStore{Store: o.Store}
		o.Store = st
	})
	live := e.Token("conv-1")
	st.fail.Store(true)

	code, _, b := call(t, e, "POST", "/tokens?sandbox=conv-2", "")
	if code != http.StatusServiceUnavailable || strings.Contains(b, "cpx_") || !strings.Contains(b, "no token was created") {
		t.Fatalf("mint on a failing store: %d %s", code, b)
	}
	page, err := st.List(t.Context(), tokens.ListQuery{Limit: 10})
	if err != nil || len(page.Records) != 1 {
		t.Fatalf("store holds %d records after a failed mint: %v", len(page.Records), err)
	}
	if code, _, b := call(t, e, "DELETE", "/tokens?sandbox=conv-1", ""); code != http.StatusServiceUnavailable || !strings.Contains(b, "may not have been recorded") {
		t.Fatalf("revoke on a failing store: %d %s", code, b)
	}
	if !strings.Contains(e.Logs.String(), "revoking tokens failed") || !strings.Contains(e.Logs.String(), "storing a token failed") {
		t.Errorf("the failures are not in the log:\n%s", e.Logs.String())
	}

	// Once the store writes again, the retried revocation takes effect on
	// the very next request.
	st.fail.Store(false)
	if code, _, b := call(t, e, "DELETE", "/tokens?sandbox=conv-1", ""); code != http.StatusNoContent {
		t.Fatalf("retried revoke: %d %s", code, b)
	}
	if r := modelRequest(e, live); r.Status != 401 || !strings.Contains(r.Body, "revoked") {
		t.Fatalf("after the retried revocation: %d %s", r.Status, r.Body)
	}
}

// GET /metrics serves the Server's metrics in Prometheus' text format, and
// refuses what the other endpoints refuse.
func TestMetricsEndpoint(t *testing.T) {
	e := newEnv(t)
	resp, err := http.Get(e.Admin.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || !strings.HasPrefix(ct, "text/plain; version=0.0.4") || !strings.Contains(string(b), "\ncproxy_build_info{") {
		t.Fatalf("GET /metrics: %s, Content-Type %q:\n%s", resp.Status, ct, b)
	}
	if code, allow, _ := call(t, e, "POST", "/metrics", ""); code != 405 || allow != "GET" {
		t.Fatalf("POST /metrics: %d, Allow %q", code, allow)
	}
	if code, _, b := call(t, e, "GET", "/metrics?name[]=go_info", ""); code != 400 || !strings.Contains(b, `unknown parameter \"name[]\" (this endpoint takes no query parameters)`) {
		t.Fatalf("GET /metrics?name[]=: %d %s", code, b)
	}
}

// DELETE /tokens/ID revokes that one token, for one that leaked: its very
// next request is refused, the sandbox's other token keeps working. Again
// is 204 too; an id no token has is 404, one that is no id 400, both in
// JSON; a failing store is 503, and the retry revokes it.
func TestRevokeOneToken(t *testing.T) {
	var st *failingStore
	e := newEnv(t, func(o *routetest.Options) {
		st = &failingStore{Store: o.Store}
		o.Store = st
	})
	_, leaked, _ := mint(t, e, "sandbox=conv-1")
	_, sibling, _ := mint(t, e, "sandbox=conv-1")
	for _, tok := range []admin.TokenCreated{leaked, sibling} {
		if r := modelRequest(e, tok.Value); r.Status != 200 {
			t.Fatalf("before the revocation: %d %s", r.Status, r.Body)
		}
	}

	st.fail.Store(true)
	if code, _, b := call(t, e, "DELETE", "/tokens/"+leaked.ID, ""); code != http.StatusServiceUnavailable || !strings.Contains(b, "may not have been recorded: retry") {
		t.Fatalf("revoke on a failing store: %d %s", code, b)
	}
	st.fail.Store(false)

	code, _, b := call(t, e, "DELETE", "/tokens/"+leaked.ID, "")
	if code != http.StatusNoContent || b != "" {
		t.Fatalf("DELETE /tokens/%s: %d %q, want 204 and no body", leaked.ID, code, b)
	}
	if r := modelRequest(e, leaked.Value); r.Status != 401 || !strings.Contains(r.Body, "sandbox token "+leaked.ID+" was revoked") {
		t.Errorf("the revoked token's next request: %d %s", r.Status, r.Body)
	}
	if r := modelRequest(e, sibling.Value); r.Status != 200 {
		t.Errorf("the sandbox's other token: %d %s, want 200", r.Status, r.Body)
	}
	_, _, list := call(t, e, "GET", "/tokens?sandbox=conv-1", "")
	var page struct{ Tokens []struct{ ID, State string } }
	json.Unmarshal([]byte(list), &page)
	for _, tok := range page.Tokens {
		want := map[string]string{leaked.ID: "revoked", sibling.ID: "live"}[tok.ID]
		if tok.State != want {
			t.Errorf("GET /tokens: %s is %s, want %s", tok.ID, tok.State, want)
		}
	}
	if !strings.Contains(e.Logs.String(), `"msg":"token revoked","sandbox":"conv-1","token_id":"`+leaked.ID+`"`) {
		t.Errorf("no log line for the revocation:\n%s", e.Logs)
	}

	// Again: harmless.
	if code, _, b := call(t, e, "DELETE", "/tokens/"+leaked.ID, ""); code != http.StatusNoContent {
		t.Errorf("DELETE again: %d %s, want 204", code, b)
	}
	if !strings.Contains(e.Logs.String(), `"msg":"token revoked already"`) {
		t.Errorf("no log line for the repeated revocation:\n%s", e.Logs)
	}

	for _, c := range []struct {
		method, path string
		code         int
		allow, msg   string
	}{
		{"DELETE", "/tokens/tok_000000000000", 404, "", `{"error":"cproxy: no token has the id tok_000000000000: it was never minted here, or was pruned (GET /tokens lists the tokens there are)"}`},
		{"DELETE", "/tokens/tok_0FAA47DD634B", 400, "", `{"error":"cproxy: invalid token id \"tok_0FAA47DD634B\": an id is tok_ and 12 lower-case hex digits, as POST /tokens and GET /tokens give it"}`},
		{"DELETE", "/tokens/conv-1", 400, "", `invalid token id \"conv-1\"`},
		{"DELETE", "/tokens/" + sibling.ID + "?sandbox=conv-1", 400, "", `unknown parameter \"sandbox\" (this endpoint takes no query parameters)`},
		{"GET", "/tokens/" + sibling.ID, 405, "DELETE", "GET /tokens/" + sibling.ID + " is not allowed (allowed: DELETE)"},
		{"DELETE", "/tokens/prune", 405, "POST", "DELETE /tokens/prune is not allowed (allowed: POST)"},
		{"DELETE", "/tokens/" + sibling.ID + "/x", 404, "", "no such admin endpoint"},
	} {
		code, allow, b := call(t, e, c.method, c.path, "")
		if code != c.code || allow != c.allow || !strings.Contains(b, c.msg) {
			t.Errorf("%s %s: %d (Allow %q) %s; want %d (Allow %q) %s", c.method, c.path, code, allow, b, c.code, c.allow, c.msg)
		}
	}
	if r := modelRequest(e, sibling.Value); r.Status != 200 {
		t.Errorf("the sandbox's other token, after all that: %d %s", r.Status, r.Body)
	}
}

// GET /healthz names the config and the listeners of the serve it answers
// for, as cproxy serve gives them to the handler.
func TestHealthzServing(t *testing.T) {
	e := newEnv(t)
	serving := client.Serving{Config: "/etc/cproxy/cproxy.toml", Admin: "127.0.0.1:19001", Proxy: "127.0.0.1:18080", PID: 4242}
	rec := httptest.NewRecorder()
	admin.Handler(e.Server, serving).ServeHTTP(rec, httptest.NewRequest("GET", "/healthz", nil))
	want := `{"status":"ok","config":"/etc/cproxy/cproxy.toml","admin":"127.0.0.1:19001","proxy":"127.0.0.1:18080","pid":4242}` + "\n"
	if rec.Code != 200 || rec.Body.String() != want {
		t.Errorf("GET /healthz: %d %s, want 200 %s", rec.Code, rec.Body, want)
	}
	if code, _, b := call(t, e, "GET", "/healthz", ""); code != 200 || b != `{"status":"ok"}`+"\n" {
		t.Errorf("GET /healthz of a handler told nothing: %d %s", code, b)
	}
}
