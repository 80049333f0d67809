package npm

import (
	"encoding/json"
	"strings"

	"github.com/Masterminds/semver/v3"
)

// installedDependencies are the members of a version manifest that name
// packages npm installs with the version: dependencies, optionalDependencies
// and, since npm 7, peerDependencies. A dependency's devDependencies are
// never installed (by npm, pnpm or yarn), so they are not read.
var installedDependencies = []string{"dependencies", "optionalDependencies", "peerDependencies"}

// foreignDependency finds a dependency of a version manifest that npm
// would fetch from somewhere else than the registry (a URL, git, GitHub
// shorthand, a file), or that cannot be read as one it would not: its
// member and, when it has one, its name. ok is false when every dependency
// is a registry spec (registrySpec). A member that is not an object of
// strings counts (npm reads an array's entries as dependencies named "0",
// "1", …), unless it is null or an empty array or string, which name
// nothing. known caches what registrySpec said of each spec (the versions
// of a package repeat their specs).
func foreignDependency(vdoc map[string]json.RawMessage, known map[string]bool) (member, name string, ok bool) {
	for _, m := range installedDependencies {
		raw, present := vdoc[m]
		if !present {
			continue
		}
		var deps map[string]string
		if err := json.Unmarshal(raw, &deps); err != nil {
			if namesNothing(raw) {
				continue
			}
			// An array, or a spec that is not a string.
			return m, "", true
		}
		for dep, s := range deps {
			if !knownRegistrySpec(s, known) {
				return m, dep, true
			}
		}
	}
	return "", "", false
}

// knownRegistrySpec is registrySpec(spec), remembered in known.
func knownRegistrySpec(spec string, known map[string]bool) bool {
	reg, seen := known[spec]
	if !seen {
		reg = registrySpec(spec)
		if len(known) < maxKnownSpecs {
			known[spec] = reg
		}
	}
	return reg
}

// foreignMember is foreignDependency for one of a version's dependencies
// members, raw as jsonScanner checked it: whether it names a dependency
// npm would fetch from elsewhere than the registry, or cannot be read as
// naming none. As encoding/json reads the member into a map of strings, a
// null spec is "" (any version), and a member that is not an object of
// strings and nulls counts unless it is null, [] or "".
func foreignMember(raw []byte, known map[string]bool) bool {
	switch raw[0] {
	case 'n':
		return false
	case '"':
		return len(raw) != 2
	case '[':
		return raw[1] != ']'
	case '{':
	default:
		return true
	}
	for _, at := range checkedMembers(raw) {
		switch raw[at] {
		case 'n':
			if !knownRegistrySpec("", known) {
				return true
			}
		case '"':
			q := raw[at:skipString(raw, at)]
			if b := q[1 : len(q)-1]; !needsUnquote(b) {
				if reg, seen := known[string(b)]; seen {
					if !reg {
						return true
					}
					continue
				}
			}
			if !knownRegistrySpec(checkedString(q), known) {
				return true
			}
		default:
			return true
		}
	}
	return false
}

// namesNothing says whether a dependencies member is null, an empty array
// or an empty string, in which npm finds no dependency.
func namesNothing(raw json.RawMessage) bool {
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return false
	}
	switch v := v.(type) {
	case nil:
		return true
	case []any:
		return len(v) == 0
	case string:
		return v == ""
	}
	return false
}

// maxKnownSpecs bounds the specs one packument's rewrite remembers.
const maxKnownSpecs = 4096

// registrySpec says whether spec, a dependency's spec as a version manifest
// gives it, is one npm resolves on the registry, through cproxy: a semver
// range (Masterminds/semver's grammar; "" and "*" are any version), a
// dist-tag, or an npm: alias of a package name with one of those. Anything
// else is refused: what npm-package-arg reads as a URL (http:, https:,
// git+…:, git:), a hosted git shorthand (github:, gitlab:, bitbucket:,
// gist:, user/repo, git@host:path), a file or folder (file:, a path, a name
// ending in .tgz, .tar or .tar.gz), and the protocols of other clients
// (workspace:, link:, portal:, patch:, jsr:, catalog:). A range or tag
// accepted, alone or after an alias's name, holds none of / \ : # @, does
// not start with . and does not end in .tgz, .tar or .tar.gz, so
// npm-package-arg can read it only as a registry spec (FuzzRegistrySpec
// holds it to a port of its rules, TestRegistrySpecIsNPMs to npm's own).
func registrySpec(spec string) bool {
	if rest, ok := cutPrefixFold(spec, "npm:"); ok {
		// npm:NAME or npm:NAME@SPEC; a scoped NAME starts with its own @.
		name, sub := rest, ""
		if i := strings.IndexByte(rest[min(1, len(rest)):], '@'); i >= 0 {
			name, sub = rest[:i+1], rest[i+2:]
		}
		return validNPMName(name) && registryRange(sub)
	}
	return registryRange(spec)
}

// registryRange is registrySpec without aliases: a range or a dist-tag.
func registryRange(spec string) bool {
	s := strings.TrimSpace(spec)
	if s == "" {
		return true
	}
	if strings.ContainsAny(s, `/\:#@`) || s[0] == '.' || isFileType(s) {
		return false
	}
	if isDistTag(s) {
		return true
	}
	_, err := semver.NewConstraint(s)
	return err == nil
}

// isDistTag says whether s is a dist-tag npm takes: nothing that
// encodeURIComponent would escape.
func isDistTag(s string) bool {
	for _, c := range []byte(s) {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', strings.IndexByte("-_.!~*'()", c) >= 0:
		default:
			return false
		}
	}
	return s != ""
}

// isFileType says whether s ends as npm-package-arg's file specs do.
func isFileType(s string) bool {
	l := strings.ToLower(s)
	return strings.HasSuffix(l, ".tgz") || strings.HasSuffix(l, ".tar") || strings.HasSuffix(l, ".tar.gz")
}

func cutPrefixFold(s, prefix string) (string, bool) {
	if len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix) {
		return s[len(prefix):], true
	}
	return s, false
}
