package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestBeforeTarget checks the earlier build's name: a commit id or tag
// becomes cproxy@REV, anything that cannot be part of a file name is
// refused.
func TestBeforeTarget(t *testing.T) {
	for rev, want := range map[string]string{"": "cproxy@before", "be8f2fd": "cproxy@be8f2fd", "v0.3.1-rc_2": "cproxy@v0.3.1-rc_2"} {
		if got, err := BeforeTarget(rev); err != nil || got != want {
			t.Errorf("BeforeTarget(%q) = %q, %v; want %q", rev, got, err, want)
		}
	}
	for _, rev := range []string{"origin/main", "HEAD~1", "a b", "../x"} {
		if got, err := BeforeTarget(rev); err == nil || !strings.Contains(err.Error(), "git rev-parse --short") {
			t.Errorf("BeforeTarget(%q) = %q, %v; want an error naming the fix", rev, got, err)
		}
	}
}

// TestParseCPUs reads the CPU count from a /metrics answer as cproxy
// writes it, and refuses one without it.
func TestParseCPUs(t *testing.T) {
	metrics := "# HELP go_goroutines Number of goroutines that currently exist.\n# TYPE go_goroutines gauge\ngo_goroutines 12\n" +
		"# HELP go_sched_gomaxprocs_threads The current runtime.GOMAXPROCS setting.\n# TYPE go_sched_gomaxprocs_threads gauge\ngo_sched_gomaxprocs_threads 1\n"
	if n, err := parseCPUs([]byte(metrics)); err != nil || n != 1 {
		t.Errorf("parseCPUs = %d, %v; want 1", n, err)
	}
	for name, in := range map[string]string{
		"missing":    "go_goroutines 12\n",
		"not a text": "go_sched_gomaxprocs_threads{ 1\n",
	} {
		if n, err := parseCPUs([]byte(in)); err == nil {
			t.Errorf("%s: parseCPUs = %d, no error", name, n)
		}
	}
}

// TestEqualCPUs checks that a comparison of two builds running on different
// numbers of CPUs is refused, with both numbers.
func TestEqualCPUs(t *testing.T) {
	admin := func(cpus string) *Target {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/metrics" {
				http.NotFound(w, r)
				return
			}
			fmt.Fprintf(w, "# TYPE go_sched_gomaxprocs_threads gauge\ngo_sched_gomaxprocs_threads %s\n", cpus)
		}))
		t.Cleanup(srv.Close)
		return &Target{Name: "cproxy on " + cpus, admin: srv.URL}
	}
	ctx := context.Background()
	if n, err := equalCPUs(ctx, admin("1"), admin("1")); err != nil || n != 1 {
		t.Errorf("1 and 1: %d, %v", n, err)
	}
	if _, err := equalCPUs(ctx, admin("1"), admin("2")); err == nil || !strings.Contains(err.Error(), "cproxy on 1 runs on 1 CPUs and cproxy on 2 on 2") {
		t.Errorf("1 and 2: %v", err)
	}
}

// TestRotated checks the order of the ways: two alternate, as they always
// did, and with three each runs first once in three rounds and each follows
// every other as often.
func TestRotated(t *testing.T) {
	two := []string{"direct", "cproxy"}
	if got := [][]string{rotated(two, 0), rotated(two, 1), rotated(two, 2)}; !slices.EqualFunc(got, [][]string{two, {"cproxy", "direct"}, two}, slices.Equal) {
		t.Errorf("two ways: %v", got)
	}
	three := []string{"direct", "cproxy", "cproxy@be8f2fd"}
	first, after := map[string]int{}, map[string]int{}
	for rep := range 3 {
		order := rotated(three, rep)
		if len(order) != 3 {
			t.Fatalf("round %d: %v", rep, order)
		}
		first[order[0]]++
		for i := 1; i < len(order); i++ {
			after[order[i-1]+" then "+order[i]]++
		}
	}
	for _, w := range three {
		if first[w] != 1 {
			t.Errorf("%s ran first in %d of 3 rounds", w, first[w])
		}
	}
	if len(after) != 3 {
		t.Errorf("successions: %v", after)
	}
	if r := rotated(three, 0); !slices.Equal(three, []string{"direct", "cproxy", "cproxy@be8f2fd"}) || !slices.Equal(r, three) {
		t.Errorf("rotated changed its argument or round 0: %v, %v", three, r)
	}
}

// TestBeforeTable checks the model route's table with an earlier build: its
// column, its ratios to the floors and cproxy ÷ it, and the CPUs both ran on;
// and the one-CPU pair, divided only by each other and judged on its own.
func TestBeforeTable(t *testing.T) {
	rep := Rep{Stats: map[string]map[string]Stats{}, Idle: map[string]Mem{}, Held: map[string]Mem{}}
	for _, m := range measures {
		rep.Stats[m.name] = map[string]Stats{
			"direct":           {P50: 100 * time.Microsecond, PerSec: 10000},
			"goproxy":          {P50: 300 * time.Microsecond, PerSec: 5000, CPU: 100 * time.Microsecond},
			OneCPUProxyTarget:  {P50: 250 * time.Microsecond, PerSec: 5500, CPU: 80 * time.Microsecond},
			OneCPUCproxyTarget: {P50: 400 * time.Microsecond, PerSec: 4400, CPU: 90 * time.Microsecond},
			"cproxy":           {P50: 320 * time.Microsecond, PerSec: 4400, CPU: 120 * time.Microsecond},
			"cproxy@abc1234":   {P50: 340 * time.Microsecond, PerSec: 4000, CPU: 150 * time.Microsecond},
		}
	}
	res := &Result{Plan: DefaultPlan, Targets: []string{"direct", "goproxy", "cproxy", "cproxy@abc1234", OneCPUProxyTarget, OneCPUCproxyTarget},
		Before: "cproxy@abc1234", CproxyCPUs: 1, Reps: []Rep{rep}}
	wantMarkdown(t, res,
		"| cproxy | cproxy@abc1234 | Go proxy, 1 CPU | cproxy, 1 CPU | cproxy ÷ Go proxy | cproxy ÷ direct | cproxy ÷ Go proxy, both 1 CPU | cproxy@abc1234 ÷ Go proxy | cproxy@abc1234 ÷ direct | cproxy ÷ cproxy@abc1234 | target | met | met, both 1 CPU |",
		// added latency: cproxy +220, before +240, Go proxy +200, on one
		// CPU +150 and cproxy +300; totals 320, 340 against direct's 100.
		"| added latency p50, 1 client | µs | 100 | +200 (300) | not run | +220 (320) | +240 (340) | +150 (250) | +300 (400) | 1.10 | 3.20 | 2.00 | 1.20 | 3.40 | 0.92 | ≤ 1.1× Go proxy | yes (1/1) | **no** (0/1) |",
		"| throughput, 16 clients | req/s | 10000 | 5000 | not run | 4400 | 4000 | 5500 | 4400 | 0.88 | 0.44 | 0.80 | 0.80 | 0.40 | 1.10 | ≥ 0.95× Go proxy | **no** (0/1) | **no** (0/1) |",
		"- cproxy and cproxy@abc1234 both on 1 CPU (go_sched_gomaxprocs_threads)",
	)
	res.Before = ""
	if out := wantMarkdown(t, res); strings.Contains(out, "÷ cproxy@abc1234") {
		t.Errorf("without Before, the earlier build's ratios are shown:\n%s", out)
	}
}

// wantMarkdown fails t for each of want that res's Markdown lacks, and
// returns the Markdown.
func wantMarkdown(t *testing.T, res interface{ Markdown(io.Writer) }, want ...string) string {
	t.Helper()
	var b bytes.Buffer
	res.Markdown(&b)
	for _, w := range want {
		if !strings.Contains(b.String(), w) {
			t.Errorf("no %q in:\n%s", w, b.String())
		}
	}
	return b.String()
}

// TestBeforeGitAndNPMTables checks the git and npm tables of an earlier build
// and this one, and that their reports keep what each used.
func TestBeforeGitAndNPMTables(t *testing.T) {
	ms := func(ns ...int) []time.Duration {
		var d []time.Duration
		for _, n := range ns {
			d = append(d, time.Duration(n)*time.Millisecond)
		}
		return d
	}
	const b = "cproxy@abc1234"
	clones := func(direct, after, before []time.Duration) []GitClone {
		var c []GitClone
		for i := range direct {
			c = append(c, GitClone{"direct", direct[i]}, GitClone{"cproxy", after[i]}, GitClone{b, before[i]})
		}
		return c
	}
	git := &GitResult{Before: b, Repos: []GitRepoResult{{
		Repo: "acme/big", PackBytes: 1 << 30, Clones: clones(ms(2000, 2200), ms(2000, 2000), ms(2500, 2000)),
		CproxyUse: CproxyUse{Peak: 19 << 20, CPU: 1600 * time.Millisecond}, Before: &CproxyUse{Peak: 20 << 20, CPU: 2 * time.Second},
	}}}
	// Throughput ÷ direct: before 2100/2250, after 2100/2000; cproxy ÷
	// before: 2250/2000, pairs 2500/2000 and 2000/2000. CPU per GiB per
	// clone: 1.00 and 0.80 s.
	wantMarkdown(t, git, "| acme/big | 0.933 (0.800–1.100) | 1.050 (1.000–1.100) | 1.125 (1.000–1.250) | 1.00 / 0.80 s | 20.0 / 19.0 MiB |")

	npm := &NPMResult{Before: b, BeforeUse: &CproxyUse{Peak: 22 << 20, CPU: 400 * time.Millisecond},
		CproxyUse: CproxyUse{Peak: 21 << 20, CPU: 200 * time.Millisecond}}
	for i, d := range ms(1000, 1200) {
		npm.Runs = append(npm.Runs, NPMRun{Way: "direct", Time: d, Tarballs: 100},
			NPMRun{Way: "cproxy", Time: ms(1100, 1300)[i], Tarballs: 100}, NPMRun{Way: b, Time: ms(1300, 1300)[i], Tarballs: 100})
	}
	wantMarkdown(t, npm, "| 1.30 s | 0.846 (0.769–0.923) | 0.917 (0.909–0.923) | 1.083 (1.000–1.182) | 2000 / 1000 µs | 22.0 / 21.0 MiB |")

	for _, res := range []any{git, npm} {
		r, err := NewReport(res, nil, "")
		if err != nil {
			t.Fatal(err)
		}
		j, err := r.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		back, err := ParseReport(j)
		if err != nil {
			t.Fatalf("%s: %v", r.Benchmark, err)
		}
		again, _ := json.Marshal(back)
		first, _ := json.Marshal(r)
		if !bytes.Equal(again, first) {
			t.Errorf("%s: the earlier build's numbers did not survive the report:\n%s", r.Benchmark, j)
		}
	}
}
