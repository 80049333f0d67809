package githubapi

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cproxy/cproxy/internal/fakes"
	"github.com/cproxy/cproxy/routes"
	"github.com/cproxy/cproxy/routes/routetest"
	"github.com/cproxy/cproxy/secrets"
)

// The in-process cost of the route (docs/benchmarks/github-api.md): a REST
// read and gh pr view's query through the route against the same requests
// sent directly to the fake API, and a createPullRequest mutation with its
// node ID resolved cold (a look-up of GitHub first) or warm (cached).
// .ci/bench-github runs them.

// ghPRView is the shape of the query gh 2.23 sends for gh pr view N.
const ghPRView = `query PullRequestByNumber($owner: String!, $repo: String!, $pr_number: Int!) { repository(owner: $owner, name: $repo) { pullRequest(number: $pr_number) { id url number title state body author{login} isDraft baseRefName headRefName headRepositoryOwner{login} headRepository{name} isCrossRepository maintainerCanModify additions deletions createdAt mergeable assignees(first:100){nodes{login},totalCount} labels(first:100){nodes{name},totalCount} milestone{title} comments(last: 1){nodes{author{login} body createdAt},totalCount} reviewRequests(first:100){nodes{requestedReviewer{...on User{login}}}} reviews(first:100){nodes{author{login} state}} } } }`

// ghComment is the mutation gh 2.23 sends for gh pr comment and gh issue
// comment.
const ghComment = `mutation CommentCreate($input: AddCommentInput!) { addComment(input: $input) { commentEdge { node { url } } } }`

// benchEnv is apiEnv with a clock the benchmark moves, a sandbox token
// that outlives it, and a rate no run reaches.
func benchEnv(b *testing.B) (e *routetest.Env, fake *fakes.GitHubREST, clock *atomic.Int64, token string) {
	fake = fakes.NewGitHubREST(fakes.GitHubRESTOptions{Token: canaryGitHub, Repos: []string{"acme/app", "acme/docs"}})
	b.Cleanup(fake.Close)
	up := routes.Upstream{Credential: secrets.New(canaryGitHub), HeaderTimeout: 10 * time.Second}
	up.URL, _ = url.Parse(fake.URL)
	clock = &atomic.Int64{}
	start := time.Now()
	e = routetest.New(b, routetest.Serve(Kind, up), routetest.WithPolicy(b, apiPolicy), func(o *routetest.Options) {
		o.Canaries = append(o.Canaries, canaryGitHub)
		o.Now = func() time.Time { return start.Add(time.Duration(clock.Load())) }
		// The benchmark's one token sends more than any sandbox: at the
		// route's default rate it would measure the throttle.
		o.Limits = map[string]routes.RouteLimits{Kind.Name: {Limits: routes.Limits{RequestsPerMinute: 1 << 30}}}
	})
	token = e.Token("conv-42", "ttl=366d")
	if r := e.Do("POST", "/api/v3/repos/acme/app/pulls", routetest.Bearer(token), `{"title":"Fix","head":"agent/x","base":"main"}`); r.Status != 201 {
		b.Fatalf("create pull: %d %s", r.Status, r.Body)
	}
	return e, fake, clock, token
}

// benchDo sends the request b.N times and checks each answer's status.
func benchDo(b *testing.B, method, url, auth, body string, status int, before func()) {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if before != nil {
			before()
		}
		req, _ := http.NewRequest(method, url, strings.NewReader(body))
		req.Header.Set("Authorization", auth)
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		out, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != status || strings.Contains(string(out), `"errors"`) {
			b.Fatalf("%s %s: %d %s", method, url, resp.StatusCode, out)
		}
	}
}

// BenchmarkRESTRead: GET /repos/acme/app/pulls/1, direct and through the
// route.
func BenchmarkRESTRead(b *testing.B) {
	e, fake, _, token := benchEnv(b)
	b.Run("direct", func(b *testing.B) {
		benchDo(b, "GET", fake.URL+"/repos/acme/app/pulls/1", "Bearer "+canaryGitHub, "", 200, nil)
	})
	b.Run("cproxy", func(b *testing.B) {
		benchDo(b, "GET", e.Proxy.URL+"/api/v3/repos/acme/app/pulls/1", "Bearer "+token, "", 200, nil)
	})
}

// BenchmarkGraphQLPRView: gh pr view's query, direct and through the
// route, which parses and decides it before it forwards it.
func BenchmarkGraphQLPRView(b *testing.B) {
	e, fake, _, token := benchEnv(b)
	body := gqlBody(b, ghPRView, map[string]any{"owner": "acme", "repo": "app", "pr_number": 1})
	b.Run("direct", func(b *testing.B) {
		benchDo(b, "POST", fake.URL+"/graphql", "Bearer "+canaryGitHub, body, 200, nil)
	})
	b.Run("cproxy", func(b *testing.B) {
		benchDo(b, "POST", e.Proxy.URL+"/api/graphql", "Bearer "+token, body, 200, nil)
	})
}

// BenchmarkNodeResolution: gh pr comment's addComment through the route,
// its subjectId resolved cold (the clock moved past the cache's lifetime
// before each, so cproxy asks GitHub first) or warm (cached); direct is the
// mutation sent to the fake API. (createPullRequest is resolved the same
// way, but each one run adds a pull request the fake then walks, so its
// times grow with b.N.)
func BenchmarkNodeResolution(b *testing.B) {
	e, fake, clock, token := benchEnv(b)
	body := gqlBody(b, ghComment, map[string]any{"input": map[string]any{"subjectId": fakes.GitHubNodeID("PullRequest", "acme/app", 1), "body": "done"}})
	b.Run("direct", func(b *testing.B) {
		benchDo(b, "POST", fake.URL+"/graphql", "Bearer "+canaryGitHub, body, 200, nil)
	})
	b.Run("warm", func(b *testing.B) {
		benchDo(b, "POST", e.Proxy.URL+"/api/graphql", "Bearer "+token, body, 200, nil)
	})
	b.Run("cold", func(b *testing.B) {
		benchDo(b, "POST", e.Proxy.URL+"/api/graphql", "Bearer "+token, body, 200, func() { clock.Add(int64(cacheTTL + time.Second)) })
	})
}
