package githubapi

import (
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/cproxy/cproxy/internal/fakes"
	"github.com/cproxy/cproxy/routes"
	"github.com/cproxy/cproxy/routes/routetest"
	"github.com/cproxy/cproxy/secrets"
)

const canaryGitHub = "github_pat_CANARYgithubapi0123456789abcdefghijklmnopqrstuvwxyz"

const apiPolicy = `[profile.default]
repos = [
  { repo = "acme/app", access = "push", refs = ["refs/heads/agent/*"], api = ["read", "pulls:create", "issues:comment"], pr_bases = ["main"] },
  { repo = "acme/docs", access = "read" },
]
`

// apiEnv serves the route in front of a fake GitHub REST API that takes
// canaryGitHub, with up's credential (the canary when zero and Missing
// is empty), and opts after the route's (a policy of the test's own).
func apiEnv(t testing.TB, up routes.Upstream, opts ...routetest.Option) (*routetest.Env, *fakes.GitHubREST) {
	t.Helper()
	fake := fakes.NewGitHubREST(fakes.GitHubRESTOptions{Token: canaryGitHub, Repos: []string{"acme/app", "acme/docs"}})
	t.Cleanup(fake.Close)
	up.URL, _ = url.Parse(fake.URL)
	up.HeaderTimeout = 10 * time.Second
	if up.Credential.IsZero() && up.Missing == "" {
		up.Credential = secrets.New(canaryGitHub)
	}
	e := routetest.New(t, append([]routetest.Option{routetest.Serve(Kind, up), routetest.WithPolicy(t, apiPolicy),
		func(o *routetest.Options) { o.Canaries = append(o.Canaries, canaryGitHub) }}, opts...)...)
	return e, fake
}

// TestForwarded: an allowed request reaches the API with the real token
// as a Bearer credential, on the path and query cproxy checked; an issue
// comment streams its body through as it came.
func TestForwarded(t *testing.T) {
	e, fake := apiEnv(t, routes.Upstream{})
	h := routetest.Bearer(e.Token("conv-42"))
	if r := e.Do("GET", "/api/v3/repos/acme/app/pulls?state=open&per_page=5", h, ""); r.Status != 200 {
		t.Fatalf("list pulls: %d %s", r.Status, r.Body)
	}
	if r := e.Do("POST", "/api/v3/repos/acme/app/pulls", h, `{"title":"t","head":"agent/x","base":"main"}`); r.Status != 201 || !strings.Contains(r.Body, `"number":1`) {
		t.Fatalf("create pull: %d %s", r.Status, r.Body)
	}
	if r := e.Do("POST", "/api/v3/repos/acme/app/issues/1/comments", h, `{"body":"done"}`); r.Status != 201 {
		t.Fatalf("comment: %d %s", r.Status, r.Body)
	}
	reqs := fake.Requests()
	if len(reqs) != 3 {
		t.Fatalf("the API got %d requests, want 3", len(reqs))
	}
	want := []string{"GET /repos/acme/app/pulls per_page=5&state=open", "POST /repos/acme/app/pulls ", "POST /repos/acme/app/issues/1/comments "}
	for i, r := range reqs {
		if got := r.Method + " " + r.Path + " " + r.Query; got != want[i] {
			t.Errorf("request %d: %q, want %q", i, got, want[i])
		}
		if a := r.Header.Get("Authorization"); a != "Bearer "+canaryGitHub {
			t.Errorf("request %d: Authorization %q, want the real token", i, a)
		}
	}
	if string(reqs[2].Body) != `{"body":"done"}` {
		t.Errorf("the comment's body: %q", reqs[2].Body)
	}
}

// TestRefusedInGitHubShape: refusals are GitHub's error body (REST) or
// GraphQL's, with the status the kind of refusal has, and reach nothing.
func TestRefusedInGitHubShape(t *testing.T) {
	e, fake := apiEnv(t, routes.Upstream{})
	h := routetest.Bearer(e.Token("conv-42"))
	for _, c := range []struct {
		method, path, body string
		status             int
		want               string
	}{
		{"GET", "/api/v3/repos/acme/docs", "", 403, `{"message":"cproxy: GitHub API \"read\" on repository acme/docs is not allowed for sandbox conv-42 (allowed on acme/docs: none)","documentation_url":"` + docsURL + `","code":"cproxy-api-not-allowed"}`},
		{"POST", "/api/v3/repos/acme/app/pulls/1/reviews", `{"event":"APPROVE"}`, 403, `submitting, approving or dismissing reviews is never allowed`},
		{"GET", "/api/v3/repos/acme/app/pulls", "x", 400, `GET /api/v3/repos/acme/app/pulls takes no body`},
		{"POST", "/api/v3/repos/acme/app/pulls", `{"head":"agent/x","base":"main"`, 403, `its body is not JSON`},
		{"GET", "/api/v3", "", 403, `is not GitHub's API`},
		{"GET", "/api/", "", 403, `is not GitHub's API`},
		{"POST", "/api/graphql", `{"query":"{viewer{login}}"}`, 403, `{"errors":[{"message":"cproxy: the GraphQL request is refused for sandbox conv-42: the top-level field viewer is not served`}, {"POST", "/api/graphql", `{"query":"{viewer{login}}"}`, 403, `"extensions":{"code":"cproxy-forbidden"}}]}`},
		{"GET", "/api/v3/repos/acme/app", "", 401, `{"message":"cproxy: no sandbox token`},
	} {
		hdr := h
		if c.status == 401 {
			hdr = nil
		}
		r := e.Do(c.method, c.path, hdr, c.body)
		if r.Status != c.status || !strings.Contains(r.Body, c.want) || !strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
			t.Errorf("%s %s: %d %s\nwant %d with %s", c.method, c.path, r.Status, r.Body, c.status, c.want)
		}
	}
	if n := len(fake.Requests()); n != 0 {
		t.Errorf("the API got %d requests", n)
	}
}

// TestUpstreamRefusesCredential: GitHub refusing cproxy's token is a 502
// for the operator, not a 401 the client takes for its sandbox token's.
func TestUpstreamRefusesCredential(t *testing.T) {
	e, _ := apiEnv(t, routes.Upstream{Credential: secrets.New("github_pat_wrong")})
	r := e.Do("GET", "/api/v3/repos/acme/app", routetest.Bearer(e.Token("conv-42")), "")
	if r.Status != 502 || !strings.Contains(r.Body, "the operator must fix upstream.githubapi.credential") {
		t.Fatalf("got %d %s", r.Status, r.Body)
	}
}

// TestMissingCredential: without a credential, an allowed request is a
// 503 naming what to set; a refused one gets its refusal first.
func TestMissingCredential(t *testing.T) {
	e, fake := apiEnv(t, routes.Upstream{Missing: "the operator must set GITHUB_TOKEN"})
	h := routetest.Bearer(e.Token("conv-42"))
	if r := e.Do("GET", "/api/v3/repos/acme/app", h, ""); r.Status != 503 || !strings.Contains(r.Body, "no GitHub API credential is configured: the operator must set GITHUB_TOKEN") {
		t.Fatalf("allowed: %d %s", r.Status, r.Body)
	}
	if r := e.Do("PUT", "/api/v3/repos/acme/app/pulls/1/merge", h, "{}"); r.Status != 403 {
		t.Fatalf("merge: %d %s", r.Status, r.Body)
	}
	if n := len(fake.Requests()); n != 0 {
		t.Errorf("the API got %d requests", n)
	}
}
