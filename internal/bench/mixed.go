package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cproxy/cproxy/internal/fakes"
)

// The mixed-load benchmark: one `cproxy serve` carries at once what a busy
// host sends it, model streams from a few clients, a large `git clone
// --no-checkout` and a few `npm ci` runs in parallel, once with
// runtime.cpus = 1 and once with 0 (every CPU), and the model clients
// alone at each setting, the baseline that says how much the mix delays
// the model streams. The pieces are the other benchmarks': the lean model
// upstream (Upstream), internal/fakes.GitServer with a repository of random
// blobs, internal/fakes.NPMRegistry with the npm benchmark's generated
// tree, the real git, git-credential-cproxy and npm. Every run has a cproxy
// process of its own, so that its CPU time and peak RSS are that run's,
// and its /metrics must show the CPUs it was set to.

// MixedOptions say what RunMixed does.
type MixedOptions struct {
	// Cproxy is the cproxy binary, Helper the git-credential-cproxy one;
	// empty: go build them.
	Cproxy, Helper string `json:"-"`
	// Dir is where the repository, projects, configs and logs go. Empty: a
	// new temporary directory, removed at the end.
	Dir string `json:"-"`
	// CPUs are the runtime.cpus settings compared, 0 for every CPU.
	CPUs []int `json:"cpus"`
	// Rounds is how many times each setting runs alone and mixed; the
	// settings take turns, in an order that alternates between rounds.
	Rounds int `json:"rounds"`
	// GitMiB is the random content of the repository cloned, in Files
	// files.
	GitMiB int `json:"git_mib"`
	Files  int `json:"git_files"`
	// NPMPackages is the size of the generated tree (as
	// NPMOptions.Packages); NPMRuns is how many `npm ci` of it run at once.
	NPMPackages int `json:"npm_packages"`
	NPMRuns     int `json:"npm_runs"`
	// Clients is how many model clients stream at once; each waits Pause
	// after a stream ends before it sends the next request.
	Clients int           `json:"clients"`
	Pause   time.Duration `json:"pause_ns"`
	// Alone is how long the model clients run by themselves, the baseline.
	Alone time.Duration `json:"alone_ns"`
	// Progress, if set, gets a line per step.
	Progress io.Writer `json:"-"`
}

// DefaultMixedOptions take about two minutes on two cores.
var DefaultMixedOptions = MixedOptions{
	CPUs: []int{1, 0}, Rounds: 3, GitMiB: 200, Files: 5, NPMPackages: 140, NPMRuns: 3,
	Clients: 4, Pause: 20 * time.Millisecond, Alone: 5 * time.Second,
}

// ModelLoad is what the model clients measured in one run: streaming
// requests, from sending to the end of the first event and to the end of
// the stream.
type ModelLoad struct {
	Requests int           `json:"requests"`
	PerSec   float64       `json:"per_sec"`
	FirstP50 time.Duration `json:"first_p50_ns"`
	FirstP99 time.Duration `json:"first_p99_ns"`
	P50      time.Duration `json:"p50_ns"`
	P99      time.Duration `json:"p99_ns"`
}

// MixedRun is one run of one setting, alone or mixed.
type MixedRun struct {
	Round int `json:"round"`
	// CPUs is runtime.cpus as configured; GOMAXPROCS what cproxy's
	// /metrics said it ran on (go_sched_gomaxprocs_threads).
	CPUs       int       `json:"cpus"`
	GOMAXPROCS int       `json:"gomaxprocs"`
	Mixed      bool      `json:"mixed"`
	Model      ModelLoad `json:"model"`
	// Clone is the git clone's wall time and NPMCI each npm ci's; none
	// when alone.
	Clone time.Duration   `json:"clone_ns,omitempty"`
	NPMCI []time.Duration `json:"npm_ci_ns,omitempty"`
	// Wall is how long the run's load lasted.
	Wall time.Duration `json:"wall_ns"`
	// Load is /proc/loadavg when the run ended.
	Load string `json:"load"`
	CproxyUse
}

// MixedResult is a whole run.
type MixedResult struct {
	Options     MixedOptions  `json:"options"`
	PackBytes   int64         `json:"pack_bytes"`
	Installed   int           `json:"npm_installed"`
	Runs        []MixedRun    `json:"runs"` // in the order run
	GitVersion  string        `json:"git_version"`
	NPMVersion  string        `json:"npm_version"`
	NodeVersion string        `json:"node_version"`
	Machine     string        `json:"machine"`
	LoadBefore  string        `json:"load_before"`
	LoadAfter   string        `json:"load_after"`
	Started     time.Time     `json:"started"`
	Took        time.Duration `json:"took_ns"`
}

// mixedPolicy lets the sandbox use the models, read the repository and
// install any package, with the model budget's rate and concurrency raised
// as for the model route benchmark (cproxyPolicy).
const mixedPolicy = cproxyPolicy + `repos = [{ repo = "acme/big", access = "read" }]
packages = ["*", "@*/*"]
`

// mixedMore is the rest of the mixed benchmark's config: the npm registry,
// and the CPUs. The per-token limits of the git and npm routes are raised
// far above the load, which comes from one token.
const mixedMore = `concurrent = 10000
requests_per_minute = 10000000

[upstream.npm]
url = "{{npm}}"
credential = "file:npm-token"
concurrent = 10000
requests_per_minute = 10000000

[runtime]
cpus = {{cpus}}
`

// mixedEnv is what every run of the mixed benchmark uses.
type mixedEnv struct {
	o        MixedOptions
	dir      string
	bin      string // cproxy
	git, npm string
	up       *Env // the model upstream
	key      string
	gs       *fakes.GitServer
	gitToken string
	gitEnv   []string
	reg      *fakes.NPMRegistry
	npmToken string
	npmEnv   []string
	// pj and lock are the npm project's package.json and lockfile, made
	// directly against the registry: its resolved URLs start with regBase,
	// replaced by each cproxy's before its runs.
	pj, lock  []byte
	regBase   string
	installed int
	progress  func(format string, args ...any)
}

// RunMixed runs the mixed-load benchmark.
func RunMixed(ctx context.Context, o MixedOptions) (_ *MixedResult, err error) {
	d := DefaultMixedOptions
	if o.CPUs == nil {
		o.CPUs = d.CPUs
	}
	o.Rounds = orDefault(o.Rounds, d.Rounds)
	o.GitMiB = orDefault(o.GitMiB, d.GitMiB)
	o.Files = orDefault(o.Files, d.Files)
	o.NPMPackages = orDefault(o.NPMPackages, d.NPMPackages)
	o.NPMRuns = orDefault(o.NPMRuns, d.NPMRuns)
	o.Clients = orDefault(o.Clients, d.Clients)
	if o.Pause == 0 {
		o.Pause = d.Pause
	}
	if o.Alone == 0 {
		o.Alone = d.Alone
	}
	if o.NPMPackages < 10 {
		return nil, fmt.Errorf("a tree of %d packages: at least 10 are needed", o.NPMPackages)
	}
	if o.Rounds < 1 || o.NPMRuns < 1 || o.Clients < 1 || o.GitMiB < 1 || o.Files < 1 || len(o.CPUs) == 0 {
		return nil, fmt.Errorf("rounds, npm runs, clients, the repository's MiB and files must be at least 1, and there must be a CPU setting")
	}
	m := &mixedEnv{o: o, progress: progressTo(o.Progress, "bench-mixed")}
	res := &MixedResult{Options: o, Machine: machine(), LoadBefore: loadavg(), Started: time.Now()}
	if m.git, err = exec.LookPath("git"); err != nil {
		return nil, fmt.Errorf("git is not installed: %w", err)
	}
	if m.npm, err = exec.LookPath("npm"); err != nil {
		return nil, fmt.Errorf("npm is not installed: %w", err)
	}
	res.GitVersion = commandVersion(m.git, "git version ")
	res.NPMVersion = commandVersion(m.npm, "")
	res.NodeVersion = commandVersion("node", "")

	dir, done, err := workDir(o.Dir, "bench-mixed")
	if err != nil {
		return nil, err
	}
	defer done()
	m.dir = dir
	bin := filepath.Join(dir, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return nil, err
	}
	if err := gitHelper(o.Helper, bin); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(dir, "upstream"), 0o755); err != nil {
		return nil, err
	}
	if m.up, m.bin, m.key, err = startUpstreamOnly(filepath.Join(dir, "upstream"), "", o.Cproxy); err != nil {
		return nil, err
	}
	defer m.up.Close()

	m.gitToken = "ghs_bench" + randomHex(16)
	if m.gs, err = fakes.NewGitServer(dir, fakes.GitServerOptions{Token: m.gitToken}); err != nil {
		return nil, err
	}
	defer m.gs.Close()
	t0 := time.Now()
	if res.PackBytes, err = makeRandomRepo(ctx, m.git, filepath.Join(m.gs.Root, "acme/big.git"), filepath.Join(dir, "work"), o.GitMiB, o.Files); err != nil {
		return nil, err
	}
	m.progress("acme/big: %.1f MiB pack, made in %s", mib(res.PackBytes), time.Since(t0).Round(100*time.Millisecond))
	home := filepath.Join(dir, "home")
	if err := os.MkdirAll(home, 0o755); err != nil {
		return nil, err
	}
	m.gitEnv, m.npmEnv = gitEnv(home, bin), npmEnv(home)

	m.npmToken = "npm_bench" + randomHex(16)
	m.reg = fakes.NewNPMRegistry(fakes.NPMRegistryOptions{Token: m.npmToken, Gzip: true})
	defer m.reg.Close()
	if err := m.makeLock(ctx); err != nil {
		return nil, err
	}
	res.Installed = m.installed

	for round := range o.Rounds {
		for _, cpus := range rotatedInts(o.CPUs, round) {
			for _, mixed := range []bool{false, true} {
				run, err := m.run(ctx, round+1, cpus, mixed)
				if err != nil {
					return nil, err
				}
				res.Runs = append(res.Runs, run)
			}
		}
	}
	res.LoadAfter = loadavg()
	res.Took = time.Since(res.Started)
	return res, nil
}

func orDefault(v, d int) int {
	if v == 0 {
		return d
	}
	return v
}

// rotatedInts is rotated for the CPU settings.
func rotatedInts(xs []int, rep int) []int {
	k := rep % len(xs)
	return slices.Concat(xs[k:], xs[:k])
}

// commandVersion is the first line cmd --version prints, less prefix;
// empty when it fails.
func commandVersion(cmd, prefix string) string {
	v, err := exec.Command(cmd, "--version").Output()
	if err != nil {
		return ""
	}
	return strings.TrimPrefix(strings.TrimSpace(string(v)), prefix)
}

// makeLock publishes the generated tree and has npm make its lockfile
// directly against the registry, once: every run installs the same.
func (m *mixedEnv) makeLock(ctx context.Context) error {
	tree := npmTree(m.o.NPMPackages)
	if err := tree.publish(m.reg); err != nil {
		return err
	}
	pj, err := json.MarshalIndent(map[string]any{"name": "bench-app", "version": "1.0.0", "private": true, "dependencies": tree.Root}, "", "  ")
	if err != nil {
		return err
	}
	m.pj, m.regBase = append(pj, '\n'), m.reg.URL+"/"
	project := filepath.Join(m.dir, "app-lock")
	if err := os.MkdirAll(project, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(project, "package.json"), m.pj, 0o644); err != nil {
		return err
	}
	args := append([]string{"install", "--package-lock-only"}, npmArgs(m.regBase, npmAuth(m.regBase, m.npmToken), filepath.Join(m.dir, "cache-lock"))...)
	cmd := exec.CommandContext(ctx, m.npm, args...)
	cmd.Dir, cmd.Env = project, m.npmEnv
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("npm install --package-lock-only: %v\n%s", err, out)
	}
	lock := filepath.Join(project, "package-lock.json")
	if m.installed, _, err = checkLock(lock, m.regBase); err != nil {
		return err
	}
	m.lock, err = os.ReadFile(lock)
	m.progress("npm: a lockfile of %d packages", m.installed)
	return err
}

// run starts a cproxy on cpus, checks it runs on them, and runs the model
// clients alone for Options.Alone, or with the clone and the installs
// until they end.
func (m *mixedEnv) run(ctx context.Context, round, cpus int, mixed bool) (MixedRun, error) {
	run := MixedRun{Round: round, CPUs: cpus, Mixed: mixed}
	what := "alone"
	if mixed {
		what = "mixed"
	}
	e := &Env{dir: filepath.Join(m.dir, fmt.Sprintf("round%d-cpus%d-%s", round, cpus, what))}
	if err := os.MkdirAll(e.dir, 0o755); err != nil {
		return run, err
	}
	defer e.Close()
	setup := routeSetup{
		Anthropic: m.up.UpstreamURL, AnthropicKey: m.key,
		More:  strings.NewReplacer("{{npm}}", m.reg.URL, "{{cpus}}", fmt.Sprint(cpus)).Replace(mixedMore),
		Files: map[string]string{"npm-token": m.npmToken + "\n"},
	}
	w, err := e.startRouteWay(m.bin, "cproxy", "github", m.gs.URL, m.gitToken, mixedPolicy, "bench-mixed", setup, &run.CproxyUse)
	if err != nil {
		return run, err
	}
	if run.GOMAXPROCS, err = fromMetrics(ctx, w.admin, parseCPUs); err != nil {
		return run, err
	}
	if cpus > 0 && run.GOMAXPROCS != cpus || cpus == 0 && run.GOMAXPROCS != runtime.NumCPU() {
		return run, fmt.Errorf("cproxy set to runtime.cpus = %d runs on %d CPUs (%s), want %d", cpus, run.GOMAXPROCS, gomaxprocsMetric, max(cpus, runtime.NumCPU()))
	}
	var projects []string
	if mixed {
		if projects, err = m.projects(e.dir, w); err != nil {
			return run, err
		}
	}
	if err := w.mark(); err != nil {
		return run, err
	}
	tarballs := countNPM(m.reg.Requests()).Tarballs

	stop := make(chan struct{})
	models := make(chan modelResult, 1)
	go func() { models <- modelClients(ctx, w.Target, m.o.Clients, m.o.Pause, stop) }()
	start := time.Now()
	var loadErr error
	if mixed {
		run.Clone, run.NPMCI, loadErr = m.mix(ctx, w, e.dir, projects)
	} else {
		select {
		case <-time.After(m.o.Alone):
		case <-ctx.Done():
			loadErr = ctx.Err()
		}
	}
	run.Wall = time.Since(start)
	close(stop)
	mr := <-models
	if loadErr != nil {
		return run, loadErr
	}
	if mr.err != nil {
		return run, fmt.Errorf("model clients: %w", mr.err)
	}
	if err := w.finish(); err != nil {
		return run, err
	}
	if mixed {
		if n := countNPM(m.reg.Requests()).Tarballs - tarballs; n != len(projects)*m.installed {
			return run, fmt.Errorf("%d npm ci fetched %d tarballs, want %d", len(projects), n, len(projects)*m.installed)
		}
	}
	run.Model = mr.load(run.Wall)
	run.Load = loadavg()
	m.progress("round %d, cpus = %d (GOMAXPROCS %d), %s: %d model streams, first event p50 %s p99 %s, stream p50 %s p99 %s; clone %s, npm ci %s; cproxy CPU %s, peak RSS %.1f MiB",
		round, cpus, run.GOMAXPROCS, what, run.Model.Requests, run.Model.FirstP50.Round(time.Microsecond), run.Model.FirstP99.Round(time.Microsecond),
		run.Model.P50.Round(time.Microsecond), run.Model.P99.Round(time.Microsecond), run.Clone.Round(time.Millisecond), roundAll(run.NPMCI),
		run.CPU.Round(time.Millisecond), mib(run.Peak))
	return run, nil
}

func roundAll(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(time.Millisecond)
	}
	return out
}

// projects makes NPMRuns npm projects under dir, each with the lockfile
// resolved through w's npm route.
func (m *mixedEnv) projects(dir string, w *cproxyWay) ([]string, error) {
	lock := strings.ReplaceAll(string(m.lock), m.regBase, w.URL+"/npm/")
	var ps []string
	for i := range m.o.NPMRuns {
		p := filepath.Join(dir, fmt.Sprintf("app-%d", i+1))
		if err := os.MkdirAll(p, 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(p, "package.json"), m.pj, 0o644); err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(p, "package-lock.json"), []byte(lock), 0o644); err != nil {
			return nil, err
		}
		ps = append(ps, p)
	}
	return ps, nil
}

// mix runs the clone (into dir) and the installs through w at once, and
// returns the wall time of each.
func (m *mixedEnv) mix(ctx context.Context, w *cproxyWay, dir string, projects []string) (time.Duration, []time.Duration, error) {
	var (
		wg    sync.WaitGroup
		clone time.Duration
		errs  = make([]error, 1+len(projects))
		npms  = make([]time.Duration, len(projects))
	)
	wg.Go(func() {
		clone, errs[0] = timeClone(ctx, m.git, "https://github.com/acme/big", filepath.Join(dir, "clone"), gitThrough(m.gitEnv, w))
	})
	registry := w.URL + "/npm/"
	for i, p := range projects {
		wg.Go(func() {
			args := append([]string{"ci"}, npmArgs(registry, npmAuth(registry, w.token), filepath.Join(p, "cache"))...)
			cmd := exec.CommandContext(ctx, m.npm, args...)
			cmd.Dir, cmd.Env = p, m.npmEnv
			t0 := time.Now()
			out, err := cmd.CombinedOutput()
			npms[i] = time.Since(t0)
			if err != nil {
				errs[i+1] = fmt.Errorf("npm ci in %s: %v\n%s", filepath.Base(p), err, out)
			}
			os.RemoveAll(filepath.Join(p, "node_modules"))
			os.RemoveAll(filepath.Join(p, "cache"))
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return 0, nil, err
		}
	}
	return clone, npms, nil
}

// modelResult is what the model clients timed.
type modelResult struct {
	first, whole []time.Duration
	err          error
}

// modelClients runs n clients, each sending streaming requests through t
// one after the other, pause apart, until stop is closed; a stream under
// way then ends first. The first failure stops them all.
func modelClients(ctx context.Context, t *Target, n int, pause time.Duration, stop <-chan struct{}) modelResult {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	hc := NewClient(n)
	defer hc.CloseIdleConnections()
	body := Body(true)
	var (
		wg  sync.WaitGroup
		mu  sync.Mutex
		res modelResult
	)
	for range n {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				case <-ctx.Done():
					return
				default:
				}
				first, whole, err := t.WholeStream(ctx, hc, body)
				if err != nil {
					cancel(err)
					return
				}
				mu.Lock()
				res.first, res.whole = append(res.first, first), append(res.whole, whole)
				mu.Unlock()
				select {
				case <-stop:
					return
				case <-ctx.Done():
					return
				case <-time.After(pause):
				}
			}
		})
	}
	wg.Wait()
	res.err = context.Cause(ctx)
	return res
}

// load sums the clients' times up over a run of wall.
func (r modelResult) load(wall time.Duration) ModelLoad {
	slices.Sort(r.first)
	slices.Sort(r.whole)
	return ModelLoad{
		Requests: len(r.whole), PerSec: float64(len(r.whole)) / wall.Seconds(),
		FirstP50: percentile(r.first, 50), FirstP99: percentile(r.first, 99),
		P50: percentile(r.whole, 50), P99: percentile(r.whole, 99),
	}
}

// cpusName is a runtime.cpus setting as the tables name it.
func cpusName(cpus int) string {
	if cpus == 0 {
		return "0 (all)"
	}
	return fmt.Sprint(cpus)
}

// Markdown writes the result as tables.
func (r *MixedResult) Markdown(w io.Writer) {
	if len(r.Runs) == 0 {
		return
	}
	o := r.Options
	fmt.Fprintf(w, "%s, %s in all; %s; load average %s → %s. git %s, npm %s, node %s.\n\n",
		r.Started.UTC().Format("2006-01-02 15:04 MST"), r.Took.Round(time.Second), r.Machine, r.LoadBefore, r.LoadAfter, r.GitVersion, r.NPMVersion, r.NodeVersion)
	fmt.Fprintf(w, "Each run is a new `cproxy serve` with `runtime.cpus` as shown. Model: %d clients, each sending a streaming request (%d KB) when its last stream ended and %s passed. "+
		"Alone: the model clients for %s. Mixed: the model clients while one `git clone --no-checkout` (a pack of %.1f MiB) and %d `npm ci` of %d packages each run at once through the same cproxy, until all end. "+
		"%d round%s; the settings take turns, alternating which goes first.\n\n",
		o.Clients, len(Body(true))/1000, o.Pause, o.Alone, mib(r.PackBytes), o.NPMRuns, r.Installed, o.Rounds, plural(o.Rounds))

	fmt.Fprintln(w, "| round | runtime.cpus → GOMAXPROCS | load | model streams | first event p50 / p99 | stream p50 / p99 | git clone | npm ci, each | cproxy CPU | cproxy peak RSS | load average after |")
	fmt.Fprintln(w, "|--:|---|---|--:|--:|--:|--:|--:|--:|--:|---|")
	for _, run := range r.Runs {
		load, clone, npms := "alone", "—", "—"
		if run.Mixed {
			load, clone = "mixed", fmt.Sprintf("%.2f s", run.Clone.Seconds())
			var s []string
			for _, d := range run.NPMCI {
				s = append(s, fmt.Sprintf("%.2f", d.Seconds()))
			}
			npms = strings.Join(s, ", ") + " s"
		}
		fmt.Fprintf(w, "| %d | %s → %d | %s | %d | %s / %s | %s / %s | %s | %s | %.2f s | %.1f MiB | %s |\n", run.Round, cpusName(run.CPUs), run.GOMAXPROCS, load,
			run.Model.Requests, ms(run.Model.FirstP50), ms(run.Model.FirstP99), ms(run.Model.P50), ms(run.Model.P99), clone, npms, run.CPU.Seconds(), mib(run.Peak), run.Load)
	}

	fmt.Fprintln(w)
	fmt.Fprintln(w, "Medians over the rounds (range); npm ci over every run of the setting.")
	fmt.Fprintln(w)
	fmt.Fprint(w, "| measure |")
	for _, c := range o.CPUs {
		fmt.Fprintf(w, " cpus = %s, alone | cpus = %s, mixed |", cpusName(c), cpusName(c))
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "|---|"+strings.Repeat("--:|", 2*len(o.CPUs)))
	rows := []struct {
		name  string
		alone bool // has a value alone
		f     func(MixedRun) []float64
		unit  string
	}{
		{"model streams a second", true, func(x MixedRun) []float64 { return []float64{x.Model.PerSec} }, "/s"},
		{"first SSE event p50", true, func(x MixedRun) []float64 { return []float64{msOf(x.Model.FirstP50)} }, "ms"},
		{"first SSE event p99", true, func(x MixedRun) []float64 { return []float64{msOf(x.Model.FirstP99)} }, "ms"},
		{"stream p50", true, func(x MixedRun) []float64 { return []float64{msOf(x.Model.P50)} }, "ms"},
		{"stream p99", true, func(x MixedRun) []float64 { return []float64{msOf(x.Model.P99)} }, "ms"},
		{"git clone", false, func(x MixedRun) []float64 { return []float64{x.Clone.Seconds()} }, "s"},
		{"npm ci", false, func(x MixedRun) []float64 {
			var s []float64
			for _, d := range x.NPMCI {
				s = append(s, d.Seconds())
			}
			return s
		}, "s"},
		{"cproxy CPU", true, func(x MixedRun) []float64 { return []float64{x.CPU.Seconds()} }, "s"},
		{"cproxy CPU a second of load", true, func(x MixedRun) []float64 { return []float64{x.CPU.Seconds() / x.Wall.Seconds()} }, ""},
		{"cproxy peak RSS", true, func(x MixedRun) []float64 { return []float64{mib(x.Peak)} }, "MiB"},
	}
	for _, row := range rows {
		fmt.Fprintf(w, "| %s |", row.name)
		for _, c := range o.CPUs {
			for _, mixed := range []bool{false, true} {
				if !mixed && !row.alone {
					fmt.Fprint(w, " — |")
					continue
				}
				var a across
				for _, run := range r.runs(c, mixed) {
					a = append(a, row.f(run)...)
				}
				fmt.Fprintf(w, " %s |", formatSpread(a, row.unit))
			}
		}
		fmt.Fprintln(w)
	}

	fmt.Fprintln(w)
	fmt.Fprintln(w, "Mixed ÷ alone: how much the mix delays the model streams at each setting (median of the rounds' ratios, range); and the mixed runs at the first setting ÷ the second.")
	fmt.Fprintln(w)
	fmt.Fprint(w, "| measure |")
	for _, c := range o.CPUs {
		fmt.Fprintf(w, " cpus = %s, mixed ÷ alone |", cpusName(c))
	}
	if len(o.CPUs) == 2 {
		fmt.Fprintf(w, " mixed, cpus = %s ÷ cpus = %s |", cpusName(o.CPUs[0]), cpusName(o.CPUs[1]))
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "|---|"+strings.Repeat("--:|", len(o.CPUs)+min(1, len(o.CPUs)/2)))
	for _, row := range rows {
		if row.unit != "ms" && row.name != "git clone" && row.name != "npm ci" && row.name != "cproxy CPU" {
			continue
		}
		fmt.Fprintf(w, "| %s |", row.name)
		for _, c := range o.CPUs {
			if !row.alone {
				fmt.Fprint(w, " — |")
				continue
			}
			var a across
			alone, mixed := r.runs(c, false), r.runs(c, true)
			for i := range min(len(alone), len(mixed)) {
				if d := row.f(alone[i])[0]; d > 0 {
					a = append(a, row.f(mixed[i])[0]/d)
				}
			}
			fmt.Fprintf(w, " %s |", formatRatio(a))
		}
		if len(o.CPUs) == 2 {
			var a across
			x, y := r.runs(o.CPUs[0], true), r.runs(o.CPUs[1], true)
			for i := range min(len(x), len(y)) {
				if d := median64(row.f(y[i])); d > 0 {
					a = append(a, median64(row.f(x[i]))/d)
				}
			}
			fmt.Fprintf(w, " %s |", formatRatio(a))
		}
		fmt.Fprintln(w)
	}
}

// runs are the runs of one setting, alone or mixed, by round.
func (r *MixedResult) runs(cpus int, mixed bool) []MixedRun {
	var out []MixedRun
	for _, run := range r.Runs {
		if run.CPUs == cpus && run.Mixed == mixed {
			out = append(out, run)
		}
	}
	return out
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", msOf(d)) }

func msOf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func median64(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	return across(xs).median()
}

// formatSpread is the median of a with its unit and, with more than one
// value, their range.
func formatSpread(a across, unit string) string {
	if len(a) == 0 {
		return "—"
	}
	f := "%.2f"
	if unit == "MiB" || unit == "/s" {
		f = "%.1f"
	}
	if unit != "" {
		f += " " + unit
	}
	s := fmt.Sprintf(f, a.median())
	if len(a) > 1 {
		s += fmt.Sprintf(" ("+strings.TrimSuffix(f, " "+unit)+"–"+f+")", slices.Min(a), slices.Max(a))
	}
	return s
}
