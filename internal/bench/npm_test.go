package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/cproxy/cproxy/internal/fakes"
)

// TestNPMTree checks the generated tree without npm: the same every time,
// over 100 packages, some scoped, every dependency published in a version
// its range takes, and every package reachable from the root.
func TestNPMTree(t *testing.T) {
	tree := npmTree(DefaultNPMOptions.Packages)
	if !reflect.DeepEqual(tree, npmTree(DefaultNPMOptions.Packages)) {
		t.Fatal("two trees of the same size differ")
	}
	if len(tree.Packages) < 100 {
		t.Fatalf("%d packages, want at least 100", len(tree.Packages))
	}
	byName := map[string]npmTreePackage{}
	scoped := 0
	for _, p := range tree.Packages {
		byName[p.Name] = p
		if strings.HasPrefix(p.Name, "@") {
			scoped++
		}
	}
	if scoped == 0 || scoped == len(tree.Packages) {
		t.Errorf("%d of %d packages scoped, want some", scoped, len(tree.Packages))
	}
	reached := map[string]bool{}
	var walk func(deps map[string]string)
	walk = func(deps map[string]string) {
		for name, rng := range deps {
			p, ok := byName[name]
			if !ok {
				t.Fatalf("dependency %s is not in the tree", name)
			}
			if rng == "^2.0.0" && len(p.Versions) < 3 {
				t.Errorf("%s@%s: no 2.x version in %v", name, rng, p.Versions)
			}
			if !reached[name] {
				reached[name] = true
				walk(p.Deps)
			}
		}
	}
	walk(tree.Root)
	if len(reached) != len(tree.Packages) {
		t.Errorf("%d of %d packages reachable from the root", len(reached), len(tree.Packages))
	}
}

// TestNPMTreeInstalls has the real npm resolve the tree from the fake
// registry (packuments only): the lockfile holds every package, some of
// them twice, one nested.
func TestNPMTreeInstalls(t *testing.T) {
	fakes.NeedClient(t, "npm")
	reg := fakes.NewNPMRegistry(fakes.NPMRegistryOptions{Gzip: true})
	defer reg.Close()
	tree := npmTree(DefaultNPMOptions.Packages)
	if err := tree.publish(reg); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	pj, _ := json.Marshal(map[string]any{"name": "bench-app", "version": "1.0.0", "private": true, "dependencies": tree.Root})
	if err := os.WriteFile(filepath.Join(dir, "package.json"), pj, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "npm", "install", "--package-lock-only", "--registry", reg.URL+"/",
		"--cache", filepath.Join(dir, "cache"), "--no-audit", "--no-fund", "--ignore-scripts")
	cmd.Dir = dir
	cmd.Env = []string{"HOME=" + dir, "PATH=" + os.Getenv("PATH"), "npm_config_update_notifier=false", "npm_config_userconfig=" + filepath.Join(dir, "npmrc")}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm install: %v\n%s", err, out)
	}
	installed, nested, err := checkLock(filepath.Join(dir, "package-lock.json"), reg.URL+"/")
	if err != nil {
		t.Fatal(err)
	}
	if installed <= len(tree.Packages) || nested == 0 {
		t.Errorf("lockfile: %d packages, %d nested; want more than %d, some nested", installed, nested, len(tree.Packages))
	}
	if n := countNPM(reg.Requests()); n.Packuments != len(tree.Packages) || n.Tarballs != 0 {
		t.Errorf("registry requests: %+v, want %d packuments and no tarball", n, len(tree.Packages))
	}
}

// TestNPMMarkdown checks the tables of a made-up result.
func TestNPMMarkdown(t *testing.T) {
	r := &NPMResult{Packages: 140, Installed: 178, CproxyUse: CproxyUse{Peak: 18 << 20, CPU: 100 * time.Millisecond}, Runs: []NPMRun{
		{Way: "direct", Time: time.Second, Tarballs: 178},
		{Way: "cproxy", Time: 1250 * time.Millisecond, Tarballs: 178},
	}}
	var b bytes.Buffer
	r.Markdown(&b)
	for _, want := range []string{"| 1 | cproxy | 1.25 s | 0.00 s | 178 | 0 |", "| 1.00 s | 1.25 s | 0.800 (0.800–0.800) | ≥ 0.9 | **no** |", "| 18.0 MiB |"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("no %q in:\n%s", want, b.String())
		}
	}
}

// TestNPMCI runs the npm ci benchmark small: both ways install the whole
// lockfile, cproxy's memory is read, the tables come out.
func TestNPMCI(t *testing.T) {
	if os.Getenv("CPROXY_BENCH") == "" {
		t.Skip("builds and starts cproxy and installs with npm: set CPROXY_BENCH=1")
	}
	fakes.NeedClient(t, "npm")
	res, err := RunNPM(context.Background(), NPMOptions{
		Cproxy: os.Getenv("CPROXY_BENCH_CPROXY"), Dir: t.TempDir(), Packages: 100, Reps: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Runs) != 2 || res.Installed < 100 || res.Peak == 0 {
		t.Errorf("%+v", res)
	}
	var b bytes.Buffer
	res.Markdown(&b)
	if !strings.Contains(b.String(), "| 1 | cproxy |") {
		t.Errorf("tables:\n%s", b.String())
	}
}
