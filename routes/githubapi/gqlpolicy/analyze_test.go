package gqlpolicy

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// body is a request object as gh sends it.
func body(t testing.TB, query string, vars map[string]any, opName string) []byte {
	t.Helper()
	m := map[string]any{"query": query}
	if vars != nil {
		m["variables"] = vars
	}
	if opName != "" {
		m["operationName"] = opName
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The documents gh 2.23 sends for `gh repo view`, `gh pr create`, `gh pr
// merge` and `gh pr comment`, in the shapes of its api/queries_*.go.
const (
	ghRepositoryInfo = `query RepositoryInfo($owner: String!, $name: String!) {
	repository(owner: $owner, name: $name) {
		id
		name
		owner { login }
		hasIssuesEnabled
		description
		viewerPermission
		defaultBranchRef { name }
	}
}`
	ghRepositoryNetwork = `fragment repo on Repository {
	id
	name
	owner { login }
	viewerPermission
	defaultBranchRef { name }
	isPrivate
}
query RepositoryNetwork {
	viewer { login }
	repo_000: repository(owner: "acme", name: "app") {
		...repo
		parent { ...repo }
	}
}`
	ghPullRequestForBranch = `query PullRequestForBranch($owner: String!, $repo: String!, $headRefName: String!, $states: [PullRequestState!]) {
	repository(owner: $owner, name: $repo) {
		pullRequests(headRefName: $headRefName, states: $states, first: 30, orderBy: { field: CREATED_AT, direction: DESC }) {
			nodes {
				number
				id
				state
				headRefName
				baseRefName
				isCrossRepository
				headRepositoryOwner { id login ... on User { name } }
			}
		}
		defaultBranchRef { name }
	}
}`
	ghPullRequestCreate = `mutation PullRequestCreate($input: CreatePullRequestInput!) {
	createPullRequest(input: $input) {
		pullRequest { id url }
	}
}`
	ghPullRequestMerge = `mutation PullRequestMerge($input: MergePullRequestInput!) {
	mergePullRequest(input: $input) { clientMutationId }
}`
	ghCommentCreate = `mutation CommentCreate($input: AddCommentInput!) {
	addComment(input: $input) { commentEdge { node { url } } }
}`
)

func TestAnalyzeGhDocuments(t *testing.T) {
	createInput := map[string]any{
		"repositoryId": "R_kgDOAcme", "baseRefName": "main", "headRefName": "agent/fix",
		"title": "Fix it", "body": "", "draft": false,
	}
	tests := []struct {
		name string
		body []byte
		want Operation
	}{{
		name: "gh repo view",
		body: body(t, ghRepositoryInfo, map[string]any{"owner": "acme", "name": "app"}, "RepositoryInfo"),
		want: Operation{
			Kind: "query", Name: "RepositoryInfo",
			Repos:  []Repo{{"acme", "app"}},
			Fields: []string{"repository"},
			Paths: []string{"repository", "repository.id", "repository.name", "repository.owner", "repository.owner.login",
				"repository.hasIssuesEnabled", "repository.description", "repository.viewerPermission",
				"repository.defaultBranchRef", "repository.defaultBranchRef.name"},
		},
	}, {
		name: "gh's repository network, aliased, with a fragment",
		body: body(t, ghRepositoryNetwork, nil, ""),
		want: Operation{
			Kind: "query", Name: "RepositoryNetwork",
			Repos:  []Repo{{"acme", "app"}},
			Fields: []string{"viewer", "repository"},
			Paths: []string{"viewer", "viewer.login", "repository", "repository.id", "repository.name",
				"repository.owner", "repository.owner.login", "repository.viewerPermission",
				"repository.defaultBranchRef", "repository.defaultBranchRef.name", "repository.isPrivate",
				"repository.parent", "repository.parent.id", "repository.parent.name", "repository.parent.owner",
				"repository.parent.owner.login", "repository.parent.viewerPermission",
				"repository.parent.defaultBranchRef", "repository.parent.defaultBranchRef.name",
				"repository.parent.isPrivate"},
		},
	}, {
		name: "gh pr create's look-up of the branch's pull request",
		body: body(t, ghPullRequestForBranch, map[string]any{
			"owner": "acme", "repo": "app", "headRefName": "agent/fix", "states": []string{"OPEN"},
		}, "PullRequestForBranch"),
		want: Operation{
			Kind: "query", Name: "PullRequestForBranch",
			Repos:  []Repo{{"acme", "app"}},
			Fields: []string{"repository"},
			Paths: []string{"repository", "repository.pullRequests", "repository.pullRequests.nodes",
				"repository.pullRequests.nodes.number", "repository.pullRequests.nodes.id",
				"repository.pullRequests.nodes.state", "repository.pullRequests.nodes.headRefName",
				"repository.pullRequests.nodes.baseRefName", "repository.pullRequests.nodes.isCrossRepository",
				"repository.pullRequests.nodes.headRepositoryOwner", "repository.pullRequests.nodes.headRepositoryOwner.id",
				"repository.pullRequests.nodes.headRepositoryOwner.login", "repository.pullRequests.nodes.headRepositoryOwner.name",
				"repository.defaultBranchRef", "repository.defaultBranchRef.name"},
		},
	}, {
		name: "gh pr create",
		body: body(t, ghPullRequestCreate, map[string]any{"input": createInput}, "PullRequestCreate"),
		want: Operation{
			Kind: "mutation", Name: "PullRequestCreate",
			Nodes:     []string{"R_kgDOAcme"},
			Fields:    []string{"createPullRequest"},
			Paths:     []string{"createPullRequest", "createPullRequest.pullRequest", "createPullRequest.pullRequest.id", "createPullRequest.pullRequest.url"},
			Mutations: []Mutation{{Name: "createPullRequest", Input: createInput}},
		},
	}, {
		name: "gh pr merge",
		body: body(t, ghPullRequestMerge, map[string]any{"input": map[string]any{"pullRequestId": "PR_kwDOAcme", "mergeMethod": "MERGE"}}, "PullRequestMerge"),
		want: Operation{
			Kind: "mutation", Name: "PullRequestMerge",
			Nodes:     []string{"PR_kwDOAcme"},
			Fields:    []string{"mergePullRequest"},
			Paths:     []string{"mergePullRequest", "mergePullRequest.clientMutationId"},
			Mutations: []Mutation{{Name: "mergePullRequest", Input: map[string]any{"pullRequestId": "PR_kwDOAcme", "mergeMethod": "MERGE"}}},
		},
	}, {
		name: "gh pr comment",
		body: body(t, ghCommentCreate, map[string]any{"input": map[string]any{"subjectId": "PR_kwDOAcme", "body": "done"}}, "CommentCreate"),
		want: Operation{
			Kind: "mutation", Name: "CommentCreate",
			Nodes:     []string{"PR_kwDOAcme"},
			Fields:    []string{"addComment"},
			Paths:     []string{"addComment", "addComment.commentEdge", "addComment.commentEdge.node", "addComment.commentEdge.node.url"},
			Mutations: []Mutation{{Name: "addComment", Input: map[string]any{"subjectId": "PR_kwDOAcme", "body": "done"}}},
		},
	}, {
		name: "gh api graphql, anonymous, input inline",
		body: body(t, `mutation { createPullRequest(input: {repositoryId: "R_1", baseRefName: "main", headRefName: "agent/x", title: "t", maintainerCanModify: true}) { pullRequest { number } } }`, nil, ""),
		want: Operation{
			Kind:   "mutation",
			Nodes:  []string{"R_1"},
			Fields: []string{"createPullRequest"},
			Paths:  []string{"createPullRequest", "createPullRequest.pullRequest", "createPullRequest.pullRequest.number"},
			Mutations: []Mutation{{Name: "createPullRequest", Input: map[string]any{
				"repositoryId": "R_1", "baseRefName": "main", "headRefName": "agent/x", "title": "t", "maintainerCanModify": true,
			}}},
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ops, err := Analyze(tt.body)
			if err != nil {
				t.Fatal(err)
			}
			if len(ops) != 1 || !reflect.DeepEqual(ops[0], tt.want) {
				t.Errorf("Analyze:\n got %#v\nwant %#v", ops, tt.want)
			}
		})
	}
}

// TestAnalyzeSeesThrough holds that what a document hides behind aliases,
// fragments, variables and nesting is still in the result.
func TestAnalyzeSeesThrough(t *testing.T) {
	tests := []struct {
		name      string
		body      []byte
		repos     []Repo
		nodes     []string
		fields    []string
		mutations []string
	}{{
		name:      "a mutation behind an alias",
		body:      body(t, `mutation { open: mergePullRequest(input: {pullRequestId: "PR_1"}) { clientMutationId } }`, nil, ""),
		nodes:     []string{"PR_1"},
		fields:    []string{"mergePullRequest"},
		mutations: []string{"mergePullRequest"},
	}, {
		name: "a mutation in a named fragment, beside an allowed one",
		body: body(t, `mutation Create($i: CreatePullRequestInput!, $m: MergePullRequestInput!) {
			createPullRequest(input: $i) { clientMutationId }
			...sneak
		}
		fragment sneak on Mutation { createPullRequest: mergePullRequest(input: $m) { clientMutationId } }`,
			map[string]any{"i": map[string]any{"repositoryId": "R_1"}, "m": map[string]any{"pullRequestId": "PR_2"}}, ""),
		nodes:     []string{"R_1", "PR_2"},
		fields:    []string{"createPullRequest", "mergePullRequest"},
		mutations: []string{"createPullRequest", "mergePullRequest"},
	}, {
		name:      "a mutation in an inline fragment under @skip(if: true)",
		body:      body(t, `mutation { ... @skip(if: true) { mergePullRequest(input: {pullRequestId: "PR_1"}) { clientMutationId } } }`, nil, ""),
		nodes:     []string{"PR_1"},
		fields:    []string{"mergePullRequest"},
		mutations: []string{"mergePullRequest"},
	}, {
		name:   "a repository named through variables, aliased twice",
		body:   body(t, `query($o: String!, $n: String!) { a: repository(owner: "acme", name: "app") { id } b: repository(owner: $o, name: $n) { id } }`, map[string]any{"o": "secret", "n": "vault"}, ""),
		repos:  []Repo{{"acme", "app"}, {"secret", "vault"}},
		fields: []string{"repository"},
	}, {
		name:   "a repository's owner and name that join the same",
		body:   body(t, `{ a: repository(owner: "a/b", name: "c") { id } b: repository(owner: "a", name: "b/c") { id } }`, nil, ""),
		repos:  []Repo{{"a/b", "c"}, {"a", "b/c"}},
		fields: []string{"repository"},
	}, {
		name:   "node(id:) nested in an allowed repository",
		body:   body(t, `query($id: ID!) { repository(owner: "acme", name: "app") { owner { ... on User { node(id: $id) { id } } } } }`, map[string]any{"id": "R_other"}, ""),
		repos:  []Repo{{"acme", "app"}},
		nodes:  []string{"R_other"},
		fields: []string{"repository"},
	}, {
		name:   "nodes(ids:) deep in a fragment, a single id for the list",
		body:   body(t, `query($ids: [ID!]!) { repository(owner: "acme", name: "app") { ...f } } fragment f on Repository { issues(first: 1) { nodes { nodes(ids: $ids) { id } } } }`, map[string]any{"ids": "I_1"}, ""),
		repos:  []Repo{{"acme", "app"}},
		nodes:  []string{"I_1"},
		fields: []string{"repository"},
	}, {
		name:   "a repository in the unused branch of @include(if: false)",
		body:   body(t, `{ repository(owner: "acme", name: "app") @include(if: false) { id } viewer { login } }`, nil, ""),
		repos:  []Repo{{"acme", "app"}},
		fields: []string{"repository", "viewer"},
	}, {
		name:   "the operation operationName chooses",
		body:   body(t, `query A { viewer { login } } query B { repository(owner: "acme", name: "app") { id } }`, nil, "B"),
		repos:  []Repo{{"acme", "app"}},
		fields: []string{"repository"},
	}, {
		name:   "introspection is reported as its fields",
		body:   body(t, `{ __schema { types { name } } t: __type(name: "Repository") { fields { name } } __typename }`, nil, ""),
		fields: []string{"__schema", "__type"},
	}, {
		name:   "nodes(ids:) with a single literal id",
		body:   body(t, `{ nodes(ids: "PR_1") { id } }`, nil, ""),
		nodes:  []string{"PR_1"},
		fields: []string{"nodes"},
	}, {
		name:   "an ID sent as a number",
		body:   body(t, `query($id: ID!) { node(id: $id) { id } }`, map[string]any{"id": 42}, ""),
		nodes:  []string{"42"},
		fields: []string{"node"},
	}, {
		name:   "a mutation's field in a query is a field, not a mutation",
		body:   body(t, `query { mergePullRequest(input: {pullRequestId: "PR_1"}) { clientMutationId } }`, nil, ""),
		fields: []string{"mergePullRequest"},
	}, {
		name: "a mutation's IDs at any depth of its input, its clientMutationId aside",
		body: body(t, `mutation($in: UpdatePullRequestInput!) { updatePullRequest(input: $in) { clientMutationId } }`,
			map[string]any{"in": map[string]any{"pullRequestId": "PR_1", "labelIds": []string{"L_1", "L_2"}, "clientMutationId": "mine",
				"nested": []any{map[string]any{"projectId": "P_1"}}}}, ""),
		nodes:     []string{"L_1", "L_2", "P_1", "PR_1"},
		fields:    []string{"updatePullRequest"},
		mutations: []string{"updatePullRequest"},
	}, {
		name:   "a variable's default",
		body:   body(t, `query($n: String = "app") { repository(owner: "acme", name: $n) { id } }`, nil, ""),
		repos:  []Repo{{"acme", "app"}},
		fields: []string{"repository"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ops, err := Analyze(tt.body)
			if err != nil {
				t.Fatal(err)
			}
			if len(ops) != 1 {
				t.Fatalf("got %d operations, want 1", len(ops))
			}
			op := ops[0]
			var mutations []string
			for _, m := range op.Mutations {
				mutations = append(mutations, m.Name)
			}
			if !reflect.DeepEqual(op.Repos, tt.repos) || !reflect.DeepEqual(op.Nodes, tt.nodes) ||
				!reflect.DeepEqual(op.Fields, tt.fields) || !reflect.DeepEqual(mutations, tt.mutations) {
				t.Errorf("got repos %v nodes %v fields %v mutations %v\nwant repos %v nodes %v fields %v mutations %v",
					op.Repos, op.Nodes, op.Fields, mutations, tt.repos, tt.nodes, tt.fields, tt.mutations)
			}
		})
	}
}

func TestAnalyzeBatch(t *testing.T) {
	good := body(t, ghRepositoryInfo, map[string]any{"owner": "acme", "name": "app"}, "")
	create := body(t, ghPullRequestCreate, map[string]any{"input": map[string]any{"repositoryId": "R_1"}}, "")
	ops, err := Analyze([]byte("[" + string(good) + "," + string(create) + "]"))
	if err != nil {
		t.Fatal(err)
	}
	if len(ops) != 2 || ops[0].Kind != "query" || ops[1].Kind != "mutation" || ops[1].Mutations[0].Name != "createPullRequest" {
		t.Errorf("got %#v", ops)
	}
	bad := body(t, `subscription { issueUpdated { id } }`, nil, "")
	_, err = Analyze([]byte("[" + string(good) + "," + string(bad) + "]"))
	if !errors.Is(err, ErrRefused) || !strings.HasPrefix(err.Error(), "request 2 of 2: ") {
		t.Errorf("a batch with a subscription second: got %v", err)
	}
}

// TestAnalyzeRefuses holds that a document this package cannot decide is
// refused, with an error that says why.
func TestAnalyzeRefuses(t *testing.T) {
	deep := "{ " + strings.Repeat("a { ", MaxDepth) + "b" + strings.Repeat(" }", MaxDepth) + " }"
	// Ten fragments each spreading the next twice: 2^10 spreads of one field.
	bomb := `{ ...f0 }`
	for i := range 10 {
		bomb += fmt.Sprintf(" fragment f%d on Query { ...f%d ...f%d }", i, i+1, i+1)
	}
	bomb += " fragment f10 on Query { viewer { login } }"
	many := "{ " + strings.Repeat("viewer { login } ", MaxSelections/2+1) + "}"
	batch := "[" + strings.Repeat(string(body(t, "{ viewer { login } }", nil, ""))+",", MaxBatch) + string(body(t, "{ viewer { login } }", nil, "")) + "]"
	tests := []struct {
		name string
		body string
		kind error
		says string
	}{
		{"not JSON", `query { viewer { login } }`, ErrInvalid, "not a JSON object"},
		{"a query that is not a string", `{"query": {"q": "{ viewer { login } }"}}`, ErrInvalid, "query is not a string"},
		{"a null query", `{"query": null}`, ErrInvalid, "query is not a string"},
		{"no query", `{"variables": {}}`, ErrInvalid, "has no query"},
		{"a key in another case", `{"Query": "{ viewer { login } }"}`, ErrInvalid, `unknown key "Query"`},
		{"duplicate query keys", `{"query": "{ viewer { login } }", "query": "mutation { mergePullRequest(input: {pullRequestId: \"PR_1\"}) { clientMutationId } }"}`, ErrInvalid, `"query" appears twice`},
		{"duplicate variable keys", `{"query": "query($n: String!) { repository(owner: \"a\", name: $n) { id } }", "variables": {"n": "ok", "n": "other"}}`, ErrInvalid, `"n" appears twice`},
		{"duplicate keys deep in variables", `{"query": "mutation($i: MergePullRequestInput!) { mergePullRequest(input: $i) { clientMutationId } }", "variables": {"i": {"pullRequestId": "a", "pullRequestId": "b"}}}`, ErrInvalid, "appears twice"},
		{"duplicate keys, one escaped", `{"query": "{ viewer { login } }", "\u0071uery": "{ node(id: \"N\") { id } }"}`, ErrInvalid, `"query" appears twice`},
		{"duplicate keys after a lone surrogate", `{"query": "{ viewer { login } }", "variables": {"s": "\ud800"}, "query": "{ node(id: \"N\") { id } }"}`, ErrInvalid, "valid escapes"},
		{"an Int out of range", string(body(t, `query($n: Int!) { viewer { repositories(first: $n) { totalCount } } }`, map[string]any{"n": 1 << 40}, "")), ErrInvalid, "a number does not fit the type Int"},
		{"an Int that is a float", string(body(t, `query($n: Int!) { viewer { repositories(first: $n) { totalCount } } }`, map[string]any{"n": 1.5}, "")), ErrInvalid, "a number does not fit the type Int"},
		{"a list item of the wrong type", string(body(t, `query($ids: [ID!]!) { nodes(ids: $ids) { id } }`, map[string]any{"ids": []any{"a", true}}, "")), ErrInvalid, "item 1: a boolean does not fit the type ID"},
		{"variables not an object", `{"query": "{ viewer { login } }", "variables": [1]}`, ErrInvalid, "variables are not a JSON object"},
		{"operationName not a string", `{"query": "{ viewer { login } }", "operationName": 1}`, ErrInvalid, "operationName is not a string"},
		{"invalid UTF-8", "{\"query\": \"{ viewer { login } }\xff\"}", ErrInvalid, "not valid UTF-8"},
		{"a query that does not parse", string(body(t, `{ viewer { login }`, nil, "")), ErrInvalid, "does not parse"},
		{"a subscription", string(body(t, `subscription { issueUpdated { id } }`, nil, "")), ErrRefused, "subscription is not served"},
		{"several operations and no name", string(body(t, `query A { viewer { login } } mutation B { mergePullRequest(input: {pullRequestId: "PR_1"}) { clientMutationId } }`, nil, "")), ErrInvalid, "no operationName"},
		{"an operationName that names none", string(body(t, `query A { viewer { login } }`, nil, "B")), ErrInvalid, "no operation is named B"},
		{"an anonymous operation among others", string(body(t, `{ viewer { login } } query B { viewer { login } }`, nil, "B")), ErrInvalid, "anonymous operation among others"},
		{"two operations of one name", string(body(t, `query A { viewer { login } } mutation A { mergePullRequest(input: {pullRequestId: "PR_1"}) { clientMutationId } }`, nil, "A")), ErrInvalid, "defined twice"},
		{"a missing variable", string(body(t, ghRepositoryInfo, map[string]any{"owner": "acme"}, "")), ErrInvalid, "$name (String!) is not given"},
		{"a mistyped variable", string(body(t, ghRepositoryInfo, map[string]any{"owner": "acme", "name": 7}, "")), ErrInvalid, "$name: a number does not fit the type String"},
		{"a null for a non-null variable", string(body(t, ghRepositoryInfo, map[string]any{"owner": "acme", "name": nil}, "")), ErrInvalid, "null does not fit the non-null type String!"},
		{"an undeclared variable", string(body(t, `{ repository(owner: "acme", name: $n) { id } }`, map[string]any{"n": "app"}, "")), ErrInvalid, "$n is used but not declared"},
		{"an undeclared variable in a directive", string(body(t, `{ viewer @include(if: $x) { login } }`, nil, "")), ErrInvalid, "$x is used but not declared"},
		{"a repository of a nullable variable left out", string(body(t, `query($n: String) { repository(owner: "acme", name: $n) { id } }`, nil, "")), ErrRefused, "without a string owner and name"},
		{"a repository by name under an owner", string(body(t, `{ organization(login: "acme") { repository(name: "app") { id } } }`, nil, "")), ErrRefused, "without a string owner and name"},
		{"a repository named twice in one field", string(body(t, `{ repository(owner: "acme", name: "app", name: "vault") { id } }`, nil, "")), ErrInvalid, "argument name appears twice"},
		{"a node by a number", string(body(t, `{ node(id: 5) { id } }`, nil, "")), ErrRefused, "without a string id"},
		{"a mutation without an input object", string(body(t, `mutation { mergePullRequest(input: "PR_1") { clientMutationId } }`, nil, "")), ErrRefused, "one argument, an input object"},
		{"a mutation with an input field twice", string(body(t, `mutation { mergePullRequest(input: {pullRequestId: "a", pullRequestId: "b"}) { clientMutationId } }`, nil, "")), ErrInvalid, "pullRequestId appears twice"},
		{"a mutation's id that is not a string", string(body(t, `mutation { mergePullRequest(input: {pullRequestId: 5}) { clientMutationId } }`, nil, "")), ErrRefused, "pullRequestId is not a string"},
		{"a fragment cycle", string(body(t, `{ ...a } fragment a on Query { viewer { ...b } } fragment b on User { ...a }`, nil, "")), ErrInvalid, "fragment a spreads itself"},
		{"a fragment spread onto itself", string(body(t, `{ ...a } fragment a on Query { ...a }`, nil, "")), ErrInvalid, "fragment a spreads itself"},
		{"an unknown fragment", string(body(t, `{ ...a }`, nil, "")), ErrInvalid, "fragment a is spread but not defined"},
		{"a fragment defined twice", string(body(t, `{ ...a } fragment a on Query { viewer { login } } fragment a on Query { repository(owner: "x", name: "y") { id } }`, nil, "")), ErrInvalid, "fragment a is defined twice"},
		{"a depth bomb", string(body(t, deep, nil, "")), ErrTooLarge, "deeper than 20"},
		{"a fragment bomb", string(body(t, bomb, nil, "")), ErrTooLarge, "more than 500"},
		{"too many fields", string(body(t, many, nil, "")), ErrTooLarge, "more than 500"},
		{"a batch too long", batch, ErrTooLarge, "more than 10"},
		{"an empty batch", `[]`, ErrInvalid, "batch is empty"},
		{"a body too large", string(body(t, "{ viewer { login } }"+strings.Repeat(" ", MaxBodyBytes), nil, "")), ErrTooLarge, "larger than 65536 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ops, err := Analyze([]byte(tt.body))
			if err == nil {
				t.Fatalf("accepted: %#v", ops)
			}
			if !errors.Is(err, tt.kind) || !strings.Contains(err.Error(), tt.says) {
				t.Errorf("got %v, want %v saying %q", err, tt.kind, tt.says)
			}
		})
	}
}

// TestAnalyzeArgumentIDs: a field's argument named for a node ID (gh pr
// checks' isRequired(pullRequestId:)), as a literal, a variable or a list,
// is a node the query reads, as node(id:) is; one that is not a string is
// refused.
func TestAnalyzeArgumentIDs(t *testing.T) {
	q := `query($id: ID!, $other: ID!) { node(id: $id) { ... on PullRequest { commits(last: 1) { nodes { commit {
		statusCheckRollup { contexts(first: 1) { nodes { ... on CheckRun { isRequired(pullRequestId: $other) } } } } } } } } }
		x: repository(owner: "acme", name: "app") { id } }`
	ops, err := Analyze(body(t, q, map[string]any{"id": "PR_1", "other": "PR_2"}, ""))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"PR_1", "PR_2"}; !reflect.DeepEqual(ops[0].Nodes, want) {
		t.Errorf("nodes %v, want %v", ops[0].Nodes, want)
	}
	ops, err = Analyze(body(t, `{ repository(owner: "acme", name: "app") { id } a: b(userIds: ["U_1", "U_2"], labelId: "L_1") { c } }`, nil, ""))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"L_1", "U_1", "U_2"}; !reflect.DeepEqual(ops[0].Nodes, want) {
		t.Errorf("nodes %v, want %v", ops[0].Nodes, want)
	}
	if _, err := Analyze(body(t, `{ b(pullRequestId: 7) { c } }`, nil, "")); !errors.Is(err, ErrRefused) {
		t.Errorf("a number as pullRequestId: %v, want ErrRefused", err)
	}
}
