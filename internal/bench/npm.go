package bench

import (
	"context"
	"encoding/json"
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

// The npm ci benchmark: the real npm installs a lockfile of a generated
// dependency tree (npmTree) from a local registry (internal/fakes.NPMRegistry
// on loopback, gzipping packuments and taking only its own token), directly
// and through the real `cproxy serve` with a sandbox token, alternated, each
// time with an empty cache. It reports the wall time of each `npm ci`, the
// ratio of the medians, the requests the registry got, and cproxy's peak RSS
// (VmHWM) and CPU over the runs.

// NPMOptions say what RunNPM does.
type NPMOptions struct {
	// Cproxy is the cproxy binary; empty: go build it.
	Cproxy string
	// Dir is where the projects, caches, configs and logs go. Empty: a new
	// temporary directory, removed at the end.
	Dir string
	// Packages is how many packages the registry has, all of them in the
	// tree the root package depends on. Zero means
	// DefaultNPMOptions.Packages.
	Packages int
	// Reps is how many `npm ci` runs per way (direct, cproxy, and the
	// earlier build's with Before). Zero means DefaultNPMOptions.Reps.
	Reps int
	// Before, if set, is the cproxy binary of an earlier build: a third way
	// (BeforeTarget(BeforeRev)), through its own cproxy process, with its
	// own lockfile, taking its turns with the other two. Empty: no earlier
	// build.
	Before, BeforeRev string
	// Progress, if set, gets a line per step.
	Progress io.Writer
}

// DefaultNPMOptions install a tree of 140 packages five times each way.
var DefaultNPMOptions = NPMOptions{Packages: 140, Reps: 5}

// NPMRun is one timed `npm ci`, with what the registry received during it.
type NPMRun struct {
	Way        string        `json:"way"` // "direct", "cproxy" or NPMResult.Before
	Time       time.Duration `json:"time_ns"`
	Tarballs   int           `json:"tarballs"`   // tarball requests the registry got
	Packuments int           `json:"packuments"` // packument requests the registry got
	// NPMCPU is the processor time npm used (user and system, its child
	// processes included): the client's share of the cores.
	NPMCPU time.Duration `json:"npm_cpu_ns"`
}

// NPMLock is the making of one way's lockfile: `npm install
// --package-lock-only` with an empty cache, which reads every packument.
type NPMLock struct {
	Way        string        `json:"way"`
	Time       time.Duration `json:"time_ns"`
	Packuments int           `json:"packuments"`
}

// NPMResult is a whole run.
type NPMResult struct {
	// Packages and Versions are what the registry holds; Scoped is how many
	// of the packages have a scope.
	Packages int `json:"packages"`
	Versions int `json:"versions"`
	Scoped   int `json:"scoped"`
	// Installed is how many packages the lockfile installs, Nested how many
	// of them under another package's node_modules (a second version).
	Installed int       `json:"installed"`
	Nested    int       `json:"nested"`
	Locks     []NPMLock `json:"locks"`
	Runs      []NPMRun  `json:"runs"` // in the order run, in turns
	// CproxyUse is what cproxy used: its peak is after all the runs,
	// lockfile included; its CPU over its `npm ci` runs.
	CproxyUse
	// Before is the way through the earlier build's cproxy
	// (NPMOptions.Before), and BeforeUse what that cproxy used; empty
	// without one.
	Before      string        `json:"before,omitempty"`
	BeforeUse   *CproxyUse    `json:"before_use,omitempty"`
	NPMVersion  string        `json:"npm_version"`
	NodeVersion string        `json:"node_version"`
	Started     time.Time     `json:"started"`
	Took        time.Duration `json:"took_ns"`
}

// RunNPM runs the npm ci benchmark.
func RunNPM(ctx context.Context, o NPMOptions) (_ *NPMResult, err error) {
	if o.Packages == 0 {
		o.Packages = DefaultNPMOptions.Packages
	}
	if o.Reps == 0 {
		o.Reps = DefaultNPMOptions.Reps
	}
	if o.Packages < 10 {
		return nil, fmt.Errorf("a tree of %d packages: at least 10 are needed, one per level at least", o.Packages)
	}
	progress := progressTo(o.Progress, "bench-npm")
	npm, err := exec.LookPath("npm")
	if err != nil {
		return nil, fmt.Errorf("npm is not installed: %w", err)
	}
	res := &NPMResult{Started: time.Now()}
	if v, err := exec.Command(npm, "--version").Output(); err == nil {
		res.NPMVersion = strings.TrimSpace(string(v))
	}
	if v, err := exec.Command("node", "--version").Output(); err == nil {
		res.NodeVersion = strings.TrimSpace(string(v))
	}
	dir, done, err := workDir(o.Dir, "bench-npm")
	if err != nil {
		return nil, err
	}
	defer done()
	if o.Cproxy, err = cproxyBinary(o.Cproxy, dir); err != nil {
		return nil, err
	}

	realToken := "npm_bench" + randomHex(16)
	reg := fakes.NewNPMRegistry(fakes.NPMRegistryOptions{Token: realToken, Gzip: true})
	defer reg.Close()
	tree := npmTree(o.Packages)
	if err := tree.publish(reg); err != nil {
		return nil, err
	}
	for _, p := range tree.Packages {
		res.Packages++
		res.Versions += len(p.Versions)
		if strings.HasPrefix(p.Name, "@") {
			res.Scoped++
		}
	}
	progress("registry: %d packages (%d scoped), %d versions", res.Packages, res.Scoped, res.Versions)

	// Each way through a cproxy has a process of its own.
	bins := map[string]string{"cproxy": o.Cproxy}
	order := []string{"direct", "cproxy"}
	if o.Before != "" {
		if res.Before, err = BeforeTarget(o.BeforeRev); err != nil {
			return nil, err
		}
		res.BeforeUse = &CproxyUse{}
		order, bins[res.Before] = append(order, res.Before), o.Before
	}
	through := map[string]*cproxyWay{}
	for _, way := range order[1:] {
		use := &res.CproxyUse
		if way == res.Before {
			use = res.BeforeUse
		}
		e := &Env{dir: filepath.Join(dir, way+"-serve")}
		if err := os.MkdirAll(e.dir, 0o755); err != nil {
			return nil, err
		}
		defer e.Close()
		if through[way], err = e.startWay(bins[way], way, "npm", reg.URL, realToken, cproxyNPMPolicy, "bench-1", use); err != nil {
			return nil, err
		}
	}

	home := filepath.Join(dir, "home")
	if err := os.MkdirAll(home, 0o755); err != nil {
		return nil, err
	}
	env := npmEnv(home)
	// Each way has its registry URL, the token npm sends there, and its
	// project: the same package.json, and the lockfile npm makes through
	// that way, so its resolved URLs (and every tarball npm ci fetches) go
	// that way.
	type npmWay struct{ registry, auth, project string }
	ways := map[string]npmWay{
		"direct": {reg.URL + "/", npmAuth(reg.URL+"/", realToken), filepath.Join(dir, "app-direct")},
	}
	for way, t := range through {
		ways[way] = npmWay{t.URL + "/npm/", npmAuth(t.URL+"/npm/", t.token), filepath.Join(dir, "app-"+way)}
	}
	pj, err := json.MarshalIndent(map[string]any{"name": "bench-app", "version": "1.0.0", "private": true, "dependencies": tree.Root}, "", "  ")
	if err != nil {
		return nil, err
	}
	caches := 0
	// npmRun runs npm in the way's project with an empty cache, and returns
	// its wall time and what the registry got meanwhile.
	npmRun := func(way string, args ...string) (time.Duration, time.Duration, npmCount, error) {
		caches++
		cache := filepath.Join(dir, fmt.Sprintf("cache-%d", caches))
		defer os.RemoveAll(cache)
		w := ways[way]
		args = append(args, npmArgs(w.registry, w.auth, cache)...)
		cmd := exec.CommandContext(ctx, npm, args...)
		cmd.Dir, cmd.Env = w.project, env
		before := len(reg.Requests())
		t0 := time.Now()
		out, err := cmd.CombinedOutput()
		d := time.Since(t0)
		if err != nil {
			return 0, 0, npmCount{}, fmt.Errorf("%s: npm %s: %v\n%s", way, args[0], err, out)
		}
		cpu := cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
		return d, cpu, countNPM(reg.Requests()[before:]), nil
	}
	for _, way := range order {
		w := ways[way]
		if err := os.MkdirAll(w.project, 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(w.project, "package.json"), append(pj, '\n'), 0o644); err != nil {
			return nil, err
		}
		d, _, n, err := npmRun(way, "install", "--package-lock-only")
		if err != nil {
			return nil, err
		}
		installed, nested, err := checkLock(filepath.Join(w.project, "package-lock.json"), w.registry)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", way, err)
		}
		res.Installed, res.Nested = installed, nested
		res.Locks = append(res.Locks, NPMLock{Way: way, Time: d, Packuments: n.Packuments})
		progress("%s: lockfile of %d packages (%d nested) in %s, %d packuments", way, installed, nested, d.Round(time.Millisecond), n.Packuments)
	}

	for _, t := range through {
		if err := t.mark(); err != nil {
			return nil, err
		}
	}
	for rep := 0; rep < o.Reps; rep++ {
		for _, way := range rotated(order, rep) {
			os.RemoveAll(filepath.Join(ways[way].project, "node_modules"))
			d, cpu, n, err := npmRun(way, "ci")
			if err != nil {
				return nil, err
			}
			// An empty cache: npm ci must have fetched every tarball, once.
			if n.Tarballs != res.Installed {
				return nil, fmt.Errorf("%s: npm ci fetched %d tarballs from the registry, want %d (one per package in the lockfile)", way, n.Tarballs, res.Installed)
			}
			res.Runs = append(res.Runs, NPMRun{Way: way, Time: d, Tarballs: n.Tarballs, Packuments: n.Packuments, NPMCPU: cpu})
			progress("%s #%d: %s, npm CPU %s, %d tarballs, %d packuments", way, rep+1, d.Round(time.Millisecond), cpu.Round(time.Millisecond), n.Tarballs, n.Packuments)
		}
	}
	for _, way := range order[1:] {
		t := through[way]
		if err := t.finish(); err != nil {
			return nil, err
		}
		progress("%s RSS %.1f MiB at start, peak %.1f MiB", way, mib(t.use.RSSStart), mib(t.use.Peak))
	}
	res.Took = time.Since(res.Started)
	return res, nil
}

// npmEnv is npm's environment, its own settings only: home as its home,
// no user config, and no proxy variables (npm takes PROXY, in any case,
// for an HTTP proxy).
func npmEnv(home string) []string {
	return []string{
		"HOME=" + home,
		"PATH=" + os.Getenv("PATH"),
		"LANG=C",
		"npm_config_userconfig=" + filepath.Join(home, "npmrc"),
		"npm_config_update_notifier=false",
		"npm_config_loglevel=warn",
	}
}

// npmAuth is the argument that has npm send token to the registry at the
// URL registry (ending in '/').
func npmAuth(registry, token string) string {
	return "--//" + strings.TrimPrefix(registry, "http://") + ":_authToken=" + token
}

// npmArgs are the arguments every npm run of the benchmarks ends with: the
// registry, its token (npmAuth), an empty cache of its own, and nothing
// but the install itself.
func npmArgs(registry, auth, cache string) []string {
	return []string{"--registry", registry, auth, "--cache", cache, "--no-audit", "--no-fund", "--ignore-scripts"}
}

// npmCount is what the registry was asked for.
type npmCount struct{ Tarballs, Packuments int }

func countNPM(reqs []fakes.NPMRequest) npmCount {
	var n npmCount
	for _, r := range reqs {
		switch {
		case strings.Contains(r.Path, "/-/"):
			n.Tarballs++
		case r.Path != "/-/ping":
			n.Packuments++
		}
	}
	return n
}

// checkLock reads a package-lock.json and returns how many packages it
// installs and how many of them are nested; every one must be resolved
// under base, so that npm ci fetches it from there.
func checkLock(path, base string) (installed, nested int, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, 0, err
	}
	var lock struct {
		Packages map[string]struct {
			Resolved  string
			Integrity string
		}
	}
	if err := json.Unmarshal(b, &lock); err != nil {
		return 0, 0, fmt.Errorf("%s: %w", path, err)
	}
	for key, p := range lock.Packages {
		if key == "" {
			continue
		}
		if !strings.HasPrefix(p.Resolved, base) || p.Integrity == "" {
			return 0, 0, fmt.Errorf("%s: %s is resolved to %q (integrity %q), want a URL under %s", path, key, p.Resolved, p.Integrity, base)
		}
		installed++
		if strings.Count(key, "node_modules/") > 1 {
			nested++
		}
	}
	return installed, nested, nil
}

// npmTreePackage is a package of the generated tree; every version has the
// same dependencies.
type npmTreePackage struct {
	Name     string
	Versions []string
	Deps     map[string]string // name -> semver range
}

// npmTreeSpec is a registry's worth of packages and the dependencies of
// the root package, which reach every one of them.
type npmTreeSpec struct {
	Packages []npmTreePackage
	Root     map[string]string
}

// npmTree generates n packages (at least 10) in four levels (a tenth, two, three and four
// tenths of them), each depending on packages of the next level, so the
// tree is four deep below the root, which depends on the first level. It
// is the same for the same n. Every fourth package is scoped (@acme/ or
// @infra/); a package has one to three versions (1.0.0, 1.1.0, 2.0.0), and
// dependents ask for ~1.0.0, ^1.0.0 or ^2.0.0, so a package is shared by
// several dependents and some are installed in two versions, one nested.
func npmTree(n int) npmTreeSpec {
	r := rand.New(rand.NewPCG(4, 2026))
	var t npmTreeSpec
	for i := range n {
		name := fmt.Sprintf("bench-%03d", i)
		if i%4 == 3 {
			name = fmt.Sprintf("%s/lib-%03d", []string{"@acme", "@infra"}[i/4%2], i)
		}
		t.Packages = append(t.Packages, npmTreePackage{Name: name, Versions: []string{"1.0.0", "1.1.0", "2.0.0"}[:1+i%3]})
	}
	// Levels by tenths: 1, 2, 3, 4.
	var levels [][]int
	start := 0
	for _, tenths := range []int{1, 3, 6, 10} {
		end := n * tenths / 10
		var lv []int
		for i := start; i < end; i++ {
			lv = append(lv, i)
		}
		levels = append(levels, lv)
		start = end
	}
	rangeFor := func(p npmTreePackage) string {
		ranges := []string{"^1.0.0", "~1.0.0"}
		if len(p.Versions) == 3 {
			ranges = append(ranges, "^2.0.0")
		}
		return ranges[r.IntN(len(ranges))]
	}
	t.Root = map[string]string{}
	for _, i := range levels[0] {
		t.Root[t.Packages[i].Name] = rangeFor(t.Packages[i])
	}
	for l := 0; l+1 < len(levels); l++ {
		parents, children := levels[l], levels[l+1]
		for _, i := range parents {
			t.Packages[i].Deps = map[string]string{}
		}
		// Every child has at least one parent, then each parent takes up
		// to three more children at random: shared dependencies.
		for k, c := range children {
			p := &t.Packages[parents[k%len(parents)]]
			p.Deps[t.Packages[c].Name] = rangeFor(t.Packages[c])
		}
		for _, i := range parents {
			for range r.IntN(4) {
				c := t.Packages[children[r.IntN(len(children))]]
				if _, ok := t.Packages[i].Deps[c.Name]; !ok {
					t.Packages[i].Deps[c.Name] = rangeFor(c)
				}
			}
		}
	}
	return t
}

// publish puts every package of the tree in the registry.
func (t npmTreeSpec) publish(reg *fakes.NPMRegistry) error {
	for _, p := range t.Packages {
		if err := reg.AddPackage(p.Name, p.Versions...); err != nil {
			return err
		}
		if len(p.Deps) == 0 {
			continue
		}
		for _, v := range p.Versions {
			if err := reg.SetDependencies(p.Name, v, p.Deps); err != nil {
				return err
			}
		}
	}
	return nil
}

// cproxyNPMPolicy lets the sandbox install any package, scoped or not.
const cproxyNPMPolicy = `[profile.default]
models = ["claude-*"]
packages = ["*", "@*/*"]
`

// Markdown writes the result as tables.
func (r *NPMResult) Markdown(w io.Writer) {
	if len(r.Runs) == 0 {
		return
	}
	fmt.Fprintf(w, "npm %s, node %s, %s, %s in all. The registry: %d packages (%d scoped), %d versions; the lockfile installs %d packages, %d of them nested.\n\n",
		r.NPMVersion, r.NodeVersion, r.Started.UTC().Format("2006-01-02 15:04 MST"), r.Took.Round(time.Second),
		r.Packages, r.Scoped, r.Versions, r.Installed, r.Nested)
	fmt.Fprintln(w, "| npm ci | way | wall time | npm CPU | tarballs | packuments |")
	fmt.Fprintln(w, "|--:|---|--:|--:|--:|--:|")
	n := map[string]int{}
	for _, run := range r.Runs {
		n[run.Way]++
		fmt.Fprintf(w, "| %d | %s | %.2f s | %.2f s | %d | %d |\n", n[run.Way], run.Way, run.Time.Seconds(), run.NPMCPU.Seconds(), run.Tarballs, run.Packuments)
	}
	fmt.Fprintln(w)
	d, c := r.times("direct"), r.times("cproxy")
	md, mc := median(d), median(c)
	ratio, lo, hi := speedRatio(d, c)
	fmt.Fprintln(w, "| direct, median | cproxy, median | direct ÷ cproxy wall time, median (range of pairs) | target | met |")
	fmt.Fprintln(w, "|--:|--:|--:|---|---|")
	fmt.Fprintf(w, "| %.2f s | %.2f s | %.3f (%.3f–%.3f) | ≥ 0.9 | %s |\n\n", md.Seconds(), mc.Seconds(), ratio, lo, hi, yesNo(ratio >= 0.9))

	fmt.Fprintln(w, "| cproxy RSS at start | cproxy peak RSS (VmHWM), whole run | cproxy CPU per npm ci | per request |")
	fmt.Fprintln(w, "|--:|--:|--:|--:|")
	per, perReq := r.cpuPer(r.CproxyUse, "cproxy")
	fmt.Fprintf(w, "| %.1f MiB | %.1f MiB | %.2f s | %d µs |\n", mib(r.RSSStart), mib(r.Peak), per.Seconds(), perReq.Microseconds())
	if len(r.Locks) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "The lockfiles, made once per way before the runs (`npm install --package-lock-only`, empty cache; one sample each):")
		fmt.Fprintln(w)
		fmt.Fprintln(w, "| way | wall time | packuments |")
		fmt.Fprintln(w, "|---|--:|--:|")
		for _, l := range r.Locks {
			fmt.Fprintf(w, "| %s | %.2f s | %d |\n", l.Way, l.Time.Seconds(), l.Packuments)
		}
	}
	if r.BeforeUse != nil {
		r.beforeMarkdown(w)
	}
}

// beforeMarkdown writes the table of the earlier build's cproxy and this
// one side by side.
func (r *NPMResult) beforeMarkdown(w io.Writer) {
	b := r.Before
	d, c, e := r.times("direct"), r.times("cproxy"), r.times(b)
	ratio := func(base, way []time.Duration) string {
		x, lo, hi := speedRatio(base, way)
		return fmt.Sprintf("%.3f (%.3f–%.3f)", x, lo, hi)
	}
	_, bReq := r.cpuPer(*r.BeforeUse, b)
	_, cReq := r.cpuPer(r.CproxyUse, "cproxy")
	fmt.Fprintf(w, "\nBefore and after: %s is the earlier build, cproxy this one, running npm ci in turns with direct; ratios of median wall times, A ÷ B above 1 when B is faster (range of the rounds' ratios).\n\n", b)
	fmt.Fprintf(w, "| %s, median | direct ÷ %s | direct ÷ cproxy | %s ÷ cproxy | CPU per request, %s / cproxy | peak RSS, %s / cproxy |\n", b, b, b, b, b)
	fmt.Fprintln(w, "|--:|--:|--:|--:|--:|--:|")
	fmt.Fprintf(w, "| %.2f s | %s | %s | %s | %d / %d µs | %.1f / %.1f MiB |\n", median(e).Seconds(), ratio(d, e), ratio(d, c), ratio(e, c),
		bReq.Microseconds(), cReq.Microseconds(), mib(r.BeforeUse.Peak), mib(r.Peak))
}

// cpuPer is the CPU use spent per npm ci through way, and per request the
// registry got through it.
func (r *NPMResult) cpuPer(use CproxyUse, way string) (perRun, perRequest time.Duration) {
	runs, reqs := 0, 0
	for _, run := range r.Runs {
		if run.Way == way {
			runs++
			reqs += run.Tarballs + run.Packuments
		}
	}
	perRun = use.CPU / time.Duration(max(runs, 1))
	if reqs > 0 {
		perRequest = use.CPU / time.Duration(reqs)
	}
	return perRun, perRequest
}

func (r *NPMResult) times(way string) []time.Duration {
	var ts []time.Duration
	for _, run := range r.Runs {
		if run.Way == way {
			ts = append(ts, run.Time)
		}
	}
	return ts
}
