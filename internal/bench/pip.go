package bench

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/cproxy/cproxy/internal/fakes"
)

// The pip install benchmark: the real pip (Debian's, in a venv made before
// anything is timed) installs a root project that depends on a generated
// tree of pure-Python wheels (pipTree) from a local index
// (internal/fakes.PyPIIndex on loopback, its files on a second host, its
// pages behind a Basic credential), directly and through the real `cproxy
// serve` with a sandbox token, with and without a min_release_age, in
// turns, each time with no cache and into an empty folder (`pip install
// --target`, which ignores what the venv has installed). It reports the
// wall time of each install, the ratio of the medians, the requests the
// index and its files host got, the requests cproxy answered, and cproxy's
// peak RSS (VmHWM) and CPU over the runs.

// PipOptions say what RunPip does.
type PipOptions struct {
	// Cproxy is the cproxy binary; empty: go build it.
	Cproxy string
	// Dir is where the venv, the installs, configs and logs go. Empty: a
	// new temporary directory, removed at the end.
	Dir string
	// Packages is how many projects the tree has below the root project,
	// which depends on all of them (some through others). Zero means
	// DefaultPipOptions.Packages.
	Packages int
	// Reps is how many installs per way. Zero means DefaultPipOptions.Reps.
	Reps int
	// Progress, if set, gets a line per step.
	Progress io.Writer
}

// DefaultPipOptions install 40 projects and the root five times each way.
var DefaultPipOptions = PipOptions{Packages: 40, Reps: 5}

// pipWays are the ways of the pip install benchmark, in the order of the
// first round.
var pipWays = []string{wayDirect, wayCproxy, wayCproxyAge}

// pipPython is Debian's Python, whose venv module brings Debian's pip into
// the venv (python3-venv): the pip the PyPI route's scripts run too.
const pipPython = "/usr/bin/python3"

// PipRun is one timed `pip install`, with what the index got during it.
type PipRun struct {
	Way  string        `json:"way"` // "direct", "cproxy" or "cproxy+age"
	Time time.Duration `json:"time_ns"`
	// PipCPU is the processor time pip used (user and system, its child
	// processes included).
	PipCPU time.Duration `json:"pip_cpu_ns"`
	// Pages, Metadata and Wheels are the requests the index and its files
	// host got: project pages, PEP 658 .metadata files, and wheels.
	Pages    int `json:"pages"`
	Metadata int `json:"metadata"`
	Wheels   int `json:"wheels"`
	// Proxied is the requests cproxy answered (its audit records); zero
	// for direct.
	Proxied int `json:"proxied"`
}

// PipResult is a whole run.
type PipResult struct {
	// Projects is how many projects the index has, the root included;
	// Versions how many versions (one wheel each); Installed how many
	// distributions each install put in its folder.
	Projects  int      `json:"projects"`
	Versions  int      `json:"versions"`
	Installed int      `json:"installed"`
	Ways      []string `json:"ways"`
	Runs      []PipRun `json:"runs"` // in the order run, in turns
	// MinReleaseAge is the min_release_age of the cproxy+age way.
	MinReleaseAge string `json:"min_release_age"`
	// Use is what each way's cproxy used: its peak is after all the runs;
	// its CPU over its runs.
	Use           map[string]CproxyUse `json:"cproxy_use"`
	PipVersion    string               `json:"pip_version"`
	PythonVersion string               `json:"python_version"`
	Started       time.Time            `json:"started"`
	Took          time.Duration        `json:"took_ns"`
}

// RunPip runs the pip install benchmark.
func RunPip(ctx context.Context, o PipOptions) (_ *PipResult, err error) {
	if o.Packages == 0 {
		o.Packages = DefaultPipOptions.Packages
	}
	if o.Reps == 0 {
		o.Reps = DefaultPipOptions.Reps
	}
	if o.Packages < 4 {
		return nil, fmt.Errorf("a tree of %d projects: at least 4 are needed, one per level", o.Packages)
	}
	progress := progressTo(o.Progress, "bench-pip")
	if err := exec.Command(pipPython, "-c", "import ensurepip, venv").Run(); err != nil {
		return nil, fmt.Errorf("%s has no venv with pip (apt-get install python3-venv python3-pip): %w", pipPython, err)
	}
	res := &PipResult{Started: time.Now(), Ways: pipWays, MinReleaseAge: pkgMinReleaseAge, Use: map[string]CproxyUse{}}
	dir, done, err := workDir(o.Dir, "bench-pip")
	if err != nil {
		return nil, err
	}
	defer done()
	if o.Cproxy, err = cproxyBinary(o.Cproxy, dir); err != nil {
		return nil, err
	}

	// One venv for every run: --target installs into an empty folder and
	// ignores what the venv has, so each install fetches everything.
	venv := filepath.Join(dir, "venv")
	if out, err := exec.CommandContext(ctx, pipPython, "-m", "venv", venv).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("%s -m venv: %v\n%s", pipPython, err, out)
	}
	pip := filepath.Join(venv, "bin", "pip")
	if v, err := exec.Command(pip, "--version").Output(); err == nil {
		res.PipVersion = strings.Fields(string(v))[1]
	}
	if v, err := exec.Command(pipPython, "--version").Output(); err == nil {
		res.PythonVersion = strings.TrimPrefix(strings.TrimSpace(string(v)), "Python ")
	}

	credential := "bench:" + randomHex(16)
	index := fakes.NewPyPIIndex(fakes.PyPIIndexOptions{Credential: credential})
	defer index.Close()
	tree := pipTree(o.Packages)
	if err := tree.publish(index, time.Now().Add(-30*24*time.Hour)); err != nil {
		return nil, err
	}
	res.Projects = len(tree.Projects)
	for _, p := range tree.Projects {
		res.Versions += len(p.Versions)
	}
	progress("index: %d projects, %d versions", res.Projects, res.Versions)

	through := map[string]*cproxyWay{}
	uses := map[string]*CproxyUse{}
	for _, way := range throughCproxy {
		policy := cproxyPipPolicy
		if way == wayCproxyAge {
			policy += "min_release_age = \"" + pkgMinReleaseAge + "\"\n"
		}
		e := &Env{dir: filepath.Join(dir, way+"-serve")}
		if err := os.MkdirAll(e.dir, 0o755); err != nil {
			return nil, err
		}
		defer e.Close()
		uses[way] = &CproxyUse{}
		setup := routeSetup{Upstream: fmt.Sprintf("files_url = %q\n", index.FilesURL)}
		if through[way], err = e.startRouteWay(o.Cproxy, way, "pypi", index.URL, credential, policy, "bench-pip", setup, uses[way]); err != nil {
			return nil, err
		}
	}

	// pip's own settings only: a home of its own, no config file, no
	// proxy variables.
	home := filepath.Join(dir, "home")
	if err := os.MkdirAll(home, 0o755); err != nil {
		return nil, err
	}
	env := []string{
		"HOME=" + home,
		"PATH=" + os.Getenv("PATH"),
		"LANG=C.UTF-8",
		"PIP_CONFIG_FILE=/dev/null",
		"PIP_NO_INPUT=1",
		"PIP_DISABLE_PIP_VERSION_CHECK=1",
	}
	// Each way's index URL with its credential, and the hosts pip may
	// reach over plain http: as `cproxy env --pip` sets them for cproxy.
	hostOf := func(u string) string { return strings.TrimSuffix(strings.TrimPrefix(u, "http://"), "/") }
	indexHost, _, _ := strings.Cut(hostOf(index.URL), "/")
	user, pass, _ := strings.Cut(credential, ":")
	wayEnv := map[string][]string{
		wayDirect: {"PIP_INDEX_URL=http://" + user + ":" + pass + "@" + indexHost + "/simple/",
			"PIP_TRUSTED_HOST=" + indexHost + " " + hostOf(index.FilesURL)},
	}
	for way, t := range through {
		wayEnv[way] = []string{"PIP_INDEX_URL=http://cproxy:" + t.token + "@" + hostOf(t.URL) + "/pypi/simple/",
			"PIP_TRUSTED_HOST=" + hostOf(t.URL)}
	}

	for _, t := range through {
		if err := t.mark(); err != nil {
			return nil, err
		}
	}
	installs := 0
	for rep := 0; rep < o.Reps; rep++ {
		for _, way := range rotated(pipWays, rep) {
			installs++
			target := filepath.Join(dir, fmt.Sprintf("site-%d", installs))
			cmd := exec.CommandContext(ctx, pip, "install", "--no-cache-dir", "--target", target, pipRoot)
			cmd.Env = append(append([]string(nil), env...), wayEnv[way]...)
			cmd.Dir = dir
			before, audited := len(index.Requests()), 0
			if t := through[way]; t != nil {
				if audited, err = t.auditLines("pypi"); err != nil {
					return nil, err
				}
			}
			t0 := time.Now()
			out, err := cmd.CombinedOutput()
			d := time.Since(t0)
			if err != nil {
				return nil, fmt.Errorf("%s: pip install: %v\n%s", way, err, out)
			}
			run := PipRun{Way: way, Time: d, PipCPU: cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()}
			for _, r := range index.Requests()[before:] {
				switch {
				case r.Host == "index":
					run.Pages++
				case strings.HasSuffix(r.Path, ".metadata"):
					run.Metadata++
				default:
					run.Wheels++
				}
			}
			if t := through[way]; t != nil {
				n, err := t.auditLines("pypi")
				if err != nil {
					return nil, err
				}
				run.Proxied = n - audited
			}
			installed, err := distInfos(target)
			os.RemoveAll(target)
			if err != nil {
				return nil, err
			}
			// No cache and an empty folder: every distribution installed,
			// each wheel fetched once.
			if installed != len(tree.Projects) || run.Wheels != installed {
				return nil, fmt.Errorf("%s: pip installed %d distributions and fetched %d wheels, want %d of each\n%s", way, installed, run.Wheels, len(tree.Projects), out)
			}
			if through[way] != nil && run.Proxied == 0 {
				return nil, fmt.Errorf("%s: cproxy answered no request of pip's", way)
			}
			res.Installed = installed
			res.Runs = append(res.Runs, run)
			progress("%s #%d: %s, pip CPU %s, %d pages, %d metadata, %d wheels, %d through cproxy", way, rep+1,
				d.Round(time.Millisecond), run.PipCPU.Round(time.Millisecond), run.Pages, run.Metadata, run.Wheels, run.Proxied)
		}
	}
	for _, way := range throughCproxy {
		t := through[way]
		if err := t.finish(); err != nil {
			return nil, err
		}
		res.Use[way] = *t.use
		progress("%s RSS %.1f MiB at start, peak %.1f MiB", way, mib(t.use.RSSStart), mib(t.use.Peak))
	}
	res.Took = time.Since(res.Started)
	return res, nil
}

// distInfos counts the distributions installed in a --target folder.
func distInfos(target string) (int, error) {
	m, err := filepath.Glob(filepath.Join(target, "*.dist-info"))
	return len(m), err
}

// pipRoot is the project pip is asked to install.
const pipRoot = "bench-root"

// pipProject is a project of the generated tree; every version has the
// same requirements.
type pipProject struct {
	Name     string
	Versions []string
	Requires []string // PEP 508
}

// pipTreeSpec is an index's worth of projects, the root (the first)
// reaching every other.
type pipTreeSpec struct{ Projects []pipProject }

// pipTree generates the root and n projects below it in four levels (a
// tenth, two, three and four tenths of them, at least one each), each
// project requiring some of the next level, so chains run four deep below
// the root, which requires the first level. A project has one to three
// versions (1.0, 1.1, 1.2), and requirements are >=1.0, ~=1.0 or >=1.1
// when there is a 1.1: each is met by the newest version, so pip picks one
// version of each project and never backtracks, and a project with several
// dependents is fetched once. It is the same for the same n.
func pipTree(n int) pipTreeSpec {
	r := rand.New(rand.NewPCG(4, 2026))
	t := pipTreeSpec{Projects: []pipProject{{Name: pipRoot, Versions: []string{"1.0"}}}}
	for i := range n {
		// Some names are spelt as PyPI allows and normalises.
		name := fmt.Sprintf("bench-py-%03d", i)
		if i%5 == 4 {
			name = fmt.Sprintf("Bench_Py.%03d", i)
		}
		t.Projects = append(t.Projects, pipProject{Name: name, Versions: []string{"1.0", "1.1", "1.2"}[:1+i%3]})
	}
	var levels [][]int
	start := 1
	for l, tenths := range []int{1, 3, 6, 10} {
		end := max(1+n*tenths/10, start+1)
		if l == 3 {
			end = n + 1
		}
		var lv []int
		for i := start; i < end; i++ {
			lv = append(lv, i)
		}
		levels = append(levels, lv)
		start = end
	}
	require := func(p pipProject) string {
		specs := []string{">=1.0", "~=1.0"}
		if len(p.Versions) > 1 {
			specs = append(specs, ">=1.1")
		}
		return p.Name + specs[r.IntN(len(specs))]
	}
	for _, i := range levels[0] {
		t.Projects[0].Requires = append(t.Projects[0].Requires, require(t.Projects[i]))
	}
	for l := 0; l+1 < len(levels); l++ {
		parents, children := levels[l], levels[l+1]
		// Every child has a parent, then each parent takes up to two more
		// children at random: shared dependencies.
		took := map[[2]int]bool{}
		for k, c := range children {
			p := parents[k%len(parents)]
			took[[2]int{p, c}] = true
			t.Projects[p].Requires = append(t.Projects[p].Requires, require(t.Projects[c]))
		}
		for _, p := range parents {
			for range r.IntN(3) {
				c := children[r.IntN(len(children))]
				if !took[[2]int{p, c}] {
					took[[2]int{p, c}] = true
					t.Projects[p].Requires = append(t.Projects[p].Requires, require(t.Projects[c]))
				}
			}
		}
	}
	return t
}

// publish puts a wheel of every version of every project in the index,
// uploaded at uploaded.
func (t pipTreeSpec) publish(index *fakes.PyPIIndex, uploaded time.Time) error {
	for _, p := range t.Projects {
		for _, v := range p.Versions {
			if err := index.AddWheel(p.Name, v, uploaded, p.Requires...); err != nil {
				return err
			}
		}
	}
	return nil
}

// cproxyPipPolicy lets the sandbox install every project of the tree;
// the cproxy+age way appends a min_release_age.
const cproxyPipPolicy = `[profile.default]
models = ["claude-*"]

[profile.default.pypi]
packages = ["bench-*"]
`

// Markdown writes the result as tables.
func (r *PipResult) Markdown(w io.Writer) {
	if len(r.Runs) == 0 {
		return
	}
	fmt.Fprintf(w, "pip %s, Python %s, %s, %s in all. The index: %d projects, %d versions (a wheel each, with its PEP 658 metadata file); each install puts %d distributions into an empty folder. cproxy+age has `min_release_age = %q` (every release is 30 days old).\n\n",
		r.PipVersion, r.PythonVersion, r.Started.UTC().Format("2006-01-02 15:04 MST"), r.Took.Round(time.Second),
		r.Projects, r.Versions, r.Installed, r.MinReleaseAge)
	fmt.Fprintln(w, "| pip install | way | wall time | pip CPU | pages | metadata | wheels | answered by cproxy |")
	fmt.Fprintln(w, "|--:|---|--:|--:|--:|--:|--:|--:|")
	n := map[string]int{}
	for _, run := range r.Runs {
		n[run.Way]++
		fmt.Fprintf(w, "| %d | %s | %.2f s | %.2f s | %d | %d | %d | %d |\n", n[run.Way], run.Way, run.Time.Seconds(), run.PipCPU.Seconds(),
			run.Pages, run.Metadata, run.Wheels, run.Proxied)
	}
	fmt.Fprintln(w)
	pkgRatioTable(w, throughCproxy, []string{wayDirect}, r.times)
	pkgUseTable(w, "pip install", r.Ways, r.Use, func(way string) int { return len(r.times(way)) }, func(way string) int {
		total := 0
		for _, run := range r.Runs {
			if run.Way == way {
				total += run.Proxied
			}
		}
		return total
	})
}

func (r *PipResult) times(way string) []time.Duration {
	var ts []time.Duration
	for _, run := range r.Runs {
		if run.Way == way {
			ts = append(ts, run.Time)
		}
	}
	return ts
}
