package npm

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/cproxy/cproxy/routes/routetest"
)

// registrySpecs are dependency specs npm resolves on the registry, as
// version manifests give them.
var registrySpecs = []string{
	"1.0.0", "^1.2.3", "~1.2.3", ">=1.0.0 <2.0.0", ">= 1.0.0", "1.x", "1.2.x", "*", "", "x", "latest", "next",
	"beta", "1.0.0 - 2.0.0", "^1.0.0 || ^2.0.0", "  1.0.0 ", "=1.2.3", "v1.2.3", "^1.0.0-rc.1", "1.0.0-alpha.1+build.5",
	"<2", ">1.0.0 <= 2.0.0", "1.0.0rc1", "npm:other@^1.0.0", "npm:@scope/other@2", "NPM:other@1", "npm:other", "npm:other@",
}

// foreignSpecs are dependency specs npm (or pnpm, or yarn) would fetch
// from somewhere else than the registry, or cannot read at all.
var foreignSpecs = []string{
	"http://evil.example/x.tgz", "https://evil.example/x.tgz", "HTTPS://evil.example/x.tgz",
	"git+https://evil.example/x.git", "git+ssh://git@evil.example/x.git", "git://evil.example/x.git",
	"git+file:///tmp/x", "github:user/repo", "gitlab:user/repo", "bitbucket:user/repo", "gist:abc123",
	"user/repo", "user/repo#v1.0.0", "git@github.com:user/repo.git", "file:../x", "file:x.tgz", "../x", "./x",
	"/tmp/x", "~/x", ".x", "x.tgz", "x.TAR", "x.tar.gz", "1.0.0-a.tar", "1.0.0-a.tgz", "C:x", "link:../x",
	"workspace:*", "portal:../x", "patch:x@npm:1.0.0#./p.patch", "jsr:@std/x", "catalog:", "exec:./x.js",
	"npm:other@git+https://evil.example/x.git", "npm:other@github:user/repo", "npm:other@npm:third@1",
	"npm:", "npm:@scope", "npm:../x@1", "npm:other@user/repo", "1.0.0#x", "a@b.c:d", "foo@bar", "\\\\host\\share",
	"1.0.0\x00/x",
}

func TestRegistrySpec(t *testing.T) {
	for _, s := range registrySpecs {
		if !registrySpec(s) {
			t.Errorf("registrySpec(%q) = false, want true", s)
		}
	}
	for _, s := range foreignSpecs {
		if registrySpec(s) {
			t.Errorf("registrySpec(%q) = true, want false", s)
		}
	}
}

// TestForeignDependency: each member npm installs from is read, in every
// shape npm would read dependencies from; devDependencies are not.
func TestForeignDependency(t *testing.T) {
	for doc, want := range map[string]string{
		`{}`: "",
		`{"dependencies":{"a":"^1.0.0","b":"npm:c@2"},"optionalDependencies":{"d":"*"},"peerDependencies":{"e":">=16"}}`: "",
		`{"dependencies":null,"optionalDependencies":[],"peerDependencies":""}`:                                          "",
		`{"dependencies":[ ],"optionalDependencies":{ }}`:                                                                "",
		`{"devDependencies":{"a":"github:user/repo"}}`:                                                                   "",
		`{"dependencies":{"a":"^1.0.0","b":"git+https://evil.example/b.git"}}`:                                           "dependencies b",
		`{"optionalDependencies":{"a":"https://evil.example/a.tgz"}}`:                                                    "optionalDependencies a",
		`{"peerDependencies":{"a":"user/repo"}}`:                                                                         "peerDependencies a",
		`{"dependencies":["git+https://evil.example/b.git"]}`:                                                            "dependencies ",
		`{"dependencies":"/"}`:                                  "dependencies ",
		`{"dependencies":{"a":1}}`:                              "dependencies ",
		`{"dependencies":{"a":["https://evil.example/a.tgz"]}}`: "dependencies ",
	} {
		var vdoc map[string]json.RawMessage
		if err := json.Unmarshal([]byte(doc), &vdoc); err != nil {
			t.Fatal(err)
		}
		member, name, ok := foreignDependency(vdoc, map[string]bool{})
		got := ""
		if ok {
			got = member + " " + name
		}
		if got != want {
			t.Errorf("%s: %q, want %q", doc, got, want)
		}
	}
}

// npa's rules, from npm-package-arg 13 (lib/npa.js, the version npm 11
// bundles), on POSIX: how resolve() tells the types of spec apart.
var (
	npaHasSlashes = regexp.MustCompile(`[/]`)
	npaIsURL      = regexp.MustCompile(`(?i)^(?:git[+])?[a-z]+:`)
	npaIsGit      = regexp.MustCompile(`(?i)^[^@]+@[^:.]+\.[^:]+:.+$`)
	npaIsFileType = regexp.MustCompile(`(?i)[.](?:tgz|tar\.gz|tar)$`)
	npaIsFile     = regexp.MustCompile(`^(?:[.]|~[/]|[/]|[a-zA-Z]:)`)
)

// npaRegistry is whether npm-package-arg's resolve(name, spec) can end in
// fromRegistry, or in fromAlias with a registry spec: spec is not a file
// spec, an alias of anything else, a hosted git URL or shorthand (which
// needs a : or a /), a URL, or a path or tarball. (fromRegistry may still
// throw, for a tag npm cannot use: that installs nothing.)
func npaRegistry(spec string) bool {
	if strings.HasPrefix(strings.ToLower(spec), "file:") || npaIsFile.MatchString(spec) {
		return false
	}
	if strings.HasPrefix(strings.ToLower(spec), "npm:") {
		// fromAlias: npa(arg) of the rest, which must be a registry spec
		// with a name.
		arg := spec[4:]
		if npaIsURL.MatchString(arg) || npaIsGit.MatchString(arg) {
			return false
		}
		at := strings.Index(arg[min(1, len(arg)):], "@")
		name := arg
		if at >= 0 {
			name = arg[:at+1]
		}
		if !strings.HasPrefix(name, "@") && (npaHasSlashes.MatchString(name) || npaIsFileType.MatchString(name)) {
			return false
		}
		sub := "*"
		if at >= 0 && arg[at+2:] != "" {
			sub = arg[at+2:]
		}
		return !strings.HasPrefix(strings.ToLower(sub), "npm:") && npaRegistry(sub)
	}
	if strings.ContainsAny(spec, ":/") || npaIsURL.MatchString(spec) {
		return false // hosted git, a URL, or a path
	}
	return !npaHasSlashes.MatchString(spec) && !npaIsFileType.MatchString(spec)
}

// FuzzRegistrySpec holds registrySpec to npm-package-arg's rules (ported
// in npaRegistry): every spec cproxy lets through is one npm resolves on
// the registry, and holds nothing a looser reader could take for a URL, a
// path or git (no / \ : #, and no @ but an alias's).
func FuzzRegistrySpec(f *testing.F) {
	for _, s := range append(registrySpecs, foreignSpecs...) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, spec string) {
		if !registrySpec(spec) {
			return
		}
		if !npaRegistry(spec) {
			t.Fatalf("cproxy takes %q for a registry spec, npm-package-arg does not", spec)
		}
		rest := spec
		if len(spec) >= 4 && strings.EqualFold(spec[:4], "npm:") {
			at := strings.Index(spec[5:], "@")
			if at < 0 {
				return
			}
			if name := spec[4 : at+5]; !validNPMName(name) {
				t.Fatalf("%q aliases %q, not a package name", spec, name)
			}
			rest = spec[at+6:]
		}
		if strings.ContainsAny(rest, `/\:#@`) || strings.HasPrefix(strings.TrimSpace(rest), ".") || npaIsFileType.MatchString(strings.TrimSpace(rest)) {
			t.Fatalf("cproxy takes %q for a registry spec", spec)
		}
	})
}

// TestRegistrySpecIsNPMs asks npm's own npm-package-arg (the copy the npm on
// PATH bundles) about the specs above: every spec cproxy lets through is a
// registry spec to it, and every one it resolves on the registry that
// cproxy refuses is one it cannot install either. In CI npm must be there.
func TestRegistrySpecIsNPMs(t *testing.T) {
	npm, err := exec.LookPath("npm")
	if err == nil {
		npm, err = filepath.EvalSymlinks(npm)
	}
	node, nerr := exec.LookPath("node")
	if err != nil || nerr != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI=true but npm or node is not installed (.ci/run installs the npm package)")
		}
		t.Skip("npm or node is not installed: install the npm package")
	}
	// npm's bin/npm-cli.js is in the folder of npm's package.json.
	root := filepath.Dir(filepath.Dir(npm))
	specs := append(append([]string{}, registrySpecs...), foreignSpecs...)
	in, _ := json.Marshal(specs)
	cmd := exec.Command(node, "-e", `
const npa = require(require("module").createRequire(process.argv[1] + "/package.json").resolve("npm-package-arg"))
const out = {}
for (const s of JSON.parse(process.argv[2])) {
  try {
    const r = npa.resolve("dep", s, "/nonexistent")
    out[s] = r.registry ? "registry" : r.type
  } catch (e) {
    out[s] = "error"
  }
}
console.log(JSON.stringify(out))`, root, string(in))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	if err != nil {
		t.Fatalf("node: %v: %s", err, stderr.String())
	}
	var types map[string]string
	if err := json.Unmarshal(b, &types); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	for _, s := range specs {
		switch ours, theirs := registrySpec(s), types[s]; {
		case ours && theirs != "registry":
			t.Errorf("%q: cproxy takes it for a registry spec, npm for %s", s, theirs)
		case !ours && theirs == "registry":
			t.Errorf("%q: npm resolves it on the registry, cproxy refuses it", s)
		}
	}
}

// TestNPMForeignDependencies: through the npm route, with and without a
// version policy, abbreviated or full, a version that npm would install
// with a dependency off the registry (in dependencies, optionalDependencies
// or peerDependencies) is not in the packument; a dist-tag naming it goes,
// latest moving to the highest release left. The others keep their bytes.
func TestNPMForeignDependencies(t *testing.T) {
	reg := newNPMRegistry(t, true)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(reg.AddPackage("is-dep", "1.0.0", "1.1.0", "1.2.0", "1.3.0", "2.0.0"))
	must(reg.SetDependencies("is-dep", "1.0.0", map[string]string{"is-thing": "^1.0.0", "is-alias": "npm:is-thing@1.1.0"}))
	must(reg.SetDependencies("is-dep", "1.1.0", map[string]string{"is-thing": "^1.0.0", "evil": "git+https://evil.example/evil.git"}))
	must(reg.SetDependencyMember("is-dep", "1.2.0", "optionalDependencies", map[string]string{"evil": "https://evil.example/evil-1.0.0.tgz"}))
	must(reg.SetDependencyMember("is-dep", "1.3.0", "peerDependencies", map[string]string{"evil": "github:evil/evil"}))
	must(reg.SetDependencyMember("is-dep", "2.0.0", "devDependencies", map[string]string{"evil": "github:evil/evil"}))
	for _, policy := range []string{"none", "version policy"} {
		var e *routetest.Env
		if policy == "none" {
			e = newNPMEnv(t, reg, "http://proxy.example:8080")
		} else {
			e = newNPMVersionEnv(t, reg)
		}
		tok := e.Token("conv-42")
		for _, accept := range []string{"", "application/vnd.npm.install-v1+json"} {
			r := e.Do("GET", "/npm/is-dep", routetest.With(routetest.Bearer(tok), "Accept", accept), "")
			var p packument
			if r.Status != 200 || json.Unmarshal([]byte(r.Body), &p) != nil {
				t.Fatalf("%s, %q: %d %s", policy, accept, r.Status, r.Body)
			}
			if got := strings.Join(sortStrings(mapKeys(p.Versions)), " "); got != "1.0.0 2.0.0" || p.DistTags["latest"] != "2.0.0" {
				t.Errorf("%s, %q: versions %s, dist-tags %v", policy, accept, got, p.DistTags)
			}
			// Only 2.0.0's devDependencies, which npm does not install.
			if strings.Contains(r.Body, "evil.example") || strings.Count(r.Body, "evil/evil") != 1 || !strings.Contains(string(p.Versions["2.0.0"]), `"devDependencies":{"evil":"github:evil/evil"}`) {
				t.Errorf("%s, %q: a foreign spec reached the client: %s", policy, accept, r.Body)
			}
			if !strings.Contains(string(p.Versions["1.0.0"]), `"is-alias":"npm:is-thing@1.1.0"`) {
				t.Errorf("%s, %q: 1.0.0 changed: %s", policy, accept, p.Versions["1.0.0"])
			}
		}
	}

	// The latest itself: it moves to the highest release left.
	must(reg.AddPackage("is-latest", "1.0.0", "1.1.0-rc.1", "1.1.0"))
	must(reg.SetDependencies("is-latest", "1.1.0", map[string]string{"evil": "file:../evil"}))
	e := newNPMEnv(t, reg, "http://proxy.example:8080")
	r := e.Do("GET", "/npm/is-latest", routetest.Bearer(e.Token("conv-42")), "")
	var p packument
	if json.Unmarshal([]byte(r.Body), &p) != nil || len(p.Versions) != 2 || p.DistTags["latest"] != "1.0.0" {
		t.Errorf("is-latest: %d %s", r.Status, r.Body)
	}
}
