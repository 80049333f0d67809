package githubapi

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/cproxy/cproxy/routes"
	"github.com/cproxy/cproxy/routes/routetest"
)

// listPulls is the shape of the query gh 2.23 sends for gh pr list.
const listPulls = `{"query":"fragment pr on PullRequest{number,title,headRefName,headRepositoryOwner{id,login,...on User{name}}} query PullRequestList($owner: String!, $repo: String!, $limit: Int!) { repository(owner: $owner, name: $repo) { pullRequests(first: $limit) { totalCount nodes { ...pr } pageInfo { hasNextPage endCursor } } } }","variables":{"owner":"acme","repo":"app","limit":30}}`

// TestGraphQLForwarded: a query of the pull requests of a repository the
// sandbox may read reaches GitHub's /graphql with the real token, its
// body as sent, and the API's answer comes back.
func TestGraphQLForwarded(t *testing.T) {
	e, fake := apiEnv(t, routes.Upstream{})
	h := routetest.Bearer(e.Token("conv-42"))
	if r := e.Do("POST", "/api/v3/repos/acme/app/pulls", h, `{"title":"t","head":"agent/x","base":"main"}`); r.Status != 201 {
		t.Fatalf("create pull: %d %s", r.Status, r.Body)
	}
	r := e.Do("POST", "/api/graphql", h, listPulls)
	if r.Status != 200 || !strings.Contains(r.Body, `"headRefName":"agent/x"`) || strings.Contains(r.Body, `"errors"`) {
		t.Fatalf("list: %d %s", r.Status, r.Body)
	}
	reqs := fake.Requests()
	if len(reqs) != 2 {
		t.Fatalf("the API got %d requests, want 2", len(reqs))
	}
	got := reqs[1]
	if got.Method+" "+got.Path != "POST /graphql" || string(got.Body) != listPulls || got.Header.Get("Authorization") != "Bearer "+canaryGitHub {
		t.Errorf("the API got %s %s with %q and body %s", got.Method, got.Path, got.Header.Get("Authorization"), got.Body)
	}
}

// TestGraphQLRefused: what reaches past the repositories the sandbox may
// read, a look-up by node ID, a mutation and what cannot be read are
// refused in GraphQL's error shape with the status of the refusal's
// kind, and never reach the API.
func TestGraphQLRefused(t *testing.T) {
	e, fake := apiEnv(t, routes.Upstream{})
	h := routetest.Bearer(e.Token("conv-42"))
	q := func(query string) string {
		b, _ := json.Marshal(map[string]string{"query": query})
		return string(b)
	}
	for _, c := range []struct {
		method, body string
		status       int
		want         string
	}{
		{"POST", q(`{repository(owner:"evil",name:"x"){id}}`), 403, `GitHub API \"read\" on repository evil/x is not allowed for sandbox conv-42`},
		{"POST", q(`{a: repository(owner:"acme",name:"app"){id} b: repository(owner:"acme",name:"docs"){id}}`), 403, `on repository acme/docs is not allowed`},
		{"POST", `[` + q(`{repository(owner:"acme",name:"app"){id}}`) + `,` + q(`{repository(owner:"Evil",name:"x"){id}}`) + `]`, 403, `on repository Evil/x is not allowed`},
		{"POST", q(`{node(id:"R_1"){id}}`), 403, `node and nodes look-ups by ID are not served`},
		{"POST", q(`{repository(owner:"acme",name:"app"){id} nodes(ids:["R_1"]){id}}`), 403, `node and nodes look-ups by ID are not served`},
		{"POST", q(`{viewer{login}}`), 403, `the top-level field viewer is not served`},
		{"POST", q(`{repository(owner:"acme",name:"app"){id} search(query:"x",type:REPOSITORY,first:1){repositoryCount}}`), 403, `the top-level field search is not served`},
		{"POST", q(`{repository(owner:"acme",name:"app"){forks(first:5){nodes{nameWithOwner}}}}`), 403, `the field repository.forks is not one cproxy serves`},
		{"POST", q(`{repository(owner:"acme",name:"app"){pullRequest(number:1){headRepository{issues(first:1){totalCount}}}}}`), 403, `the field repository.pullRequest.headRepository.issues is not one`},
		{"POST", q(`{repository(owner:"acme",name:"app"){pullRequests(first:1){nodes{author{...on User{repositories(first:1){totalCount}}}}}}}`), 403, `repository.pullRequests.nodes.author.repositories is not one`},
		{"POST", q(`{__typename}`), 403, `it reads no repository`},
		{"POST", q(`mutation{mergePullRequest(input:{pullRequestId:"PR_1"}){clientMutationId}}`), 403, `mutations (mergePullRequest) are not served`},
		{"POST", q(`subscription{x}`), 403, `graphql request refused`},
		{"POST", q(`{repository(owner:"acme",name:"a/b"){id}}`), 403, `\"acme/a/b\" is not a GitHub repository`},
		{"POST", `{"query":"{repository(owner:\"acme\",name:\"app\"){id}}","Query":"{viewer{login}}"}`, 400, `invalid graphql request`},
		{"POST", `{"query":"{repository(owner:\"acme\",name:\"app\"){id` + strings.Repeat(" ", 70<<10) + `}}"}`, 413, `graphql request too large`},
		{"GET", "", 403, `GET /api/graphql is refused for sandbox conv-42: send GraphQL as POST`},
	} {
		r := e.Do(c.method, "/api/graphql", h, c.body)
		if r.Status != c.status || !strings.HasPrefix(r.Body, `{"errors":[{"message":"cproxy: `) || !strings.Contains(r.Body, c.want) || !strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
			t.Errorf("%s %.80s: %d %s\nwant %d with %s", c.method, c.body, r.Status, r.Body, c.status, c.want)
		}
	}
	if n := len(fake.Requests()); n != 0 {
		t.Errorf("the API got %d requests", n)
	}
}

// TestGraphQLMissingCredential: an allowed query without a credential is
// a 503 naming what to set, in GraphQL's shape.
func TestGraphQLMissingCredential(t *testing.T) {
	e, _ := apiEnv(t, routes.Upstream{Missing: "the operator must set GITHUB_TOKEN"})
	r := e.Do("POST", "/api/graphql", routetest.Bearer(e.Token("conv-42")), listPulls)
	if r.Status != 503 || !strings.Contains(r.Body, `{"errors":[{"message":"cproxy: no GitHub API credential is configured: the operator must set GITHUB_TOKEN`) {
		t.Fatalf("got %d %s", r.Status, r.Body)
	}
}
