package npm

import (
	"net/url"
	"regexp"
	"strings"
	"testing"
)

// FuzzValidNPMName compares cproxy's package-name rule with npm's own,
// validate-npm-package-name 7.0.2 (the version npm 11 bundles), ported
// below. Every name cproxy accepts is one npm accepts for an existing
// package, so the name the policy checks is the name npm asked for; it is
// one URL path segment (two with a scope) that needs no escaping and is not
// a dot segment. The other way, every unscoped name npm lets a package be
// published under today, and every such name under a plain scope, is one
// cproxy serves.
func FuzzValidNPMName(f *testing.F) {
	for _, s := range []string{
		"react", "@types/node", "JSONStream", "@types/JSONStream", "-", "~a", "a.b_c-d~e",
		"@Types/node", "@.a/b", "@a/.b", "@a/_b", "@a/node_modules", "NODE_MODULES", "favicon.ico",
		"a!b", "@a!b/c", "a b", " a", "a%20b", "@a/b/c", "@/a", "@a/", "a/b", "é", ".", "..", "@a/..",
		strings.Repeat("a", 214), strings.Repeat("a", 215),
	} {
		f.Add(s)
	}
	plainScope := regexp.MustCompile(`^@[a-z0-9][a-z0-9-]*/`)
	f.Fuzz(func(t *testing.T, name string) {
		ours := validNPMName(name)
		if ours {
			// One known difference, names npm itself never asks for:
			// cproxy still serves the old names that start with '-' (the
			// registry holds "-"), which validate-npm-package-name 7
			// refuses.
			lax := strings.HasPrefix(name, "-")
			if !npmValidForOldPackages(name) && !lax {
				t.Fatalf("cproxy accepts %q, npm does not", name)
			}
			parts := strings.Split(name, "/")
			for _, p := range parts {
				if p == "" || p == "." || p == ".." || url.PathEscape(p) != p {
					t.Fatalf("accepted %q holds the path segment %q", name, p)
				}
			}
			if len(parts) > 2 || len(parts) == 2 && !strings.HasPrefix(name, "@") {
				t.Fatalf("accepted %q is not one package", name)
			}
		}
		// cproxy is stricter than npm with a scoped package that starts
		// with '_' or is named node_modules or favicon.ico.
		last := name[strings.IndexByte(name, '/')+1:]
		if !ours && npmValidForNewPackages(name) && (!strings.HasPrefix(name, "@") || plainScope.MatchString(name)) &&
			!strings.HasPrefix(last, "_") && last != "node_modules" && last != "favicon.ico" {
			t.Fatalf("npm publishes %q, cproxy refuses it", name)
		}
	})
}

// npmValidForOldPackages is validate-npm-package-name 7.0.2's
// validForOldPackages: its errors, without its warnings.
func npmValidForOldPackages(name string) bool {
	if name == "" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "-") ||
		strings.HasPrefix(name, "_") || strings.TrimSpace(name) != name {
		return false
	}
	if l := asciiLower(name); l == "node_modules" || l == "favicon.ico" {
		return false
	}
	if uriComponentSafe(name) {
		return true
	}
	// ^(?:@([^/]+?)[/])?([^/]+?)$ with both groups URL-safe; an unscoped
	// match leaves the user undefined, which encodeURIComponent turns into
	// "undefined", so it fails.
	user, pkg, ok := strings.Cut(strings.TrimPrefix(name, "@"), "/")
	if !strings.HasPrefix(name, "@") || !ok || user == "" || pkg == "" || strings.Contains(pkg, "/") {
		return false
	}
	return !strings.HasPrefix(pkg, ".") && uriComponentSafe(user) && uriComponentSafe(pkg)
}

// npmValidForNewPackages adds the warnings that matter here: capitals,
// more than 214 characters, and ~'!()* in the last part. (Core module
// names are warnings too; cproxy serves them, so they are left out.)
func npmValidForNewPackages(name string) bool {
	last := name[strings.LastIndexByte(name, '/')+1:]
	return npmValidForOldPackages(name) && asciiLower(name) == name && len(name) <= 214 &&
		!strings.ContainsAny(last, "~'!()*")
}

// uriComponentSafe reports whether JavaScript's encodeURIComponent leaves s
// as it is.
func uriComponentSafe(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("-_.!~*'()", c) >= 0) {
			return false
		}
	}
	return true
}

func asciiLower(s string) string {
	return strings.Map(func(r rune) rune {
		if 'A' <= r && r <= 'Z' {
			return r + 'a' - 'A'
		}
		return r
	}, s)
}
