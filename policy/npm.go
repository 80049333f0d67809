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
	// Ask lists version ranges, per package glob, whose tarballs are served
	// only with an operator's approval of exactly that package version
	// (docs/approvals.md); the packument keeps them, so npm can resolve
	// them. Deny and the release age are asked first. Empty: none asks.
	Ask []NPMDenyRule `toml:"ask"`
	// AskTooNew makes a version younger than MinReleaseAge, asked for by
	// name (a lockfile pins it), wait for an operator's approval of exactly
	// that package version instead of being refused; packuments still hide
	// it, so npm resolves to an older one. A version with no publish time
	// is refused as ever. False: refused.
	AskTooNew bool `toml:"ask_too_new"`
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
	pr.checkMinAge(d, np, pr.NPM.MinReleaseAge)
	pr.validateNPMRules(d, np.key("deny"), pr.NPM.Deny)
	pr.validateNPMRules(d, np.key("ask"), pr.NPM.Ask)
	if pr.NPM.AskTooNew && pr.NPM.MinReleaseAge.Duration <= 0 {
		d.atKey(np.key("ask_too_new"), "%s: ask_too_new asks about versions younger than min_release_age, which %s does not set (set it, or drop ask_too_new)", np.key("ask_too_new"), np)
	}
}

// validateNPMRules checks npm.deny's or npm.ask's entries, at dp.
func (pr *Profile) validateNPMRules(d *decoder, dp path, rules []NPMDenyRule) {
	for i := range rules {
		r := &rules[i]
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

// checkMinAge refuses a min_release_age under sp that is set but not positive.
func (pr *Profile) checkMinAge(d *decoder, sp path, age Age) {
	if d.has(sp.key("min_release_age")) && age.Duration <= 0 {
		d.atValue(sp.key("min_release_age"), `%s: must be more than 0 (e.g. "3d"; leave it out for no minimum)`, sp.key("min_release_age"))
	}
}

// isArrayOfTables says whether entry i of the array at p came from a [[…]] header.
func isArrayOfTables(d *decoder, p path, i int) bool {
	l := d.ix.locs[p.elem(i, true).id()]
	return l != nil && l.val >= 0 && strings.HasPrefix(d.ix.src[l.val:], "[[")
}

// VersionDecision is the answer about one version of a package: a Decision,
// and for a denial the reason in words for the client's output ("it was
// published …, less than 3d ago").
type VersionDecision struct {
	Decision
	Reason string
}

// NPMDecision is the answer about one npm version.
type NPMDecision = VersionDecision

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
	return denyVersion(pr, "npm", pr.NPM.Deny, strings.ToLower(name), version, semver.StrictNewVersion, "semver", "package")
}

// versionRule is a deny rule over versions of type V.
type versionRule[V any] interface {
	// rule is the glob the rule matches names with, its versions as written
	// and its reason.
	rule() (glob, versions, reason string)
	// has reports whether the rule's range holds v.
	has(v V) bool
}

func (r NPMDenyRule) rule() (string, string, string) {
	return strings.ToLower(r.Package), r.Versions, r.Reason
}
func (r NPMDenyRule) has(v *semver.Version) bool { return r.c != nil && r.c.Check(v) }

// denyVersion decides a version of the package name against the deny rules
// at .KEY.deny: denied by the first rule whose glob matches name and whose
// range holds the version; denied too when a rule's glob matches and the
// version does not parse (scheme names its kind, what what the rules name),
// since cproxy cannot tell whether it is in the range.
func denyVersion[V any, R versionRule[V]](pr *Profile, key string, rules []R, name, version string, parse func(string) (V, error), scheme, what string) VersionDecision {
	var v V
	parsed := false
	for i, r := range rules {
		glob, versions, reason := r.rule()
		if !matchGlob(glob, name) {
			continue
		}
		if !parsed {
			var err error
			if v, err = parse(version); err != nil {
				return VersionDecision{Decision: Decision{Rule: pr.rule(".%s.deny[%d]: version %q is not %s", key, i, version, scheme)}, Reason: fmt.Sprintf("it is not a %s version and a deny rule names the %s", scheme, what)}
			}
			parsed = true
		}
		if r.has(v) {
			return VersionDecision{Decision: Decision{Rule: pr.rule(".%s.deny[%d]", key, i)}, Reason: denyReason(versions, reason)}
		}
	}
	return VersionDecision{Decision: Decision{Allow: true, Rule: pr.rule(".%s", key)}}
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
	return pr.releaseAge(d, ".npm.min_release_age", pr.NPM.MinReleaseAge, published, now, "the registry gives no publish time for it")
}

// denyReason words a deny rule's denial, with the rule's own reason if it has one.
func denyReason(versions, reason string) string {
	if reason != "" {
		return fmt.Sprintf("it is denied by the sandbox's policy (versions %q): %s", versions, reason)
	}
	return fmt.Sprintf("it is denied by the sandbox's policy (versions %q)", versions)
}

// releaseAge applies a minimum release age (the rule at key) to a version
// that d allowed: published at least age before now, and a zero published
// time refused with noTime as the start of its reason (fail closed). A zero
// age keeps d.
func (pr *Profile) releaseAge(d VersionDecision, key string, age Age, published, now time.Time, noTime string) VersionDecision {
	if age.Duration <= 0 {
		return d
	}
	text, _ := age.MarshalText()
	if published.IsZero() {
		return VersionDecision{Decision: Decision{Rule: pr.rule("%s", key)}, Reason: fmt.Sprintf("%s and the sandbox's policy needs versions at least %s old", noTime, text)}
	}
	if now.Sub(published) < age.Duration {
		return VersionDecision{Decision: Decision{Rule: pr.rule("%s", key)}, Reason: fmt.Sprintf("it was published %s, less than %s ago (the sandbox's minimum release age)", published.UTC().Format(time.RFC3339), text)}
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
	return pr != nil && (pr.NPM.MinReleaseAge.Duration > 0 || len(pr.NPM.Deny) > 0 || len(pr.NPM.Ask) > 0)
}

// NPMAsk decides a version of an allowed package against the profile's ask
// list: it asks (Decision.Ask) when a rule's package glob (in any case, as
// deny's) and range both match, and when a rule's glob matches a version
// that is not semver, which an operator can still judge; else it allows.
func (pr *Profile) NPMAsk(name, version string) Decision {
	if pr == nil {
		return Decision{Rule: "no profile"}
	}
	name = strings.ToLower(name)
	for i, r := range pr.NPM.Ask {
		glob, _, _ := r.rule()
		if !matchGlob(glob, name) {
			continue
		}
		v, err := semver.StrictNewVersion(version)
		if err != nil || r.has(v) {
			return Decision{Ask: true, Rule: pr.rule(".npm.ask[%d]", i)}
		}
	}
	return Decision{Allow: true, Rule: pr.rule(".npm")}
}
