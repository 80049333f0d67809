package bench

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/cproxy/cproxy/internal/fakes"
)

// The git clone benchmark: the real git clones a repository from a local
// fake GitHub (internal/fakes.GitServer: `git http-backend` behind
// net/http/cgi on loopback), directly with the real token and through the
// real `cproxy serve` with a sandbox token handed over by
// git-credential-cproxy, alternated, for a big repository and a small one.
// It reports wall time and MiB/s per clone, the ratio of cproxy's throughput
// to direct's, and cproxy's peak RSS (VmHWM) with each repository, each size
// on a fresh cproxy process, so the two peaks compare.

// GitOptions say what RunGit does.
type GitOptions struct {
	// Cproxy is the cproxy binary; empty: go build it.
	Cproxy string
	// Helper is the git-credential-cproxy binary; empty: go build it.
	Helper string
	// Dir is where the repositories, clones, configs and logs go. Empty: a
	// new temporary directory, removed at the end.
	Dir string
	// BigMiB and SmallMiB are the sizes of random (incompressible) content
	// in the big and the small repository.
	BigMiB, SmallMiB int
	// Files is how many files the content is split into.
	Files int
	// Reps is how many clones per repository and way (direct, cproxy, and
	// the earlier build's with Before).
	Reps int
	// Before, if set, is the cproxy binary of an earlier build: a third way
	// (BeforeTarget(BeforeRev)), through its own cproxy process, taking its
	// turns with the other two. Empty: no earlier build.
	Before, BeforeRev string
	// Progress, if set, gets a line per step.
	Progress io.Writer
}

// DefaultGitOptions clone a 220 MiB and a 20 MiB repository three times
// each way.
var DefaultGitOptions = GitOptions{BigMiB: 220, SmallMiB: 20, Files: 5, Reps: 3}

// GitClone is one timed clone.
type GitClone struct {
	Way  string        `json:"way"` // "direct", "cproxy" or GitResult.Before
	Time time.Duration `json:"time_ns"`
}

// GitRepoResult is what was measured for one repository.
type GitRepoResult struct {
	Repo      string     `json:"repo"`
	PackBytes int64      `json:"pack_bytes"`
	Clones    []GitClone `json:"clones"` // in the order run, in turns
	// CproxyUse is what cproxy used for this repository: a fresh process
	// per repository, so that the peaks of the two compare.
	CproxyUse
	// Before is what the earlier build's cproxy used, with
	// GitResult.Before.
	Before *CproxyUse `json:"before,omitempty"`
}

// GitResult is a whole run.
type GitResult struct {
	Repos []GitRepoResult `json:"repos"` // big, then small
	// Before is the way through the earlier build's cproxy
	// (GitOptions.Before); empty without one.
	Before     string        `json:"before,omitempty"`
	GitVersion string        `json:"git_version"`
	Started    time.Time     `json:"started"`
	Took       time.Duration `json:"took_ns"`
}

// RunGit runs the git clone benchmark.
func RunGit(ctx context.Context, o GitOptions) (_ *GitResult, err error) {
	if o.BigMiB == 0 {
		o.BigMiB = DefaultGitOptions.BigMiB
	}
	if o.SmallMiB == 0 {
		o.SmallMiB = DefaultGitOptions.SmallMiB
	}
	if o.Files == 0 {
		o.Files = DefaultGitOptions.Files
	}
	if o.Reps == 0 {
		o.Reps = DefaultGitOptions.Reps
	}
	progress := progressTo(o.Progress, "bench-git")
	git, err := exec.LookPath("git")
	if err != nil {
		return nil, fmt.Errorf("git is not installed: %w", err)
	}
	res := &GitResult{Started: time.Now()}
	if v, err := exec.Command(git, "--version").Output(); err == nil {
		res.GitVersion = strings.TrimSpace(strings.TrimPrefix(string(v), "git version "))
	}
	dir, done, err := workDir(o.Dir, "bench-git")
	if err != nil {
		return nil, err
	}
	defer done()
	bin := filepath.Join(dir, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return nil, err
	}
	if o.Cproxy, err = cproxyBinary(o.Cproxy, bin); err != nil {
		return nil, err
	}
	if err := gitHelper(o.Helper, bin); err != nil {
		return nil, err
	}

	realToken := "ghs_bench" + randomHex(16)
	gs, err := fakes.NewGitServer(dir, fakes.GitServerOptions{Token: realToken})
	if err != nil {
		return nil, err
	}
	defer gs.Close()

	repos := []struct {
		name string
		mib  int
	}{{"acme/big", o.BigMiB}, {"acme/small", o.SmallMiB}}
	for _, r := range repos {
		t0 := time.Now()
		pack, err := makeRandomRepo(ctx, git, filepath.Join(gs.Root, r.name+".git"), filepath.Join(dir, "work"), r.mib, o.Files)
		if err != nil {
			return nil, err
		}
		progress("%s: %.1f MiB pack, made in %s", r.name, mib(pack), time.Since(t0).Round(100*time.Millisecond))
		res.Repos = append(res.Repos, GitRepoResult{Repo: r.name, PackBytes: pack})
	}

	home := filepath.Join(dir, "home")
	if err := os.MkdirAll(home, 0o755); err != nil {
		return nil, err
	}
	baseEnv := gitEnv(home, bin)
	// Every way gets its credential from a helper, after the server's 401:
	// the same round trips.
	direct := append(slices.Clone(baseEnv),
		"GIT_CONFIG_COUNT=1",
		"GIT_CONFIG_KEY_0=credential.helper",
		"GIT_CONFIG_VALUE_0=!f() { echo username=x-access-token; echo password=$BENCH_REAL_TOKEN; }; f",
		"BENCH_REAL_TOKEN="+realToken,
	)
	ways, bins := []string{"direct", "cproxy"}, map[string]string{"cproxy": o.Cproxy}
	if o.Before != "" {
		if res.Before, err = BeforeTarget(o.BeforeRev); err != nil {
			return nil, err
		}
		ways, bins[res.Before] = append(ways, res.Before), o.Before
	}
	for i := range res.Repos {
		rr := &res.Repos[i]
		err := func() error {
			envs, through := map[string][]string{"direct": direct}, map[string]*cproxyWay{}
			for _, way := range ways[1:] {
				use := &rr.CproxyUse
				if way == res.Before {
					rr.Before = &CproxyUse{}
					use = rr.Before
				}
				// A fresh cproxy per repository, so its VmHWM is this
				// repository's.
				e := &Env{dir: filepath.Join(dir, fmt.Sprintf("%s-%d", way, i))}
				if err := os.MkdirAll(e.dir, 0o755); err != nil {
					return err
				}
				defer e.Close()
				w, err := e.startWay(bins[way], way, "github", gs.URL, realToken, cproxyGitPolicy, "bench-git", use)
				if err != nil {
					return err
				}
				if err := w.mark(); err != nil {
					return err
				}
				through[way] = w
				envs[way] = gitThrough(baseEnv, w)
			}
			for rep := 0; rep < o.Reps; rep++ {
				for _, way := range rotated(ways, rep) {
					url := gs.URL + "/" + rr.Repo + ".git"
					if way != "direct" {
						url = "https://github.com/" + rr.Repo
					}
					d, err := timeClone(ctx, git, url, filepath.Join(dir, "clone"), envs[way])
					if err != nil {
						return fmt.Errorf("%s clone of %s: %w", way, rr.Repo, err)
					}
					rr.Clones = append(rr.Clones, GitClone{Way: way, Time: d})
					progress("%s %s #%d: %s, %.0f MiB/s", rr.Repo, way, rep+1, d.Round(time.Millisecond), mib(rr.PackBytes)/d.Seconds())
				}
			}
			for _, way := range ways[1:] {
				w := through[way]
				if err := w.finish(); err != nil {
					return err
				}
				progress("%s: %s RSS %.1f MiB at start, peak %.1f MiB", rr.Repo, way, mib(w.use.RSSStart), mib(w.use.Peak))
			}
			return nil
		}()
		if err != nil {
			return nil, err
		}
		// The repository is not needed any more: free the disk.
		os.RemoveAll(filepath.Join(gs.Root, rr.Repo+".git"))
	}
	res.Took = time.Since(res.Started)
	return res, nil
}

// gitHelper puts git-credential-cproxy into bin, where git finds it on
// PATH: a link to helper, or when that is empty one built there.
func gitHelper(helper, bin string) error {
	dst := filepath.Join(bin, "git-credential-cproxy")
	if helper == "" {
		return goBuild(dst, "github.com/cproxy/cproxy/cmd/git-credential-cproxy")
	}
	abs, err := filepath.Abs(helper)
	if err != nil {
		return err
	}
	return os.Symlink(abs, dst)
}

// gitEnv is the environment git runs in: home as its home, bin (with
// git-credential-cproxy) first on PATH, and no system or global config.
func gitEnv(home, bin string) []string {
	return []string{
		"HOME=" + home,
		"PATH=" + bin + string(os.PathListSeparator) + os.Getenv("PATH"),
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_TERMINAL_PROMPT=0",
		"LANG=C",
	}
}

// gitThrough is env with git sent through the cproxy way w as a sandbox
// sends it: https://github.com/ rewritten to w's git route (insteadOf), and
// the sandbox token handed over by git-credential-cproxy.
func gitThrough(env []string, w *cproxyWay) []string {
	return append(slices.Clone(env),
		"GIT_CONFIG_COUNT=2",
		"GIT_CONFIG_KEY_0=url."+w.URL+"/github/.insteadOf",
		"GIT_CONFIG_VALUE_0=https://github.com/",
		"GIT_CONFIG_KEY_1=credential.helper",
		"GIT_CONFIG_VALUE_1=cproxy",
		"CPROXY_URL="+w.URL,
		"CPROXY_TOKEN="+w.token,
	)
}

// progressTo is a benchmark's progress: each line on w as "NAME: …";
// nothing without w.
func progressTo(w io.Writer, name string) func(format string, args ...any) {
	return func(format string, args ...any) {
		if w != nil {
			fmt.Fprintf(w, name+": "+format+"\n", args...)
		}
	}
}

// workDir is dir, or when it is empty a new temporary folder for the
// benchmark name; done removes the folder it made.
func workDir(dir, name string) (_ string, done func(), err error) {
	if dir != "" {
		return dir, func() {}, nil
	}
	if dir, err = os.MkdirTemp("", "cproxy-"+name+"-"); err != nil {
		return "", nil, err
	}
	return dir, func() { os.RemoveAll(dir) }, nil
}

// cproxyBinary is the cproxy to run: path when one is given, else one
// built into dir.
func cproxyBinary(path, dir string) (string, error) {
	if path != "" {
		return path, nil
	}
	path = filepath.Join(dir, "cproxy")
	return path, goBuild(path, "github.com/cproxy/cproxy/cmd/cproxy")
}

// benchproxyBinary is path, or else benchproxy built into dir.
func benchproxyBinary(path, dir string) (string, error) {
	if path != "" {
		return path, nil
	}
	path = filepath.Join(dir, "benchproxy")
	return path, goBuild(path, "github.com/cproxy/cproxy/internal/bench/cmd/benchproxy")
}

func goBuild(out, pkg string) error {
	if b, err := exec.Command("go", "build", "-o", out, pkg).CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %v\n%s", pkg, err, b)
	}
	return nil
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }

// makeRandomRepo makes the bare repository bare with one commit of files
// holding mibs MiB of random bytes in all, packed into one pack, and returns
// the pack's size. Random content does not compress or delta, so the pack
// is the content's size; compression is off to save the time of trying.
func makeRandomRepo(ctx context.Context, git, bare, work string, mibs, files int) (int64, error) {
	if err := os.RemoveAll(work); err != nil {
		return 0, err
	}
	defer os.RemoveAll(work)
	if err := os.MkdirAll(work, 0o755); err != nil {
		return 0, err
	}
	gitCmd := func(args ...string) error {
		cmd := exec.CommandContext(ctx, git, append([]string{
			"-c", "core.compression=0", "-c", "core.looseCompression=0", "-c", "pack.compression=0",
			"--git-dir", bare, "--work-tree", work}, args...)...)
		cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
			"GIT_AUTHOR_NAME=Bench", "GIT_AUTHOR_EMAIL=bench@example.com",
			"GIT_COMMITTER_NAME=Bench", "GIT_COMMITTER_EMAIL=bench@example.com")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	if out, err := exec.CommandContext(ctx, git, "init", "--quiet", "--bare", "--initial-branch=main", bare).CombinedOutput(); err != nil {
		return 0, fmt.Errorf("git init %s: %v: %s", bare, err, out)
	}
	buf := make([]byte, 1<<20)
	for i := 0; i < files; i++ {
		n := mibs / files
		if i < mibs%files {
			n++
		}
		f, err := os.Create(filepath.Join(work, fmt.Sprintf("blob-%d.bin", i)))
		if err != nil {
			return 0, err
		}
		for j := 0; j < n; j++ {
			rand.Read(buf)
			if _, err := f.Write(buf); err != nil {
				f.Close()
				return 0, err
			}
		}
		if err := f.Close(); err != nil {
			return 0, err
		}
	}
	for _, args := range [][]string{
		{"add", "-A"},
		{"commit", "--quiet", "-m", "random blobs"},
		{"repack", "-a", "-d", "-q"},
	} {
		if err := gitCmd(args...); err != nil {
			return 0, err
		}
	}
	packs, _ := filepath.Glob(filepath.Join(bare, "objects", "pack", "*.pack"))
	if len(packs) != 1 {
		return 0, fmt.Errorf("%s: %d packs after repack, want 1", bare, len(packs))
	}
	fi, err := os.Stat(packs[0])
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

// timeClone clones url into dest (removed before and after) and returns the
// wall time of `git clone --no-checkout`: the transfer and git's indexing of
// the pack, without writing the work tree, which costs the same either way.
func timeClone(ctx context.Context, git, url, dest string, env []string) (time.Duration, error) {
	os.RemoveAll(dest)
	defer os.RemoveAll(dest)
	cmd := exec.CommandContext(ctx, git, "clone", "--quiet", "--no-checkout", url, dest)
	cmd.Env = env
	t0 := time.Now()
	out, err := cmd.CombinedOutput()
	d := time.Since(t0)
	if err != nil {
		return 0, fmt.Errorf("%v: %s", err, out)
	}
	return d, nil
}

// cproxyGitPolicy lets the sandbox read the two benchmark repositories.
const cproxyGitPolicy = `[profile.default]
models = ["claude-*"]
repos = [{ repo = "acme/big", access = "read" }, { repo = "acme/small", access = "read" }]
`

// Markdown writes the result as tables.
func (r *GitResult) Markdown(w io.Writer) {
	if len(r.Repos) == 0 {
		return
	}
	fmt.Fprintf(w, "git %s, %s, %s in all.\n\n", r.GitVersion, r.Started.UTC().Format("2006-01-02 15:04 MST"), r.Took.Round(time.Second))
	fmt.Fprintln(w, "| repository | pack | clone | way | wall time | MiB/s |")
	fmt.Fprintln(w, "|---|--:|--:|---|--:|--:|")
	for _, rr := range r.Repos {
		n := map[string]int{}
		for _, c := range rr.Clones {
			n[c.Way]++
			fmt.Fprintf(w, "| %s | %.1f MiB | %d | %s | %.2f s | %.0f |\n", rr.Repo, mib(rr.PackBytes), n[c.Way], c.Way,
				c.Time.Seconds(), mib(rr.PackBytes)/c.Time.Seconds())
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| repository | direct, median | cproxy, median | cproxy ÷ direct throughput, median (range of pairs) | target | met |")
	fmt.Fprintln(w, "|---|--:|--:|--:|---|---|")
	for _, rr := range r.Repos {
		d, c := rr.times("direct"), rr.times("cproxy")
		md, mc := median(d), median(c)
		ratio, lo, hi := speedRatio(d, c)
		target, met := "", ""
		if rr.Repo == r.Repos[0].Repo {
			target, met = "≥ 0.95", yesNo(ratio >= 0.95)
		}
		fmt.Fprintf(w, "| %s | %.2f s (%.0f MiB/s) | %.2f s (%.0f MiB/s) | %.3f (%.3f–%.3f) | %s | %s |\n", rr.Repo,
			md.Seconds(), mib(rr.PackBytes)/md.Seconds(), mc.Seconds(), mib(rr.PackBytes)/mc.Seconds(), ratio, lo, hi, target, met)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| repository | pack | cproxy RSS at start | cproxy peak RSS (VmHWM) over its clones | cproxy CPU per clone | per GiB |")
	fmt.Fprintln(w, "|---|--:|--:|--:|--:|--:|")
	for _, rr := range r.Repos {
		per := rr.cpuPerClone(rr.CproxyUse, "cproxy")
		fmt.Fprintf(w, "| %s | %.1f MiB | %.1f MiB | %.1f MiB | %.2f s | %.2f s |\n", rr.Repo, mib(rr.PackBytes), mib(rr.RSSStart), mib(rr.Peak),
			per.Seconds(), per.Seconds()/(mib(rr.PackBytes)/1024))
	}
	if len(r.Repos) >= 2 {
		big, small := r.Repos[0], r.Repos[len(r.Repos)-1]
		flat := big.Peak-small.Peak < 16<<20 && big.Peak < 2*small.Peak
		fmt.Fprintf(w, "\nPeak RSS, %s ÷ %s: %.2f for a pack %.1f× the size (flat: under +16 MiB and under 2×: %s).\n",
			big.Repo, small.Repo, float64(big.Peak)/float64(small.Peak), float64(big.PackBytes)/float64(small.PackBytes), yesNo(flat))
	}
	if r.Before != "" {
		r.beforeMarkdown(w)
	}
}

// beforeMarkdown writes the table of the earlier build's cproxy and this
// one side by side.
func (r *GitResult) beforeMarkdown(w io.Writer) {
	b := r.Before
	fmt.Fprintf(w, "\nBefore and after: %s is the earlier build, cproxy this one, cloning in turns with direct; throughput ratios of medians (range of the rounds' ratios).\n\n", b)
	fmt.Fprintf(w, "| repository | %s ÷ direct | cproxy ÷ direct | cproxy ÷ %s | CPU per GiB, %s / cproxy | peak RSS, %s / cproxy |\n", b, b, b, b)
	fmt.Fprintln(w, "|---|--:|--:|--:|--:|--:|")
	for _, rr := range r.Repos {
		if rr.Before == nil {
			continue
		}
		d, c, e := rr.times("direct"), rr.times("cproxy"), rr.times(b)
		ratio := func(base, way []time.Duration) string {
			x, lo, hi := speedRatio(base, way)
			return fmt.Sprintf("%.3f (%.3f–%.3f)", x, lo, hi)
		}
		gib := mib(rr.PackBytes) / 1024
		fmt.Fprintf(w, "| %s | %s | %s | %s | %.2f / %.2f s | %.1f / %.1f MiB |\n", rr.Repo, ratio(d, e), ratio(d, c), ratio(e, c),
			rr.cpuPerClone(*rr.Before, b).Seconds()/gib, rr.cpuPerClone(rr.CproxyUse, "cproxy").Seconds()/gib, mib(rr.Before.Peak), mib(rr.Peak))
	}
}

// cpuPerClone is the CPU use spent per clone through way.
func (rr GitRepoResult) cpuPerClone(use CproxyUse, way string) time.Duration {
	return use.CPU / time.Duration(max(len(rr.times(way)), 1))
}

func (rr GitRepoResult) times(way string) []time.Duration {
	var ts []time.Duration
	for _, c := range rr.Clones {
		if c.Way == way {
			ts = append(ts, c.Time)
		}
	}
	return ts
}

func median(ts []time.Duration) time.Duration {
	if len(ts) == 0 {
		return 0
	}
	s := slices.Clone(ts)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "**no**"
}
