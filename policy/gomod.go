package policy

import (
	"fmt"
	"strings"
	"time"

	"github.com/Masterminds/semver/v3"
	"golang.org/x/mod/module"
	gosemver "golang.org/x/mod/semver"
)

// GoPolicy is a profile's Go modules settings ([profile.NAME.go]): the
// modules it may fetch through the gomod route and the version policy for
// them. The zero value allows no module.
type GoPolicy struct {
	// Modules are module-path globs ("golang.org/x/*", "github.com/acme/**"),
	// matched exactly against the decoded path (after undoing the proxy
	// protocol's "!" case-encoding), so "github.com/Acme/x" is matched as
	// written with its capitals. Empty: no module.
	Modules []string `toml:"modules"`
	// MinReleaseAge hides versions whose time (the proxy's .info Time) is
	// less than this long ago; a version with no time is hidden too (fail
	// closed). Zero (unset): no minimum.
	MinReleaseAge Age `toml:"min_release_age"`
	// Deny lists version ranges that are never served, per module glob.
	Deny []GoDenyRule `toml:"deny"`
}

// GoDenyRule denies the versions of the modules matching a glob that fall in
// a semver range, written as npm's deny ranges are ("1.2.3", ">=1.2.0
// <1.2.4", "1.x || 2.1.0"; a leading "v" is allowed). Pre-releases inside the
// range are denied too, and so are pseudo-versions, which are pre-releases of
// the version after the commit's base (v1.2.4-0.2026… is inside ">=1.2.0
// <1.2.5"). "+incompatible" is ignored when comparing.
type GoDenyRule struct {
	// Module is a module-path glob as in GoPolicy.Modules. Required.
	Module string `toml:"module"`
	// Versions is the semver range. Required.
	Versions string `toml:"versions"`
	// Reason is shown in the refusal, e.g. "compromised release". Optional.
	Reason string `toml:"reason"`

	c *semver.Constraints
}

// checkModuleGlob refuses a glob that no module path could match, by making
// a path of it (each wildcard taken as a letter) and asking module.CheckPath.
func checkModuleGlob(g string) error {
	probe := strings.NewReplacer("**", "x", "*", "x", "?", "x").Replace(g)
	if err := module.CheckPath(probe); err != nil {
		return fmt.Errorf(`is not a Go module path pattern (e.g. "golang.org/x/*", "github.com/acme/**"): %v`, err)
	}
	return nil
}

func (pr *Profile) validateGo(d *decoder, pp path) {
	gp := pp.key("go")
	checkGlobs(d, gp.key("modules"), pr.Go.Modules, checkModuleGlob)
	pr.checkMinAge(d, gp, pr.Go.MinReleaseAge)
	dp := gp.key("deny")
	for i := range pr.Go.Deny {
		r := &pr.Go.Deny[i]
		ep := dp.elem(i, isArrayOfTables(d, dp, i))
		if !d.has(ep.key("module")) {
			d.missing(ep.key("module"), ep, `%s: entry needs module, a module-path glob (e.g. module = "github.com/acme/lib")`, dp)
		} else if err := checkGlob(r.Module); err != nil {
			d.atValue(ep.key("module"), "%s.module: %q %v", dp, r.Module, err)
		} else if err := checkModuleGlob(r.Module); err != nil {
			d.atValue(ep.key("module"), "%s.module: %q %v", dp, r.Module, err)
		} else if !pr.GoModule(r.Module).Allow && !strings.ContainsAny(r.Module, "*?") {
			d.atValue(ep.key("module"), "%s.module: %q is not in this profile's go.modules, so the rule can never apply", dp, r.Module)
		}
		if !d.has(ep.key("versions")) {
			d.missing(ep.key("versions"), ep, `%s: entry needs versions, a semver range (e.g. versions = "1.2.3" or ">=1.2.0 <1.2.4")`, dp)
		} else if c, err := parseRange(r.Versions); err != nil {
			d.atValue(ep.key("versions"), "%s.versions: %q %v", dp, r.Versions, err)
		} else {
			r.c = c
		}
	}
}

// GoModule decides whether the profile allows a Go module, by its decoded
// path ("github.com/Acme/lib").
func (pr *Profile) GoModule(path string) Decision {
	if pr == nil {
		return Decision{Rule: "no profile"}
	}
	return pr.firstMatch("go.modules", "module", pr.Go.Modules, path)
}

// GoDecision is the answer about one module version.
type GoDecision = VersionDecision

func (r GoDenyRule) rule() (string, string, string) {
	return strings.ToLower(r.Module), r.Versions, r.Reason
}
func (r GoDenyRule) has(v *semver.Version) bool { return r.c != nil && r.c.Check(v) }

// goSemver turns a canonical Go module version ("v1.2.3",
// "v2.0.0+incompatible", a pseudo-version) into a semver.Version.
func goSemver(version string) (*semver.Version, error) {
	v := strings.TrimSuffix(version, "+incompatible")
	if !gosemver.IsValid(v) || gosemver.Canonical(v) != v {
		return nil, fmt.Errorf("%q is not a canonical module version", version)
	}
	return semver.StrictNewVersion(v[1:])
}

// GoDeny decides a version of an allowed module against the profile's go.deny
// list alone; it allows unless a rule's glob and range both match. A version
// that is not a canonical semver version is refused outright (fail closed):
// the proxy protocol names only canonical versions. A rule's glob matches the
// path in any case, so that it cannot be dodged by a path in other capitals.
func (pr *Profile) GoDeny(path, version string) GoDecision {
	if pr == nil {
		return GoDecision{Decision: Decision{Rule: "no profile"}, Reason: "the sandbox has no profile"}
	}
	if _, err := goSemver(version); err != nil {
		return GoDecision{Decision: Decision{Rule: pr.rule(".go: version %q is not a canonical semver version", version)}, Reason: "it is not a canonical module version (e.g. v1.2.3)"}
	}
	return denyVersion(pr, "go", pr.Go.Deny, strings.ToLower(path), version, goSemver, "semver", "module")
}

// GoVersion decides whether a version of an allowed module may be served: not
// refused by GoDeny, and, when the profile has a min_release_age, with a time
// (the proxy's .info Time) at least that long before now. A zero time is
// "unknown" and is refused when there is a minimum. A pseudo-version's time is
// in the version, but the proxy's .info Time is what is checked, as for any
// other version.
func (pr *Profile) GoVersion(path, version string, published, now time.Time) GoDecision {
	d := pr.GoDeny(path, version)
	if !d.Allow || pr == nil {
		return d
	}
	return pr.releaseAge(d, ".go.min_release_age", pr.Go.MinReleaseAge, published, now, "the module proxy gives no time for it")
}

// HasGoVersionPolicy reports whether the profile filters module versions at all.
func (pr *Profile) HasGoVersionPolicy() bool {
	return pr != nil && (pr.Go.MinReleaseAge.Duration > 0 || len(pr.Go.Deny) > 0)
}

// GoQuestion is a request for a Go module: its version list or @latest (no
// version), or one version's .info, .mod or .zip.
type GoQuestion struct {
	// Module is the decoded module path ("github.com/Acme/lib").
	Module string
	// Version is the version asked for; empty for list and @latest.
	Version string
	// Published is the version's .info Time (zero when the proxy gives
	// none); nil while not fetched.
	Published *time.Time
	// Now is the time the release age is measured at.
	Now time.Time
}

// AskGo asks whether the profile may have a Go module: go.modules, then for a
// version go.deny and go.min_release_age. A list's versions are each decided
// when it is filtered, and a release age needs the version's .info time: both
// are deferred steps. The answer's Rule is the module's rule unless a version
// rule refuses.
func (pr *Profile) AskGo(q GoQuestion) Answer {
	return pr.askVersioned(versionedQuestion{
		what: "module", name: q.Module, version: q.Version, published: q.Published, now: q.Now,
		allow: pr.GoModule(q.Module), allowKey: "go.modules", section: "go", hasPolicy: pr.HasGoVersionPolicy(),
		minAge: pr.Go.MinReleaseAge, timeFrom: "the module proxy's .info time", placeholder: "MODULE@VERSION",
		deny: func() (Decision, string) { d := pr.GoDeny(q.Module, q.Version); return d.Decision, d.Reason },
		aged: func(published time.Time) (Decision, string) {
			d := pr.GoVersion(q.Module, q.Version, published, q.Now)
			return d.Decision, d.Reason
		},
	})
}
