package githubapi

import (
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/cproxy/cproxy/routes/githubapi/gqlpolicy"
)

// FuzzParse: whatever path and query come, parse never panics, and what it
// accepts is a /repos/OWNER/REPO/… path of plain segments that one table
// line matches, with only the forwarded query parameters.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"/api/v3/repos/acme/app", "/api/v3/repos/acme/app/pulls?state=open", "/api/v3/repos/acme/app/pulls/1/merge",
		"/api/v3/user", "/api/v3/repos/acme/app/../other", "/api/v3/repos/acme//app", "/api/v3/repos/acme/app/contents/.github/workflows/x",
		"/api/v3/repos/acme/app/pulls?q=1", "/api/v3/repos/acme/app.git",
	} {
		f.Add("GET", s)
		f.Add("POST", s)
	}
	f.Fuzz(func(t *testing.T, method, target string) {
		u, err := url.ParseRequestURI(target)
		if err != nil || method == "" {
			return
		}
		r := &http.Request{Method: method, URL: u}
		q, err := parse(r, "conv-42")
		if err != nil {
			return
		}
		p := "/" + strings.Join(q.segs, "/")
		if !strings.HasPrefix(p, "/repos/") || strings.Contains(p, "//") || strings.Contains(p, "/../") || strings.HasSuffix(p, "/..") || strings.Contains(p, "/./") {
			t.Fatalf("%s %q accepted as %q", method, target, p)
		}
		if i := match(method, q.segs); i < 0 || endpoints[i] != q.ep {
			t.Fatalf("%s %q accepted without its endpoint", method, target)
		}
		for k := range q.query {
			found := false
			for _, a := range queryParams {
				found = found || a == k
			}
			if !found {
				t.Fatalf("%s %q forwards query parameter %q", method, target, k)
			}
		}
	})
}

// FuzzPullHeadBase: a body pullHeadBase accepts has the head and base
// encoding/json reads, as GitHub's JSON parser would.
func FuzzPullHeadBase(f *testing.F) {
	for _, s := range []string{
		`{"title":"t","head":"agent/x","base":"main"}`, `{"head":"acme:agent/x","base":"main"}`,
		`{"head":"agent/x","base":"prod","base":"main"}`, `{"head":"agent/x","Base":"prod","base":"main"}`,
		`{"head":"agent/\u0078","base":"main"}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		head, base, err := pullHeadBase([]byte(body), "acme", "conv-42")
		if err != nil {
			return
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(body), &m); err != nil {
			t.Fatalf("accepted %q, which encoding/json refuses: %v", body, err)
		}
		h, _ := m["head"].(string)
		if _, b, ok := strings.Cut(h, ":"); ok {
			h = b
		}
		if h != head || m["base"] != base {
			t.Fatalf("%q: read head %q base %q, encoding/json reads %q %v", body, head, base, h, m["base"])
		}
	})
}

// FuzzCheckOperations: whatever GraphQL document comes, the route's
// decision never panics, and what it lets through to the policy is only
// mutations it serves, each with a target ID to resolve and only the
// input keys of its rule, and queries that read only readPaths, the
// schema, of valid repositories, every node they read to be looked up.
func FuzzCheckOperations(f *testing.F) {
	for _, q := range []string{
		ghCreatePull,
		`mutation { a: createPullRequest(input: {repositoryId: "R_1", headRefName: "agent/x", baseRefName: "main"}) { pullRequest { id } } b: mergePullRequest(input: {pullRequestId: "PR_1"}) { clientMutationId } }`,
		`mutation M { ...F } fragment F on Mutation { addComment(input: {subjectId: "PR_1", body: "x"}) { commentEdge { node { url } } } }`,
		`{ repository(owner: "acme", name: "app") { parent { id name } pullRequest(number: 1) { title } } }`,
		`{ __type(name: "PullRequest") { fields { name } } }`,
		`{ n: node(id: "PR_1") { ... on PullRequest { title } } nodes(ids: ["R_1"]) { id } }`,
		ghChecks,
		`mutation { createIssue(input: {repositoryId: "R_1", title: "t", labelIds: ["L_1"]}) { issue { url } } }`,
	} {
		b, _ := json.Marshal(map[string]any{"query": q, "variables": pullInput("R_1", "agent/x", "main")})
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		ops, err := gqlpolicy.Analyze(body)
		if err != nil {
			return
		}
		p, err := checkOperations(ops, "conv-42")
		if err != nil {
			return
		}
		for _, m := range p.mutations {
			rule, ok := mutationRules[m.name]
			if !ok || neverMutations[m.name] != "" || m.target == "" || m.perm != rule.perm {
				t.Fatalf("mutation %+v let through", m)
			}
		}
		for _, op := range ops {
			if op.Kind == gqlpolicy.KindMutation {
				for _, m := range op.Mutations {
					for k := range m.Input {
						if !slices.Contains(mutationRules[m.Name].keys, k) {
							t.Fatalf("%s let through with input key %q", m.Name, k)
						}
					}
				}
				continue
			}
			for _, id := range op.Nodes {
				if !slices.Contains(p.nodes, id) {
					t.Fatalf("a query's node %q let through without a look-up", id)
				}
			}
			for _, path := range op.Paths {
				top, _, _ := strings.Cut(path, ".")
				if !readPaths[path] && !slices.Contains(introspection, top) {
					t.Fatalf("a query reading %s let through", path)
				}
			}
		}
		for _, r := range p.repos {
			if !validRepo(r) {
				t.Fatalf("repository %q let through", r)
			}
		}
	})
}
