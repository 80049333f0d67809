package bench

import (
	"bytes"
	"encoding/xml"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/cproxy/cproxy/tokens"
)

var fixedDate = time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)

// fixtureReports are one report of each benchmark, small but complete.
func fixtureReports(t *testing.T) map[string]*Report {
	t.Helper()
	stats := func(scale time.Duration) map[string]Stats {
		return map[string]Stats{
			"direct":     {P50: 100 * scale, P90: 150 * scale, P99: 400 * scale, Ops: 4000, PerSec: 2400},
			"goproxy":    {P50: 250 * scale, P90: 300 * scale, P99: 700 * scale, Ops: 3000, PerSec: 1800, CPU: 90 * time.Microsecond},
			"nginx":      {P50: 230 * scale, P90: 280 * scale, P99: 650 * scale, Ops: 3100, PerSec: 1900, CPU: 80 * time.Microsecond},
			"cproxy":     {P50: 320 * scale, P90: 390 * scale, P99: 900 * scale, Ops: 2800, PerSec: 1500, CPU: 150 * time.Microsecond},
			LimitsTarget: {P50: 340 * scale, P90: 410 * scale, P99: 950 * scale, Ops: 2700, PerSec: 1450, CPU: 160 * time.Microsecond},
		}
	}
	rep := func(i time.Duration) Rep {
		r := Rep{Stats: map[string]map[string]Stats{}, Idle: map[string]Mem{}, Held: map[string]Mem{},
			Metered: Metered{Answered: 20000, Usage: tokens.Usage{Requests: 20000, Input: 1e6, Output: 2e6}, AuditLines: 20000, Scrapes: 30}}
		for _, m := range measures {
			r.Stats[m.name] = stats(time.Microsecond + i*time.Microsecond/10)
		}
		for _, n := range []string{"goproxy", "nginx", "cproxy", LimitsTarget} {
			r.Idle[n], r.Held[n] = Mem{RSS: 18 << 20, Peak: 20 << 20}, Mem{RSS: 60 << 20, Peak: 64 << 20}
		}
		return r
	}
	model := &Result{
		Plan:    Plan{Reps: 3, Rounds: 6, Slice: 400 * time.Millisecond, MaxOps: 20000, Streams: 1000},
		Targets: []string{"direct", "goproxy", "nginx", "cproxy", LimitsTarget},
		Reps:    []Rep{rep(0), rep(1), rep(2)}, NginxVersion: "nginx/1.22.1",
		Machine: "2 × Xeon", LoadBefore: "0.10 0.20 0.30", LoadAfter: "1.00 1.10 1.20",
		Started: fixedDate, Took: 200 * time.Second,
	}
	git := &GitResult{GitVersion: "2.39.5", Started: fixedDate, Took: 90 * time.Second, Repos: []GitRepoResult{
		{Repo: "acme/big", PackBytes: 220 << 20, CproxyUse: CproxyUse{RSSStart: 12 << 20, Peak: 13 << 20, CPU: 450 * time.Millisecond}, Clones: []GitClone{
			{"direct", 1770 * time.Millisecond}, {"cproxy", 1830 * time.Millisecond}, {"cproxy", 1900 * time.Millisecond},
			{"direct", 1700 * time.Millisecond}, {"direct", 1800 * time.Millisecond}, {"cproxy", 1850 * time.Millisecond}}},
		{Repo: "acme/small", PackBytes: 20 << 20, CproxyUse: CproxyUse{RSSStart: 12 << 20, Peak: 13 << 20, CPU: 60 * time.Millisecond}, Clones: []GitClone{
			{"direct", 200 * time.Millisecond}, {"cproxy", 220 * time.Millisecond}}},
	}}
	npm := &NPMResult{Packages: 140, Versions: 279, Scoped: 35, Installed: 178, Nested: 38, CproxyUse: CproxyUse{RSSStart: 13 << 20, Peak: 18 << 20,
		CPU: 200 * time.Millisecond}, NPMVersion: "11.19.1", NodeVersion: "v20.20.2", Started: fixedDate, Took: 25 * time.Second,
		Locks: []NPMLock{{"direct", 2670 * time.Millisecond, 140}, {"cproxy", 3040 * time.Millisecond, 140}},
		Runs: []NPMRun{{"direct", 1970 * time.Millisecond, 178, 0, 1750 * time.Millisecond}, {"cproxy", 1280 * time.Millisecond, 178, 0, 1760 * time.Millisecond},
			{"cproxy", 1300 * time.Millisecond, 178, 0, 1810 * time.Millisecond}, {"direct", 1690 * time.Millisecond, 178, 0, 1760 * time.Millisecond}}}

	out := map[string]*Report{}
	for _, res := range []any{model, git, npm} {
		r, err := NewReport(res, []string{"-reps", "3"}, "0.10 0.20 0.30")
		if err != nil {
			t.Fatal(err)
		}
		// What the machine would add; fixed, so the charts are too.
		r.Machine = Machine{CPUs: 2, CPUModel: "Xeon", Kernel: "6.18", MemoryBytes: 24 << 30, LoadBefore: "0.10 0.20 0.30", LoadAfter: "1.00 1.10 1.20"}
		r.Versions.Go, r.Versions.Cproxy = "go1.26.8", "283d602abcde"
		out[r.Benchmark] = r
	}
	return out
}

func TestReportRoundTrip(t *testing.T) {
	for name, r := range fixtureReports(t) {
		b, err := r.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		got, err := ParseReport(b)
		if err != nil {
			t.Fatalf("%s: %v\n%s", name, err, b)
		}
		if !reflect.DeepEqual(got, r) {
			t.Errorf("%s: round trip changed the report:\n got %+v\nwant %+v", name, got, r)
		}
		again, _ := got.Marshal()
		if !bytes.Equal(again, b) {
			t.Errorf("%s: encoding the decoded report gives other bytes", name)
		}
	}
}

// TestReportFields pins a few field names: files written by earlier runs
// must still read.
func TestReportFields(t *testing.T) {
	r := fixtureReports(t)
	for name, want := range map[string][]string{
		BenchModelRoute: {`"benchmark": "model-route"`, `"date": "2026-11-30T08:00:00Z"`, `"cpus": 2`, `"nginx": "1.22.1"`, `"latency, 16 clients"`, `"p90_ns": 165000`, `"per_sec": 2400`, `"peak_bytes"`, `"audit_lines": 20000`, `"slice_ns": 400000000`},
		BenchGitClone:   {`"benchmark": "git-clone"`, `"git": "2.39.5"`, `"pack_bytes": 230686720`, `"way": "cproxy"`, `"time_ns": 1830000000`},
		BenchNPMCI:      {`"benchmark": "npm-ci"`, `"npm": "11.19.1"`, `"node": "v20.20.2"`, `"npm_cpu_ns": 1750000000`, `"installed": 178`},
	} {
		b, err := r[name].Marshal()
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range want {
			if !bytes.Contains(b, []byte(w)) {
				t.Errorf("%s: no %s in\n%s", name, w, b)
			}
		}
		if bytes.Contains(b, []byte("Progress")) {
			t.Errorf("%s: the progress writer is encoded", name)
		}
	}
}

func TestParseReportRejects(t *testing.T) {
	for name, in := range map[string]string{
		"unknown benchmark": `{"benchmark": "nope"}`,
		"unknown field":     `{"benchmark": "npm-ci", "npm_ci": {}, "colour": "red"}`,
		"no result":         `{"benchmark": "git-clone"}`,
		"the wrong result":  `{"benchmark": "git-clone", "npm_ci": {}}`,
		"two results":       `{"benchmark": "git-clone", "git_clone": {}, "npm_ci": {}}`,
		"not JSON":          `benchmark: git-clone`,
	} {
		if _, err := ParseReport([]byte(in)); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestCharts(t *testing.T) {
	reports := fixtureReports(t)
	svgs, err := Charts(reports)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range svgs {
		names = append(names, s.Name)
		d := xml.NewDecoder(bytes.NewReader(s.SVG))
		for {
			if _, err := d.Token(); err == io.EOF {
				break
			} else if err != nil {
				t.Fatalf("%s: not well-formed: %v", s.Name, err)
			}
		}
	}
	if got := strings.Join(names, " "); got != "model-latency.svg model-throughput.svg git-clone.svg npm-ci.svg" {
		t.Fatalf("charts %s", got)
	}
	for i, want := range [][]string{
		{"Model route: time per request", "direct", "Go proxy", "nginx", "cproxy+limits", "p90, 16 clients", "p99, 1 client: direct", "cproxy 352 µs"},
		{"requests per second", "1 client", "cproxy 1500 requests per second"},
		{"git clone", "acme/big (220 MiB pack)", "acme/small (20 MiB pack)", "cproxy 119 MiB/s"},
		{"npm", "npm ci (2 runs per way)", "package-lock-only", "direct 1.83 seconds", "cproxy 1.29 seconds"},
	} {
		for _, w := range want {
			if !bytes.Contains(svgs[i].SVG, []byte(w)) {
				t.Errorf("%s lacks %q", svgs[i].Name, w)
			}
		}
	}
	again, _ := Charts(fixtureReports(t))
	for i := range svgs {
		if !bytes.Equal(svgs[i].SVG, again[i].SVG) {
			t.Errorf("%s: the same reports gave other bytes", svgs[i].Name)
		}
	}
	delete(reports, BenchModelRoute)
	if svgs, _ := Charts(reports); len(svgs) != 2 {
		t.Errorf("without the model-route report: %d charts, want 2", len(svgs))
	}
}

// TestCommittedCharts checks that the SVGs in docs/benchmarks are what
// benchcharts makes of the JSON beside them: a chart edited by hand, or
// JSON replaced without redrawing, fails here.
func TestCommittedCharts(t *testing.T) {
	dir := filepath.Join("..", "..", "docs", "benchmarks")
	reports := map[string]*Report{}
	for b, name := range ResultFiles {
		r, err := ReadReport(filepath.Join(dir, name))
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		reports[b] = r
	}
	if len(reports) == 0 {
		t.Skip("no reports in docs/benchmarks")
	}
	svgs, err := Charts(reports)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range svgs {
		got, err := os.ReadFile(filepath.Join(dir, s.Name))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, s.SVG) {
			t.Errorf("docs/benchmarks/%s is not what its JSON gives: go run ./internal/bench/cmd/benchcharts -in docs/benchmarks -out docs/benchmarks", s.Name)
		}
	}
}

// maxPageLines is how long docs/benchmarks.md may grow: it is a reader's
// summary of each run, whose tables go to docs/benchmarks/.
const maxPageLines = 300

// TestBenchmarksPage checks that docs/benchmarks.md stays a summary a
// reader gets through (at most maxPageLines lines), that it embeds every
// chart benchcharts draws, and that each file of docs/benchmarks/ it links
// to, where the tables of each run are, exists.
func TestBenchmarksPage(t *testing.T) {
	docs := filepath.Join("..", "..", "docs")
	b, err := os.ReadFile(filepath.Join(docs, "benchmarks.md"))
	if err != nil {
		t.Fatal(err)
	}
	page := string(b)
	if n := strings.Count(page, "\n"); n > maxPageLines {
		t.Errorf("docs/benchmarks.md has %d lines, more than %d: sum the run up there and put its tables in a file of docs/benchmarks/, linked from its section", n, maxPageLines)
	}
	for _, c := range chartFiles {
		if !strings.Contains(page, "](benchmarks/"+c.file+")") {
			t.Errorf("docs/benchmarks.md does not embed the chart benchmarks/%s", c.file)
		}
	}
	for _, m := range regexp.MustCompile(`\]\((benchmarks/[^)#]+)`).FindAllStringSubmatch(page, -1) {
		if _, err := os.Stat(filepath.Join(docs, m[1])); err != nil {
			t.Errorf("docs/benchmarks.md links to %s: %v", m[1], err)
		}
	}
}
