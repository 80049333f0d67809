package fakes

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
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

// TestGitHubGraphQLMutations: the fake GraphQL API runs createPullRequest
// on a repository's node ID and records it, finds the pull request by
// its branch and by its node ID, resolves node IDs in nodes(ids:) (null
// for one it does not have), comments and merges, each mutation recorded.
func TestGitHubGraphQLMutations(t *testing.T) {
	g := NewGitHubREST(GitHubRESTOptions{Repos: []string{"acme/app"}, Parents: map[string]string{"acme/app": "up/app"}})
	defer g.Close()
	post := func(query string, vars map[string]any) string {
		t.Helper()
		b, _ := json.Marshal(map[string]any{"query": query, "variables": vars})
		resp, err := http.Post(g.URL+"/graphql", "application/json", bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		return string(out)
	}
	repoID, prID := GitHubNodeID("Repository", "acme/app", 0), GitHubNodeID("PullRequest", "acme/app", 1)
	for _, c := range []struct {
		query string
		vars  map[string]any
		want  string
	}{
		{`mutation($input: CreatePullRequestInput!) { createPullRequest(input: $input) { pullRequest { id number url } } }`,
			map[string]any{"input": map[string]any{"repositoryId": repoID, "headRefName": "agent/x", "baseRefName": "main", "title": "t", "body": "b"}},
			`{"data":{"createPullRequest":{"pullRequest":{"id":"` + prID + `","number":1,"url":"https://github.com/acme/app/pull/1"}}}}`},
		{`mutation { createPullRequest(input: {repositoryId: "R_kgDOnope", headRefName: "a", baseRefName: "b"}) { pullRequest { id } } }`, nil,
			`Could not resolve to a Repository with the global id of 'R_kgDOnope'`},
		{`{ repository(owner: "acme", name: "app") { parent { nameWithOwner } pullRequests(headRefName: "agent/x", states: [OPEN]) { nodes { number title body } } other: pullRequests(headRefName: "agent/y") { totalCount } } }`, nil,
			`{"data":{"repository":{"other":{"totalCount":0},"parent":{"nameWithOwner":"up/app"},"pullRequests":{"nodes":[{"body":"b","number":1,"title":"t"}]}}}}`},
		{`query($ids: [ID!]!) { nodes(ids: $ids) { __typename ... on Repository { nameWithOwner } ... on PullRequest { repository { nameWithOwner } } } }`,
			map[string]any{"ids": []string{repoID, prID, "PR_kwDOnope"}},
			`{"data":{"nodes":[{"__typename":"Repository","nameWithOwner":"acme/app"},{"__typename":"PullRequest","repository":{"nameWithOwner":"acme/app"}},null]}}`},
		{`mutation { addComment(input: {subjectId: "` + prID + `", body: "done"}) { commentEdge { node { url } } } }`, nil,
			`"url":"https://github.com/acme/app/pull/1#issuecomment-2"`},
		{`mutation { mergePullRequest(input: {pullRequestId: "` + prID + `"}) { pullRequest { state } } }`, nil,
			`{"data":{"mergePullRequest":{"pullRequest":{"state":"MERGED"}}}}`},
		{`mutation { deleteRef(input: {refId: "x"}) { clientMutationId } }`, nil, `Field 'deleteRef' doesn't exist on type 'Mutation'`},
	} {
		if got := post(c.query, c.vars); !strings.Contains(got, c.want) {
			t.Errorf("%.60s: %s\nwant %s", c.query, got, c.want)
		}
	}
	var names []string
	for _, m := range g.GraphQLMutations() {
		names = append(names, m.Name)
	}
	if strings.Join(names, " ") != "createPullRequest createPullRequest addComment mergePullRequest" {
		t.Errorf("recorded mutations %v", names)
	}
}

// TestGitHubRESTOverTLS: with TLS the same API answers over HTTPS under
// GitHub Enterprise Server's paths, its certificate trusted through
// CertPEM; with Forget it keeps no record of what it was sent.
func TestGitHubRESTOverTLS(t *testing.T) {
	g := NewGitHubREST(GitHubRESTOptions{Token: "github_pat_fake", Repos: []string{"acme/app"}, TLS: true, Forget: true})
	defer g.Close()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(g.CertPEM) {
		t.Fatal("CertPEM holds no certificate")
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	for _, c := range []struct {
		method, path, body string
		status             int
		want               string
	}{
		{"GET", "/api/v3/repos/acme/app", "", 200, `"full_name":"acme/app"`},
		{"POST", "/api/graphql", `{"query":"{repository(owner:\"acme\",name:\"app\"){name}}"}`, 200, `{"data":{"repository":{"name":"app"}}}`},
		{"GET", "/repos/acme/app", "", 404, `"Not Found"`},
	} {
		req, _ := http.NewRequest(c.method, g.TLSURL+c.path, strings.NewReader(c.body))
		req.Header.Set("Authorization", "Bearer github_pat_fake")
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.status || !strings.Contains(string(b), c.want) {
			t.Errorf("%s %s: %d %s, want %d with %s", c.method, c.path, resp.StatusCode, b, c.status, c.want)
		}
	}
	if n := len(g.Requests()); n != 0 {
		t.Errorf("with Forget, %d requests recorded", n)
	}
}
