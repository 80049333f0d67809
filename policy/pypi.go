package policy

import (
	"fmt"
	"regexp"
	"strings"
	"time"

	pep440 "github.com/aquasecurity/go-pep440-version"
)

// PyPIPolicy is a profile's PyPI settings ([profile.NAME.pypi]): the projects
// the sandbox may install and the version policy for them. The zero value
// allows no project.
type PyPIPolicy struct {
	// Packages are project-name globs on PEP 503-normalised names
	// ("requests", "django-*"): lower case, each run of - _ . written as one
	// "-". A glob not in that form is refused at load, with its normal form,
	// so that no spelling of a name gets past a rule. Empty: no project.
	Packages []string `toml:"packages"`
	// MinReleaseAge hides versions uploaded less than this long ago, by the
	// index's upload-time (PEP 700) of each file; a file with no upload time
	// is hidden too (fail closed). Zero (unset): no minimum.
	MinReleaseAge Age `toml:"min_release_age"`
	// Deny lists version ranges that are never served, per project glob.
	Deny []PyPIDenyRule `toml:"deny"`
}

// PyPIDenyRule denies the versions of the projects matching a glob that fall
// in a PEP 440 specifier set.
type PyPIDenyRule struct {
	// Package is a project-name glob as in PyPIPolicy.Packages. Required.
	Package string `toml:"package"`
	// Versions is a PEP 440 specifier set (">=2.0,<2.3", "==1.4.*"). Pre- and
	// dev releases inside it are denied too. Required.
	Versions string `toml:"versions"`
	// Reason is shown in the denial, e.g. "compromised release". Optional.
	Reason string `toml:"reason"`

	spec *pep440.Specifiers
}

var (
	pypiSeparatorsRE = regexp.MustCompile(`[-_.]+`)
	pypiGlobRE       = regexp.MustCompile(`^[a-z0-9*?-]+$`)
)

// NormalizePyPIName is the PEP 503 normal form of a project name: lower
// case, each run of -, _ and . replaced by one "-". "Foo_Bar", "foo.bar" and
// "FOO--bar" are all "foo-bar".
func NormalizePyPIName(name string) string {
	return pypiSeparatorsRE.ReplaceAllString(strings.ToLower(name), "-")
}

// checkPyPIGlob refuses a project glob that is not in PEP 503 normal form,
// naming the form to write.
func checkPyPIGlob(g string) error {
	if n := NormalizePyPIName(g); n != g {
		return fmt.Errorf("is not a PEP 503-normalised project name pattern: write %q", n)
	}
	if !pypiGlobRE.MatchString(g) {
		return fmt.Errorf(`is not a PyPI project name pattern (e.g. "requests", "django-*")`)
	}
	return nil
}

// parseSpecifiers parses a PEP 440 specifier set; pre-releases inside it count.
func parseSpecifiers(s string) (*pep440.Specifiers, error) {
	bad := `is not a PEP 440 specifier set (e.g. "==2.3.1", ">=2.0,<2.3", "==1.4.*")`
	if strings.TrimSpace(s) == "" {
		return nil, fmt.Errorf("is empty")
	}
	if strings.Contains(s, "||") { // the library's own extension, not PEP 440
		return nil, fmt.Errorf("%s: || is not PEP 440; write one deny entry per range", bad)
	}
	spec, err := pep440.NewSpecifiers(s, pep440.WithPreRelease(true))
	if err != nil {
		return nil, fmt.Errorf("%s: %v", bad, err)
	}
	return &spec, nil
}

func (pr *Profile) validatePyPI(d *decoder, pp path) {
	yp := pp.key("pypi")
	checkGlobs(d, yp.key("packages"), pr.PyPI.Packages, checkPyPIGlob)
	pr.checkMinAge(d, yp, pr.PyPI.MinReleaseAge)
	dp := yp.key("deny")
	for i := range pr.PyPI.Deny {
		r := &pr.PyPI.Deny[i]
		ep := dp.elem(i, isArrayOfTables(d, dp, i))
		if !d.has(ep.key("package")) {
			d.missing(ep.key("package"), ep, `%s: entry needs package, a project-name glob (e.g. package = "requests")`, dp)
		} else if err := checkGlob(r.Package); err != nil {
			d.atValue(ep.key("package"), "%s.package: %q %v", dp, r.Package, err)
		} else if err := checkPyPIGlob(r.Package); err != nil {
			d.atValue(ep.key("package"), "%s.package: %q %v", dp, r.Package, err)
		} else if !pr.PyPIProject(r.Package).Allow && !strings.ContainsAny(r.Package, "*?") {
			d.atValue(ep.key("package"), "%s.package: %q is not in this profile's pypi.packages, so the rule can never apply", dp, r.Package)
		}
		if !d.has(ep.key("versions")) {
			d.missing(ep.key("versions"), ep, `%s: entry needs versions, a PEP 440 specifier set (e.g. versions = "==2.3.1" or ">=2.0,<2.3")`, dp)
		} else if spec, err := parseSpecifiers(r.Versions); err != nil {
			d.atValue(ep.key("versions"), "%s.versions: %q %v", dp, r.Versions, err)
		} else {
			r.spec = spec
		}
	}
}

// PyPIProject decides whether the profile allows a PyPI project, by its name
// in any spelling: the name is normalised (PEP 503) before it is matched.
func (pr *Profile) PyPIProject(name string) Decision {
	if pr == nil {
		return Decision{Rule: "no profile"}
	}
	return pr.firstMatch("pypi.packages", "project", pr.PyPI.Packages, NormalizePyPIName(name))
}

// PyPIDeny decides a version of an allowed project against the profile's
// pypi.deny list alone; it allows unless a rule's glob and specifier set both
// match. A version that is not PEP 440 is denied when a rule names the
// project (fail closed), since cproxy cannot tell whether it is in the set.
func (pr *Profile) PyPIDeny(name, version string) VersionDecision {
	if pr == nil {
		return VersionDecision{Decision: Decision{Rule: "no profile"}, Reason: "the sandbox has no profile"}
	}
	return denyVersion(pr, "pypi", pr.PyPI.Deny, NormalizePyPIName(name), version, pep440.Parse, "PEP 440", "project")
}

func (r PyPIDenyRule) rule() (string, string, string) { return r.Package, r.Versions, r.Reason }
func (r PyPIDenyRule) has(v pep440.Version) bool      { return r.spec != nil && r.spec.Check(v) }

// PyPIVersion decides whether a file of a version of an allowed project may
// be served: not denied by PyPIDeny, and, when the profile has a
// min_release_age, uploaded (per the index's upload-time) at least that long
// before now. A zero upload time is "unknown" and is denied when there is a
// minimum.
func (pr *Profile) PyPIVersion(name, version string, uploaded, now time.Time) VersionDecision {
	d := pr.PyPIDeny(name, version)
	if !d.Allow || pr == nil {
		return d
	}
	return pr.releaseAge(d, ".pypi.min_release_age", pr.PyPI.MinReleaseAge, uploaded, now, "the index gives no upload time for it")
}

// HasPyPIVersionPolicy reports whether the profile filters PyPI versions at all.
func (pr *Profile) HasPyPIVersionPolicy() bool {
	return pr != nil && (pr.PyPI.MinReleaseAge.Duration > 0 || len(pr.PyPI.Deny) > 0)
}

// PyPIQuestion is a request for a PyPI project: its index page (no
// version) or a file of one version.
type PyPIQuestion struct {
	// Name is the project's name, in any spelling; it is normalised.
	Name string
	// Version is the file's version; empty for the index page.
	Version string
	// Uploaded is the file's upload time, as the index gives it (zero when
	// it gives none); nil while not fetched.
	Uploaded *time.Time
	// Now is the time the release age is measured at.
	Now time.Time
}

// AskPyPI asks whether the profile may have a PyPI project: pypi.packages,
// then for a version pypi.deny and pypi.min_release_age. An index page's
// versions are each decided when it is rewritten, and a release age needs
// the file's upload time: both are deferred steps. The answer's Rule is the
// project's rule unless a version rule refuses.
func (pr *Profile) AskPyPI(q PyPIQuestion) Answer {
	name := NormalizePyPIName(q.Name)
	a := newAnswer()
	d := pr.PyPIProject(name)
	a.Rule = d.Rule
	if !a.ask("project "+name, "pypi.packages", d, "") {
		return a
	}
	if q.Version == "" {
		if pr.HasPyPIVersionPolicy() {
			a.later("versions of "+name, "pypi", pr.rule(".pypi"), fmt.Sprintf("each version is checked against %s.pypi at request time; ask about NAME==VERSION for one", pr.Key()))
		}
		return a
	}
	what := name + "==" + q.Version
	if vd := pr.PyPIDeny(name, q.Version); !a.ask("version "+what, "pypi.deny", vd.Decision, vd.Reason) {
		return a
	}
	if pr.PyPI.MinReleaseAge.Duration <= 0 {
		return a
	}
	if q.Uploaded == nil {
		text, _ := pr.PyPI.MinReleaseAge.MarshalText()
		a.later("release age of "+what, "pypi.min_release_age", pr.rule(".pypi.min_release_age"),
			fmt.Sprintf("release age checked against the index's upload time at request time (%s.pypi.min_release_age = %q)", pr.Key(), text))
		return a
	}
	vd := pr.PyPIVersion(name, q.Version, *q.Uploaded, q.Now)
	a.ask("release age of "+what, "pypi.min_release_age", vd.Decision, vd.Reason)
	return a
}
