package policy

import (
	"strings"
	"testing"
	"time"
	"unicode"

	"pgregory.net/rapid"
)

const pypiPolicy = `[profile.web]
pypi = { packages = ["requests", "django-*"], min_release_age = "72h", deny = [ { package = "requests", versions = ">=2.0,<2.3", reason = "compromised" }, { package = "django-*", versions = "==1.4.*" } ] }

[profile.ci.pypi]
packages = ["*"]

[[profile.ci.pypi.deny]]
package = "left-pad"
versions = "!=2.0"
`

func TestNormalizePyPIName(t *testing.T) {
	for in, want := range map[string]string{
		"requests": "requests", "Foo_Bar": "foo-bar", "foo.bar": "foo-bar", "FOO--bar": "foo-bar",
		"a-_.-b": "a-b", "zope.interface": "zope-interface", "": "",
	} {
		if got := NormalizePyPIName(in); got != want {
			t.Errorf("NormalizePyPIName(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestPyPIProjectDecisions(t *testing.T) {
	p := mustPolicy(t, pypiPolicy)
	web := p.Profiles["web"]
	for _, c := range []struct {
		name  string
		allow bool
		rule  string
	}{
		{"requests", true, `profile.web.pypi.packages["requests"]`},
		{"Requests", true, `profile.web.pypi.packages["requests"]`},
		{"Django_Rest.Framework", true, `profile.web.pypi.packages["django-*"]`},
		{"numpy", false, "profile.web: no pypi.packages entry matches"},
		{"", false, "profile.web: no project named"},
	} {
		if d := web.PyPIProject(c.name); d.Allow != c.allow || d.Rule != c.rule {
			t.Errorf("PyPIProject(%q) = %+v, want allow %v rule %q", c.name, d, c.allow, c.rule)
		}
	}
	// npm's packages do not allow PyPI projects, nor the other way round.
	if d := mustPolicy(t, "[profile.x]\npackages = [\"*\"]\n").Profiles["x"].PyPIProject("requests"); d.Allow {
		t.Errorf("npm packages allowed a PyPI project: %+v", d)
	}
	if d := p.Profiles["ci"].Package("requests"); d.Allow {
		t.Errorf("pypi.packages allowed an npm package: %+v", d)
	}
}

func TestPyPIVersionDecisions(t *testing.T) {
	p := mustPolicy(t, pypiPolicy)
	web, ci := p.Profiles["web"], p.Profiles["ci"]
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	old := now.Add(-30 * 24 * time.Hour)
	for _, c := range []struct {
		pr        *Profile
		name, ver string
		uploaded  time.Time
		allow     bool
		rule      string
		reason    string
	}{
		{web, "requests", "2.2.1", old, false, "profile.web.pypi.deny[0]", `versions ">=2.0,<2.3"): compromised`},
		{web, "REQUESTS", "2.0", old, false, "profile.web.pypi.deny[0]", ""},
		{web, "requests", "2.3", old, true, "profile.web.pypi", ""},
		{web, "requests", "1.9", old, true, "profile.web.pypi", ""},
		{web, "requests", "2.1.0rc1", old, false, "profile.web.pypi.deny[0]", ""},
		// PEP 440's <2.3 leaves out 2.3's own pre-releases; a deny rule
		// denies them too, the side that fails closed.
		{web, "requests", "2.3.0.dev1", old, false, "profile.web.pypi.deny[0]", ""},
		{web, "requests", "not a version", old, false, `profile.web.pypi.deny[0]: version "not a version" is not PEP 440`, "not a PEP 440 version"},
		{web, "Django.Foo", "1.4.7", old, false, "profile.web.pypi.deny[1]", `"==1.4.*"`},
		{web, "django-foo", "1.5", old, true, "profile.web.pypi", ""},
		{web, "requests", "3.0", now.Add(-71 * time.Hour), false, "profile.web.pypi.min_release_age", "less than 72h ago"},
		{web, "requests", "3.0", now.Add(-72 * time.Hour), true, "profile.web.pypi", ""},
		{web, "requests", "3.0", time.Time{}, false, "profile.web.pypi.min_release_age", "no upload time"},
		{ci, "left_pad", "1.0", old, false, "profile.ci.pypi.deny[0]", ""},
		{ci, "left-pad", "2.0", time.Time{}, true, "profile.ci.pypi", ""},
		{nil, "left-pad", "2.0", old, false, "no profile", ""},
	} {
		d := c.pr.PyPIVersion(c.name, c.ver, c.uploaded, now)
		if d.Allow != c.allow || d.Rule != c.rule || !strings.Contains(d.Reason, c.reason) {
			t.Errorf("PyPIVersion(%s, %s) = %+v, want allow %v rule %q reason ~%q", c.name, c.ver, d, c.allow, c.rule, c.reason)
		}
	}
	if !web.HasPyPIVersionPolicy() || !ci.HasPyPIVersionPolicy() || web.HasNPMVersionPolicy() {
		t.Error("version policies mixed up")
	}
}

func TestAskPyPI(t *testing.T) {
	web := mustPolicy(t, pypiPolicy).Profiles["web"]
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	young := now.Add(-time.Hour)
	for _, c := range []struct {
		q        PyPIQuestion
		allow    bool
		deferred bool
		last     string
	}{
		{PyPIQuestion{Name: "numpy"}, false, false, "pypi.packages"},
		{PyPIQuestion{Name: "Requests"}, true, true, "pypi"},
		{PyPIQuestion{Name: "requests", Version: "2.2"}, false, false, "pypi.deny"},
		{PyPIQuestion{Name: "requests", Version: "2.4"}, true, true, "pypi.min_release_age"},
		{PyPIQuestion{Name: "requests", Version: "2.4", Uploaded: &young, Now: now}, false, false, "pypi.min_release_age"},
	} {
		a := web.AskPyPI(c.q)
		last := a.Steps[len(a.Steps)-1]
		if a.Allow != c.allow || a.Deferred() != c.deferred || last.Key != c.last {
			t.Errorf("AskPyPI(%+v) = %+v", c.q, a)
		}
	}
}

func TestPyPIPolicyProblems(t *testing.T) {
	for _, c := range []struct{ src, want string }{
		{"[profile.w.pypi]\npackages = [\"Foo_Bar\"]\n",
			`policy.toml:2:13: profile.w.pypi.packages: "Foo_Bar" is not a PEP 503-normalised project name pattern: write "foo-bar"`},
		{"[profile.w.pypi]\npackages = [\"a/b\"]\n",
			`policy.toml:2:13: profile.w.pypi.packages: "a/b" is not a PyPI project name pattern`},
		{"[profile.w.pypi]\npackages = [\"a\"]\nmin_release_age = \"0h\"\n",
			`policy.toml:3:19: profile.w.pypi.min_release_age: must be more than 0`},
		{"[profile.w.pypi]\npackages = [\"a\"]\ndeny = [ { package = \"a\", versions = \">=1.0 || <0.5\" } ]\n",
			`policy.toml:3:38: profile.w.pypi.deny.versions: ">=1.0 || <0.5" is not a PEP 440 specifier set`},
		{"[profile.w.pypi]\npackages = [\"a\"]\ndeny = [ { package = \"a\", versions = \">>1\" } ]\n",
			`policy.toml:3:38: profile.w.pypi.deny.versions: ">>1" is not a PEP 440 specifier set`},
		{"[profile.w.pypi]\npackages = [\"a\"]\ndeny = [ { package = \"A\", versions = \"1.0\" } ]\n",
			`policy.toml:3:22: profile.w.pypi.deny.package: "A" is not a PEP 503-normalised project name pattern: write "a"`},
		{"[profile.w.pypi]\npackages = [\"a\"]\ndeny = [ { package = \"b\", versions = \"==1.0\" } ]\n",
			`policy.toml:3:22: profile.w.pypi.deny.package: "b" is not in this profile's pypi.packages, so the rule can never apply`},
		{"[profile.w.pypi]\npackages = [\"a\"]\ndeny = [ { package = \"a\" } ]\n",
			`policy.toml:3:10: profile.w.pypi.deny: entry needs versions, a PEP 440 specifier set`},
		{"[profile.w.pypi]\npackages = [\"a\"]\nindex = \"x\"\n",
			`policy.toml:3:1: unknown key "index"`},
	} {
		_, probs := loadPolicy("policy.toml", []byte(c.src))
		got := (&probs).Error()
		if len(probs) != 1 || !strings.HasPrefix(got, c.want) {
			t.Errorf("%s\ngot  %s\nwant %s", c.src, got, c.want)
		}
	}
}

// No spelling of a project name gets past a rule: a name respelled in any
// case, with any run of - _ . for each separator, is decided as the name is,
// by packages and by deny alike.
func TestPyPIRespellingDecidesTheSame(t *testing.T) {
	pr := mustPolicy(t, pypiPolicy).Profiles["web"]
	rapid.Check(t, func(t *rapid.T) {
		words := rapid.SliceOfN(rapid.StringMatching(`[a-z0-9]{1,6}`), 1, 4).Draw(t, "words")
		if rapid.Bool().Draw(t, "known") {
			words = strings.Split(rapid.SampledFrom([]string{"requests", "django-foo", "django-rest-framework"}).Draw(t, "name"), "-")
		}
		name := strings.Join(words, "-")
		var b strings.Builder
		for i, w := range words {
			if i > 0 {
				b.WriteString(rapid.StringMatching(`[-_.]{1,3}`).Draw(t, "sep"))
			}
			for _, r := range w {
				if rapid.Bool().Draw(t, "upper") {
					r = unicode.ToUpper(r)
				}
				b.WriteRune(r)
			}
		}
		spelled := b.String()
		if got := NormalizePyPIName(spelled); got != name {
			t.Fatalf("NormalizePyPIName(%q) = %q, want %q", spelled, got, name)
		}
		if a, b := pr.PyPIProject(spelled), pr.PyPIProject(name); a != b {
			t.Fatalf("PyPIProject(%q) = %+v, but %q: %+v", spelled, a, name, b)
		}
		if a, b := pr.PyPIDeny(spelled, "2.1"), pr.PyPIDeny(name, "2.1"); a != b {
			t.Fatalf("PyPIDeny(%q) = %+v, but %q: %+v", spelled, a, name, b)
		}
	})
}
