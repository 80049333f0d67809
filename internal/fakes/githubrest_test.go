package fakes

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestGitHubREST: the fake API answers as GitHub's REST API does: the
// token checked, a repository, a pull request created and listed, 422
// without head or base, 404 for what it does not have; GraphQL's
// repository and pull requests, through aliases, variables and fragments,
// with GitHub's errors for what it does not have or know.
func TestGitHubREST(t *testing.T) {
	g := NewGitHubREST(GitHubRESTOptions{Token: "github_pat_fake", Repos: []string{"acme/app"}})
	defer g.Close()
	do := func(method, path, auth, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, g.URL+path, strings.NewReader(body))
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, c := range []struct {
		method, path, auth, body string
		status                   int
		want                     string
	}{
		{"GET", "/repos/acme/app", "", "", 401, `{"documentation_url":"https://docs.github.com/rest","message":"Bad credentials"}`},
		{"GET", "/repos/acme/app", "Bearer wrong", "", 401, `"Bad credentials"`},
		{"GET", "/repos/acme/app", "token github_pat_fake", "", 200, `"full_name":"acme/app"`},
		{"GET", "/repos/acme/app/pulls", "Bearer github_pat_fake", "", 200, `[]`},
		{"POST", "/repos/acme/app/pulls", "Bearer github_pat_fake", `{"title":"t","head":"acme:agent/x","base":"main"}`, 201, `"head":{"label":"acme:agent/x","ref":"agent/x"}`},
		{"GET", "/repos/acme/app/pulls/1", "Bearer github_pat_fake", "", 200, `"number":1`},
		{"GET", "/repos/acme/app/pulls", "Bearer github_pat_fake", "", 200, `"state":"open"`},
		{"POST", "/repos/acme/app/pulls", "Bearer github_pat_fake", `{"title":"t"}`, 422, `"message":"Validation Failed"`},
		{"GET", "/repos/acme/other", "Bearer github_pat_fake", "", 404, `"message":"Not Found"`},
		{"GET", "/user", "Bearer github_pat_fake", "", 404, `"message":"Not Found"`},
		{"POST", "/graphql", "", `{"query":"{repository(owner:\"acme\",name:\"app\"){id}}"}`, 401, `"Bad credentials"`},
		{"POST", "/graphql", "Bearer github_pat_fake", `{"query":"{repository(owner:\"acme\",name:\"app\"){pullRequest(number:1){number headRefName}}}"}`, 200, `{"data":{"repository":{"pullRequest":{"headRefName":"agent/x","number":1}}}}`},
		{"POST", "/graphql", "Bearer github_pat_fake", `{"query":"query Q($n: Int!, $s: [PullRequestState!] = OPEN) {repository(owner:\"acme\",name:\"app\"){pr: pullRequest(number:$n){title ...on PullRequest{state} ...on Issue{closed}} pullRequests(states:$s){totalCount}}}","variables":{"n":1}}`, 200, `{"data":{"repository":{"pr":{"state":"OPEN","title":"t"},"pullRequests":{"totalCount":1}}}}`},
		{"POST", "/graphql", "Bearer github_pat_fake", `{"query":"{repository(owner:\"acme\",name:\"app\"){pullRequest(number:9){number}}}"}`, 200, `"message":"Could not resolve to a PullRequest with the number of 9."`},
		{"POST", "/graphql", "Bearer github_pat_fake", `{"query":"{repository(owner:\"acme\",name:\"app\"){forks{totalCount}}}"}`, 200, `"message":"Field 'forks' doesn't exist on type 'Repository'"`},
		{"POST", "/graphql", "Bearer github_pat_fake", `{"query":"{repository(owner:\"acme\",name:\"other\"){id}}"}`, 200, `{"data":{"repository":null},"errors":[{"message":"Could not resolve to a Repository with the name 'acme/other'.","path":["repository"],"type":"NOT_FOUND"}]}`},
		{"POST", "/graphql", "Bearer github_pat_fake", `{"query":"mutation{mergePullRequest(input:{}){clientMutationId}}"}`, 200, `"errors":`},
	} {
		if status, body := do(c.method, c.path, c.auth, c.body); status != c.status || !strings.Contains(body, c.want) {
			t.Errorf("%s %s: %d %s, want %d with %s", c.method, c.path, status, body, c.status, c.want)
		}
	}
	if n := len(g.Requests()); n != 17 {
		t.Errorf("recorded %d requests, want 17", n)
	}
}
