package bench

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestMixedMarkdown checks the tables of a made-up result.
func TestMixedMarkdown(t *testing.T) {
	o := DefaultMixedOptions
	o.Rounds = 1
	model := ModelLoad{Requests: 100, PerSec: 20, FirstP50: time.Millisecond, FirstP99: 4 * time.Millisecond, P50: 2 * time.Millisecond, P99: 8 * time.Millisecond}
	slow := model
	slow.FirstP50 = 3 * time.Millisecond
	r := &MixedResult{Options: o, PackBytes: 200 << 20, Installed: 178, Runs: []MixedRun{
		{Round: 1, CPUs: 1, GOMAXPROCS: 1, Model: model, Wall: 5 * time.Second, CproxyUse: CproxyUse{Peak: 20 << 20, CPU: time.Second}},
		{Round: 1, CPUs: 1, GOMAXPROCS: 1, Mixed: true, Model: slow, Clone: 4 * time.Second, NPMCI: []time.Duration{3 * time.Second, 5 * time.Second}, Wall: 5 * time.Second, CproxyUse: CproxyUse{Peak: 30 << 20, CPU: 2 * time.Second}},
		{Round: 1, CPUs: 0, GOMAXPROCS: 2, Model: model, Wall: 5 * time.Second, CproxyUse: CproxyUse{Peak: 20 << 20, CPU: time.Second}},
		{Round: 1, CPUs: 0, GOMAXPROCS: 2, Mixed: true, Model: model, Clone: 2 * time.Second, NPMCI: []time.Duration{3 * time.Second}, Wall: 4 * time.Second, CproxyUse: CproxyUse{Peak: 32 << 20, CPU: 2 * time.Second}},
	}}
	var b bytes.Buffer
	r.Markdown(&b)
	for _, want := range []string{
		"| 1 | 1 → 1 | mixed | 100 | 3.00 ms / 4.00 ms | 2.00 ms / 8.00 ms | 4.00 s | 3.00, 5.00 s | 2.00 s | 30.0 MiB |",
		"| first SSE event p50 | 1.00 ms | 3.00 ms | 1.00 ms | 1.00 ms |",
		"| npm ci | — | 4.00 s (3.00–5.00 s) | — | 3.00 s |",
		"| first SSE event p50 | 3.00 | 1.00 | 3.00 |",
		"| git clone | — | — | 2.00 |",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("no %q in:\n%s", want, b.String())
		}
	}
}

// TestMixed runs the mixed-load benchmark small: every setting runs alone
// and mixed on the CPUs it was set to, the clone and every install end, and
// the tables come out.
func TestMixed(t *testing.T) {
	if os.Getenv("CPROXY_BENCH") == "" {
		t.Skip("builds and starts cproxy, clones with git and installs with npm: set CPROXY_BENCH=1")
	}
	for _, c := range []string{"git", "npm"} {
		if _, err := exec.LookPath(c); err != nil {
			t.Skipf("%s is not installed", c)
		}
	}
	res, err := RunMixed(context.Background(), MixedOptions{
		Cproxy: os.Getenv("CPROXY_BENCH_CPROXY"), Dir: t.TempDir(), Rounds: 1, GitMiB: 4, Files: 2,
		NPMPackages: 20, NPMRuns: 2, Clients: 2, Alone: 300 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Runs) != 4 {
		t.Fatalf("%d runs, want 4", len(res.Runs))
	}
	for _, run := range res.Runs {
		if run.Model.Requests == 0 || run.Peak == 0 || run.Mixed && (run.Clone == 0 || len(run.NPMCI) != 2) {
			t.Errorf("%+v", run)
		}
	}
	var b bytes.Buffer
	res.Markdown(&b)
	if !strings.Contains(b.String(), "| 1 | 1 → 1 | mixed |") {
		t.Errorf("tables:\n%s", b.String())
	}
}

// TestMixedReport: a mixed-load result goes into a JSON report and comes
// back out whole.
func TestMixedReport(t *testing.T) {
	res := &MixedResult{Options: DefaultMixedOptions, Runs: []MixedRun{{Round: 1, CPUs: 1, GOMAXPROCS: 1, NPMCI: []time.Duration{time.Second}}}}
	rep, err := NewReport(res, nil, "1.00 1.00 1.00")
	if err != nil {
		t.Fatal(err)
	}
	b, err := rep.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseReport(b)
	if err != nil {
		t.Fatal(err)
	}
	if got.Benchmark != BenchMixedLoad || got.MixedLoad == nil || len(got.MixedLoad.Runs) != 1 || got.MixedLoad.Options.Alone != DefaultMixedOptions.Alone {
		t.Errorf("%s", b)
	}
}
