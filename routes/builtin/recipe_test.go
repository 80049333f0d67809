package builtin_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cproxy/cproxy/internal/fakes"
	"github.com/cproxy/cproxy/internal/testutil"
	"github.com/cproxy/cproxy/routes"
	"github.com/cproxy/cproxy/routes/builtin"
	"github.com/cproxy/cproxy/routes/internal/echoroute"
	"github.com/cproxy/cproxy/routes/routetest"
	"github.com/cproxy/cproxy/secrets"
)

// The tests in this file hold docs/adding-a-route.md's recipe: a route
// added as one package (echoroute) and one line in a copy of the table is
// authenticated, decided, audited, metered and budgeted by the core, with
// no other edit. Everything is seen through HTTP, as a sandbox, the
// harness and a scraper see it.

// echoCredential is the echo upstream's credential: a canary that must
// reach the upstream and nothing else.
const echoCredential = "echo-canary-credential-7d41c0"

// echoPolicy gives sandboxes echo-* the echo route, metered-* the echo
// route with a budget of two requests a day, slow-* one with a rate of one
// request a minute, and every other sandbox no echo route.
const echoPolicy = `
[profile.default]
models = ["claude-*"]

[profile.echo]
relays = ["echo"]

[profile.metered]
relays = ["echo"]
budget = { window = "day", requests = 2 }

[profile.slow]
relays = ["echo"]
budget = { requests_per_minute = 1 }

[[sandbox]]
match = "echo-*"
profile = "echo"

[[sandbox]]
match = "metered-*"
profile = "metered"

[[sandbox]]
match = "slow-*"
profile = "slow"
`

// recipe is a Server with the echo route registered by one line, its
// upstream, and its audit log.
type recipe struct {
	*routetest.Env
	t     *testing.T
	up    *fakes.Echo
	audit *testutil.Buffer
}

func newRecipe(t *testing.T) *recipe {
	t.Helper()
	// The registration: one line.
	kinds := append(slices.Clone(builtin.Kinds), echoroute.Kind)

	up := fakes.NewEcho()
	t.Cleanup(up.Close)
	u, err := url.Parse(up.URL)
	if err != nil {
		t.Fatal(err)
	}
	// A clock that stands still: the rate limit is not a race with the
	// test's speed.
	now := time.Now()
	audit := &testutil.Buffer{}
	e := routetest.New(t, routetest.WithPolicy(t, echoPolicy), func(o *routetest.Options) {
		o.Kinds = kinds
		o.Upstreams = map[string]routes.Upstream{"echo": {URL: u, Credential: secrets.New(echoCredential)}}
		o.Canaries = append(o.Canaries, echoCredential)
		o.AuditLog = audit
		o.Now = func() time.Time { return now }
	})
	return &recipe{Env: e, t: t, up: up, audit: audit}
}

// send sends a request to the proxy listener, and waits for its audit
// line.
func (rc *recipe) send(method, path string, header map[string]string, body string) routetest.Reply {
	rc.t.Helper()
	a := rc.Do(method, path, header, body)
	// The handler writes the audit line and counts the request after the
	// answer's end, which the client may read first.
	if err := rc.Server.WaitRequests(rc.t.Context()); err != nil {
		rc.t.Fatal(err)
	}
	return a
}

// get GETs path with token as a bearer token; no token when it is empty.
func (rc *recipe) get(path, token string) routetest.Reply {
	rc.t.Helper()
	var h map[string]string
	if token != "" {
		h = routetest.Bearer(token)
	}
	return rc.send(http.MethodGet, path, h, "")
}

// refused checks that a is a refusal with status in the echo route's
// shape, {"error": "cproxy: …"}, whose message holds want.
func refused(t *testing.T, a routetest.Reply, status int, want string) {
	t.Helper()
	if a.Status != status {
		t.Fatalf("status %d, want %d: %s", a.Status, status, a.Body)
	}
	var e struct{ Error string }
	if ct := a.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q, want application/json", ct)
	}
	if err := json.Unmarshal([]byte(a.Body), &e); err != nil || !strings.HasPrefix(e.Error, "cproxy: ") {
		t.Errorf("refusal %q is not the echo route's {\"error\": \"cproxy: …\"}", a.Body)
	}
	if !strings.Contains(e.Error, want) {
		t.Errorf("refusal %q does not say %q", e.Error, want)
	}
}

// upstreamGot checks that the upstream received n requests, none of them
// with a sandbox token anywhere, and returns them.
func (rc *recipe) upstreamGot(n int, tokens ...string) []fakes.EchoRequest {
	rc.t.Helper()
	reqs := rc.up.Requests()
	if len(reqs) != n {
		rc.t.Fatalf("the upstream got %d requests, want %d: %+v", len(reqs), n, reqs)
	}
	for _, r := range reqs {
		seen, _ := json.Marshal(r)
		seen = append(seen, '\n')
		for name, vs := range r.Header {
			seen = append(seen, name+": "+strings.Join(vs, ", ")+"\n"...)
		}
		for _, tok := range tokens {
			if strings.Contains(string(seen), tok) {
				rc.t.Errorf("the upstream got the sandbox token: %s", seen)
			}
		}
	}
	return reqs
}

func TestEchoRouteAuthenticates(t *testing.T) {
	rc := newRecipe(t)
	refused(t, rc.get("/echo/hello", ""), http.StatusUnauthorized, "")
	refused(t, rc.get("/echo/hello", "cpx_notatoken"), http.StatusUnauthorized, "malformed sandbox token")
	rc.upstreamGot(0)

	tok := rc.Token("echo-1")
	if a := rc.get("/echo/hello", tok); a.Status != http.StatusOK {
		t.Fatalf("a live token: %d %s", a.Status, a.Body)
	}
	rc.Revoke("echo-1")
	refused(t, rc.get("/echo/hello", tok), http.StatusUnauthorized, "revoked")
	rc.upstreamGot(1, tok)
}

func TestEchoRouteAsksThePolicy(t *testing.T) {
	rc := newRecipe(t)
	other := rc.Token("other-1")
	refused(t, rc.get("/echo/hello", other), http.StatusForbidden, "the echo route is not allowed for sandbox other-1")
	rc.upstreamGot(0)

	tok := rc.Token("echo-1")
	if a := rc.get("/echo/hello", tok); a.Status != http.StatusOK || !strings.Contains(a.Body, `"path":"/hello"`) {
		t.Fatalf("an allowed GET: %d %s", a.Status, a.Body)
	}
	// The token in another header the core strips, and a body the route
	// checks and sends as it came.
	if a := rc.send(http.MethodPost, "/echo/a/b", map[string]string{"X-Api-Key": tok}, `{"n": 1}`); a.Status != http.StatusOK {
		t.Fatalf("an allowed POST: %d %s", a.Status, a.Body)
	}
	reqs := rc.upstreamGot(2, tok, other)
	for _, r := range reqs {
		if got := r.Header.Get("Authorization"); got != "Bearer "+echoCredential {
			t.Errorf("%s %s: the upstream got Authorization %q, want the echo credential", r.Method, r.Path, got)
		}
	}
	if r := reqs[1]; r.Method != http.MethodPost || r.Path != "/a/b" || r.Body != `{"n": 1}` {
		t.Errorf("the upstream got %+v, want POST /a/b with the body sent", r)
	}

	// What the route does not understand is refused, not forwarded.
	refused(t, rc.get("/echo/a/../b%2f", tok), http.StatusForbidden, "is not an echo path")
	refused(t, rc.get("/echo/hello?x=1", tok), http.StatusForbidden, "no query string")
	refused(t, rc.send(http.MethodPost, "/echo/hello", routetest.Bearer(tok), `not json`), http.StatusBadRequest, "must be JSON")
	rc.upstreamGot(2, tok, other)

	// A reload that takes the route away refuses the token's next request.
	rc.Server.SetPolicy(routetest.MustPolicy(t, strings.Replace(echoPolicy, "[profile.echo]\nrelays = [\"echo\"]", "[profile.echo]\nmodels = [\"claude-*\"]", 1)))
	refused(t, rc.get("/echo/hello", tok), http.StatusForbidden, "the echo route is not allowed for sandbox echo-1")
	rc.upstreamGot(2, tok, other)
}

// auditRecords are the audit log's records, each line one JSON object.
func (rc *recipe) auditRecords() []map[string]any {
	rc.t.Helper()
	var recs []map[string]any
	for line := range strings.Lines(rc.audit.String()) {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			rc.t.Fatalf("audit line %q: %v", line, err)
		}
		recs = append(recs, rec)
	}
	return recs
}

func TestEchoRouteIsAudited(t *testing.T) {
	rc := newRecipe(t)
	tok, other := rc.Token("echo-1"), rc.Token("other-1")
	rc.get("/echo/hello", tok)
	rc.get("/echo/hello", other)
	rc.get("/echo/hello", "")
	want := []map[string]any{
		{"sandbox": "echo-1", "route": "echo", "target": "hello", "decision": "allow", "rule": `profile.echo.relays["echo"]`, "status": 200.0},
		{"sandbox": "other-1", "route": "echo", "decision": "deny", "rule": "profile.default: no relays entry matches", "status": 403.0},
		{"route": "echo", "decision": "deny", "status": 401.0},
	}
	recs := rc.auditRecords()
	if len(recs) != len(want) {
		t.Fatalf("%d audit records for %d requests:\n%s", len(recs), len(want), rc.audit.String())
	}
	for i, w := range want {
		for k, v := range w {
			if recs[i][k] != v {
				t.Errorf("audit record %d: %s is %v, want %v", i, k, recs[i][k], v)
			}
		}
	}
}

// metric is the value of the series line name (with its labels, as
// GET /metrics writes them), or "" when there is none.
func (rc *recipe) metric(series string) string {
	rc.t.Helper()
	resp, err := http.Get(rc.Admin.URL + "/metrics")
	if err != nil {
		rc.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for line := range strings.Lines(string(body)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), series+" "); ok {
			return v
		}
	}
	return ""
}

func TestEchoRouteHasMetrics(t *testing.T) {
	rc := newRecipe(t)
	// Labelled from the start, as every registered route is.
	if v := rc.metric(`cproxy_request_bytes_total{route="echo"}`); v != "0" {
		t.Errorf("before any request, cproxy_request_bytes_total for the echo route is %q, want 0", v)
	}
	rc.get("/echo/hello", rc.Token("echo-1"))
	if v := rc.metric(`cproxy_requests_total{profile="echo",route="echo",status="200"}`); v != "1" {
		t.Errorf("after one request, cproxy_requests_total for the echo route is %q, want 1", v)
	}
}

func TestEchoRouteKeepsTheBudget(t *testing.T) {
	rc := newRecipe(t)
	tok := rc.Token("metered-1")
	for i := range 2 {
		if a := rc.get("/echo/hello", tok); a.Status != http.StatusOK {
			t.Fatalf("request %d of a budget of 2: %d %s", i+1, a.Status, a.Body)
		}
	}
	refused(t, rc.get("/echo/hello", tok), http.StatusTooManyRequests, "over its budget")
	rc.upstreamGot(2, tok)

	slow := rc.Token("slow-1")
	if a := rc.get("/echo/hello", slow); a.Status != http.StatusOK {
		t.Fatalf("the first request at a rate of one a minute: %d %s", a.Status, a.Body)
	}
	a := rc.get("/echo/hello", slow)
	refused(t, a, http.StatusTooManyRequests, "")
	if a.Header.Get("Retry-After") == "" {
		t.Errorf("a rate refusal without Retry-After: %v", a.Header)
	}
	rc.upstreamGot(3, tok, slow)
}
