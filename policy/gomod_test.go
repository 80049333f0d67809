package policy

import (
	"strings"
	"testing"
	"time"
)

const goPolicy = `[profile.web]

[profile.web.go]
modules = ["golang.org/x/*", "github.com/Acme/**", "example.com/lib"]
min_release_age = "3d"

[[profile.web.go.deny]]
module = "example.com/lib"
versions = ">=1.2.0 <1.2.5"
reason = "compromised"

[[profile.web.go.deny]]
module = "github.com/acme/*"
versions = "v2.x"
`

func TestGoPolicyDecisions(t *testing.T) {
	p := mustPolicy(t, goPolicy)
	web := p.Profiles["web"]
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	old, fresh := now.Add(-30*24*time.Hour), now.Add(-time.Hour)
	for _, c := range []struct {
		mod, ver  string
		published time.Time
		allow     bool
		rule      string
		reason    string
	}{
		{"example.com/lib", "v1.2.3", old, false, "profile.web.go.deny[0]", `versions ">=1.2.0 <1.2.5"): compromised`},
		{"example.com/lib", "v1.2.5", old, true, "profile.web.go", ""},
		{"example.com/lib", "v1.1.9", old, true, "profile.web.go", ""},
		// A pseudo-version is a pre-release of the version after its base: inside the range.
		{"example.com/lib", "v1.2.4-0.20261101000000-abcdefabcdef", old, false, "profile.web.go.deny[0]", ""},
		{"example.com/lib", "v1.2.5-pre", old, false, "profile.web.go.deny[0]", ""},
		{"github.com/Acme/tool", "v2.0.0+incompatible", old, false, "profile.web.go.deny[1]", `"v2.x"`},
		{"github.com/Acme/tool", "v1.9.0", old, true, "profile.web.go", ""},
		{"example.com/lib", "v1.3.0", fresh, false, "profile.web.go.min_release_age", "less than 3d ago"},
		{"example.com/lib", "v1.3.0", time.Time{}, false, "profile.web.go.min_release_age", "gives no time"},
		// Not canonical: refused whatever the rules say.
		{"golang.org/x/mod", "v1.2", old, false, `profile.web.go: version "v1.2" is not a canonical semver version`, ""},
		{"golang.org/x/mod", "1.2.0", old, false, `profile.web.go: version "1.2.0" is not a canonical semver version`, ""},
		{"golang.org/x/mod", "latest", old, false, `profile.web.go: version "latest" is not a canonical semver version`, ""},
	} {
		d := web.GoVersion(c.mod, c.ver, c.published, now)
		if d.Allow != c.allow || d.Rule != c.rule || !strings.Contains(d.Reason, c.reason) {
			t.Errorf("GoVersion(%s@%s) = %+v, want allow %v rule %q reason ~%q", c.mod, c.ver, d, c.allow, c.rule, c.reason)
		}
	}
	for _, c := range []struct {
		mod   string
		allow bool
		rule  string
	}{
		{"golang.org/x/mod", true, `profile.web.go.modules["golang.org/x/*"]`},
		{"golang.org/x/mod/sumdb", false, "profile.web: no go.modules entry matches"},
		{"github.com/Acme/a/b", true, `profile.web.go.modules["github.com/Acme/**"]`},
		// Matched as decoded: the module in other capitals is another module.
		{"github.com/acme/a", false, "profile.web: no go.modules entry matches"},
		{"", false, "profile.web: no module named"},
	} {
		if d := web.GoModule(c.mod); d.Allow != c.allow || d.Rule != c.rule {
			t.Errorf("GoModule(%q) = %+v, want allow %v rule %q", c.mod, d, c.allow, c.rule)
		}
	}
	if (*Profile)(nil).GoModule("golang.org/x/mod").Allow || (*Profile)(nil).GoDeny("golang.org/x/mod", "v1.0.0").Allow {
		t.Error("no profile allows a module")
	}
	if d := mustPolicy(t, "[profile.ci]\nmodels = [\"*\"]\n").Profiles["ci"].GoModule("golang.org/x/mod"); d.Allow {
		t.Errorf("a profile without go allows a module: %+v", d)
	}
}

func TestAskGo(t *testing.T) {
	web := mustPolicy(t, goPolicy).Profiles["web"]
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	old := now.Add(-30 * 24 * time.Hour)
	a := web.AskGo(GoQuestion{Module: "example.com/lib", Now: now})
	if !a.Allow || !a.Deferred() || a.Rule != `profile.web.go.modules["example.com/lib"]` {
		t.Errorf("list: %+v", a)
	}
	a = web.AskGo(GoQuestion{Module: "example.com/lib", Version: "v1.3.0", Now: now})
	if !a.Allow || !a.Deferred() || a.Steps[len(a.Steps)-1].Key != "go.min_release_age" {
		t.Errorf("version without time: %+v", a)
	}
	a = web.AskGo(GoQuestion{Module: "example.com/lib", Version: "v1.3.0", Published: &old, Now: now})
	if !a.Allow || a.Deferred() || len(a.Steps) != 3 {
		t.Errorf("old version: %+v", a)
	}
	a = web.AskGo(GoQuestion{Module: "example.com/lib", Version: "v1.2.3", Published: &old, Now: now})
	if a.Allow || a.Rule != "profile.web.go.deny[0]" || a.Steps[len(a.Steps)-1].Key != "go.deny" {
		t.Errorf("denied version: %+v", a)
	}
	a = web.AskGo(GoQuestion{Module: "evil.example/x", Version: "v1.0.0", Now: now})
	if a.Allow || len(a.Steps) != 1 || a.Steps[0].Key != "go.modules" {
		t.Errorf("module not allowed: %+v", a)
	}
}

func TestGoPolicyProblems(t *testing.T) {
	for _, c := range []struct{ src, want string }{
		{"[profile.w.go]\nmodules = [\"example.com/a!b\"]\n",
			`policy.toml:2:12: profile.w.go.modules: "example.com/a!b" is not a Go module path pattern`},
		{"[profile.w.go]\nmodules = [\"a.com/x\", \"a.com/x\"]\n",
			`policy.toml:2:23: profile.w.go.modules: "a.com/x" is listed twice`},
		{"[profile.w.go]\nmodules = [\"a.com/x\"]\nmin_release_age = \"0d\"\n",
			`policy.toml:3:19: profile.w.go.min_release_age: must be more than 0`},
		{"[profile.w.go]\nmodules = [\"a.com/x\"]\ndeny = [ { module = \"b.com/y\", versions = \"1.0.0\" } ]\n",
			`policy.toml:3:21: profile.w.go.deny.module: "b.com/y" is not in this profile's go.modules, so the rule can never apply`},
		{"[profile.w.go]\nmodules = [\"a.com/x\"]\ndeny = [ { module = \"a.com/x\", versions = \"one\" } ]\n",
			`policy.toml:3:43: profile.w.go.deny.versions: "one" is not a semver range`},
		{"[profile.w.go]\nmodules = [\"a.com/x\"]\ndeny = [ { module = \"a.com/x\" } ]\n",
			`policy.toml:3:10: profile.w.go.deny: entry needs versions`},
		{"[profile.w.go]\nmodule = [\"a.com/x\"]\n",
			`policy.toml:2:1: unknown key "module" in [profile.w.go] (did you mean "modules"?)`},
	} {
		_, probs := loadPolicy("policy.toml", []byte(c.src))
		got := (&probs).Error()
		if len(probs) != 1 || !strings.HasPrefix(got, c.want) {
			t.Errorf("%s\ngot  %s\nwant %s", c.src, got, c.want)
		}
	}
}
