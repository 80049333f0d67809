package gomod

import (
	"bytes"
	"strings"

	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
)

// VisibleVersions reads an @v/list answer (one version a line) and keeps
// the versions visible says the sandbox may see, in the upstream's order.
// A line that is not a canonical version of the module is left out, so the
// answer go reads holds only versions the policy was asked about.
func VisibleVersions(mod string, list []byte, visible func(version string) bool) []string {
	var out []string
	for line := range bytes.Lines(list) {
		v := string(bytes.TrimSpace(line))
		if v == "" || module.Check(mod, v) != nil || module.IsPseudoVersion(v) {
			continue
		}
		if base := strings.TrimSuffix(v, "+incompatible"); semver.Canonical(base) != base {
			continue
		}
		if visible(v) {
			out = append(out, v)
		}
	}
	return out
}

// Newest is the version go's @latest query would choose among versions:
// the highest release, else the highest pre-release; "" when there is none.
// It stands in for an upstream @latest whose answer is hidden.
func Newest(versions []string) string {
	var rel, pre string
	for _, v := range versions {
		if semver.Prerelease(v) == "" {
			if rel == "" || semver.Compare(v, rel) > 0 {
				rel = v
			}
		} else if pre == "" || semver.Compare(v, pre) > 0 {
			pre = v
		}
	}
	if rel != "" {
		return rel
	}
	return pre
}
