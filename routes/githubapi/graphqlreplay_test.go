package githubapi

import (
	"strings"
	"testing"
	"time"

	"github.com/cproxy/cproxy/policy"
)

// The question a GraphQL request's audit record keeps, asked again with
// policy.AskGraphQL (cproxy policy replay), answers as the route decided:
// for queries, forks' parents, node look-ups and mutations, allowed and
// refused at each.
func TestGraphQLQuestionAnswersAsTheRoute(t *testing.T) {
	p, err := policy.ParsePolicy("policy.toml", []byte(`
[profile.default]
repos = [
  { repo = "acme/app", access = "push", refs = ["refs/heads/agent/*"], api = ["read", "pulls:create"], pr_bases = ["main"] },
  { repo = "acme/docs", access = "read", api = ["read"] },
  { repo = "acme/plain", access = "read" },
]

[profile.none]
models = ["claude-*"]
`))
	if err != nil {
		t.Fatal(err)
	}
	app := node{typ: "Repository", repo: "acme/app"}
	pr := func(head, base string) mutation {
		return mutation{name: "createPullRequest", perm: policy.APIPullsCreate, target: "R_app", key: "repositoryId", types: []string{"Repository"}, head: head, base: base}
	}
	for _, c := range []struct {
		name    string
		profile string
		p       plan
		nodes   map[string]node
		parents map[string]string
	}{
		{name: "query", p: plan{repos: []string{"acme/app"}}},
		{name: "query refused", p: plan{repos: []string{"acme/app", "acme/plain"}}},
		{name: "schema", p: plan{schema: true}},
		{name: "schema without api", profile: "none", p: plan{schema: true}},
		{name: "parent", p: plan{repos: []string{"acme/app"}, parentsOf: []string{"acme/app"}}, parents: map[string]string{"acme/app": "acme/docs"}},
		{name: "parent refused", p: plan{repos: []string{"acme/app"}, parentsOf: []string{"acme/app"}}, parents: map[string]string{"acme/app": "other/up"}},
		{name: "node", p: plan{nodes: []string{"R_app"}}, nodes: map[string]node{"R_app": app}},
		{name: "node refused", p: plan{nodes: []string{"R_x"}}, nodes: map[string]node{"R_x": {typ: "Repository", repo: "acme/plain"}}},
		{name: "pull request", p: plan{mutations: []mutation{pr("agent/x", "main")}}, nodes: map[string]node{"R_app": app}},
		{name: "pull request base refused", p: plan{mutations: []mutation{pr("agent/x", "release")}}, nodes: map[string]node{"R_app": app}},
		{name: "pull request head refused", p: plan{mutations: []mutation{pr("main", "main")}}, nodes: map[string]node{"R_app": app}},
		{name: "mutation before its target is known", p: plan{mutations: []mutation{pr("agent/x", "release")}}},
	} {
		prof := p.Profiles["default"]
		if c.profile != "" {
			prof = p.Profiles[c.profile]
		}
		_, err := decidePlan(nil, prof, "conv-1", c.p, c.nodes, c.parents)
		if refused := strings.HasSuffix(c.name, "refused") || c.profile == "none"; refused != (err != nil) {
			t.Errorf("%s: the route decided %v", c.name, err)
		}
		q := graphQLQuestion(c.p, c.nodes, c.parents)
		again, aerr := prof.Ask(q, time.Now(), nil)
		if aerr != nil {
			t.Fatalf("%s: %v", c.name, aerr)
		}
		if again.Allow != (err == nil) {
			t.Errorf("%s: the route decided %v; asked again, %+v", c.name, err, again)
		}
	}
}
