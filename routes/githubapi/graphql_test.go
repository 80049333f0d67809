package githubapi

import (
	"context"
	"encoding/json"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/cproxy/cproxy/internal/fakes"
	"github.com/cproxy/cproxy/routes"
	"github.com/cproxy/cproxy/routes/routetest"
	"github.com/cproxy/cproxy/secrets"
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
// read, a mutation and what cannot be read are
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
		{"POST", q(`{viewer{login}}`), 403, `the top-level field viewer is not served`},
		{"POST", q(`{repository(owner:"acme",name:"app"){id} search(query:"x",type:REPOSITORY,first:1){repositoryCount}}`), 403, `the top-level field search is not served`},
		{"POST", q(`{repository(owner:"acme",name:"app"){forks(first:5){nodes{nameWithOwner}}}}`), 403, `the field repository.forks is not one cproxy serves`},
		{"POST", q(`{repository(owner:"acme",name:"app"){pullRequest(number:1){headRepository{issues(first:1){totalCount}}}}}`), 403, `the field repository.pullRequest.headRepository.issues is not one`},
		{"POST", q(`{repository(owner:"acme",name:"app"){pullRequests(first:1){nodes{author{...on User{repositories(first:1){totalCount}}}}}}}`), 403, `repository.pullRequests.nodes.author.repositories is not one`},
		{"POST", q(`{__typename}`), 403, `it reads no repository`},
		{"POST", q(`mutation{mergePullRequest(input:{pullRequestId:"PR_1"}){clientMutationId}}`), 403, `the mutation mergePullRequest is refused: merging a pull request is never allowed through cproxy (a person merges)`},
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

// ghChecks is the query gh 2.23 sends for gh pr checks: the pull request
// by its node ID, with isRequired naming it again.
const ghChecks = `query PullRequestStatusChecks($id: ID!, $endCursor: String) { node(id: $id) { ...on PullRequest { statusCheckRollup: commits(last: 1) {nodes {commit {statusCheckRollup {contexts(first:100,after:$endCursor) {nodes {__typename...on StatusContext {context,state,targetUrl,createdAt,isRequired(pullRequestId: $id)},...on CheckRun {name,checkSuite{workflowRun{workflow{name}}},status,conclusion,startedAt,completedAt,detailsUrl,isRequired(pullRequestId: $id)}},pageInfo{hasNextPage,endCursor}}}}}} } } }`

// TestGraphQLNodeQueries: a query's node(id:) and nodes(ids:), behind an
// alias, in a fragment, with the ID in a variable or in another field's
// argument, are resolved through GitHub and served when every node is in
// a repository the sandbox may read; a node of another repository is
// refused without naming it, GitHub hearing only cproxy's look-up, once.
func TestGraphQLNodeQueries(t *testing.T) {
	e, fake := apiEnv(t, routes.Upstream{})
	h := routetest.Bearer(e.Token("conv-42"))
	if r := e.Do("POST", "/api/v3/repos/acme/app/pulls", h, `{"title":"Fix","head":"agent/x","base":"main"}`); r.Status != 201 {
		t.Fatalf("create pull: %d %s", r.Status, r.Body)
	}
	app, docs := fakes.GitHubNodeID("Repository", "acme/app", 0), fakes.GitHubNodeID("Repository", "acme/docs", 0)
	pr1 := fakes.GitHubNodeID("PullRequest", "acme/app", 1)
	id := map[string]any{"id": pr1}
	for _, c := range []struct {
		name, body, want string
	}{
		{"a node", gqlBody(t, `{node(id:"`+pr1+`"){... on PullRequest{title}}}`, nil), `"title":"Fix"`},
		{"an alias and a variable", gqlBody(t, `query($id: ID!){p: node(id: $id){... on PullRequest{number title}}}`, id), `"p":{"number":1,"title":"Fix"}`},
		{"fragments", gqlBody(t, `query($id: ID!){...F} fragment F on Query{node(id: $id){...P}} fragment P on PullRequest{title}`, id), `"title":"Fix"`},
		{"nodes", gqlBody(t, `{nodes(ids:["`+app+`","`+pr1+`"]){... on Repository{nameWithOwner} ... on PullRequest{title}}}`, nil), `[{"nameWithOwner":"acme/app"},{"title":"Fix"}]`},
		{"gh pr checks", gqlBody(t, ghChecks, id), `"statusCheckRollup":{"nodes":[]}`},
	} {
		r := e.Do("POST", "/api/graphql", h, c.body)
		if r.Status != 200 || !strings.Contains(r.Body, c.want) || strings.Contains(r.Body, `"errors"`) {
			t.Errorf("%s: %d %s\nwant 200 with %s", c.name, r.Status, r.Body, c.want)
		}
	}
	before := len(fake.Requests())
	other := map[string]any{"id": docs}
	for _, c := range []struct{ name, body string }{
		{"a node of another repository", gqlBody(t, `{node(id:"`+docs+`"){id}}`, nil)},
		{"behind an alias, in a variable", gqlBody(t, `query($id: ID!){r: node(id: $id){... on Repository{nameWithOwner}}}`, other)},
		{"in a fragment", gqlBody(t, `query($id: ID!){...F} fragment F on Query{node(id: $id){id}}`, other)},
		{"in nodes beside an allowed one", gqlBody(t, `{nodes(ids:["`+pr1+`","`+docs+`"]){id}}`, nil)},
		{"beside a repository by name", gqlBody(t, `query($id: ID!){repository(owner:"acme",name:"app"){id} node(id: $id){id}}`, other)},
		{"in isRequired", gqlBody(t, `query($id: ID!, $other: ID!){node(id: $id){... on PullRequest{commits(last:1){nodes{commit{statusCheckRollup{contexts(first:1){nodes{... on CheckRun{name isRequired(pullRequestId: $other)}}}}}}}}}}`, map[string]any{"id": pr1, "other": docs})},
	} {
		r := e.Do("POST", "/api/graphql", h, c.body)
		want := `the node ID \"` + docs + `\" is in a repository on which GitHub API \"read\" is not allowed; do not retry`
		if r.Status != 403 || !strings.Contains(r.Body, want) || strings.Contains(r.Body, "acme/docs") {
			t.Errorf("%s: %d %s\nwant 403 with %s", c.name, r.Status, r.Body, want)
		}
	}
	reqs := fake.Requests()[before:]
	if len(reqs) != 1 || !strings.Contains(string(reqs[0].Body), "nodes(ids: $ids)") || !strings.Contains(string(reqs[0].Body), docs) {
		t.Errorf("GitHub heard %d requests, want cproxy's one look-up of %s", len(reqs), docs)
		for _, r := range reqs {
			t.Logf("%s", r.Body)
		}
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

// ghCreatePull is the mutation gh 2.23 sends for gh pr create, with its
// input as variables.
const ghCreatePull = "mutation PullRequestCreate($input: CreatePullRequestInput!) { createPullRequest(input: $input) { pullRequest { id url } } }"

func gqlBody(t testing.TB, query string, vars map[string]any) string {
	t.Helper()
	b, err := json.Marshal(map[string]any{"query": query, "variables": vars})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func pullInput(repoID, head, base string) map[string]any {
	return map[string]any{"input": map[string]any{"repositoryId": repoID, "headRefName": head, "baseRefName": base,
		"title": "t", "body": "b", "draft": false, "maintainerCanModify": true}}
}

// TestGraphQLMutations: createPullRequest and addComment reach GitHub
// once cproxy has resolved the node ID they name to a repository the
// policy lets the sandbox open pull requests in (from a branch it may
// push into a base in pr_bases) or comment on; the resolution is asked of
// GitHub once and kept. What the policy refuses, what is never allowed
// and what cannot be decided is refused in GraphQL's error shape, seen
// through aliases, fragments, variables and batches, and GitHub runs none
// of it.
func TestGraphQLMutations(t *testing.T) {
	e, fake := apiEnv(t, routes.Upstream{})
	h := routetest.Bearer(e.Token("conv-42"))
	app, docs := fakes.GitHubNodeID("Repository", "acme/app", 0), fakes.GitHubNodeID("Repository", "acme/docs", 0)
	pr1 := fakes.GitHubNodeID("PullRequest", "acme/app", 1)

	r := e.Do("POST", "/api/graphql", h, gqlBody(t, ghCreatePull, pullInput(app, "agent/x", "main")))
	if r.Status != 200 || !strings.Contains(r.Body, `"url":"https://github.com/acme/app/pull/1"`) {
		t.Fatalf("create: %d %s", r.Status, r.Body)
	}
	r = e.Do("POST", "/api/graphql", h, gqlBody(t, `mutation($s: ID!) { c: addComment(input: {subjectId: $s, body: "done"}) { commentEdge { node { url } } } }`, map[string]any{"s": pr1}))
	if r.Status != 200 || !strings.Contains(r.Body, `issuecomment`) {
		t.Fatalf("comment: %d %s", r.Status, r.Body)
	}
	// The repository's ID is kept: a second pull request asks GitHub no
	// look-up.
	before := len(fake.Requests())
	if r = e.Do("POST", "/api/graphql", h, gqlBody(t, ghCreatePull, pullInput(app, "agent/y", "main"))); r.Status != 200 {
		t.Fatalf("second create: %d %s", r.Status, r.Body)
	}
	if n := len(fake.Requests()) - before; n != 1 {
		t.Errorf("the second pull request took %d requests of GitHub, want 1 (no look-up)", n)
	}

	merge := `mutation { mergePullRequest(input: {pullRequestId: "` + pr1 + `"}) { clientMutationId } }`
	for _, c := range []struct {
		name, body string
		status     int
		want       string
	}{
		{"a head the sandbox may not push", gqlBody(t, ghCreatePull, pullInput(app, "main", "main")), 403,
			`a pull request from branch main of acme/app is refused for sandbox conv-42: the sandbox may not push that branch`},
		{"a base not in pr_bases", gqlBody(t, ghCreatePull, pullInput(app, "agent/x", "prod")), 403,
			`a pull request into prod of acme/app is refused for sandbox conv-42: that base is not in the policy's pr_bases`},
		{"the ID of a repository without pulls:create, not named", gqlBody(t, ghCreatePull, pullInput(docs, "agent/x", "main")), 403,
			`the repositoryId of createPullRequest, \"` + docs + `\", is in a repository on which GitHub API \"pulls:create\" is not allowed (profile.default.repos[\"acme/docs\"]: api does not list \"pulls:create\")`},
		{"an ID GitHub does not know", gqlBody(t, ghCreatePull, pullInput("R_kgDOnope", "agent/x", "main")), 403,
			`the node ID \"R_kgDOnope\" is not one GitHub knows`},
		{"a pull request's ID as the repositoryId", gqlBody(t, ghCreatePull, pullInput(pr1, "agent/x", "main")), 403,
			`is a PullRequest, not Repository`},
		{"a head in another owner's repository", gqlBody(t, ghCreatePull, pullInput(app, "evil:agent/x", "main")), 403,
			`the headRefName of createPullRequest, \"evil:agent/x\", is in another owner's repository`},
		{"a head repository of its own", gqlBody(t, `mutation { createPullRequest(input: {repositoryId: "`+app+`", headRepositoryId: "R_kgDOfork", headRefName: "agent/x", baseRefName: "main", title: "t"}) { pullRequest { id } } }`, nil), 403,
			`a pull request from another repository (headRepositoryId) is not served`},
		{"an input key not forwarded", gqlBody(t, `mutation { createPullRequest(input: {repositoryId: "`+app+`", headRefName: "agent/x", baseRefName: "main", title: "t", issueId: "I_1"}) { pullRequest { id } } }`, nil), 403,
			`the input of createPullRequest has issueId, not a key cproxy forwards`},
		{"an answer selected past the pull request", gqlBody(t, `mutation { createPullRequest(input: {repositoryId: "`+app+`", headRefName: "agent/x", baseRefName: "main", title: "t"}) { pullRequest { author { ... on User { repositories(first: 1) { totalCount } } } } } }`, nil), 403,
			`the field createPullRequest.pullRequest.author.repositories of a mutation's answer is not one cproxy serves`},
		{"mergePullRequest", gqlBody(t, merge, nil), 403,
			`the mutation mergePullRequest is refused: merging a pull request is never allowed through cproxy (a person merges)`},
		{"mergePullRequest behind an alias", gqlBody(t, `mutation { open: mergePullRequest(input: {pullRequestId: "`+pr1+`"}) { clientMutationId } }`, nil), 403,
			`the mutation mergePullRequest is refused`},
		{"mergePullRequest in a fragment beside an allowed mutation", gqlBody(t, `mutation M($i: CreatePullRequestInput!, $m: MergePullRequestInput!) { createPullRequest(input: $i) { pullRequest { id } } ...F } fragment F on Mutation { mergePullRequest(input: $m) { clientMutationId } }`,
			map[string]any{"i": pullInput(app, "agent/x", "main")["input"], "m": map[string]any{"pullRequestId": pr1}}), 403,
			`the mutation mergePullRequest is refused`},
		{"enablePullRequestAutoMerge in an inline fragment under @skip", gqlBody(t, `mutation { ... @skip(if: true) { enablePullRequestAutoMerge(input: {pullRequestId: "`+pr1+`"}) { clientMutationId } } }`, nil), 403,
			`the mutation enablePullRequestAutoMerge is refused: auto-merge merges without a person`},
		{"a review", gqlBody(t, `mutation { addPullRequestReview(input: {pullRequestId: "`+pr1+`", event: APPROVE}) { clientMutationId } }`, nil), 403,
			`the mutation addPullRequestReview is refused: reviews are never submitted through cproxy`},
		{"updateRef", gqlBody(t, `mutation { updateRef(input: {refId: "REF_1", oid: "0000000000000000000000000000000000000000", force: true}) { clientMutationId } }`, nil), 403,
			`the mutation updateRef is refused: branches and tags go through git`},
		{"createCommitOnBranch", gqlBody(t, `mutation { createCommitOnBranch(input: {branch: {repositoryNameWithOwner: "acme/app", branchName: "main"}, expectedHeadOid: "0", message: {headline: "m"}}) { clientMutationId } }`, nil), 403,
			`the mutation createCommitOnBranch is refused: commits go through git`},
		{"a mutation not on the list", gqlBody(t, `mutation { closePullRequest(input: {pullRequestId: "`+pr1+`"}) { clientMutationId } }`, nil), 403,
			`the mutation closePullRequest is not one cproxy serves (those served: addComment, createIssue, createPullRequest, requestReviews)`},
		{"a mutation the policy does not allow", gqlBody(t, `mutation { createIssue(input: {repositoryId: "`+app+`", title: "t"}) { issue { url } } }`, nil), 403,
			`the repositoryId of createIssue, \"` + app + `\", is in a repository on which GitHub API \"issues:create\" is not allowed`},
		{"a comment on a repository", gqlBody(t, `mutation { addComment(input: {subjectId: "`+app+`", body: "x"}) { clientMutationId } }`, nil), 403,
			`the subjectId of addComment, \"` + app + `\", is a Repository, not PullRequest or Issue`},
		{"a batch with one bad operation", `[` + gqlBody(t, ghCreatePull, pullInput(app, "agent/x", "main")) + `,` + gqlBody(t, merge, nil) + `]`, 403,
			`the mutation mergePullRequest is refused`},
		{"a batch with a pull request into another repository", `[` + gqlBody(t, ghCreatePull, pullInput(app, "agent/x", "main")) + `,` + gqlBody(t, ghCreatePull, pullInput(docs, "agent/x", "main")) + `]`, 403,
			`is in a repository on which GitHub API \"pulls:create\" is not allowed`},
		{"a target that is not a string", gqlBody(t, `mutation { createPullRequest(input: {repositoryId: 7, headRefName: "agent/x", baseRefName: "main"}) { pullRequest { id } } }`, nil), 403,
			`graphql request refused: the input's repositoryId is not a string`},
	} {
		r := e.Do("POST", "/api/graphql", h, c.body)
		if r.Status != c.status || !strings.HasPrefix(r.Body, `{"errors":[{"message":"cproxy: `) || !strings.Contains(r.Body, c.want) {
			t.Errorf("%s: %d %s\nwant %d with %s", c.name, r.Status, r.Body, c.status, c.want)
		}
	}
	var ran []string
	for _, m := range fake.GraphQLMutations() {
		in, _ := json.Marshal(m.Input)
		ran = append(ran, m.Name+" "+string(in))
	}
	want := []string{
		`createPullRequest {"baseRefName":"main","body":"b","draft":false,"headRefName":"agent/x","maintainerCanModify":true,"repositoryId":"` + app + `","title":"t"}`,
		`addComment {"body":"done","subjectId":"` + pr1 + `"}`,
		`createPullRequest {"baseRefName":"main","body":"b","draft":false,"headRefName":"agent/y","maintainerCanModify":true,"repositoryId":"` + app + `","title":"t"}`,
	}
	if strings.Join(ran, "\n") != strings.Join(want, "\n") {
		t.Errorf("GitHub ran\n%s\nwant\n%s", strings.Join(ran, "\n"), strings.Join(want, "\n"))
	}
}

// TestGraphQLParent: gh's RepositoryInfo reads the repository's parent;
// cproxy asks GitHub which repository that is, and serves the query when
// there is none or the sandbox may read it.
func TestGraphQLParent(t *testing.T) {
	fake := fakes.NewGitHubREST(fakes.GitHubRESTOptions{Token: canaryGitHub, Repos: []string{"acme/app", "acme/docs"},
		Parents: map[string]string{"acme/docs": "evil/upstream"}})
	t.Cleanup(fake.Close)
	up := routes.Upstream{Credential: secrets.New(canaryGitHub), HeaderTimeout: 10 * time.Second}
	up.URL, _ = url.Parse(fake.URL)
	e := routetest.New(t, routetest.Serve(Kind, up), routetest.WithPolicy(t, `[profile.default]
repos = [{ repo = "acme/*", access = "read", api = ["read"] }]
`), func(o *routetest.Options) { o.Canaries = append(o.Canaries, canaryGitHub) })
	h := routetest.Bearer(e.Token("conv-42"))
	info := `fragment repo on Repository { id name owner { login } hasIssuesEnabled description hasWikiEnabled viewerPermission defaultBranchRef { name } }
query RepositoryInfo($owner: String!, $name: String!) { repository(owner: $owner, name: $name) { ...repo parent { ...repo } mergeCommitAllowed rebaseMergeAllowed squashMergeAllowed } }`
	r := e.Do("POST", "/api/graphql", h, gqlBody(t, info, map[string]any{"owner": "acme", "name": "app"}))
	if r.Status != 200 || !strings.Contains(r.Body, `"parent":null`) {
		t.Fatalf("no parent: %d %s", r.Status, r.Body)
	}
	r = e.Do("POST", "/api/graphql", h, gqlBody(t, info, map[string]any{"owner": "acme", "name": "docs"}))
	if r.Status != 403 || !strings.Contains(r.Body, `acme/docs is a fork, and the sandbox may not read the repository it was forked from`) || strings.Contains(r.Body, "evil") {
		t.Fatalf("a parent not allowed: %d %s", r.Status, r.Body)
	}
	var got []string
	for _, q := range fake.Requests() {
		got = append(got, string(q.Body))
	}
	if len(got) != 3 || !strings.Contains(got[0], "parent { nameWithOwner }") || got[1] != gqlBody(t, info, map[string]any{"owner": "acme", "name": "app"}) || !strings.Contains(got[2], "parent { nameWithOwner }") {
		t.Errorf("GitHub got %q", got)
	}
}

// A pull request into a base ask_pr_bases names is refused with an
// approval request's id, through GraphQL and REST alike; approved, it is
// opened once, by either. A GraphQL request whose mutations would need two
// approvals is refused while it holds one, which it does not use.
func TestPullBaseAsk(t *testing.T) {
	e, fake := apiEnv(t, routes.Upstream{}, routetest.WithPolicy(t, `[profile.default]
repos = [
  { repo = "acme/app", access = "push", refs = ["refs/heads/agent/*"], api = ["read", "pulls:create"], pr_bases = ["main"], ask_pr_bases = ["release/*"] },
]
`))
	h := routetest.Bearer(e.Token("conv-42"))
	app := fakes.GitHubNodeID("Repository", "acme/app", 0)
	id := regexp.MustCompile(`needs approval \(request (apr_[0-9a-f]{16})\)`)
	asked := func(r routetest.Reply) string {
		t.Helper()
		m := id.FindStringSubmatch(r.Body)
		if r.Status != 403 || m == nil || !strings.Contains(r.Body, "cproxy: a pull request into release/1 of acme/app needs approval") {
			t.Fatalf("not asked: %d %s", r.Status, r.Body)
		}
		return m[1]
	}
	apr := asked(e.Do("POST", "/api/graphql", h, gqlBody(t, ghCreatePull, pullInput(app, "agent/x", "release/1"))))
	if got := asked(e.Do("POST", "/api/v3/repos/acme/app/pulls", h, `{"title":"t","head":"agent/x","base":"release/1"}`)); got != apr {
		t.Errorf("REST asked %s, GraphQL %s: one pull request, two requests", got, apr)
	}
	if _, err := e.Server.Store().DecideApproval(context.Background(), apr, true, "", time.Now(), time.Minute); err != nil {
		t.Fatal(err)
	}
	two := `mutation($a: CreatePullRequestInput!, $b: CreatePullRequestInput!) { a: createPullRequest(input: $a) { pullRequest { id } } b: createPullRequest(input: $b) { pullRequest { id } } }`
	r := e.Do("POST", "/api/graphql", h, gqlBody(t, two, map[string]any{
		"a": pullInput(app, "agent/x", "release/1")["input"], "b": pullInput(app, "agent/y", "release/2")["input"]}))
	if r.Status != 403 || !strings.Contains(r.Body, "the request holds the approval of another ("+apr+")") {
		t.Fatalf("two asking mutations: %d %s", r.Status, r.Body)
	}
	if r := e.Do("POST", "/api/v3/repos/acme/app/pulls", h, `{"title":"t","head":"agent/x","base":"release/1"}`); r.Status != 201 {
		t.Fatalf("approved: %d %s", r.Status, r.Body)
	}
	if got := asked(e.Do("POST", "/api/graphql", h, gqlBody(t, ghCreatePull, pullInput(app, "agent/x", "release/1")))); got == apr {
		t.Errorf("the grant was used twice")
	}
	for _, r := range fake.Requests() {
		if r.Path == "/graphql" && strings.Contains(string(r.Body), "createPullRequest") {
			t.Errorf("GitHub ran a mutation: %s", r.Body)
		}
	}
}
