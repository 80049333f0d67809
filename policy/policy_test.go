package policy

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// examplePolicy is the policy the project started from, which must load and mean what it says.
const examplePolicy = `[profile.default]
models = ["claude-*"]

[profile.web]
models = ["claude-sonnet-*", "claude-haiku-*"]
repos = [
  { repo = "acme/app", access = "push", refs = ["refs/heads/agent/*"] },
  { repo = "acme/*-docs", access = "read" },
]
packages = ["react", "react-dom", "@types/*"]

[[sandbox]]
match = "conv-*"
profile = "web"
`

func mustPolicy(t *testing.T, src string) *Policy {
	t.Helper()
	p, probs := loadPolicy("policy.toml", []byte(src))
	if len(probs) > 0 {
		t.Fatalf("loadPolicy:\n%s", (&probs).Error())
	}
	return p
}

func TestExamplePolicyLoads(t *testing.T) {
	p := mustPolicy(t, examplePolicy)
	if got := sortedKeys(p.Profiles); !slices.Equal(got, []string{"default", "web"}) {
		t.Fatalf("profiles = %v", got)
	}
	web := p.Profiles["web"]
	if web.Name != "web" || p.Path != "policy.toml" {
		t.Errorf("Name = %q, Path = %q", web.Name, p.Path)
	}
	want := []RepoRule{
		{Repo: "acme/app", Access: "push", Refs: []string{"refs/heads/agent/*"}},
		{Repo: "acme/*-docs", Access: "read"},
	}
	if len(web.Repos) != len(want) {
		t.Fatalf("repos = %+v", web.Repos)
	}
	for i := range want {
		if g, w := web.Repos[i], want[i]; g.Repo != w.Repo || g.Access != w.Access || !slices.Equal(g.Refs, w.Refs) || g.Tags || g.Delete {
			t.Errorf("repos[%d] = %+v, want %+v", i, g, w)
		}
	}
	if len(p.Sandboxes) != 1 || p.Sandboxes[0] != (SandboxRule{Match: "conv-*", Profile: "web"}) {
		t.Errorf("sandboxes = %+v", p.Sandboxes)
	}
}

func TestExamplePolicyDecisions(t *testing.T) {
	p := mustPolicy(t, examplePolicy)
	web, def := p.Profiles["web"], p.Profiles["default"]
	tests := []struct {
		name string
		got  Decision
		want Decision
	}{
		{"web sonnet", web.Model("claude-sonnet-4-5-20250929"), Decision{Allow: true, Rule: `profile.web.models["claude-sonnet-*"]`}},
		{"web haiku", web.Model("claude-haiku-4-5"), Decision{Allow: true, Rule: `profile.web.models["claude-haiku-*"]`}},
		{"web opus", web.Model("claude-opus-4-1"), Decision{Allow: false, Rule: `profile.web: no models entry matches`}},
		{"web empty model", web.Model(""), Decision{Allow: false, Rule: `profile.web: no model named`}},
		{"model case", web.Model("Claude-sonnet-4"), Decision{Allow: false, Rule: `profile.web: no models entry matches`}},
		{"default opus", def.Model("claude-opus-4-1"), Decision{Allow: true, Rule: `profile.default.models["claude-*"]`}},
		{"default gpt", def.Model("gpt-5"), Decision{Allow: false, Rule: `profile.default: no models entry matches`}},

		{"fetch app", web.Repo("acme/app", false), Decision{Allow: true, Rule: `profile.web.repos["acme/app"]`}},
		{"push app", web.Repo("acme/app", true), Decision{Allow: true, Rule: `profile.web.repos["acme/app"]`}},
		{"push app any case, .git", web.Repo("ACME/App.git", true), Decision{Allow: true, Rule: `profile.web.repos["acme/app"]`}},
		{"fetch docs", web.Repo("acme/api-docs", false), Decision{Allow: true, Rule: `profile.web.repos["acme/*-docs"]`}},
		{"push docs", web.Repo("acme/api-docs", true), Decision{Allow: false, Rule: `profile.web.repos["acme/*-docs"]: access = "read"`}},
		{"fetch other", web.Repo("acme/other", false), Decision{Allow: false, Rule: `profile.web: no repos entry matches`}},
		{"fetch other owner", web.Repo("evil/app", false), Decision{Allow: false, Rule: `profile.web: no repos entry matches`}},
		{"default no repos", def.Repo("acme/app", false), Decision{Allow: false, Rule: `profile.default: no repos entry matches`}},
		{"bad repo name", web.Repo("acme/app/x", false), Decision{Allow: false, Rule: `profile.web: "acme/app/x" is not an owner/name repository`}},
		{"dotdot repo", web.Repo("acme/..", false), Decision{Allow: false, Rule: `profile.web: "acme/.." is not an owner/name repository`}},

		{"ref agent", web.Ref("acme/app", "refs/heads/agent/fix-1", false, false), Decision{Allow: true, Rule: `profile.web.repos["acme/app"].refs["refs/heads/agent/*"]`}},
		{"ref agent nested", web.Ref("acme/app", "refs/heads/agent/a/b", false, false), Decision{Allow: false, Rule: `profile.web.repos["acme/app"]: no refs entry matches`}},
		{"ref main", web.Ref("acme/app", "refs/heads/main", false, false), Decision{Allow: false, Rule: `profile.web.repos["acme/app"]: no refs entry matches`}},
		{"ref delete", web.Ref("acme/app", "refs/heads/agent/x", false, true), Decision{Allow: false, Rule: `profile.web.repos["acme/app"].refs["refs/heads/agent/*"]: delete = false`}},
		{"ref tag flag", web.Ref("acme/app", "refs/heads/agent/x", true, false), Decision{Allow: false, Rule: `profile.web.repos["acme/app"].refs["refs/heads/agent/*"]: tags = false`}},
		{"ref tag path", web.Ref("acme/app", "refs/tags/v1", false, false), Decision{Allow: false, Rule: `profile.web.repos["acme/app"]: no refs entry matches`}},
		{"ref short name", web.Ref("acme/app", "agent/x", false, false), Decision{Allow: false, Rule: `profile.web: "agent/x" is not a full ref name (refs/…)`}},
		{"ref read-only repo", web.Ref("acme/api-docs", "refs/heads/agent/x", false, false), Decision{Allow: false, Rule: `profile.web: no repos entry allows push`}},

		{"react", web.Package("react"), Decision{Allow: true, Rule: `profile.web.packages["react"]`}},
		{"react-dom", web.Package("react-dom"), Decision{Allow: true, Rule: `profile.web.packages["react-dom"]`}},
		{"@types/node", web.Package("@types/node"), Decision{Allow: true, Rule: `profile.web.packages["@types/*"]`}},
		{"@types nested", web.Package("@types/node/x"), Decision{Allow: false, Rule: `profile.web: no packages entry matches`}},
		{"lodash", web.Package("lodash"), Decision{Allow: false, Rule: `profile.web: no packages entry matches`}},
		{"react-native", web.Package("react-native"), Decision{Allow: false, Rule: `profile.web: no packages entry matches`}},
		{"empty package", web.Package(""), Decision{Allow: false, Rule: `profile.web: no package named`}},
		{"default no packages", def.Package("react"), Decision{Allow: false, Rule: `profile.default: no packages entry matches`}},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s: got %+v, want %+v", tt.name, tt.got, tt.want)
		}
	}
}

func TestRefTagsAndDelete(t *testing.T) {
	p := mustPolicy(t, `[profile.rel]
repos = [
  { repo = "acme/app", access = "push", refs = ["refs/heads/agent/**"], delete = true },
  { repo = "acme/app", access = "push", refs = ["refs/tags/v*"], tags = true },
]
`)
	pr := p.Profiles["rel"]
	tests := []struct {
		ref      string
		tag, del bool
		want     Decision
	}{
		{"refs/heads/agent/a/b", false, false, Decision{Allow: true, Rule: `profile.rel.repos["acme/app"].refs["refs/heads/agent/**"]`}},
		{"refs/heads/agent/a", false, true, Decision{Allow: true, Rule: `profile.rel.repos["acme/app"].refs["refs/heads/agent/**"]`}},
		{"refs/tags/v1.2", true, false, Decision{Allow: true, Rule: `profile.rel.repos["acme/app"].refs["refs/tags/v*"]`}},
		{"refs/tags/v1.2", false, false, Decision{Allow: true, Rule: `profile.rel.repos["acme/app"].refs["refs/tags/v*"]`}},
		{"refs/tags/v1.2", true, true, Decision{Allow: false, Rule: `profile.rel.repos["acme/app"].refs["refs/tags/v*"]: delete = false`}},
		{"refs/tags/x", true, false, Decision{Allow: false, Rule: `profile.rel.repos["acme/app"]: no refs entry matches`}},
		{"refs/heads/main", false, false, Decision{Allow: false, Rule: `profile.rel.repos["acme/app"]: no refs entry matches`}},
	}
	for _, tt := range tests {
		if got := pr.Ref("acme/app", tt.ref, tt.tag, tt.del); got != tt.want {
			t.Errorf("Ref(%q, tag=%v, del=%v) = %+v, want %+v", tt.ref, tt.tag, tt.del, got, tt.want)
		}
	}
}

func TestProfileFor(t *testing.T) {
	withDefault := mustPolicy(t, examplePolicy)
	noDefault := mustPolicy(t, `[profile.web]
models = ["claude-*"]

[[sandbox]]
match = "conv-*"
profile = "web"

[[sandbox]]
match = "conv-7*"
profile = "nope-never-reached"

[profile.nope-never-reached]
`)
	tests := []struct {
		name              string
		p                 *Policy
		sandbox, explicit string
		want              string // profile name, or the error
	}{
		{"explicit wins over sandbox glob", withDefault, "conv-42", "default", "default"},
		{"sandbox glob", withDefault, "conv-42", "", "web"},
		{"default", withDefault, "ci-1", "", "default"},
		{"first sandbox rule wins", noDefault, "conv-7", "", "web"},
		{"unknown explicit", withDefault, "conv-42", "admin", `no profile "admin" in policy.toml (it has default, web)`},
		{"none applies", noDefault, "ci-1", "", `no profile applies to sandbox "ci-1": no [[sandbox]] match in policy.toml fits it and there is no [profile.default] (add one, or a [[sandbox]] rule, or name a profile when creating the token)`},
		{"built-in", DefaultPolicy(), "anything", "", "default"},
		{"built-in unknown explicit", DefaultPolicy(), "x", "web", `no profile "web" in the built-in policy (it has default)`},
	}
	for _, tt := range tests {
		pr, err := tt.p.ProfileFor(tt.sandbox, tt.explicit)
		got := ""
		if err != nil {
			got = err.Error()
			if !errors.Is(err, ErrNoProfile) {
				t.Errorf("%s: error %v does not wrap ErrNoProfile", tt.name, err)
			}
		} else {
			got = pr.Name
		}
		if got != tt.want {
			t.Errorf("%s: ProfileFor(%q, %q) = %q, want %q", tt.name, tt.sandbox, tt.explicit, got, tt.want)
		}
	}
	if !withDefault.HasProfile("web") || withDefault.HasProfile("admin") {
		t.Error("HasProfile")
	}
	var none *Profile
	if d := none.Model("claude-x"); d.Allow || d.Rule != "no profile" {
		t.Errorf("nil profile: %+v", d)
	}
}

func TestDefaultPolicy(t *testing.T) {
	pr, err := DefaultPolicy().ProfileFor("conv-1", "")
	if err != nil {
		t.Fatal(err)
	}
	if d := pr.Model("claude-opus-4-1"); !d.Allow {
		t.Errorf("model: %+v", d)
	}
	if d := pr.Repo("acme/app", false); d.Allow {
		t.Errorf("repo: %+v", d)
	}
	if d := pr.Package("react"); d.Allow {
		t.Errorf("package: %+v", d)
	}
}

func TestPolicyProblems(t *testing.T) {
	tests := []struct {
		name string
		src  string
		want []string
	}{
		{"unknown key in a table, indented", `[profile.web]
  models = ["claude-*"]
  repo = "acme/app"
`, []string{`policy.toml:3:3: unknown key "repo" in [profile.web] (did you mean "repos"?)`}},

		{"unknown key in an inline table of a multi-line array", `[profile.web]
repos = [
  { repo = "acme/app", access = "read" },
  { repo = "acme/docs", acces = "read" },
]
`, []string{`policy.toml:4:25: unknown key "acces" in a profile.web.repos entry (did you mean "access"?)`}},

		{"unknown key in the second [[sandbox]]", `[profile.default]
models = ["*"]

[[sandbox]]
match = "conv-*"
profile = "default"

[[sandbox]]
match = "ci-*"
profiel = "default"
`, []string{`policy.toml:10:1: unknown key "profiel" in [[sandbox]] (did you mean "profile"?)`}},

		{"unknown key without a near miss", `[profile.web]
quota = 10
`, []string{`policy.toml:2:1: unknown key "quota" in [profile.web] (known keys: ask_models, bind, budget, go, mcp, mode, models, npm, packages, pypi, relays, repos, sources, warn)`}},

		{"budget", `[profile.web.budget]
window = "week"
requests = -1
output_tokens = "lots"
`, []string{
			`policy.toml:2:10: profile.web.budget.window: "week" is not a budget window (use "token", the token's lifetime, or "day", each UTC day)`,
			`policy.toml:3:12: profile.web.budget.requests: must not be negative (leave it out for no limit)`,
			`policy.toml:4:17: profile.web.budget.output_tokens: must be an integer, not a string`,
		}},

		{"budget of MCP calls", `[profile.web.budget]
mcp_calls = -2
mcp_calls_per_minute = -1
mcp_call = 5
`, []string{
			`policy.toml:2:13: profile.web.budget.mcp_calls: must not be negative (leave it out for no limit)`,
			`policy.toml:3:24: profile.web.budget.mcp_calls_per_minute: must not be negative (leave it out for no limit)`,
			`policy.toml:4:1: unknown key "mcp_call" in [profile.web.budget] (did you mean "mcp_calls"?)`,
		}},

		{"config key in a policy", `[listen]
proxy = "127.0.0.1:8080"
[profile.default]
`, []string{`policy.toml:1:2: unknown key "listen" (that is a config key; a policy file has only [profile.NAME] and [[sandbox]])`}},

		{"string for an array", `[profile.default]
models = "claude-*"
`, []string{`policy.toml:2:10: profile.default.models: must be an array of strings, not a string (write ["claude-*"])`}},

		{"integer in an array", `[profile.default]
models = ["claude-*", 3]
`, []string{`policy.toml:2:23: profile.default.models: each entry must be a string, not an integer`}},

		{"string for a boolean", `[profile.p]
repos = [{ repo = "a/b", access = "push", refs = ["refs/heads/x"], tags = "yes" }]
`, []string{`policy.toml:2:75: profile.p.repos.tags: must be true or false, not a string`}},

		{"profile not a table", `profile = "web"
`, []string{
			`policy.toml:1:1: no profiles: nothing would be allowed (add one, e.g. [profile.default] with models = ["claude-*"])`,
			`policy.toml:1:11: profile: must be a table, not a string`,
		}},

		{"a wrong type is reported once", `[profile.p]
repos = [{ repo = "a/b", access = 3 }, "c/d"]
`, []string{
			`policy.toml:2:35: profile.p.repos.access: must be a string, not an integer`,
			`policy.toml:2:40: profile.p.repos: each entry must be a table, not a string`,
		}},

		{"bad access in an inline table", `[profile.p]
repos = [
  { repo = "a/b", access = "write" },
]
`, []string{`policy.toml:3:28: profile.p.repos.access: "write" is not an access level (use "read" or "push")`}},

		{"missing repo and access", `[profile.p]
repos = [{ refs = ["refs/heads/x"] }]
`, []string{
			`policy.toml:2:10: profile.p.repos: entry needs access = "read" or "push"`,
			`policy.toml:2:10: profile.p.repos: entry needs repo, an owner/name glob (e.g. repo = "acme/app")`,
		}},

		{"push without refs", `[profile.p]
repos = [{ repo = "a/b", access = "push" }]
`, []string{`policy.toml:2:35: profile.p.repos: access = "push" needs refs, the refs a push may update (e.g. refs = ["refs/heads/agent/*"], or ["refs/heads/**"] for every branch)`}},

		{"push with empty refs", `[profile.p]
repos = [{ repo = "a/b", access = "push", refs = [] }]
`, []string{`policy.toml:2:50: profile.p.repos: access = "push" needs refs, the refs a push may update (e.g. refs = ["refs/heads/agent/*"], or ["refs/heads/**"] for every branch)`}},

		{"push-only keys on a read rule", `[profile.p]
repos = [
  { repo = "a/b", access = "read", refs = ["refs/heads/x"], tags = false, delete = true },
]
`, []string{
			`policy.toml:3:36: profile.p.repos.refs: only for access = "push" (this entry has access = "read")`,
			`policy.toml:3:61: profile.p.repos.tags: only for access = "push" (this entry has access = "read")`,
			`policy.toml:3:75: profile.p.repos.delete: only for access = "push" (this entry has access = "read")`,
		}},

		{"ref globs", `[profile.p]
repos = [{ repo = "a/b", access = "push", refs = ["heads/main", "refs/heads/a..b", "refs/heads/*", "refs/heads/*"] }]
`, []string{
			`policy.toml:2:51: profile.p.repos.refs: "heads/main" is not a full ref name pattern: start it with refs/ (e.g. "refs/heads/agent/*", "refs/tags/v*")`,
			`policy.toml:2:65: profile.p.repos.refs: "refs/heads/a..b" can never match: git ref names cannot contain ~ ^ : .. or @{`,
			`policy.toml:2:100: profile.p.repos.refs: "refs/heads/*" is listed twice (remove one)`,
		}},

		{"repo globs", `[profile.p]
repos = [
  { repo = "acme", access = "read" },
  { repo = "acme/app/x", access = "read" },
  { repo = "acme/app.git", access = "read" },
  { repo = "acme/**", access = "read" },
  { repo = "", access = "read" },
]
`, []string{
			`policy.toml:3:12: profile.p.repos.repo: "acme" is not an owner/name pattern (e.g. "acme/app", "acme/*")`,
			`policy.toml:4:12: profile.p.repos.repo: "acme/app/x" is not an owner/name pattern (e.g. "acme/app", "acme/*")`,
			`policy.toml:5:12: profile.p.repos.repo: "acme/app.git" ends in .git: write "acme/app"`,
			`policy.toml:7:12: profile.p.repos.repo: "" is empty`,
		}},

		{"duplicate repo rule", `[profile.p]
repos = [
  { repo = "acme/app", access = "read" },
  { repo = "ACME/app", access = "read" },
  { repo = "acme/app", access = "push", refs = ["refs/heads/x"] },
]
`, []string{`policy.toml:4:3: profile.p.repos: entry for "ACME/app" is the same as the one on line 3 (remove one)`}},

		{"model globs", `[profile.p]
models = ["", "claude-***", "claude sonnet", "claude-[35]", "claude-*", "claude-*"]
`, []string{
			`policy.toml:2:11: profile.p.models: "" is empty`,
			`policy.toml:2:15: profile.p.models: "claude-***" has "***" (use * within a path segment or ** across "/")`,
			`policy.toml:2:29: profile.p.models: "claude sonnet" contains whitespace or a control character`,
			`policy.toml:2:46: profile.p.models: "claude-[35]" has "[": globs have only *, ** and ? (no classes, braces or escapes)`,
			`policy.toml:2:73: profile.p.models: "claude-*" is listed twice (remove one)`,
		}},

		{"package globs", `[profile.p]
packages = ["react", "JSONStream", "@types", "a/b", "_private", "@Types/node", "@*/*", "**"]
`, []string{
			`policy.toml:2:36: profile.p.packages: "@types" is not an npm package name pattern (e.g. "react", "@types/*", "@acme/*")`,
			`policy.toml:2:46: profile.p.packages: "a/b" is not an npm package name pattern (e.g. "react", "@types/*", "@acme/*")`,
			`policy.toml:2:53: profile.p.packages: "_private" is not an npm package name pattern (e.g. "react", "@types/*", "@acme/*")`,
			`policy.toml:2:65: profile.p.packages: "@Types/node" is not an npm package name pattern (e.g. "react", "@types/*", "@acme/*")`,
		}},

		{"profile names", `[profile.Web]
[profile."my profile"]
[profile.ok_name-2]
`, []string{
			`policy.toml:1:10: profile "Web": a profile name has lower-case letters, digits, - and _, starts with a letter or digit, and has at most 63 characters`,
			`policy.toml:2:10: profile "my profile": a profile name has lower-case letters, digits, - and _, starts with a letter or digit, and has at most 63 characters`,
		}},

		{"sandbox rules", `[profile.web]

[[sandbox]]
match = "Conv-*"
profile = "web"

[[sandbox]]
match = "ci-*"
profile = "ci"

[[sandbox]]
profile = "web"

[[sandbox]]
match = "x-*"
`, []string{
			`policy.toml:4:9: sandbox.match: "Conv-*" can never match: sandbox ids have only a-z, 0-9 and -`,
			`policy.toml:9:11: sandbox.profile: no profile "ci" in this file (add [profile.ci] or use one of: web)`,
			`policy.toml:11:1: sandbox: missing match, a sandbox-id glob (e.g. match = "conv-*")`,
			`policy.toml:14:1: sandbox: missing profile, the profile these sandboxes get (e.g. profile = "default")`,
		}},

		{"sandbox as inline array", `profile.web = {}
sandbox = [{ match = "a-*", profile = "web", extra = 1 }]
`, []string{`policy.toml:2:46: unknown key "extra" in a sandbox entry (known keys: match, profile)`}},

		{"no profiles", ``, []string{
			`policy.toml:1:1: no profiles: nothing would be allowed (add one, e.g. [profile.default] with models = ["claude-*"])`,
		}},

		{"syntax error", `[profile.web]
models = ["claude-*"
repos = []
`, []string{`policy.toml:3:1: invalid TOML: expected a comma (',') or array terminator (']'), but got 'r'`}},

		{"duplicate key is a syntax error", `[profile.web]
models = []
models = []
`, []string{`policy.toml:3:1: invalid TOML: key 'profile.web.models' has already been defined`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, probs := loadPolicy("policy.toml", []byte(tt.src))
			got := make([]string, len(probs))
			for i, pr := range probs {
				got[i] = pr.String()
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("got:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
			if p != nil {
				t.Errorf("a policy with problems came back: %+v", p)
			}
		})
	}
}

func TestLoadPolicyFile(t *testing.T) {
	dir := t.TempDir()
	name := filepath.Join(dir, "policy.toml")
	if err := os.WriteFile(name, []byte(examplePolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := LoadPolicy(name)
	if err != nil {
		t.Fatal(err)
	}
	if p.Path != name {
		t.Errorf("Path = %q", p.Path)
	}

	if err := os.WriteFile(name, []byte("[profile.web]\nmodel = []\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = LoadPolicy(name)
	var probs *Problems
	if !errors.As(err, &probs) || len(*probs) != 1 {
		t.Fatalf("err = %v, want one *Problems", err)
	}
	if want := name + `:2:1: unknown key "model" in [profile.web] (did you mean "models"?)`; err.Error() != want {
		t.Errorf("err = %q, want %q", err, want)
	}

	if _, err := LoadPolicy(filepath.Join(dir, "missing.toml")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: err = %v", err)
	}

	big := filepath.Join(dir, "big.toml")
	if err := os.WriteFile(big, []byte(strings.Repeat("#", maxFileSize+1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadPolicy(big); err == nil || !strings.Contains(err.Error(), "too large") {
		t.Errorf("big file: err = %v", err)
	}
}

func FuzzLoadPolicy(f *testing.F) {
	f.Add([]byte(examplePolicy))
	f.Add([]byte("[profile.a]\nrepos = [{ repo = \"a/b\", access = \"push\", refs = [\"refs/**\"], tags = true, delete = true }]\n[[sandbox]]\nmatch = \"*\"\nprofile = \"a\"\n"))
	f.Add([]byte("[[a.b]]\n[[a]]\n[[a.b]]\nx.'y'.\"z\\u0041\" = { p = [1, [2, {q = '''\n]'''}]], r = \"\"\"\n#\"\"\"\" }\n"))
	f.Add([]byte("\xef\xbb\xbfprofile.x = {}\n"))
	f.Add([]byte("x = [\n# ]\n{a=1,\n},]"))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, probs := loadPolicy("f.toml", data)
		for _, pr := range probs {
			if pr.Line < 1 || pr.Col < 1 || pr.File != "f.toml" || pr.Message == "" {
				t.Fatalf("bad problem %+v", pr)
			}
		}
		if p == nil {
			if len(probs) == 0 {
				t.Fatal("no policy and no problems")
			}
			return
		}
		for _, pr := range p.Profiles {
			pr.Model("claude-x")
			pr.Repo("acme/app", true)
			pr.Ref("acme/app", "refs/heads/x", true, true)
			pr.Package("@types/node")
		}
		p.ProfileFor("conv-1", "")
	})
}

func TestPackageDocExampleLoads(t *testing.T) {
	p := mustPolicy(t, `[profile.web]
models = ["claude-sonnet-*", "claude-haiku-*"]
repos = [
  { repo = "acme/app", access = "push", refs = ["refs/heads/agent/*"] },
  { repo = "acme/app", access = "push", refs = ["refs/tags/v*"], tags = true },
  { repo = "acme/*-docs", access = "read" },
]
packages = ["react", "react-dom", "@types/*"]

[[sandbox]]
match = "conv-*"
profile = "web"
`)
	web := p.Profiles["web"]
	if !web.Ref("acme/app", "refs/tags/v2", true, false).Allow || web.Ref("acme/app", "refs/heads/main", false, false).Allow {
		t.Error("the doc's example does not mean what the doc says")
	}
}

func TestSuggest(t *testing.T) {
	known := []string{"access", "delete", "refs", "repo", "tags", "header_timeout", "github"}
	for key, want := range map[string]string{
		"acces":         "access",
		"acecss":        "access", // a swap is one edit
		"Access":        "access",
		"ref":           "refs",
		"repos":         "repo",
		"header_timout": "header_timeout",
		"heder_timeot":  "header_timeout", // two edits in a long key
		"gitlab":        "",               // two edits in a short key: a different word
		"budget":        "",
	} {
		if got := suggest(key, known); got != want {
			t.Errorf("suggest(%q) = %q, want %q", key, got, want)
		}
	}
}

func TestRefAsk(t *testing.T) {
	p, err := ParsePolicy("policy.toml", []byte(`
[profile.web]
repos = [
  { repo = "acme/app", access = "push", refs = ["refs/heads/**"], ask = ["refs/heads/main", "refs/heads/release/*"] },
  { repo = "acme/app", access = "push", refs = ["refs/tags/v*"], ask = ["refs/tags/stable"], tags = true },
  { repo = "acme/lib", access = "push", ask = ["refs/heads/main"] },
]
`))
	if err != nil {
		t.Fatal(err)
	}
	pr := p.Profiles["web"]
	for _, c := range []struct {
		repo, ref string
		del       bool
		allow     bool
		ask       bool
		rule      string
	}{
		{"acme/app", "refs/heads/agent/x", false, true, false, `profile.web.repos["acme/app"].refs["refs/heads/**"]`},
		{"acme/app", "refs/heads/main", false, false, true, `profile.web.repos["acme/app"].ask["refs/heads/main"]`},
		{"acme/app", "refs/heads/release/1", false, false, true, `profile.web.repos["acme/app"].ask["refs/heads/release/*"]`},
		{"acme/app", "refs/heads/main", true, false, false, `profile.web.repos["acme/app"].ask["refs/heads/main"]: delete = false`},
		{"acme/app", "refs/tags/stable", false, false, true, `profile.web.repos["acme/app"].ask["refs/tags/stable"]`},
		{"acme/app", "refs/tags/v1", false, true, false, `profile.web.repos["acme/app"].refs["refs/tags/v*"]`},
		{"acme/lib", "refs/heads/main", false, false, true, `profile.web.repos["acme/lib"].ask["refs/heads/main"]`},
		{"acme/lib", "refs/heads/dev", false, false, false, `profile.web.repos["acme/lib"]: no refs entry matches`},
	} {
		d := pr.Ref(c.repo, c.ref, false, c.del)
		if d.Allow != c.allow || d.Ask != c.ask || d.Rule != c.rule {
			t.Errorf("Ref(%s, %s, delete %v) = %+v; want allow %v ask %v by %s", c.repo, c.ref, c.del, d, c.allow, c.ask, c.rule)
		}
	}
	// A push with an allowed ref and an asking one asks; one with a
	// refused ref is refused, whatever else asks.
	a := pr.AskPush("acme/app", []RefUpdate{{Ref: "refs/heads/agent/x"}, {Ref: "refs/heads/main"}})
	if a.Allow || !a.Ask || a.Rule != `profile.web.repos["acme/app"].ask["refs/heads/main"]` || a.Steps[2].Outcome != Asked {
		t.Errorf("push of an allowed and an asking ref: %+v", a)
	}
	a = pr.AskPush("acme/app", []RefUpdate{{Ref: "refs/heads/main"}, {Ref: "refs/heads/main", Delete: true}})
	if a.Allow || a.Ask || a.Rule != `profile.web.repos["acme/app"].ask["refs/heads/main"]: delete = false` {
		t.Errorf("push of an asking and a refused ref: %+v", a)
	}
	if _, refused := a.Refusal(); !refused {
		t.Errorf("no refusal in %+v", a)
	}
}

func TestRefAskChecked(t *testing.T) {
	_, err := ParsePolicy("policy.toml", []byte(`
[profile.web]
repos = [
  { repo = "acme/app", access = "read", ask = ["refs/heads/main"] },
  { repo = "acme/lib", access = "push", ask = ["heads/main", "refs/heads/main", "refs/heads/main"] },
]
`))
	want := []string{
		`policy.toml:4:41: profile.web.repos.ask: only for access = "push" (this entry has access = "read")`,
		`policy.toml:5:48: profile.web.repos.ask: "heads/main" is not a full ref name pattern: start it with refs/ (e.g. "refs/heads/agent/*", "refs/tags/v*")`,
		`policy.toml:5:81: profile.web.repos.ask: "refs/heads/main" is listed twice (remove one)`,
	}
	if err == nil || err.Error() != strings.Join(want, "\n") {
		t.Errorf("got\n%v\nwant\n%s", err, strings.Join(want, "\n"))
	}
}

func TestModelAsk(t *testing.T) {
	pr := mustPolicy(t, `
[profile.web]
models = ["claude-*"]
ask_models = ["claude-opus-*", "gpt-*"]
`).Profiles["web"]
	for _, c := range []struct {
		model      string
		allow, ask bool
		rule       string
	}{
		{"claude-sonnet-4-5", true, false, `profile.web.models["claude-*"]`},
		{"claude-opus-4-6", false, true, `profile.web.ask_models["claude-opus-*"]`},
		{"gpt-5", false, true, `profile.web.ask_models["gpt-*"]`}, // ask alone lets a model be asked for
		{"llama", false, false, `profile.web: no models entry matches`},
		{"", false, false, `profile.web: no model named`},
	} {
		a := pr.AskModel(c.model)
		if a.Allow != c.allow || a.Ask != c.ask || a.Rule != c.rule {
			t.Errorf("AskModel(%q): allow %v ask %v rule %s; want %v %v %s", c.model, a.Allow, a.Ask, a.Rule, c.allow, c.ask, c.rule)
		}
	}
	_, err := ParsePolicy("policy.toml", []byte(`
[profile.web]
ask_models = ["claude-[ab]", "x", "x"]
`))
	want := []string{
		`policy.toml:3:15: profile.web.ask_models: "claude-[ab]" has "[": globs have only *, ** and ? (no classes, braces or escapes)`,
		`policy.toml:3:35: profile.web.ask_models: "x" is listed twice (remove one)`,
	}
	if err == nil || err.Error() != strings.Join(want, "\n") {
		t.Errorf("got\n%v\nwant\n%s", err, strings.Join(want, "\n"))
	}
}

// A warn list names refusal codes, and policy check refuses any other
// word, saying which are meant; StepCode gives a refusing step the code
// the routes send, so that explain says what the routes do.
func TestWarnList(t *testing.T) {
	_, probs := loadPolicy("policy.toml", []byte("[profile.default]\nmodels = [\"*\"]\nwarn = [\"cproxy-version-too-new\", \"min_release_age\"]\n"))
	if err := (&probs).Error(); !strings.Contains(err, `policy.toml:3:35: profile.default.warn: "min_release_age" is not the code of a refusal the policy decides (one of cproxy-model-not-allowed,`) {
		t.Fatalf("a warn list of a key: %s", err)
	}
	p := mustPolicy(t, "[profile.default]\nmodels = [\"claude-*\"]\nwarn = [\"cproxy-model-not-allowed\"]\n")
	prof := p.Profiles["default"]
	if !prof.WarnsOf("cproxy-model-not-allowed") || prof.WarnsOf("cproxy-ref-not-allowed") || prof.WarnsOf("") || prof.Warns() {
		t.Errorf("WarnsOf of %q is wrong", prof.Warn)
	}
	step, _ := prof.AskModel("gpt-4").Refusal()
	if got := StepCode(step.Key); got != "cproxy-model-not-allowed" {
		t.Errorf("StepCode(%q) = %q", step.Key, got)
	}
	for key, want := range map[string]string{
		"refs": "cproxy-ref-not-allowed", "npm.min_release_age": "cproxy-version-too-new", "pypi.deny": "cproxy-version-denied",
		"go.modules": "cproxy-package-not-allowed", "paths": "cproxy-relay-not-allowed", "npm.search": "",
	} {
		if got := StepCode(key); got != want {
			t.Errorf("StepCode(%q) = %q, want %q", key, got, want)
		}
	}
}
