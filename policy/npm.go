package policy

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/Masterminds/semver/v3"
)

// NPMPolicy is a profile's npm settings beyond its packages
// ([profile.NAME.npm]): the version policy, and the registry endpoints that
// are not packages. The zero value hides no version and allows neither
// search nor audit.
type NPMPolicy struct {
	// MinReleaseAge hides versions published less than this long ago, by the
	// packument's time[version]; a version with no time is hidden too (fail
	// closed). Zero (unset): no minimum.
	MinReleaseAge Age `toml:"min_release_age"`
	// Deny lists version ranges that are never served, per package glob.
	Deny []NPMDenyRule `toml:"deny"`
	// Search lets the sandbox run npm search (GET /-/v1/search). Default false.
	Search bool `toml:"search"`
	// Audit lets the sandbox run npm audit (the bulk advisory endpoint) for
	// the packages it may install. Default false.
	Audit bool `toml:"audit"`
}

// NPMDenyRule denies the versions of the packages matching a glob that fall in
// a semver range.
type NPMDenyRule struct {
	// Package is a package-name glob as in Profile.Packages. Required.
	Package string `toml:"package"`
	// Versions is a semver range ("3.3.6", ">=2.0.0 <2.0.3", "1.x || 2.1.0").
	// Pre-releases inside the range are denied too. Required.
	Versions string `toml:"versions"`
	// Reason is shown in the denial, e.g. "compromised release". Optional.
	Reason string `toml:"reason"`

	c *semver.Constraints
}

// maxAgeDays bounds an age written in days: a century is older than any package.
const maxAgeDays = 100 * 365

// Age is a duration written in TOML as a string: a Go duration ("72h",
// "90m") or a whole number of days ("3d").
type Age struct {
	time.Duration
	text string // as written, for messages
}

// UnmarshalText parses "3d" or a Go duration string.
func (a *Age) UnmarshalText(text []byte) error {
	s := string(text)
	d, err := ParseDays(s)
	_, days := strings.CutSuffix(s, "d")
	switch {
	case errors.Is(err, ErrDurationTooLong) || err == nil && days && d > maxAgeDays*24*time.Hour:
		return fmt.Errorf(`%q is too long for an age: the longest is "%dd"`, s, maxAgeDays)
	case err != nil || days && d < 0:
		return fmt.Errorf(`%q is not an age (e.g. "3d", "72h", "36h30m")`, s)
	}
	a.Duration, a.text = d, s
	return nil
}

// MarshalText writes the age as it was written, else in days when it is whole
// days, else as time.Duration.String does.
func (a Age) MarshalText() ([]byte, error) {
	if a.text != "" {
		return []byte(a.text), nil
	}
	if a.Duration > 0 && a.Duration%(24*time.Hour) == 0 {
		return []byte(strconv.FormatInt(int64(a.Duration/(24*time.Hour)), 10) + "d"), nil
	}
	return []byte(a.String()), nil
}

// TOMLWant says what the TOML text looks like, for the "must be …, not …"
// message of a value of the wrong type.
func (Age) TOMLWant() string { return `an age string like "3d" or "72h"` }

// parseRange parses an npm-style semver range; pre-releases inside it count.
func parseRange(s string) (*semver.Constraints, error) {
	if strings.TrimSpace(s) == "" {
		return nil, fmt.Errorf("is empty")
	}
	c, err := semver.NewConstraint(s)
	if err != nil {
		return nil, fmt.Errorf(`is not a semver range (e.g. "3.3.6", ">=2.0.0 <2.0.3", "1.x || 2.1.0"): %v`, err)
	}
	c.IncludePrerelease = true
	return c, nil
}

func (pr *Profile) validateNPM(d *decoder, pp path) {
	np := pp.key("npm")
	if d.has(np.key("min_release_age")) && pr.NPM.MinReleaseAge.Duration <= 0 {
		d.atValue(np.key("min_release_age"), `%s: must be more than 0 (e.g. "3d"; leave it out for no minimum)`, np.key("min_release_age"))
	}
	dp := np.key("deny")
	for i := range pr.NPM.Deny {
		r := &pr.NPM.Deny[i]
		ep := dp.elem(i, isArrayOfTables(d, dp, i))
		if !d.has(ep.key("package")) {
			d.missing(ep.key("package"), ep, `%s: entry needs package, a package-name glob (e.g. package = "event-stream")`, dp)
		} else if err := checkGlob(r.Package); err != nil {
			d.atValue(ep.key("package"), "%s.package: %q %v", dp, r.Package, err)
		} else if err := checkPackageGlob(r.Package); err != nil {
			d.atValue(ep.key("package"), "%s.package: %q %v", dp, r.Package, err)
		} else if !pr.Package(r.Package).Allow && !strings.ContainsAny(r.Package, "*?") {
			d.atValue(ep.key("package"), "%s.package: %q is not in this profile's packages, so the rule can never apply", dp, r.Package)
		}
		if !d.has(ep.key("versions")) {
			d.missing(ep.key("versions"), ep, `%s: entry needs versions, a semver range (e.g. versions = "3.3.6" or ">=2.0.0 <2.0.3")`, dp)
		} else if c, err := parseRange(r.Versions); err != nil {
			d.atValue(ep.key("versions"), "%s.versions: %q %v", dp, r.Versions, err)
		} else {
			r.c = c
		}
	}
}

// isArrayOfTables says whether entry i of the array at p came from a [[…]] header.
func isArrayOfTables(d *decoder, p path, i int) bool {
	l := d.ix.locs[p.elem(i, true).id()]
	return l != nil && l.val >= 0 && strings.HasPrefix(d.ix.src[l.val:], "[[")
}

// NPMDecision is the answer about one npm version: a Decision, and for a
// denial the reason in words for npm's output ("it was published …, less
// than 3d ago").
type NPMDecision struct {
	Decision
	Reason string
}

// NPMDeny decides a version of an allowed package against the profile's deny
// list alone; it allows unless a rule's package glob and range both match. A
// version that is not semver is denied when a rule names the package (fail
// closed), since cproxy cannot tell whether it is in the range.
//
// A rule's glob matches the name in any case: a registry that ignores case
// serves event-stream for Event-Stream, and a rule must not be dodged by
// asking for it so. (packages, which allow, match as written: a name in
// another case may be another package, such as JSONStream and jsonstream.)
func (pr *Profile) NPMDeny(name, version string) NPMDecision {
	if pr == nil {
		return NPMDecision{Decision: Decision{Rule: "no profile"}, Reason: "the sandbox has no profile"}
	}
	var v *semver.Version
	for i, r := range pr.NPM.Deny {
		if !matchGlob(strings.ToLower(r.Package), strings.ToLower(name)) {
			continue
		}
		if v == nil {
			var err error
			if v, err = semver.StrictNewVersion(version); err != nil {
				return NPMDecision{Decision: Decision{Rule: pr.rule(".npm.deny[%d]: version %q is not semver", i, version)}, Reason: "it is not a semver version and a deny rule names the package"}
			}
		}
		if r.c != nil && r.c.Check(v) {
			reason := fmt.Sprintf("it is denied by the sandbox's policy (versions %q)", r.Versions)
			if r.Reason != "" {
				reason = fmt.Sprintf("it is denied by the sandbox's policy (versions %q): %s", r.Versions, r.Reason)
			}
			return NPMDecision{Decision: Decision{Rule: pr.rule(".npm.deny[%d]", i)}, Reason: reason}
		}
	}
	return NPMDecision{Decision: Decision{Allow: true, Rule: pr.rule(".npm")}}
}

// NPMVersion decides whether a version of an allowed package may be served:
// not denied by NPMDeny, and, when the profile has a min_release_age, published
// (per the packument's time[version]) at least that long before now. A zero
// published time is "unknown" and is denied when there is a minimum.
func (pr *Profile) NPMVersion(name, version string, published, now time.Time) NPMDecision {
	d := pr.NPMDeny(name, version)
	if !d.Allow || pr == nil {
		return d
	}
	age := pr.NPM.MinReleaseAge.Duration
	if age <= 0 {
		return d
	}
	text, _ := pr.NPM.MinReleaseAge.MarshalText()
	if published.IsZero() {
		return NPMDecision{Decision: Decision{Rule: pr.rule(".npm.min_release_age")}, Reason: fmt.Sprintf("the registry gives no publish time for it and the sandbox's policy needs versions at least %s old", text)}
	}
	if now.Sub(published) < age {
		return NPMDecision{Decision: Decision{Rule: pr.rule(".npm.min_release_age")}, Reason: fmt.Sprintf("it was published %s, less than %s ago (the sandbox's minimum release age)", published.UTC().Format(time.RFC3339), text)}
	}
	return d
}

// NPMSearch decides npm search: allowed only when the profile sets
// npm.search = true.
func (pr *Profile) NPMSearch() Decision {
	return pr.npmSwitch("search", pr != nil && pr.NPM.Search)
}

// NPMAudit decides npm audit: allowed only when the profile sets
// npm.audit = true (each package it names must then be allowed as well).
func (pr *Profile) NPMAudit() Decision {
	return pr.npmSwitch("audit", pr != nil && pr.NPM.Audit)
}

func (pr *Profile) npmSwitch(key string, on bool) Decision {
	switch {
	case pr == nil:
		return Decision{Rule: "no profile"}
	case on:
		return Decision{Allow: true, Rule: pr.rule(".npm.%s", key)}
	}
	return Decision{Rule: pr.rule(".npm.%s is off (the default)", key)}
}

// HasNPMVersionPolicy reports whether the profile filters npm versions at all.
func (pr *Profile) HasNPMVersionPolicy() bool {
	return pr != nil && (pr.NPM.MinReleaseAge.Duration > 0 || len(pr.NPM.Deny) > 0)
}
