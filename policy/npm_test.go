package policy

import (
	"strings"
	"testing"
	"time"
)

const npmPolicy = `[profile.web]
packages = ["react", "@types/*", "event-stream", "@acme/*"]
npm = { min_release_age = "72h", deny = [ { package = "event-stream", versions = "3.3.6", reason = "compromised" }, { package = "@acme/*", versions = ">=2.0.0 <2.0.3" } ] }

[profile.ci]
packages = ["*"]

[profile.ci.npm]
min_release_age = "3d"

[[profile.ci.npm.deny]]
package = "left-pad"
versions = "1.x || 2.1.0"
`

func TestNPMPolicyLoads(t *testing.T) {
	p := mustPolicy(t, npmPolicy)
	web, ci := p.Profiles["web"], p.Profiles["ci"]
	if web.NPM.MinReleaseAge.Duration != 72*time.Hour || len(web.NPM.Deny) != 2 || web.NPM.Deny[0].Reason != "compromised" {
		t.Errorf("web.npm = %+v", web.NPM)
	}
	if ci.NPM.MinReleaseAge.Duration != 72*time.Hour || len(ci.NPM.Deny) != 1 || ci.NPM.Deny[0].Package != "left-pad" {
		t.Errorf("ci.npm = %+v", ci.NPM)
	}
	if !web.HasNPMVersionPolicy() || p.Profiles["web"] == nil {
		t.Error("web has no version policy")
	}
}

func TestNPMVersionDecisions(t *testing.T) {
	p := mustPolicy(t, npmPolicy)
	web, ci := p.Profiles["web"], p.Profiles["ci"]
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	old := now.Add(-30 * 24 * time.Hour)
	for _, c := range []struct {
		pr        *Profile
		name, ver string
		published time.Time
		allow     bool
		rule      string
		reason    string
	}{
		{web, "event-stream", "3.3.6", old, false, "profile.web.npm.deny[0]", `versions "3.3.6"): compromised`},
		{web, "event-stream", "3.3.5", old, true, "profile.web.npm", ""},
		// A registry that ignores case serves event-stream for these.
		{web, "Event-Stream", "3.3.6", old, false, "profile.web.npm.deny[0]", `versions "3.3.6"): compromised`},
		{web, "EVENT-STREAM", "3.3.6", old, false, "profile.web.npm.deny[0]", ""},
		{web, "@acme/UTIL", "2.0.2", old, false, "profile.web.npm.deny[1]", ""},
		{web, "@acme/util", "2.0.2", old, false, "profile.web.npm.deny[1]", `">=2.0.0 <2.0.3"`},
		{web, "@acme/util", "2.0.3", old, true, "profile.web.npm", ""},
		{web, "@acme/util", "2.0.1-beta.1", old, false, "profile.web.npm.deny[1]", ""},
		{web, "@acme/util", "1.9.9", old, true, "profile.web.npm", ""},
		{web, "@acme/util", "not-semver", old, false, `profile.web.npm.deny[1]: version "not-semver" is not semver`, "not a semver version"},
		{web, "react", "not-semver", old, true, "profile.web.npm", ""},
		{web, "react", "18.0.0", now.Add(-71 * time.Hour), false, "profile.web.npm.min_release_age", "less than 72h ago"},
		{web, "react", "18.0.0", now.Add(-72 * time.Hour), true, "profile.web.npm", ""},
		{web, "react", "18.0.0", time.Time{}, false, "profile.web.npm.min_release_age", "no publish time"},
		{ci, "left-pad", "1.3.0", old, false, "profile.ci.npm.deny[0]", ""},
		{ci, "left-pad", "2.1.0", old, false, "profile.ci.npm.deny[0]", ""},
		{ci, "left-pad", "2.0.0", old, true, "profile.ci.npm", ""},
		{ci, "left-pad", "2.0.0", now.Add(-47 * time.Hour), false, "profile.ci.npm.min_release_age", "less than 3d ago"},
		{nil, "left-pad", "2.0.0", old, false, "no profile", ""},
	} {
		d := c.pr.NPMVersion(c.name, c.ver, c.published, now)
		if d.Allow != c.allow || d.Rule != c.rule || !strings.Contains(d.Reason, c.reason) {
			t.Errorf("NPMVersion(%s, %s) = %+v, want allow %v rule %q reason ~%q", c.name, c.ver, d, c.allow, c.rule, c.reason)
		}
	}
	// Without a minimum, an unknown publish time is fine.
	nomin := mustPolicy(t, "[profile.x]\npackages = [\"a\"]\n").Profiles["x"]
	if d := nomin.NPMVersion("a", "1.0.0", time.Time{}, now); !d.Allow || nomin.HasNPMVersionPolicy() {
		t.Errorf("no policy: %+v", d)
	}
}

func TestNPMPolicyProblems(t *testing.T) {
	for _, c := range []struct{ src, want string }{
		{"[profile.w]\npackages = [\"a\"]\nnpm = { min_release_age = \"3 days\" }\n",
			`policy.toml:3:27: profile.w.npm.min_release_age: "3 days" is not an age (e.g. "3d", "72h", "36h30m")`},
		{"[profile.w]\npackages = [\"a\"]\nnpm = { min_release_age = 3 }\n",
			`policy.toml:3:27: profile.w.npm.min_release_age: must be an age string like "3d" or "72h", not an integer`},
		{"[profile.w]\npackages = [\"a\"]\nnpm = { min_release_age = \"0h\" }\n",
			`policy.toml:3:27: profile.w.npm.min_release_age: must be more than 0 (e.g. "3d"; leave it out for no minimum)`},
		{"[profile.w]\npackages = [\"a\"]\n[profile.w.npm]\nmin_age = \"3d\"\n",
			`policy.toml:4:1: unknown key "min_age"`},
		{"[profile.w]\npackages = [\"a\"]\nnpm = { deny = [ { package = \"a\", versions = \">=1.0.0 <<2\" } ] }\n",
			`policy.toml:3:46: profile.w.npm.deny.versions: ">=1.0.0 <<2" is not a semver range`},
		{"[profile.w]\npackages = [\"a\"]\nnpm = { deny = [ { package = \"a\" } ] }\n",
			`policy.toml:3:18: profile.w.npm.deny: entry needs versions, a semver range`},
		{"[profile.w]\npackages = [\"a\"]\n\n[[profile.w.npm.deny]]\nversions = \"1.0.0\"\n",
			`policy.toml:4:1: profile.w.npm.deny: entry needs package, a package-name glob`},
		{"[profile.w]\npackages = [\"a\"]\nnpm = { deny = [ { package = \"A!B\", versions = \"1.0.0\" } ] }\n",
			`policy.toml:3:30: profile.w.npm.deny.package: "A!B" is not an npm package name pattern`},
		{"[profile.w]\npackages = [\"a\"]\nnpm = { deny = [ { package = \"b\", versions = \"1.0.0\" } ] }\n",
			`policy.toml:3:30: profile.w.npm.deny.package: "b" is not in this profile's packages, so the rule can never apply`},
		{"[profile.w]\npackages = [\"a\"]\nnpm = { deny = { package = \"a\", versions = \"1.0.0\" } }\n",
			`policy.toml:3:16: profile.w.npm.deny: must be an array of tables, not a table`},
	} {
		_, probs := loadPolicy("policy.toml", []byte(c.src))
		got := (&probs).Error()
		if len(probs) != 1 || !strings.HasPrefix(got, c.want) {
			t.Errorf("%s\ngot  %s\nwant %s", c.src, got, c.want)
		}
	}
}

func TestNPMSearchAndAudit(t *testing.T) {
	p := mustPolicy(t, `[profile.web]
packages = ["react"]

[profile.web.npm]
search = true
audit = true

[profile.ci]
packages = ["*"]
`)
	web, ci := p.Profiles["web"], p.Profiles["ci"]
	for _, c := range []struct {
		name  string
		d     Decision
		allow bool
		rule  string
	}{
		{"web search", web.NPMSearch(), true, "profile.web.npm.search"},
		{"web audit", web.NPMAudit(), true, "profile.web.npm.audit"},
		{"ci search", ci.NPMSearch(), false, "profile.ci.npm.search is off (the default)"},
		{"ci audit", ci.NPMAudit(), false, "profile.ci.npm.audit is off (the default)"},
	} {
		if c.d.Allow != c.allow || c.d.Rule != c.rule {
			t.Errorf("%s = %+v, want allow %v rule %q", c.name, c.d, c.allow, c.rule)
		}
	}
	if web.HasNPMVersionPolicy() {
		t.Error("search and audit are not a version policy")
	}
	if (*Profile)(nil).NPMAudit().Allow {
		t.Error("no profile allows audit")
	}
	if _, probs := loadPolicy("policy.toml", []byte("[profile.web.npm]\nsearch = \"yes\"\n")); len(probs) == 0 || !strings.Contains((&probs).Error(), "policy.toml:2:10: profile.web.npm.search") {
		t.Errorf("search = \"yes\": %v", (&probs).Error())
	}
}

func TestNPMAsk(t *testing.T) {
	p, err := ParsePolicy("policy.toml", []byte(`
[profile.web]
packages = ["is-*", "left-pad"]
[profile.web.npm]
min_release_age = "3d"
deny = [{ package = "is-thing", versions = "2.0.1" }]
ask = [{ package = "is-*", versions = ">=2.0.0" }]
`))
	if err != nil {
		t.Fatal(err)
	}
	pr := p.Profiles["web"]
	now := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
	old, young := now.Add(-10*24*time.Hour), now.Add(-time.Hour)
	for _, c := range []struct {
		name, version string
		published     *time.Time
		allow, ask    bool
		rule          string
	}{
		{"is-thing", "1.0.0", &old, true, false, `profile.web.packages["is-*"]`},
		{"is-thing", "2.0.0", &old, false, true, `profile.web.npm.ask[0]`},
		{"IS-THING", "2.0.0", &old, false, false, `profile.web: no packages entry matches`},
		{"is-thing", "2.0.1", &old, false, false, `profile.web.npm.deny[0]`},
		{"is-thing", "2.0.0", &young, false, false, `profile.web.npm.min_release_age`},
		{"is-thing", "2.0.0", nil, true, false, `profile.web.packages["is-*"]`}, // deferred: the age first
		{"is-other", "latest-ish", &old, false, true, `profile.web.npm.ask[0]`},
		{"left-pad", "9.0.0", &old, true, false, `profile.web.packages["left-pad"]`},
	} {
		a := pr.AskNPM(NPMQuestion{Name: c.name, Version: c.version, Published: c.published, Now: now})
		if a.Allow != c.allow || a.Ask != c.ask || a.Rule != c.rule {
			t.Errorf("%s@%s: allow %v ask %v rule %s; want %v %v %s", c.name, c.version, a.Allow, a.Ask, a.Rule, c.allow, c.ask, c.rule)
		}
	}
}

// npm.ask_too_new: a version younger than min_release_age, of a known
// publish time, asks instead of being refused; one with no time, or one
// deny names, is refused as ever, and the packument's filter (NPMVersion)
// still hides it. Without min_release_age the key is refused.
func TestNPMAskTooNew(t *testing.T) {
	p, err := ParsePolicy("policy.toml", []byte(`
[profile.web]
packages = ["is-*"]
[profile.web.npm]
min_release_age = "3d"
ask_too_new = true
deny = [{ package = "is-thing", versions = "2.0.1" }]
`))
	if err != nil {
		t.Fatal(err)
	}
	pr := p.Profiles["web"]
	now := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
	old, young, none := now.Add(-10*24*time.Hour), now.Add(-time.Hour), time.Time{}
	for _, c := range []struct {
		version    string
		published  *time.Time
		allow, ask bool
		rule       string
	}{
		{"1.0.0", &old, true, false, `profile.web.packages["is-*"]`},
		{"2.0.0", &young, false, true, `profile.web.npm.min_release_age`},
		{"2.0.0", &none, false, false, `profile.web.npm.min_release_age`},
		{"2.0.1", &young, false, false, `profile.web.npm.deny[0]`},
	} {
		a := pr.AskNPM(NPMQuestion{Name: "is-thing", Version: c.version, Published: c.published, Now: now})
		if a.Allow != c.allow || a.Ask != c.ask || a.Rule != c.rule {
			t.Errorf("is-thing@%s: allow %v ask %v rule %s; want %v %v %s", c.version, a.Allow, a.Ask, a.Rule, c.allow, c.ask, c.rule)
		}
	}
	if pr.NPMVersion("is-thing", "2.0.0", young, now).Allow {
		t.Error("a version too new is shown in the packument")
	}
	_, err = ParsePolicy("policy.toml", []byte("[profile.web]\npackages = [\"*\"]\nnpm.ask_too_new = true\n"))
	if err == nil || !strings.Contains(err.Error(), "ask_too_new asks about versions younger than min_release_age, which profile.web.npm does not set") {
		t.Errorf("ask_too_new without min_release_age: %v", err)
	}
}
