package policy

import (
	"strings"
	"testing"
)

const apiPolicy = `[profile.web]
repos = [
  { repo = "acme/app", access = "push", refs = ["refs/heads/agent/*"], api = ["read", "pulls:create", "issues:comment"], pr_bases = ["main", "release/*"] },
  { repo = "acme/docs", access = "read", api = ["read"] },
  { repo = "acme/lib", access = "read" },
]
`

func TestAPIDecisions(t *testing.T) {
	web := mustPolicy(t, apiPolicy).Profiles["web"]
	for _, c := range []struct {
		q     APIQuestion
		allow bool
		rule  string
	}{
		{APIQuestion{Repo: "acme/app", Permission: APIRead}, true, `profile.web.repos["acme/app"].api["read"]`},
		{APIQuestion{Repo: "ACME/App", Permission: APIIssuesComment}, true, `profile.web.repos["acme/app"].api["issues:comment"]`},
		{APIQuestion{Repo: "acme/app", Permission: APIIssuesCreate}, false, `profile.web.repos["acme/app"]: api does not list "issues:create"`},
		{APIQuestion{Repo: "acme/lib", Permission: APIRead}, false, `profile.web.repos["acme/lib"]: api does not list "read"`},
		{APIQuestion{Repo: "other/app", Permission: APIRead}, false, `profile.web: no repos entry matches`},
		{APIQuestion{Repo: "acme/docs", Permission: APIPullsCreate, Head: "agent/x", Base: "main"}, false, `profile.web.repos["acme/docs"]: api does not list "pulls:create"`},
		{APIQuestion{Repo: "acme/app", Permission: APIPullsCreate, Head: "agent/x", Base: "main"}, true, `profile.web.repos["acme/app"].api["pulls:create"]`},
		{APIQuestion{Repo: "acme/app", Permission: APIPullsCreate, Head: "agent/x", Base: "release/2"}, true, `profile.web.repos["acme/app"].api["pulls:create"]`},
		{APIQuestion{Repo: "acme/app", Permission: APIPullsCreate, Head: "main", Base: "main"}, false, `profile.web.repos["acme/app"]: no refs entry matches`},
		{APIQuestion{Repo: "acme/app", Permission: APIPullsCreate, Head: "agent/x", Base: "prod"}, false, `profile.web.repos["acme/app"]: no pr_bases entry matches`},
	} {
		a := web.AskAPI(c.q)
		if a.Allow != c.allow || a.Rule != c.rule || a.Deferred() {
			t.Errorf("AskAPI(%+v) = %v %q, want %v %q", c.q, a.Allow, a.Rule, c.allow, c.rule)
		}
	}
	// Before the body is read, a pull request's head and base wait for it.
	if a := web.AskAPI(APIQuestion{Repo: "acme/app", Permission: APIPullsCreate}); !a.Allow || !a.Deferred() || len(a.Steps) != 3 {
		t.Errorf("AskAPI without head and base = %+v, want allowed with two deferred steps", a)
	}
	if a := (*Profile)(nil).AskAPI(APIQuestion{Repo: "acme/app", Permission: APIRead}); a.Allow {
		t.Error("a nil profile allows the API")
	}
}

func TestAPIKeysAreChecked(t *testing.T) {
	for _, c := range []struct{ src, want string }{
		{`[profile.a]
repos = [{ repo = "a/b", access = "read", api = ["write"] }]`, `2:50: profile.a.repos.api: "write" is not an API permission (use read, pulls:create, pulls:request-reviewers, issues:create, issues:comment)`},
		{`[profile.a]
repos = [{ repo = "a/b", access = "read", api = ["read", "read"] }]`, `"read" is listed twice`},
		{`[profile.a]
repos = [{ repo = "a/b", access = "read", api = ["read"], pr_bases = ["main"] }]`, `pr_bases: only with "pulls:create" in api`},
		{`[profile.a]
repos = [{ repo = "a/b", access = "push", refs = ["refs/heads/x/*"], api = ["pulls:create"], pr_bases = ["refs/heads/main"] }]`, `"refs/heads/main" is a ref name: write the branch name, "main"`},
		{`[profile.a]
repos = [{ repo = "a/b", access = "read", api = ["read"], ask_pr_bases = ["main"] }]`, `ask_pr_bases: only with "pulls:create" in api`},
		{`[profile.a]
repos = [{ repo = "a/b", access = "push", refs = ["refs/heads/x/*"], api = ["pulls:create"], ask_pr_bases = ["a..b"] }]`, `profile.a.repos.ask_pr_bases: "a..b" can never match`},
	} {
		_, probs := loadPolicy("policy.toml", []byte(c.src))
		if got := (&probs).Error(); len(probs) == 0 || !strings.Contains(got, c.want) {
			t.Errorf("loading\n%s\ngot %q, want %q", c.src, got, c.want)
		}
	}
}

// A head branch pushed only with an approval is refused as a pull
// request's head: that approval is of a push.
func TestAPIHeadUnderAsk(t *testing.T) {
	p, err := ParsePolicy("policy.toml", []byte(`
[profile.web]
repos = [{ repo = "acme/app", access = "push", refs = ["refs/heads/agent/*"], ask = ["refs/heads/release/*"], api = ["pulls:create"], pr_bases = ["main"] }]
`))
	if err != nil {
		t.Fatal(err)
	}
	a := p.Profiles["web"].AskAPI(APIQuestion{Repo: "acme/app", Permission: APIPullsCreate, Head: "release/1", Base: "main"})
	step, refused := a.Refusal()
	if a.Allow || a.Ask || !refused || step.Key != "refs" || step.Rule != `profile.web.repos["acme/app"].ask["refs/heads/release/*"]: pushed only with an approval` {
		t.Errorf("got %+v", a)
	}
}

// A base an ask_pr_bases glob matches asks, even where pr_bases match it
// too; a head or a repository that refuses still refuses.
func TestAPIBaseAsk(t *testing.T) {
	web := mustPolicy(t, `
[profile.web]
repos = [
  { repo = "acme/app", access = "push", refs = ["refs/heads/agent/*"], api = ["pulls:create"], pr_bases = ["*"], ask_pr_bases = ["main"] },
  { repo = "acme/lib", access = "push", refs = ["refs/heads/agent/*"], api = ["pulls:create"], ask_pr_bases = ["release/*"] },
]
`).Profiles["web"]
	for _, c := range []struct {
		q          APIQuestion
		allow, ask bool
		rule       string
	}{
		{APIQuestion{Repo: "acme/app", Permission: APIPullsCreate, Head: "agent/x", Base: "dev"}, true, false, `profile.web.repos["acme/app"].api["pulls:create"]`},
		{APIQuestion{Repo: "acme/app", Permission: APIPullsCreate, Head: "agent/x", Base: "main"}, false, true, `profile.web.repos["acme/app"].ask_pr_bases["main"]`},
		{APIQuestion{Repo: "acme/lib", Permission: APIPullsCreate, Head: "agent/x", Base: "release/1"}, false, true, `profile.web.repos["acme/lib"].ask_pr_bases["release/*"]`},
		{APIQuestion{Repo: "acme/lib", Permission: APIPullsCreate, Head: "agent/x", Base: "main"}, false, false, `profile.web.repos["acme/lib"]: no pr_bases entry matches`},
		{APIQuestion{Repo: "acme/app", Permission: APIPullsCreate, Head: "main", Base: "main"}, false, false, `profile.web.repos["acme/app"]: no refs entry matches`},
	} {
		a := web.AskAPI(c.q)
		if a.Allow != c.allow || a.Ask != c.ask || a.Rule != c.rule {
			t.Errorf("AskAPI(%+v) = allow %v ask %v %q, want %v %v %q", c.q, a.Allow, a.Ask, a.Rule, c.allow, c.ask, c.rule)
		}
	}
}
