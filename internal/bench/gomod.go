package bench

import (
	"context"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/cproxy/cproxy/internal/fakes"
)

// The go mod download benchmark: the machine's go (GOTOOLCHAIN=local)
// downloads and verifies every module a main module requires, a generated
// set (goModTree) on a local module proxy with its own signed checksum
// database (internal/fakes.GoProxy on loopback), directly and through the
// real `cproxy serve`'s TLS listener with a sandbox token, with and without
// a min_release_age, in turns, each time with an empty module cache and
// no go.sum, so go asks the checksum database for every module. It
// reports the wall time of each download, the ratio of the medians, the
// requests the proxy got, the requests cproxy answered, and cproxy's peak
// RSS (VmHWM) and CPU over the runs.
//
// go reaches cproxy over HTTPS only (it sends a module proxy's credential
// over nothing else), and cproxy the fake over plain HTTP, so go takes
// two direct ways to the same fake: plain HTTP (direct) and HTTPS
// (direct-tls, HTTP/2 as cproxy's TLS listener and proxy.golang.org), to tell TLS from
// the rest of what cproxy costs. And what any proxy's hop costs: the
// do-nothing proxy over TLS (floortls.go) on one CPU, beside cproxy on its
// default one, and on every CPU, beside cproxy with runtime.cpus = 0.

// GoModOptions say what RunGoMod does.
type GoModOptions struct {
	// Cproxy is the cproxy binary; empty: go build it.
	Cproxy string
	// Proxy is the benchproxy binary, which runs the do-nothing proxy;
	// empty: go build it.
	Proxy string
	// Dir is where the module caches, configs and logs go. Empty: a new
	// temporary directory, removed at the end.
	Dir string
	// Modules is how many modules the main module requires. Zero means
	// DefaultGoModOptions.Modules.
	Modules int
	// Reps is how many downloads per way. Zero means
	// DefaultGoModOptions.Reps.
	Reps int
	// Progress, if set, gets a line per step.
	Progress io.Writer
}

// DefaultGoModOptions download 40 modules nine times each way: a download
// takes a few tenths of a second, so one more or less of a slow stretch
// moves a median of few runs.
var DefaultGoModOptions = GoModOptions{Modules: 40, Reps: 9}

// goModWays are the ways of the go mod download benchmark, in the order
// of the first round.
var goModWays = []string{wayDirect, wayDirectTLS, wayFloor1, wayCproxy, wayCproxyAge, wayFloor, wayCproxyAll}

// goModThrough are the ways through a cproxy.
var goModThrough = []string{wayCproxy, wayCproxyAge, wayCproxyAll}

// GoModRun is one timed `go mod download`, with what the proxy got during
// it.
type GoModRun struct {
	Way  string        `json:"way"` // one of goModWays
	Time time.Duration `json:"time_ns"`
	// GoCPU is the processor time go used (user and system).
	GoCPU time.Duration `json:"go_cpu_ns"`
	// Info, Mod and Zip are the requests for versions' .info, .mod and .zip
	// files the proxy got; SumDB those for the checksum database
	// (supported, lookups and tiles).
	Info  int `json:"info"`
	Mod   int `json:"mod"`
	Zip   int `json:"zip"`
	SumDB int `json:"sumdb"`
	// Proxied is the requests cproxy answered (its audit records), or the
	// do-nothing proxy forwarded (those the module proxy got); zero for
	// direct.
	Proxied int `json:"proxied"`
}

// GoModResult is a whole run.
type GoModResult struct {
	// Modules is how many modules the main module requires, Versions how
	// many versions the proxy has of them.
	Modules  int        `json:"modules"`
	Versions int        `json:"versions"`
	Ways     []string   `json:"ways"`
	Runs     []GoModRun `json:"runs"` // in the order run, in turns
	// MinReleaseAge is the min_release_age of the cproxy+age way.
	MinReleaseAge string `json:"min_release_age"`
	// Use is what each way's proxy used: its peak is after all the runs;
	// its CPU over its runs.
	Use       map[string]CproxyUse `json:"cproxy_use"`
	GoVersion string               `json:"go_version"`
	Started   time.Time            `json:"started"`
	Took      time.Duration        `json:"took_ns"`
}

// RunGoMod runs the go mod download benchmark.
func RunGoMod(ctx context.Context, o GoModOptions) (_ *GoModResult, err error) {
	if o.Modules == 0 {
		o.Modules = DefaultGoModOptions.Modules
	}
	if o.Reps == 0 {
		o.Reps = DefaultGoModOptions.Reps
	}
	if o.Modules < 4 {
		return nil, fmt.Errorf("%d modules: at least 4 are needed, one per level", o.Modules)
	}
	progress := progressTo(o.Progress, "bench-gomod")
	goCmd, err := exec.LookPath("go")
	if err != nil {
		return nil, fmt.Errorf("go is not installed: %w", err)
	}
	res := &GoModResult{Started: time.Now(), Ways: goModWays, MinReleaseAge: pkgMinReleaseAge, Use: map[string]CproxyUse{}}
	dir, done, err := workDir(o.Dir, "bench-gomod")
	if err != nil {
		return nil, err
	}
	defer done()
	if o.Cproxy, err = cproxyBinary(o.Cproxy, dir); err != nil {
		return nil, err
	}
	if o.Proxy, err = benchproxyBinary(o.Proxy, dir); err != nil {
		return nil, err
	}

	// Anonymous, as proxy.golang.org is: go sends no credential over plain
	// HTTP. cproxy sends the real token.
	realToken := "goproxy_bench" + randomHex(16)
	proxy, err := fakes.NewGoProxy(fakes.GoProxyOptions{Token: realToken, Anonymous: true, TLS: true})
	if err != nil {
		return nil, err
	}
	defer proxy.Close()
	tree := goModTree(o.Modules)
	released := time.Now().Add(-30 * 24 * time.Hour)
	for i, m := range tree.Modules {
		for _, v := range m.Versions {
			files := map[string]string{
				"go.mod":                      tree.goMod(i),
				filepath.Base(m.Path) + ".go": fmt.Sprintf("package %s\n\nfunc Version() string { return %q }\n", filepath.Base(m.Path), v),
			}
			if err := proxy.AddModule(m.Path, v, released, files); err != nil {
				return nil, err
			}
			res.Versions++
		}
	}
	res.Modules = len(tree.Modules)
	progress("module proxy: %d modules, %d versions", res.Modules, res.Versions)

	through := map[string]*cproxyWay{}
	cas := map[string]string{}
	for _, way := range goModThrough {
		policy := cproxyGoModPolicy
		if way == wayCproxyAge {
			policy += "min_release_age = \"" + pkgMinReleaseAge + "\"\n"
		}
		setup := routeSetup{TLS: true}
		if way == wayCproxyAll {
			setup.More = "\n[runtime]\ncpus = 0\n"
		}
		e := &Env{dir: filepath.Join(dir, way+"-serve")}
		if err := os.MkdirAll(e.dir, 0o755); err != nil {
			return nil, err
		}
		defer e.Close()
		if through[way], err = e.startRouteWay(o.Cproxy, way, "gomod", proxy.URL, realToken, policy, "bench-gomod", setup, &CproxyUse{}); err != nil {
			return nil, err
		}
		// The local CA go trusts for the TLS listener, as a sandbox gets it.
		ca, err := exec.CommandContext(ctx, o.Cproxy, "ca", "--config", filepath.Join(e.dir, "cproxy.toml")).Output()
		if err != nil {
			return nil, fmt.Errorf("%s: cproxy ca: %w", way, err)
		}
		cas[way] = filepath.Join(e.dir, "ca.pem")
		if err := os.WriteFile(cas[way], ca, 0o644); err != nil {
			return nil, err
		}
	}

	// go's own settings only, every one that could send it anywhere but
	// GOPROXY cleared: no GOPRIVATE, GONOPROXY, GONOSUMDB or GOINSECURE,
	// and GOPROXY a single loopback URL with no "direct" after it. GOSUMDB
	// is the fake database's key with no URL, so go reads it through
	// GOPROXY.
	home := filepath.Join(dir, "home")
	if err := os.MkdirAll(home, 0o755); err != nil {
		return nil, err
	}
	env := []string{
		"HOME=" + home,
		"PATH=" + os.Getenv("PATH"),
		"LANG=C",
		"GOENV=off",
		"GOTOOLCHAIN=local",
		"GOFLAGS=-mod=mod",
		"GOSUMDB=" + proxy.VerifierKey,
		"GONOSUMDB=", "GONOSUMCHECK=", "GOPRIVATE=", "GONOPROXY=", "GOINSECURE=",
		"GOCACHE=" + filepath.Join(dir, "gocache"),
	}
	if v, err := exec.Command(goCmd, "env", "GOVERSION").Output(); err == nil {
		res.GoVersion = strings.TrimSpace(string(v))
	}
	fakeCA := filepath.Join(dir, "fake-proxy.pem")
	if err := os.WriteFile(fakeCA, proxy.CertPEM, 0o644); err != nil {
		return nil, err
	}
	wayEnv := map[string][]string{
		wayDirect:    {"GOPROXY=" + proxy.URL},
		wayDirectTLS: {"GOPROXY=" + proxy.TLSURL, "SSL_CERT_FILE=" + fakeCA},
	}
	// The do-nothing proxies, with a credential in GOPROXY as cproxy's
	// ways have (go sends it; the proxy replaces it with the real one).
	floors := map[string]*cproxyWay{}
	fe := &Env{dir: filepath.Join(dir, "floors")}
	if err := os.MkdirAll(fe.dir, 0o755); err != nil {
		return nil, err
	}
	defer fe.Close()
	for way, cpus := range map[string]map[string]string{wayFloor1: oneCPU, wayFloor: allCPUs()} {
		addr, ca, err := fe.startTLSFloor(way, o.Proxy, proxy.URL, realToken, cpus)
		if err != nil {
			return nil, err
		}
		t := fe.Target(way)
		m, err := t.Memory()
		if err != nil {
			return nil, err
		}
		floors[way] = &cproxyWay{Target: t, use: &CproxyUse{RSSStart: m.RSS}}
		wayEnv[way] = []string{"GOPROXY=https://bench:unchecked@" + addr + "/", "SSL_CERT_FILE=" + ca}
	}
	for way, t := range through {
		wayEnv[way] = []string{"GOPROXY=https://cproxy:" + t.token + "@" + t.tlsAddr + "/gomod/", "SSL_CERT_FILE=" + cas[way]}
	}

	// Every proxy's memory and CPU are measured, cproxy's and the floor's.
	proxies := maps.Clone(through)
	maps.Copy(proxies, floors)
	for _, t := range proxies {
		if err := t.mark(); err != nil {
			return nil, err
		}
	}
	downloads := 0
	// download runs go mod download in a new main module with no go.sum,
	// a new GOPATH (the checksum database's cache) and an empty module
	// cache, and returns the run, its go.sum and the zips in its cache.
	download := func(way string) (r GoModRun, sums []byte, zips []string, err error) {
		downloads++
		run := filepath.Join(dir, fmt.Sprintf("run-%d", downloads))
		defer os.RemoveAll(run)
		app := filepath.Join(run, "app")
		if err := os.MkdirAll(app, 0o755); err != nil {
			return r, nil, nil, err
		}
		if err := os.WriteFile(filepath.Join(app, "go.mod"), []byte(tree.mainGoMod()), 0o644); err != nil {
			return r, nil, nil, err
		}
		cmd := exec.CommandContext(ctx, goCmd, "mod", "download")
		cmd.Env = append(append(append([]string(nil), env...), wayEnv[way]...),
			"GOPATH="+filepath.Join(run, "gopath"), "GOMODCACHE="+filepath.Join(run, "modcache"))
		cmd.Dir = app
		before, audited := len(proxy.Requests()), 0
		if t := through[way]; t != nil {
			if audited, err = t.auditLines("gomod"); err != nil {
				return r, nil, nil, err
			}
		}
		t0 := time.Now()
		out, err := cmd.CombinedOutput()
		d := time.Since(t0)
		if err != nil {
			return r, nil, nil, fmt.Errorf("%s: go mod download: %v\n%s", way, err, out)
		}
		r = GoModRun{Way: way, Time: d, GoCPU: cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()}
		for _, line := range proxy.Requests()[before:] {
			path := strings.Fields(line)[1]
			switch {
			case strings.HasPrefix(path, "/sumdb/"):
				r.SumDB++
			case strings.HasSuffix(path, ".info"):
				r.Info++
			case strings.HasSuffix(path, ".mod"):
				r.Mod++
			case strings.HasSuffix(path, ".zip"):
				r.Zip++
			}
		}
		if t := through[way]; t != nil {
			n, err := t.auditLines("gomod")
			if err != nil {
				return r, nil, nil, err
			}
			r.Proxied = n - audited
		} else if floors[way] != nil {
			r.Proxied = len(proxy.Requests()) - before
		}
		if sums, err = os.ReadFile(filepath.Join(app, "go.sum")); err != nil {
			return r, nil, nil, fmt.Errorf("%s: go mod download wrote no go.sum: %w", way, err)
		}
		zips, err = filepath.Glob(filepath.Join(run, "modcache", "cache", "download", "example.com", "bench", "*", "@v", "*.zip"))
		return r, sums, zips, err
	}
	// The fake checksum database adds a module's record to its tree at the
	// first lookup, as sum.golang.org does, so the first download also
	// grows the tree and reads more tiles: one download, untimed, puts
	// every record in first, as the real database has them. It goes
	// directly, so each cproxy meets these modules first in its timed
	// runs.
	if _, _, _, err := download(wayDirect); err != nil {
		return nil, err
	}
	for rep := 0; rep < o.Reps; rep++ {
		for _, way := range rotated(goModWays, rep) {
			r, sums, zips, err := download(way)
			if err != nil {
				return nil, err
			}
			// Every module downloaded once, and checked against the
			// checksum database (go.sum gets the go.mod hashes; go checks
			// each zip's against the database's record as it downloads).
			if len(zips) != res.Modules || r.Zip != res.Modules || strings.Count(string(sums), "/go.mod h1:") != res.Modules || r.SumDB == 0 {
				return nil, fmt.Errorf("%s: %d modules in the cache, %d zips fetched, %d checksum database requests; want %d modules, each once, verified\n%s",
					way, len(zips), r.Zip, r.SumDB, res.Modules, sums)
			}
			if through[way] != nil && r.Proxied == 0 {
				return nil, fmt.Errorf("%s: cproxy answered no request of go's", way)
			}
			res.Runs = append(res.Runs, r)
			progress("%s #%d: %s, go CPU %s, %d info, %d mod, %d zip, %d sumdb, %d through cproxy", way, rep+1,
				r.Time.Round(time.Millisecond), r.GoCPU.Round(time.Millisecond), r.Info, r.Mod, r.Zip, r.SumDB, r.Proxied)
		}
	}
	for way, t := range proxies {
		if err := t.finish(); err != nil {
			return nil, err
		}
		res.Use[way] = *t.use
		progress("%s RSS %.1f MiB at start, peak %.1f MiB", way, mib(t.use.RSSStart), mib(t.use.Peak))
	}
	res.Took = time.Since(res.Started)
	return res, nil
}

// goModule is a module of the generated set: its versions, and the
// modules (of the set) its go.mod requires at their newest version.
type goModule struct {
	Path     string
	Versions []string
	Requires []int
}

// goModTreeSpec is the modules the main module requires, every one of
// them directly (as go mod tidy writes a go.mod since go 1.17).
type goModTreeSpec struct{ Modules []goModule }

// goModTree generates n modules, example.com/bench/mNNN, in four levels (a
// tenth, two, three and four tenths of them, at least one each), each
// requiring some of the next level, so chains run four deep. A module has
// one to three versions (v1.0.0, v1.1.0, v1.2.0); every requirement, the
// main module's and the modules' own, is of the newest version, so go
// needs one version of each. It is the same for the same n.
func goModTree(n int) goModTreeSpec {
	r := rand.New(rand.NewPCG(4, 2026))
	var t goModTreeSpec
	for i := range n {
		t.Modules = append(t.Modules, goModule{Path: fmt.Sprintf("example.com/bench/m%03d", i), Versions: []string{"v1.0.0", "v1.1.0", "v1.2.0"}[:1+i%3]})
	}
	var levels [][]int
	start := 0
	for l, tenths := range []int{1, 3, 6, 10} {
		end := max(n*tenths/10, start+1)
		if l == 3 {
			end = n
		}
		var lv []int
		for i := start; i < end; i++ {
			lv = append(lv, i)
		}
		levels = append(levels, lv)
		start = end
	}
	for l := 0; l+1 < len(levels); l++ {
		parents, children := levels[l], levels[l+1]
		took := map[[2]int]bool{}
		for k, c := range children {
			p := parents[k%len(parents)]
			took[[2]int{p, c}] = true
			t.Modules[p].Requires = append(t.Modules[p].Requires, c)
		}
		for _, p := range parents {
			for range r.IntN(3) {
				c := children[r.IntN(len(children))]
				if !took[[2]int{p, c}] {
					took[[2]int{p, c}] = true
					t.Modules[p].Requires = append(t.Modules[p].Requires, c)
				}
			}
		}
	}
	return t
}

// newest is the module's newest version.
func (m goModule) newest() string { return m.Versions[len(m.Versions)-1] }

// goMod is the go.mod of the i-th module, requiring its modules at their
// newest versions.
func (t goModTreeSpec) goMod(i int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "module %s\n\ngo 1.21\n", t.Modules[i].Path)
	if req := t.Modules[i].Requires; len(req) > 0 {
		b.WriteString("\nrequire (\n")
		for _, j := range req {
			fmt.Fprintf(&b, "\t%s %s\n", t.Modules[j].Path, t.Modules[j].newest())
		}
		b.WriteString(")\n")
	}
	return b.String()
}

// mainGoMod is the main module's go.mod, requiring every module.
func (t goModTreeSpec) mainGoMod() string {
	var b strings.Builder
	b.WriteString("module example.com/benchapp\n\ngo 1.21\n\nrequire (\n")
	for _, m := range t.Modules {
		fmt.Fprintf(&b, "\t%s %s\n", m.Path, m.newest())
	}
	b.WriteString(")\n")
	return b.String()
}

// cproxyGoModPolicy lets the sandbox download every module of the set;
// the cproxy+age way appends a min_release_age.
const cproxyGoModPolicy = `[profile.default]
models = ["claude-*"]

[profile.default.go]
modules = ["example.com/bench/*"]
`

// Markdown writes the result as tables.
func (r *GoModResult) Markdown(w io.Writer) {
	if len(r.Runs) == 0 {
		return
	}
	fmt.Fprintf(w, "%s, %s, %s in all. The module proxy: %d modules, %d versions, and its checksum database; the main module requires every module at its newest version. go reaches cproxy over its TLS listener (go sends a proxy's credential over HTTPS only), and cproxy the proxy over plain HTTP; direct is plain HTTP to the proxy, direct-tls HTTPS (HTTP/2, as cproxy's listener and proxy.golang.org). goproxy is a do-nothing Go reverse proxy over TLS (HTTP/2, a transport keeping 64 idle connections, as cproxy's), on one CPU (goproxy-1cpu, beside cproxy on its default one) and on every CPU (beside cproxy-all, `runtime.cpus = 0`). cproxy+age has `min_release_age = %q` (every version is 30 days old).\n\n",
		r.GoVersion, r.Started.UTC().Format("2006-01-02 15:04 MST"), r.Took.Round(time.Second), r.Modules, r.Versions, r.MinReleaseAge)
	fmt.Fprintln(w, "| go mod download | way | wall time | go CPU | .info | .mod | .zip | checksum database | answered by the proxy |")
	fmt.Fprintln(w, "|--:|---|--:|--:|--:|--:|--:|--:|--:|")
	n := map[string]int{}
	for _, run := range r.Runs {
		n[run.Way]++
		fmt.Fprintf(w, "| %d | %s | %.2f s | %.2f s | %d | %d | %d | %d | %d |\n", n[run.Way], run.Way, run.Time.Seconds(), run.GoCPU.Seconds(),
			run.Info, run.Mod, run.Zip, run.SumDB, run.Proxied)
	}
	fmt.Fprintln(w)
	pkgRatioTable(w, []string{wayCproxy, wayCproxyAge}, []string{wayDirect, wayDirectTLS, wayFloor1}, r.times)
	pkgRatioTable(w, []string{wayCproxyAll}, []string{wayDirect, wayDirectTLS, wayFloor}, r.times)
	pkgUseTable(w, "go mod download", r.Ways, r.Use, func(way string) int { return len(r.times(way)) }, func(way string) int {
		total := 0
		for _, run := range r.Runs {
			if run.Way == way {
				total += run.Proxied
			}
		}
		return total
	})
}

func (r *GoModResult) times(way string) []time.Duration {
	var ts []time.Duration
	for _, run := range r.Runs {
		if run.Way == way {
			ts = append(ts, run.Time)
		}
	}
	return ts
}
