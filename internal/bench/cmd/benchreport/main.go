// Command benchreport runs the side-by-side comparison of internal/bench and
// prints its table in Markdown on stdout, progress on stderr. .ci/bench runs
// it; docs/benchmarks.md says what each row means. With -git it runs the git
// clone benchmark instead (.ci/bench-git), with -npm the npm ci benchmark
// (.ci/bench-npm), with -pip the pip install benchmark (.ci/bench-pip),
// with -gomod the go mod download benchmark (.ci/bench-gomod), with -mcp
// the MCP route benchmark (.ci/bench-mcp), with -github the GitHub API
// route benchmark (.ci/bench-github), with -mixed the mixed load at
// runtime.cpus 1 and 0 (.ci/bench-mixed), with -store
// the PostgreSQL store benchmark
// (.ci/bench-store), with -store-size the embedded store's size benchmark
// (.ci/bench-store-size). With -before BINARY each of the first three also
// measures an earlier build of cproxy side by side (.ci/bench-compare).
// With -json FILE it also writes everything the run measured
// to FILE as a bench.Report, which benchcharts draws charts from.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/cproxy/cproxy/internal/bench"
)

func main() {
	bench.RunRoleIfAsked()

	var o bench.Options
	p := bench.DefaultPlan
	flag.StringVar(&o.Cproxy, "cproxy", "", "the cproxy `binary` to measure (default: go build it)")
	flag.StringVar(&o.Before, "before", "", "also measure this cproxy `binary`, an earlier build, side by side with -cproxy (.ci/bench-compare); with -git and -npm too")
	flag.StringVar(&o.BeforeRev, "before-rev", "", "name the -before build `REV` (a commit id) in the tables: cproxy@REV")
	flag.StringVar(&o.Proxy, "proxy", "", "the benchproxy `binary` that runs the do-nothing Go proxy (default: go build it)")
	flag.StringVar(&o.Nginx, "nginx", "", "the nginx `binary` (default: nginx on PATH, else /usr/sbin/nginx)")
	flag.StringVar(&o.Dir, "dir", "", "keep configs and logs in `DIR` (default: a temporary directory, removed)")
	flag.StringVar(&o.Profile, "profile", "", "write CPU profiles of the Go proxy, the upstream and routes.Server (an extra target) into `DIR`")
	flag.StringVar(&o.Trace, "trace", "", "write execution traces of the Go proxies and routes.Server (extra targets: routes, and routes-1cpu with -one-cpu) into `DIR`")
	flag.BoolVar(&o.NoNginx, "no-nginx", false, "leave nginx out")
	flag.BoolVar(&o.OneCPU, "one-cpu", true, "also run the do-nothing Go proxy and cproxy on one CPU each (GOMAXPROCS=1), beside the pair on every CPU; -one-cpu=false leaves them out")
	flag.BoolVar(&o.SharedProxy, "shared-floor", false, "add the do-nothing Go proxy run from benchreport's own executable (the client's and the upstream's), as the floor ran until 2026-11-30")
	flag.IntVar(&p.Reps, "reps", p.Reps, "repetitions of the whole comparison, each on new processes")
	flag.IntVar(&p.Rounds, "rounds", p.Rounds, "turns per target and measure in one repetition")
	flag.DurationVar(&p.Slice, "slice", p.Slice, "length of one turn")
	flag.IntVar(&p.MaxOps, "max-ops", p.MaxOps, "most requests in one turn")
	flag.IntVar(&p.Streams, "streams", p.Streams, "streams held open for the memory measure")
	gitMode := flag.Bool("git", false, "run the git clone benchmark instead (.ci/bench-git): -cproxy, -helper, -dir and the -git-* flags apply")
	g := bench.DefaultGitOptions
	flag.StringVar(&g.Helper, "helper", "", "with -git: the git-credential-cproxy `binary` (default: go build it)")
	flag.IntVar(&g.BigMiB, "git-big", g.BigMiB, "with -git: MiB of random content in the big repository")
	flag.IntVar(&g.SmallMiB, "git-small", g.SmallMiB, "with -git: MiB of random content in the small repository")
	flag.IntVar(&g.Reps, "git-reps", g.Reps, "with -git: clones per repository and way")
	npmMode := flag.Bool("npm", false, "run the npm ci benchmark instead (.ci/bench-npm): -cproxy, -dir and the -npm-* flags apply")
	n := bench.DefaultNPMOptions
	flag.IntVar(&n.Packages, "npm-packages", n.Packages, "with -npm: packages in the generated dependency tree")
	flag.IntVar(&n.Reps, "npm-reps", n.Reps, "with -npm: npm ci runs per way")
	pipMode := flag.Bool("pip", false, "run the pip install benchmark instead (.ci/bench-pip): -cproxy, -dir and the -pip-* flags apply")
	pp := bench.DefaultPipOptions
	flag.IntVar(&pp.Packages, "pip-packages", pp.Packages, "with -pip: projects in the generated dependency tree, below the root project")
	flag.IntVar(&pp.Reps, "pip-reps", pp.Reps, "with -pip: pip install runs per way")
	gomodMode := flag.Bool("gomod", false, "run the go mod download benchmark instead (.ci/bench-gomod): -cproxy, -proxy, -dir and the -gomod-* flags apply")
	gm := bench.DefaultGoModOptions
	flag.IntVar(&gm.Modules, "gomod-modules", gm.Modules, "with -gomod: modules the main module requires")
	flag.IntVar(&gm.Reps, "gomod-reps", gm.Reps, "with -gomod: go mod download runs per way")
	mcpMode := flag.Bool("mcp", false, "run the MCP route benchmark instead (.ci/bench-mcp): -cproxy, -dir and the -mcp-* flags apply")
	mo := bench.DefaultMCPOptions
	flag.IntVar(&mo.Rounds, "mcp-rounds", mo.Rounds, "with -mcp: turns per way")
	flag.IntVar(&mo.Calls, "mcp-calls", mo.Calls, "with -mcp: tools/call timed per way and round")
	flag.IntVar(&mo.Lists, "mcp-lists", mo.Lists, "with -mcp: tools/list timed per way and round")
	flag.IntVar(&mo.Tools, "mcp-tools", mo.Tools, "with -mcp: generated tools the server lists beside its own three")
	githubMode := flag.Bool("github", false, "run the GitHub API route benchmark instead (.ci/bench-github): -cproxy, -proxy, -dir and the -github-* flags apply")
	gh := bench.DefaultGitHubOptions
	flag.IntVar(&gh.Rounds, "github-rounds", gh.Rounds, "with -github: turns per way")
	flag.IntVar(&gh.Reads, "github-reads", gh.Reads, "with -github: sequential REST reads timed per way and round")
	flag.DurationVar(&gh.Slice, "github-slice", gh.Slice, "with -github: how long 16 clients read per way and round")
	flag.IntVar(&gh.Queries, "github-queries", gh.Queries, "with -github: sequential GraphQL queries timed per way and round")
	flag.IntVar(&gh.Gh, "github-gh", gh.Gh, "with -github: gh pr view runs per gh way and round; -1 leaves gh out")
	mixedMode := flag.Bool("mixed", false, "run the mixed-load benchmark instead (.ci/bench-mixed): model streams, a git clone and npm ci runs at once through one cproxy at runtime.cpus 1 and 0; -cproxy, -helper, -dir and the -mixed-* flags apply")
	mx := bench.DefaultMixedOptions
	flag.IntVar(&mx.Rounds, "mixed-rounds", mx.Rounds, "with -mixed: rounds, each running every setting alone and mixed")
	flag.Func("mixed-cpus", "with -mixed: the runtime.cpus settings, comma-separated, 0 for every CPU (default 1,0)", intList(&mx.CPUs, 0, "CPUs"))
	flag.IntVar(&mx.GitMiB, "mixed-git", mx.GitMiB, "with -mixed: MiB of random content in the repository cloned")
	flag.IntVar(&mx.NPMPackages, "mixed-npm-packages", mx.NPMPackages, "with -mixed: packages in the generated dependency tree")
	flag.IntVar(&mx.NPMRuns, "mixed-npm-runs", mx.NPMRuns, "with -mixed: npm ci runs at once")
	flag.IntVar(&mx.Clients, "mixed-clients", mx.Clients, "with -mixed: model clients streaming at once")
	flag.DurationVar(&mx.Pause, "mixed-pause", mx.Pause, "with -mixed: each model client's pause between a stream's end and its next request")
	flag.DurationVar(&mx.Alone, "mixed-alone", mx.Alone, "with -mixed: how long the model clients run alone, the baseline")
	storeMode := flag.Bool("store", false, "run the PostgreSQL store benchmark instead (.ci/bench-store): -cproxy, -dir and the -store-* flags apply")
	st := bench.DefaultStoreOptions
	flag.StringVar(&st.DSN, "store-dsn", os.Getenv("CPROXY_TEST_PG_DSN"), "with -store: a postgres:// `URL` of a role that may create databases (default $CPROXY_TEST_PG_DSN)")
	flag.StringVar(&st.PGData, "store-pgdata", os.Getenv("CPROXY_TEST_PG_DATA"), "with -store: the server's data `DIR`, to count its CPU (default $CPROXY_TEST_PG_DATA)")
	flag.IntVar(&st.Rounds, "store-rounds", st.Rounds, "with -store: turns per target and measure")
	flag.DurationVar(&st.Slice, "store-slice", st.Slice, "with -store: length of one turn")
	flag.IntVar(&st.Revocations, "store-revocations", st.Revocations, "with -store: revocations timed per mode")
	flag.DurationVar(&st.LookupCache, "store-cache", st.LookupCache, "with -store: store.lookup_cache of the cached cproxy and replicas")
	sizeMode := flag.Bool("store-size", false, "run the embedded store's size benchmark instead (.ci/bench-store-size): -cproxy, -dir and the -size-* flags apply")
	sz := bench.DefaultStoreSizeOptions
	flag.Func("size-tokens", "with -store-size: the store sizes to measure, comma-separated (default 10000,100000,1000000)", intList(&sz.Sizes, 1, "tokens"))
	flag.IntVar(&sz.Lookups, "size-lookups", sz.Lookups, "with -store-size: look-ups timed in process per size")
	flag.IntVar(&sz.Requests, "size-requests", sz.Requests, "with -store-size: requests through cproxy per size")
	flag.IntVar(&sz.Days, "size-days", sz.Days, "with -store-size: simulated days of churn")
	flag.IntVar(&sz.PerDay, "size-per-day", sz.PerDay, "with -store-size: tokens minted per simulated day")
	jsonPath := flag.String("json", "", "also write the full results as JSON to `FILE` (what benchcharts reads)")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "benchreport: takes no arguments, got %q\n", flag.Arg(0))
		os.Exit(2)
	}
	if _, err := bench.BeforeTarget(o.BeforeRev); err != nil {
		fmt.Fprintf(os.Stderr, "benchreport: -before-rev: %v\n", err)
		os.Exit(2)
	}
	// Under CI a missing nginx is a broken setup, not a reason to print a
	// table without it.
	o.RequireNginx = os.Getenv("CI") == "true"
	p.Progress = os.Stderr

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if *storeMode {
		st.Cproxy, st.Dir, st.Progress = o.Cproxy, o.Dir, os.Stderr
	}
	sz.Cproxy, sz.Dir, sz.Progress = o.Cproxy, o.Dir, os.Stderr
	pp.Cproxy, pp.Dir, pp.Progress = o.Cproxy, o.Dir, os.Stderr
	gm.Cproxy, gm.Proxy, gm.Dir, gm.Progress = o.Cproxy, o.Proxy, o.Dir, os.Stderr
	mo.Cproxy, mo.Dir, mo.Progress = o.Cproxy, o.Dir, os.Stderr
	gh.Cproxy, gh.Proxy, gh.Dir, gh.Progress = o.Cproxy, o.Proxy, o.Dir, os.Stderr
	mx.Cproxy, mx.Helper, mx.Dir, mx.Progress = o.Cproxy, g.Helper, o.Dir, os.Stderr
	pkg := pkgRuns{pip: *pipMode, pipOpts: pp, gomod: *gomodMode, gomodOpts: gm, mcp: *mcpMode, mcpOpts: mo, github: *githubMode, githubOpts: gh, mixed: *mixedMode, mixedOpts: mx}
	if err := run(ctx, *gitMode, *npmMode, *storeMode, *sizeMode, pkg, o, p, g, n, st, sz, *jsonPath); err != nil {
		fmt.Fprintf(os.Stderr, "benchreport: %v\n", err)
		os.Exit(1)
	}
}

// intList parses a flag's comma-separated numbers, each at least least,
// into dst; what names what they count, for the error.
func intList(dst *[]int, least int, what string) func(string) error {
	return func(v string) error {
		*dst = nil
		for f := range strings.SplitSeq(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < least {
				return fmt.Errorf("%q is not a number of %s", f, what)
			}
			*dst = append(*dst, n)
		}
		return nil
	}
}

// pkgRuns say whether to run the package-route benchmarks, the MCP
// route's, the GitHub API route's or the mixed load, and how.
type pkgRuns struct {
	pip        bool
	pipOpts    bench.PipOptions
	gomod      bool
	gomodOpts  bench.GoModOptions
	mcp        bool
	mcpOpts    bench.MCPOptions
	github     bool
	githubOpts bench.GitHubOptions
	mixed      bool
	mixedOpts  bench.MixedOptions
}

// run runs the benchmark asked for, prints its tables and, with jsonPath
// set, writes its report.
func run(ctx context.Context, gitMode, npmMode, storeMode, sizeMode bool, pkg pkgRuns, o bench.Options, p bench.Plan, g bench.GitOptions, n bench.NPMOptions, st bench.StoreOptions, sz bench.StoreSizeOptions, jsonPath string) error {
	loadBefore := bench.LoadAverage()
	var (
		res interface{ Markdown(io.Writer) }
		err error
	)
	switch {
	case sizeMode:
		res, err = bench.RunStoreSize(ctx, sz)
	case storeMode:
		res, err = bench.RunStore(ctx, st)
	case pkg.pip:
		res, err = bench.RunPip(ctx, pkg.pipOpts)
	case pkg.gomod:
		res, err = bench.RunGoMod(ctx, pkg.gomodOpts)
	case pkg.mcp:
		res, err = bench.RunMCP(ctx, pkg.mcpOpts)
	case pkg.github:
		res, err = bench.RunGitHub(ctx, pkg.githubOpts)
	case pkg.mixed:
		res, err = bench.RunMixed(ctx, pkg.mixedOpts)
	case npmMode:
		n.Cproxy, n.Dir, n.Progress, n.Before, n.BeforeRev = o.Cproxy, o.Dir, os.Stderr, o.Before, o.BeforeRev
		res, err = bench.RunNPM(ctx, n)
	case gitMode:
		g.Cproxy, g.Dir, g.Progress, g.Before, g.BeforeRev = o.Cproxy, o.Dir, os.Stderr, o.Before, o.BeforeRev
		res, err = bench.RunGit(ctx, g)
	default:
		res, err = bench.Run(ctx, o, p)
	}
	if err != nil {
		return err
	}
	res.Markdown(os.Stdout)
	if jsonPath == "" {
		return nil
	}
	rep, err := bench.NewReport(res, os.Args[1:], loadBefore)
	if err != nil {
		return err
	}
	if err := bench.WriteReport(jsonPath, rep); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "benchreport: wrote %s\n", jsonPath)
	return nil
}
