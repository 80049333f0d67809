package bench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strings"
	"time"
)

// The benchmarks a Report can hold, and the file each one's results go to
// under docs/benchmarks/ (.ci/bench-all, benchcharts).
const (
	BenchModelRoute = "model-route"
	BenchGitClone   = "git-clone"
	BenchNPMCI      = "npm-ci"
	// BenchPipInstall (.ci/bench-pip) and BenchGoModDownload
	// (.ci/bench-gomod) have JSON files in docs/benchmarks/ but no chart:
	// docs/benchmarks.md sums them up in a table.
	BenchPipInstall    = "pip-install"
	BenchGoModDownload = "go-mod-download"
	// BenchMCP (.ci/bench-mcp) has a JSON file in docs/benchmarks/ and
	// no chart either.
	BenchMCP = "mcp"
	// BenchPostgresStore (.ci/bench-store) has no JSON file in
	// docs/benchmarks/ and no chart: the latest run's tables are kept by
	// hand in docs/benchmarks/postgres-store.md.
	BenchPostgresStore = "postgres-store"
	// BenchStoreSize (.ci/bench-store-size) has no JSON file or chart
	// either: its tables are in docs/benchmarks/store-size.md.
	BenchStoreSize = "store-size"
	// BenchMixedLoad (.ci/bench-mixed) has no chart either: its tables
	// are in docs/benchmarks/mixed-load.md.
	BenchMixedLoad = "mixed-load"
	// BenchGitHubAPI (.ci/bench-github) has a JSON file in
	// docs/benchmarks/ and no chart either: its tables are in
	// docs/benchmarks/github-api.md.
	BenchGitHubAPI = "github-api"
)

// ResultFiles name the JSON file of each benchmark in a results directory.
var ResultFiles = map[string]string{
	BenchModelRoute: "model-route.json",
	BenchGitClone:   "git-clone.json",
	BenchNPMCI:      "npm-ci.json",
}

// Report is one benchmark run as benchreport -json writes it and
// benchcharts reads it: what ran, where, when and with which versions, and
// every number the run measured (not only the medians the tables show), so
// charts and tables can be made again from it. Durations are integer
// nanoseconds and sizes bytes; field names carry the unit and do not change
// (a new quantity gets a new field).
type Report struct {
	// Benchmark is BenchModelRoute, BenchGitClone, BenchNPMCI,
	// BenchPipInstall, BenchGoModDownload, BenchMCP, BenchPostgresStore,
	// BenchStoreSize, BenchMixedLoad or BenchGitHubAPI, and says which of
	// the result fields is set.
	Benchmark string `json:"benchmark"`
	// Date is when the run started, in UTC.
	Date     time.Time `json:"date"`
	Machine  Machine   `json:"machine"`
	Versions Versions  `json:"versions"`
	// Args are benchreport's command-line arguments, as given.
	Args []string `json:"args"`

	ModelRoute *Result    `json:"model_route,omitempty"`
	GitClone   *GitResult `json:"git_clone,omitempty"`
	NPMCI      *NPMResult `json:"npm_ci,omitempty"`
	// PipInstall is BenchPipInstall's, GoModDownload BenchGoModDownload's.
	PipInstall    *PipResult   `json:"pip_install,omitempty"`
	GoModDownload *GoModResult `json:"go_mod_download,omitempty"`
	// MCP is BenchMCP's.
	MCP *MCPResult `json:"mcp,omitempty"`
	// PostgresStore is BenchPostgresStore's.
	PostgresStore *StoreResult `json:"postgres_store,omitempty"`
	// StoreSize is BenchStoreSize's.
	StoreSize *StoreSizeResult `json:"store_size,omitempty"`
	// MixedLoad is BenchMixedLoad's.
	MixedLoad *MixedResult `json:"mixed_load,omitempty"`
	// GitHubAPI is BenchGitHubAPI's.
	GitHubAPI *GitHubResult `json:"github_api,omitempty"`
}

// Machine is what the run ran on.
type Machine struct {
	CPUs     int    `json:"cpus"` // runtime.NumCPU
	CPUModel string `json:"cpu_model"`
	Kernel   string `json:"kernel"`
	// MemoryBytes is MemTotal from /proc/meminfo; zero if unknown.
	MemoryBytes int64 `json:"memory_bytes"`
	// LoadBefore and LoadAfter are the 1, 5 and 15 minute load averages
	// (/proc/loadavg) when the run started and ended: on a shared machine
	// they say how much the numbers can be trusted.
	LoadBefore string `json:"load_before"`
	LoadAfter  string `json:"load_after"`
}

// Versions are the software measured and measured with. Empty: not used by
// this benchmark, or unknown.
type Versions struct {
	Go string `json:"go"`
	// Cproxy is the commit benchreport was built from (cproxy is built from
	// the same tree by the .ci scripts), with "+dirty" when the working tree
	// had uncommitted changes.
	Cproxy string `json:"cproxy"`
	Nginx  string `json:"nginx,omitempty"`
	Git    string `json:"git,omitempty"`
	NPM    string `json:"npm,omitempty"`
	Node   string `json:"node,omitempty"`
	Pip    string `json:"pip,omitempty"`
	Python string `json:"python,omitempty"`
}

// NewReport wraps a finished run. res is a *Result, *GitResult, *NPMResult,
// *PipResult, *GoModResult, *MCPResult, *StoreResult, *StoreSizeResult, *MixedResult or *GitHubResult; loadBefore is /proc/loadavg as read when the run started.
func NewReport(res any, args []string, loadBefore string) (*Report, error) {
	r := &Report{Machine: currentMachine(), Versions: Versions{Go: runtime.Version(), Cproxy: buildCommit()}, Args: args}
	if r.Args == nil {
		r.Args = []string{}
	}
	r.Machine.LoadBefore, r.Machine.LoadAfter = loadBefore, loadavg()
	switch res := res.(type) {
	case *Result:
		r.Benchmark, r.ModelRoute, r.Date = BenchModelRoute, res, res.Started
		r.Versions.Nginx = strings.TrimPrefix(res.NginxVersion, "nginx/")
	case *GitResult:
		r.Benchmark, r.GitClone, r.Date = BenchGitClone, res, res.Started
		r.Versions.Git = res.GitVersion
	case *NPMResult:
		r.Benchmark, r.NPMCI, r.Date = BenchNPMCI, res, res.Started
		r.Versions.NPM, r.Versions.Node = res.NPMVersion, res.NodeVersion
	case *PipResult:
		r.Benchmark, r.PipInstall, r.Date = BenchPipInstall, res, res.Started
		r.Versions.Pip, r.Versions.Python = res.PipVersion, res.PythonVersion
	case *GoModResult:
		r.Benchmark, r.GoModDownload, r.Date = BenchGoModDownload, res, res.Started
	case *MCPResult:
		r.Benchmark, r.MCP, r.Date = BenchMCP, res, res.Started
	case *StoreResult:
		r.Benchmark, r.PostgresStore, r.Date = BenchPostgresStore, res, res.Started
	case *StoreSizeResult:
		r.Benchmark, r.StoreSize, r.Date = BenchStoreSize, res, res.Started
	case *MixedResult:
		r.Benchmark, r.MixedLoad, r.Date = BenchMixedLoad, res, res.Started
		r.Versions.Git, r.Versions.NPM, r.Versions.Node = res.GitVersion, res.NPMVersion, res.NodeVersion
	case *GitHubResult:
		r.Benchmark, r.GitHubAPI, r.Date = BenchGitHubAPI, res, res.Started
	default:
		return nil, fmt.Errorf("no report for a %T", res)
	}
	r.Date = r.Date.UTC().Round(time.Second)
	return r, nil
}

// Marshal is the report as indented JSON, ending in a newline.
func (r *Report) Marshal() ([]byte, error) {
	b, err := json.MarshalIndent(r, "", "\t")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// WriteReport writes r to path.
func WriteReport(path string, r *Report) error {
	b, err := r.Marshal()
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// ReadReport reads a report written by WriteReport, refusing unknown fields
// (a file from a newer harness, or a typo in a hand edit) and a report whose
// result does not match its Benchmark.
func ReadReport(path string) (*Report, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	r, err := ParseReport(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return r, nil
}

// ParseReport decodes a report; see ReadReport.
func ParseReport(b []byte) (*Report, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var r Report
	if err := dec.Decode(&r); err != nil {
		return nil, err
	}
	held := map[string]bool{BenchModelRoute: r.ModelRoute != nil, BenchGitClone: r.GitClone != nil, BenchNPMCI: r.NPMCI != nil,
		BenchPipInstall: r.PipInstall != nil, BenchGoModDownload: r.GoModDownload != nil,
		BenchMCP: r.MCP != nil, BenchMixedLoad: r.MixedLoad != nil, BenchGitHubAPI: r.GitHubAPI != nil}
	if _, known := held[r.Benchmark]; !known {
		return nil, fmt.Errorf("unknown benchmark %q", r.Benchmark)
	}
	ok := held[r.Benchmark]
	for b, h := range held {
		ok = ok && (b == r.Benchmark || !h)
	}
	if !ok {
		return nil, fmt.Errorf("a %s report must hold that result and no other", r.Benchmark)
	}
	return &r, nil
}

func currentMachine() Machine {
	m := Machine{CPUs: runtime.NumCPU(), CPUModel: "unknown"}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			var kb int64
			if _, err := fmt.Sscanf(line, "MemTotal: %d kB", &kb); err == nil {
				m.MemoryBytes = kb << 10
				break
			}
		}
	}
	return m
}

// buildCommit is the VCS revision the running binary was built from, or
// failing that what git says of the working directory.
func buildCommit() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		rev, dirty := "", false
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
		if rev != "" {
			if len(rev) > 12 {
				rev = rev[:12]
			}
			if dirty {
				rev += "+dirty"
			}
			return rev
		}
	}
	out, err := exec.Command("git", "describe", "--always", "--dirty=+dirty", "--abbrev=12").Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(out))
}

// LoadAverage is /proc/loadavg's 1, 5 and 15 minute averages, or "unknown".
func LoadAverage() string { return loadavg() }
