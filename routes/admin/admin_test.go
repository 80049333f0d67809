package admin_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

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
