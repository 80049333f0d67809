package layers

import (
	"go/build"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/cproxy/cproxy"

// mayImport is what each package may import of this module, by path under
// the module; "x/..." is x and everything under it. A package under routes/
// that is not named here is a route (routes/model, routes/npm, a new one):
// it gets routePackage's rule, so adding a route needs no line here. Any
// other package not named here may import nothing of ours until it is.
var mayImport = map[string][]string{
	"policy":               {},
	"tokens":               {},
	"helpers/gitcred":      {},
	"helpers/sandboxenv":   {},
	"client":               {},
	"secrets":              {"internal/watch", "secrets/internal/..."},
	"secrets/internal/...": {},
	"config":               {"policy", "secrets"},

	// The core: the route interface and the server, fed by budgets,
	// audit and metrics, and knowing no route.
	"routes":               {"policy", "tokens", "secrets", "routes/audit", "routes/budget", "routes/metrics", "routes/internal/memo"},
	"routes/audit":         {"tokens"},
	"routes/metrics":       {"tokens", "routes/internal/memo"},
	"routes/budget":        {"policy", "tokens", "routes/metrics"},
	"routes/internal/memo": {},
	"routes/admin":         {"routes", "client", "policy", "tokens"}, // the core's client; the core does not import it
	"routes/webhook":       {"tokens"},
	"routes/console":       {"client", "routes/audit", "secrets"}, // the admin API's client in the browser, called in process
	"routes/builtin":       {"routes", "routes/..."},
	"routes/routetest":     {"routes", "routes/admin", "routes/relay", "routes/mcp", "client", "policy", "tokens", "secrets", "internal/fakes", "internal/testutil"},
	"routes/internal/...":  routePackage,
	// The GraphQL analysis of the GitHub API route: a library of the
	// route's, standard library and gqlparser only.
	"routes/githubapi/gqlpolicy": {},
	// The GitHub API route, a route that decides GraphQL with it.
	"routes/githubapi": append([]string{"routes/githubapi/gqlpolicy"}, routePackage...),

	"cmd/...":            {"..."},
	"internal/bench/...": {"..."},
	"deploy/...":         {"..."},
	"docs/...":           {"client", "helpers/sandboxenv"},

	"internal/fakes":        {},
	"internal/testutil":     {},
	"internal/testprogress": {},
	"internal/watch":        {},
	"internal/localca":      {},
	"internal/layers":       {},
}

// routePackage is what one route's package may import: the core, the rule
// engine, credentials and tokens' types, the audit record's types and the
// shared memo; never another route, the table of routes, or the config.
var routePackage = []string{"routes", "policy", "secrets", "tokens", "routes/audit", "routes/internal/memo"}

// matches reports whether pkg is pattern or, for "x/...", under x.
func matches(pattern, pkg string) bool {
	if pattern == "..." {
		return true
	}
	if base, ok := strings.CutSuffix(pattern, "/..."); ok {
		return pkg == base || strings.HasPrefix(pkg, base+"/")
	}
	return pkg == pattern
}

// ruleFor is the rule for pkg: its own entry, the longest pattern that
// matches it, or, under routes/, a route's.
func ruleFor(pkg string) ([]string, bool) {
	if r, ok := mayImport[pkg]; ok {
		return r, true
	}
	best := ""
	for p := range mayImport {
		if matches(p, pkg) && len(p) > len(best) {
			best = p
		}
	}
	if best != "" {
		return mayImport[best], true
	}
	if strings.HasPrefix(pkg, "routes/") {
		return routePackage, true
	}
	return nil, false
}

func TestPackagesImportDownward(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		name := d.Name()
		if path != root && (strings.HasPrefix(name, ".") || name == "testdata") {
			return filepath.SkipDir
		}
		pkg, err := build.ImportDir(path, 0)
		if err != nil {
			if _, ok := err.(*build.NoGoError); ok {
				return nil
			}
			t.Errorf("%s: %v", path, err)
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		rule, ok := ruleFor(rel)
		if !ok {
			t.Errorf("%s is not in mayImport: say what it may import", rel)
			return nil
		}
		checked++
		for _, imp := range pkg.Imports {
			ours, ok := strings.CutPrefix(imp, module+"/")
			if !ok {
				continue
			}
			if strings.HasPrefix(ours, "cmd/") {
				t.Errorf("%s imports %s: nothing imports the CLI", rel, ours)
				continue
			}
			if !slices.ContainsFunc(rule, func(p string) bool { return matches(p, ours) }) {
				t.Errorf("%s imports %s, which it may not (allowed: %v)", rel, ours, rule)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 20 {
		t.Fatalf("only %d packages checked: is the module root %s?", checked, root)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatal(err)
	}
}
