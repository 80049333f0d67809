package bench

import (
	"bytes"
	"context"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/cproxy/cproxy/internal/fakes"
	"golang.org/x/mod/modfile"
)

// TestGoModTree checks the generated set without go: the same every time,
// at least 30 modules, each go.mod valid and requiring modules of the set,
// some of them in chains.
func TestGoModTree(t *testing.T) {
	tree := goModTree(DefaultGoModOptions.Modules)
	if !reflect.DeepEqual(tree, goModTree(DefaultGoModOptions.Modules)) {
		t.Fatal("two sets of the same size differ")
	}
	if len(tree.Modules) < 30 {
		t.Fatalf("%d modules, want at least 30", len(tree.Modules))
	}
	required := 0
	for i, m := range tree.Modules {
		f, err := modfile.Parse("go.mod", []byte(tree.goMod(i)), nil)
		if err != nil {
			t.Fatalf("%s: %v", m.Path, err)
		}
		required += len(f.Require)
	}
	if required < len(tree.Modules)-4 {
		t.Errorf("%d requirements between the modules, want chains through most of them", required)
	}
	main, err := modfile.Parse("go.mod", []byte(tree.mainGoMod()), nil)
	if err != nil || len(main.Require) != len(tree.Modules) {
		t.Errorf("main go.mod: %v, %d requirements, want %d", err, len(main.Require), len(tree.Modules))
	}
}

// TestGoModDownloads runs the go mod download benchmark small, one
// download each way: the machine's go downloads and verifies every module
// directly, through the do-nothing proxies and through the cproxy
// processes' TLS listener, each proxy answering go's requests, and the
// tables come out. It checks that the
// harness works, not how fast anything is.
func TestGoModDownloads(t *testing.T) {
	fakes.NeedClient(t, "go")
	if testing.Short() {
		t.Skip("builds cproxy and runs go mod download")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, err := RunGoMod(ctx, GoModOptions{Cproxy: os.Getenv("CPROXY_BENCH_CPROXY"), Dir: t.TempDir(), Modules: 6, Reps: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Runs) != len(goModWays) || res.Modules != 6 {
		t.Fatalf("%d runs of %d modules; want %d of 6: %+v", len(res.Runs), res.Modules, len(goModWays), res)
	}
	for _, run := range res.Runs {
		if strings.HasPrefix(run.Way, wayDirect) != (run.Proxied == 0) {
			t.Errorf("%s: the proxy answered %d requests", run.Way, run.Proxied)
		}
	}
	for _, way := range goModWays[2:] {
		if res.Use[way].Peak == 0 {
			t.Errorf("%s: memory not read: %+v", way, res.Use[way])
		}
	}
	var b bytes.Buffer
	res.Markdown(&b)
	for _, want := range []string{"| 1 | cproxy+age |", "| 1 | goproxy-1cpu |", "| cproxy | goproxy-1cpu |", "| cproxy-all | goproxy |"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("no %q in the tables:\n%s", want, b.String())
		}
	}
}
