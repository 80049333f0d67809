package routes

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cproxy/cproxy/policy"
	"github.com/cproxy/cproxy/secrets"
	"github.com/cproxy/cproxy/tokens"
)

// askingRoute asks for an approval of every request, its subject the
// request's path, and forwards what an operator approved to the model
// upstream's list of models.
type askingRoute struct{ fwd *Forwarder }

func (askingRoute) Name() string                                    { return "asking" }
func (askingRoute) Prefix() string                                  { return "/asking/" }
func (r askingRoute) Close()                                        { r.fwd.Close() }
func (askingRoute) WriteError(w http.ResponseWriter, err error) int { return WriteJSONError(w, err) }
func (r askingRoute) Serve(c *Call) {
	subject := strings.TrimPrefix(c.Request().URL.Path, "/asking/")
	if err := c.Decide(func(*policy.Profile) (string, error) { return "ask", nil }); err != nil {
		c.Fail(err)
		return
	}
	if err := c.NeedApproval(ApprovalRequest{Subject: subject, Detail: map[string]string{"thing": subject}, What: "thing " + subject}); err != nil {
		c.Fail(err)
		return
	}
	r.fwd.Forward(c, c.Request(), Target{Path: "/v1/models"})
}

func newAskingEnv(t *testing.T, notify func(tokens.Approval)) *env {
	return newEnv(t, func(o *testOptions) {
		env := Env{Upstream: Upstream{URL: o.Anthropic.URL, Credential: secrets.New(canaryKey), Auth: "api-key", HeaderTimeout: 10 * time.Second}, Log: o.Logger}
		o.Extra = append(o.Extra, askingRoute{fwd: env.NewForwarder("asking", "/asking/", func(h http.Header, s secrets.Secret) { h.Set("X-Api-Key", s.Reveal()) }, nil)})
		o.Approvals = ApprovalOptions{GrantLifetime: time.Minute, Notify: notify}
	})
}

// A request that asks is refused with its request's id, once filed; the
// webhook hears of it once; approved, one request uses the grant.
func TestNeedApproval(t *testing.T) {
	var notified []tokens.Approval
	e := newAskingEnv(t, func(a tokens.Approval) { notified = append(notified, a) })
	tok := e.token("conv-1")
	r := e.do("GET", "/asking/x", bearer(tok), "")
	if r.status != 403 || !strings.Contains(r.body, "cproxy: thing x needs approval (request apr_") {
		t.Fatalf("first ask: %d %s", r.status, r.body)
	}
	e.do("GET", "/asking/x", bearer(tok), "")
	all, _ := e.srv.Store().Approvals(context.Background())
	if len(all) != 1 || len(notified) != 1 || notified[0].ID != all[0].ID || string(all[0].Detail) != `{"thing":"x"}` {
		t.Fatalf("asked twice: %d approvals, %d notices", len(all), len(notified))
	}
	if _, err := e.srv.Store().DecideApproval(context.Background(), all[0].ID, true, "", time.Now(), time.Minute); err != nil {
		t.Fatal(err)
	}
	if r := e.do("GET", "/asking/x", bearer(tok), ""); r.status != 200 {
		t.Fatalf("approved: %d %s", r.status, r.body)
	}
	if r := e.do("GET", "/asking/x", bearer(tok), ""); r.status != 403 || strings.Contains(r.body, all[0].ID) {
		t.Fatalf("after use: %d %s", r.status, r.body)
	}
	if n := len(e.fake.Requests()); n != 1 {
		t.Errorf("the upstream got %d requests, want the approved one", n)
	}
}

// One sandbox may have maxPendingPerSandbox requests waiting; past it a
// new one is refused with 429, while one already filed is still answered
// with its id, and another sandbox is not held up.
func TestPendingBound(t *testing.T) {
	e := newAskingEnv(t, nil)
	tok := e.token("conv-1")
	for i := range maxPendingPerSandbox {
		if r := e.do("GET", "/asking/"+string(rune('a'+i)), bearer(tok), ""); r.status != 403 {
			t.Fatalf("request %d: %d %s", i, r.status, r.body)
		}
	}
	r := e.do("GET", "/asking/zz", bearer(tok), "")
	if r.status != 429 || !strings.Contains(r.body, "has 20 requests waiting for an operator already") {
		t.Fatalf("past the bound: %d %s", r.status, r.body)
	}
	if r := e.do("GET", "/asking/a", bearer(tok), ""); r.status != 403 || !strings.Contains(r.body, "needs approval (request apr_") {
		t.Fatalf("one filed before: %d %s", r.status, r.body)
	}
	if r := e.do("GET", "/asking/zz", bearer(e.token("conv-2")), ""); r.status != 403 || !strings.Contains(r.body, "needs approval (request apr_") {
		t.Fatalf("another sandbox: %d %s", r.status, r.body)
	}
	if r := e.do("GET", "/asking/"+strings.Repeat("y", maxApprovalSubject+1), bearer(tok), ""); r.status != 403 || !strings.Contains(r.body, "too large a request") {
		t.Fatalf("too large: %d %.200s", r.status, r.body)
	}
}
