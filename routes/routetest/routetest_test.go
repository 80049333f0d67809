package routetest

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/cproxy/cproxy/routes"
	"github.com/cproxy/cproxy/routes/model"
	"github.com/cproxy/cproxy/secrets"
)

// whoami is a route that answers with the sandbox it served, forwarding
// nothing.
type whoami struct{}

func (whoami) Name() string   { return "whoami" }
func (whoami) Prefix() string { return "/whoami/" }
func (whoami) Close()         {}
func (whoami) WriteError(w http.ResponseWriter, err error) int {
	return routes.WritePlainError(w, err)
}

func (whoami) Serve(c *routes.Call) {
	if err := c.Decide(routes.AnyProfile); err != nil {
		c.Fail(err)
		return
	}
	io.WriteString(c.ResponseWriter(), c.Session().Sandbox)
}

var whoamiKind = routes.Kind{Name: "whoami", Prefix: "/whoami/", Upstream: "whoami", New: func(routes.Env) routes.Route { return whoami{} }}

// TestServesTheNamedRoute: the Server New starts serves the route it is
// given behind its authentication, and its tokens come from the admin API.
func TestServesTheNamedRoute(t *testing.T) {
	up := routes.Upstream{URL: &url.URL{Scheme: "http", Host: "127.0.0.1:1"}, Credential: secrets.New("canary-whoami")}
	e := New(t, Serve(whoamiKind, up))
	tok := e.Token("conv-1")
	if r := e.Do("GET", "/whoami/x", Bearer(tok), ""); r.Status != 200 || r.Body != "conv-1" {
		t.Fatalf("got %d %q", r.Status, r.Body)
	}
	if r := e.Do("GET", "/whoami/x", nil, ""); r.Status != 401 {
		t.Fatalf("no token: got %d %q", r.Status, r.Body)
	}
	if r := e.Do("GET", "/v1/messages", Bearer(tok), ""); r.Status != 403 || !strings.Contains(r.Body, "no such route") {
		t.Fatalf("a route not named: got %d %q", r.Status, r.Body)
	}
	e.Revoke("conv-1")
	if r := e.Do("GET", "/whoami/x", Bearer(tok), ""); r.Status != 401 || !strings.Contains(r.Body, "revoked") {
		t.Fatalf("revoked: got %d %q", r.Status, r.Body)
	}
	if !strings.Contains(e.Logs.String(), `"route":"whoami"`) {
		t.Errorf("no audit line of the route:\n%s", e.Logs.String())
	}
}

// TestUnservedWithoutUpstream: a kind given no upstream is refused with
// what the operator must set, as under cproxy serve.
func TestUnservedWithoutUpstream(t *testing.T) {
	e := New(t, func(o *Options) { o.Kinds = append(o.Kinds, whoamiKind) })
	r := e.Do("GET", "/whoami/x", Bearer(e.Token("conv-1")), "")
	if r.Status != 403 || !strings.Contains(r.Body, "upstream.whoami.url") {
		t.Fatalf("got %d %q", r.Status, r.Body)
	}
}

// TestAnthropic: the fake Anthropic upstream answers the model route with
// the canary credential, which never reaches the client.
func TestAnthropic(t *testing.T) {
	fake, up := Anthropic(t)
	e := New(t, Serve(model.Kind, up))
	h := Bearer(e.Token("conv-1"))
	h["Anthropic-Version"] = "2023-06-01"
	r := e.Do("POST", "/v1/messages", h, `{"model":"claude-sonnet-4-5","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`)
	if r.Status != 200 || len(fake.Requests()) != 1 || fake.Requests()[0].Header.Get("X-Api-Key") != CanaryKey {
		t.Fatalf("got %d %q", r.Status, r.Body)
	}
}
