package bench

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"reflect"
	"strings"
	"testing"
	"time"
)

// needPip skips a test when Debian's Python has no venv with pip, except
// under CI=true, where that is a failure (as cmd/cproxy's [pip] condition).
func needPip(t *testing.T) {
	t.Helper()
	if exec.Command(pipPython, "-c", "import ensurepip, venv").Run() == nil {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatal(pipPython + " has no venv with pip: .ci/run installs python3-venv and python3-pip")
	}
	t.Skip(pipPython + " has no venv with pip (apt-get install python3-venv python3-pip)")
}

// TestPipTree checks the generated tree without pip: the same every time,
// every requirement naming a project of the tree and met by its newest
// version, and every project reachable from the root.
func TestPipTree(t *testing.T) {
	tree := pipTree(DefaultPipOptions.Packages)
	if !reflect.DeepEqual(tree, pipTree(DefaultPipOptions.Packages)) {
		t.Fatal("two trees of the same size differ")
	}
	if len(tree.Projects) < 31 {
		t.Fatalf("%d projects, want at least 31", len(tree.Projects))
	}
	byName := map[string]pipProject{}
	for _, p := range tree.Projects {
		byName[p.Name] = p
	}
	reached := map[string]bool{pipRoot: true}
	var walk func(p pipProject)
	walk = func(p pipProject) {
		for _, req := range p.Requires {
			i := strings.IndexAny(req, ">~")
			dep, ok := byName[req[:i]]
			if !ok {
				t.Fatalf("%s requires %s, not in the tree", p.Name, req)
			}
			if strings.HasSuffix(req, ">=1.1") && len(dep.Versions) < 2 {
				t.Errorf("%s: no 1.1 in %v", req, dep.Versions)
			}
			if !reached[dep.Name] {
				reached[dep.Name] = true
				walk(dep)
			}
		}
	}
	walk(tree.Projects[0])
	if len(reached) != len(tree.Projects) {
		t.Errorf("%d of %d projects reachable from the root", len(reached), len(tree.Projects))
	}
}

// TestPipTreeInstalls runs the pip install benchmark small, one install
// each way: the real pip installs every project directly and through both
// cproxy processes, cproxy answering pip's requests, and the tables come
// out. It checks that the harness works, not how fast anything is.
func TestPipTreeInstalls(t *testing.T) {
	needPip(t)
	if testing.Short() {
		t.Skip("builds cproxy and runs pip")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, err := RunPip(ctx, PipOptions{Cproxy: os.Getenv("CPROXY_BENCH_CPROXY"), Dir: t.TempDir(), Packages: 6, Reps: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Runs) != 3 || res.Installed != 7 {
		t.Fatalf("%d runs, %d installed; want 3 and 7: %+v", len(res.Runs), res.Installed, res)
	}
	for _, run := range res.Runs {
		if (run.Way == wayDirect) != (run.Proxied == 0) {
			t.Errorf("%s: cproxy answered %d requests", run.Way, run.Proxied)
		}
	}
	if res.Use[wayCproxy].Peak == 0 || res.Use[wayCproxyAge].Peak == 0 {
		t.Errorf("cproxy's memory not read: %+v", res.Use)
	}
	var b bytes.Buffer
	res.Markdown(&b)
	if !strings.Contains(b.String(), "| 1 | cproxy+age |") {
		t.Errorf("tables:\n%s", b.String())
	}
}
