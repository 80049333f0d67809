package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/cproxy/cproxy/config"
	"github.com/cproxy/cproxy/internal/testutil"
)

// TestDocExamples runs the examples in README.md, docs/*.md and
// docs/integrations/*.md against the real binaries, so that the documentation cannot drift from what cproxy
// does. docs/writing-docs.md is the convention for whoever writes docs:
// every fenced block runs (a command, a shell session, a policy or config
// file, JSON, the lines cproxy logs) or carries a marker with the reason it
// cannot run here. Each Markdown file becomes one testscript, run with the
// same fakes and commands as testdata/script: TestDocExamples/config.md,
// and TestDocExamples/integrations/go-harness.md for the integration pages.
func TestDocExamples(t *testing.T) {
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	files := []string{filepath.Join(repo, "README.md")}
	for _, glob := range docGlobs {
		more, err := filepath.Glob(filepath.Join(repo, glob))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, more...)
	}

	// A page's script goes in the folder of its subtest group:
	// docs/integrations/README.md runs as integrations/README.md, beside
	// the top-level README.md.
	dir := t.TempDir()
	groupDir := func(rel string) string {
		if group := docGroup(rel); group != "" {
			return filepath.Join(dir, group)
		}
		return dir
	}
	var total docCounts
	var problems []string
	docs := map[string]*docFile{}
	for _, path := range files {
		rel, _ := filepath.Rel(repo, path)
		src, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		df, errs := parseDoc(rel, string(src))
		problems = append(problems, errs...)
		if len(errs) > 0 {
			continue
		}
		script, err := df.script(repo)
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		if err := os.MkdirAll(groupDir(rel), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(groupDir(rel), filepath.Base(rel)+".txt"), []byte(script), 0o644); err != nil {
			t.Fatal(err)
		}
		docs[rel] = df
		t.Logf("%s: %s", rel, df.counts)
		total.add(df.counts)
	}
	if len(problems) > 0 {
		t.Fatalf("documentation examples (see docs/writing-docs.md):\n%s", strings.Join(problems, "\n"))
	}
	t.Logf("doc examples: %s", total)
	if path := os.Getenv("CPROXY_DOC_SUMMARY"); path != "" {
		// .ci/test prints it: go test shows a passing test's log only with -v.
		summary := fmt.Sprintf("doc examples in README.md, %s: %s\n", strings.Join(docGlobs, " and "), total)
		if err := os.WriteFile(path, []byte(summary), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	params := scriptParams(t, dir)
	setup := params.Setup
	params.Setup = func(env *testscript.Env) error {
		if err := setup(env); err != nil {
			return err
		}
		env.Values["docrun"] = new(docRun)
		return nil
	}
	for name, cmd := range map[string]func(*testscript.TestScript, bool, []string){
		"docinit":  func(ts *testscript.TestScript, neg bool, args []string) { cmdDocInit(ts, docs, repo, args) },
		"docblock": func(ts *testscript.TestScript, neg bool, args []string) { cmdDocBlock(ts, args) },
		// docskipped PAGE:LINE CLIENT: the block at PAGE:LINE did not run,
		// for want of CLIENT (the condition before it failed under CI).
		"docskipped": func(ts *testscript.TestScript, neg bool, args []string) {
			ts.Logf("%s: not run: %s is not installed (%s)", args[0], args[1], installHint(args[1]))
		},
	} {
		params.Cmds[name] = cmd
	}
	testscript.Run(t, params)
	t.Run(integrationsGroup, func(t *testing.T) {
		params.Dir = filepath.Join(dir, integrationsGroup)
		testscript.Run(t, params)
	})
}

// docGlobs are the pages TestDocExamples runs besides README.md.
var docGlobs = []string{"docs/*.md", "docs/integrations/*.md"}

// integrationsGroup names the subtests of docs/integrations/*.md, whose
// README.md would otherwise share its name with the top-level one.
const integrationsGroup = "integrations"

// docGroup is the subtest group of a page: integrationsGroup for
// docs/integrations/*.md, "" for the others.
func docGroup(rel string) string {
	if filepath.Dir(rel) == filepath.Join("docs", integrationsGroup) {
		return integrationsGroup
	}
	return ""
}

// A docBlock is one fenced block of a Markdown file, or one hidden
// example-sh, example-script or example-serve comment.
type docBlock struct {
	line   int    // of the opening fence, 1-based
	lang   string // the fence's info string, "" for none
	text   string // the body, with the fence's indentation removed
	marker string // what follows "example:" in the marker above it
	kind   docKind
	output int // index of the block holding this one's expected output, or -1
}

type docKind int

const (
	kindSkip         docKind = iota // marked: not run, with a reason
	kindCommand                     // shell commands: must exit 0, or print its output block
	kindSession                     // "$ command" lines with their output
	kindServe                       // commands ending in a long-running cproxy serve
	kindOutput                      // the output of the block above it
	kindLog                         // lines the running cproxy serve logs
	kindTOML                        // a policy or config file: cproxy policy check
	kindJSON                        // must parse as JSON (one value or JSON lines)
	kindSameAs                      // must appear in a file of the repository
	kindMetrics                     // PromQL or alert rules: its metric names are the running serve's
	kindFile                        // written to a file for later blocks, not checked
	kindHiddenSh                    // an example-sh comment: hidden set-up commands
	kindHiddenScript                // an example-script comment: testscript commands
)

// docCounts counts a file's blocks by what the test does with them.
type docCounts struct {
	run, marked int
	byKind      map[string]int
}

func (c *docCounts) add(o docCounts) {
	c.run += o.run
	c.marked += o.marked
	if c.byKind == nil {
		c.byKind = map[string]int{}
	}
	for k, n := range o.byKind {
		c.byKind[k] += n
	}
}

func (c docCounts) String() string {
	var parts []string
	for _, k := range []string{"command", "session", "serve", "output", "log", "toml", "json", "same-as", "file", "metrics"} {
		if n := c.byKind[k]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, k))
		}
	}
	return fmt.Sprintf("%d examples run or checked (%s), %d marked as not runnable here", c.run, strings.Join(parts, ", "), c.marked)
}

type docFile struct {
	name   string // path relative to the repository
	blocks []docBlock
	counts docCounts
	// ports maps each loopback port the examples name to a free one.
	ports map[string]string
}

var (
	fenceRE  = regexp.MustCompile("^( *)(```+|~~~+)\\s*([^`\\s]*)")
	markerRE = regexp.MustCompile(`^\s*<!-- example: (.*?)\s*-->\s*$`)
	hiddenRE = regexp.MustCompile(`^\s*<!-- (example-sh|example-script|example-serve)\s*$`)
)

// parseDoc splits a Markdown file into its blocks and decides what the test
// does with each; problems name the file and line of each block that is
// neither runnable nor marked.
func parseDoc(name, src string) (*docFile, []string) {
	df := &docFile{name: name, counts: docCounts{byKind: map[string]int{}}}
	var problems []string
	bad := func(line int, format string, args ...any) {
		problems = append(problems, fmt.Sprintf("%s:%d: %s", name, line, fmt.Sprintf(format, args...)))
	}
	lines := strings.Split(src, "\n")
	marker, markerLine := "", 0
	lastBlockEnd := -10 // line index of the closing fence of the last block
	onlyBlank := func(from, to int) bool {
		for _, l := range lines[from:to] {
			if strings.TrimSpace(l) != "" {
				return false
			}
		}
		return true
	}
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if m := markerRE.FindStringSubmatch(l); m != nil {
			marker, markerLine = m[1], i
			continue
		}
		if m := hiddenRE.FindStringSubmatch(l); m != nil {
			start := i
			var body []string
			for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "-->"; i++ {
				body = append(body, lines[i])
			}
			if i == len(lines) {
				bad(start+1, "%s comment has no closing --> line", m[1])
				break
			}
			kind := map[string]docKind{"example-sh": kindHiddenSh, "example-script": kindHiddenScript, "example-serve": kindServe}[m[1]]
			df.blocks = append(df.blocks, docBlock{line: start + 1, text: strings.Join(body, "\n") + "\n", kind: kind, output: -1})
			continue
		}
		m := fenceRE.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		indent, fence, lang := len(m[1]), m[2], m[3]
		start := i
		var body []string
		for i++; i < len(lines); i++ {
			t := strings.TrimLeft(lines[i], " ")
			if strings.HasPrefix(t, fence) && strings.TrimSpace(strings.TrimLeft(t, fence[:1])) == "" {
				break
			}
			body = append(body, strings.TrimPrefix(lines[i], strings.Repeat(" ", indent)))
		}
		if i == len(lines) {
			bad(start+1, "a fenced block that does not end")
			break
		}
		b := docBlock{line: start + 1, lang: lang, text: strings.Join(body, "\n") + "\n", output: -1}
		if marker != "" && onlyBlank(markerLine+1, start) {
			b.marker = marker
		}
		follows := -1
		if b.marker == "" && lastBlockEnd >= 0 && onlyBlank(lastBlockEnd+1, start) && len(df.blocks) > 0 {
			follows = len(df.blocks) - 1
		}
		marker, lastBlockEnd = "", i
		if err := df.classify(&b, follows); err != "" {
			bad(b.line, "%s", err)
		}
		df.blocks = append(df.blocks, b)
	}
	return df, problems
}

// classify decides a block's kind from its marker, its language, its text
// and whether it directly follows a block that runs; it returns a problem,
// or "".
func (df *docFile) classify(b *docBlock, follows int) string {
	count := func(k string) { df.counts.run++; df.counts.byKind[k]++ }
	directive, arg, _ := strings.Cut(b.marker, " ")
	arg = strings.TrimSpace(arg)
	runs := func(k docKind) bool { return k == kindCommand || k == kindSession || k == kindServe }
	switch {
	case directive == "skip":
		if len(strings.Fields(arg)) < 3 {
			return "<!-- example: skip REASON --> needs a reason a reader understands (three words or more)"
		}
		b.kind = kindSkip
		df.counts.marked++
		return ""
	case directive == "same-as":
		if arg == "" {
			return "<!-- example: same-as PATH --> needs the repository file the block is taken from"
		}
		b.kind = kindSameAs
		count("same-as")
		return ""
	case directive == "log":
		b.kind = kindLog
		count("log")
		return ""
	case directive == "metrics":
		b.kind = kindMetrics
		count("metrics")
		return ""
	case directive == "serve":
		b.kind = kindServe
		count("serve")
		return ""
	case directive == "file":
		if arg == "" || filepath.IsAbs(arg) || strings.Contains(arg, "..") {
			return "<!-- example: file NAME --> needs a relative file name"
		}
		if b.lang == "toml" {
			b.kind = kindTOML
			count("toml")
			return ""
		}
		b.kind = kindFile
		count("file")
		return ""
	case directive == "invalid":
		if arg != "" && (filepath.IsAbs(arg) || strings.Contains(arg, "..")) {
			return "<!-- example: invalid NAME --> needs a relative file name"
		}
		if b.lang != "toml" {
			return "<!-- example: invalid --> is for TOML blocks that cproxy policy check must refuse"
		}
		if filepath.IsAbs(arg) || strings.Contains(arg, "..") {
			return "<!-- example: invalid NAME --> needs a relative file name"
		}
		b.kind = kindTOML
		count("toml")
		return ""
	case directive == "output":
		if len(df.blocks) == 0 || df.blocks[len(df.blocks)-1].kind != kindHiddenSh || df.blocks[len(df.blocks)-1].output >= 0 {
			return "<!-- example: output --> is for the output of the example-sh comment right above it"
		}
		df.blocks[len(df.blocks)-1].output = len(df.blocks)
		b.kind = kindOutput
		count("output")
		return ""
	case directive == "run":
		b.kind = kindCommand
		if isSession(b.text) {
			b.kind = kindSession
		}
		count(kindName(b.kind))
		return ""
	case directive != "":
		return fmt.Sprintf("unknown marker %q: use skip, run, serve, log, output, file, invalid or same-as", b.marker)
	}
	if follows >= 0 && runs(df.blocks[follows].kind) && df.blocks[follows].output < 0 {
		df.blocks[follows].output = len(df.blocks)
		b.kind = kindOutput
		count("output")
		return ""
	}
	switch {
	case isSession(b.text):
		b.kind = kindSession
	case b.lang == "sh" || b.lang == "bash" || b.lang == "shell" || b.lang == "fish":
		b.kind = kindCommand
	case b.lang == "toml":
		b.kind = kindTOML
	case b.lang == "json":
		b.kind = kindJSON
	case b.lang == "promql":
		b.kind = kindMetrics
	default:
		return fmt.Sprintf("a %q block that neither runs nor is marked: mark it <!-- example: skip REASON -->, or see docs/writing-docs.md for what runs", b.lang)
	}
	count(kindName(b.kind))
	return ""
}

func kindName(k docKind) string {
	return map[docKind]string{kindCommand: "command", kindSession: "session", kindTOML: "toml", kindJSON: "json", kindMetrics: "metrics"}[k]
}

// isSession reports whether a block is a shell session: its first line
// is a "$ " prompt.
func isSession(text string) bool {
	first, _, _ := strings.Cut(strings.TrimLeft(text, "\n"), "\n")
	return strings.HasPrefix(first, "$ ")
}

// docPortRE finds the loopback addresses the examples name; each gets a free
// port of its own, so that every page runs beside the others.
var docPortRE = regexp.MustCompile(`(?:127\.0\.0\.1|localhost):(\d{2,5})\b`)

// script writes the testscript that runs the file's blocks in order.
func (df *docFile) script(repo string) (string, error) {
	df.ports = map[string]string{}
	for _, b := range df.blocks {
		if b.kind == kindSkip {
			continue
		}
		for _, m := range docPortRE.FindAllStringSubmatch(b.text, -1) {
			if _, ok := df.ports[m[1]]; ok {
				continue
			}
			p, err := freePort()
			if err != nil {
				return "", err
			}
			df.ports[m[1]] = p
		}
	}
	for _, def := range []string{"8080", "9001"} {
		if _, ok := df.ports[def]; !ok {
			p, err := freePort()
			if err != nil {
				return "", err
			}
			df.ports[def] = p
		}
	}
	var s strings.Builder
	fmt.Fprintf(&s, "# The examples of %s, in order (generated by TestDocExamples).\n", df.name)
	fmt.Fprintf(&s, "docinit %s\n", df.name)
	for i, b := range df.blocks {
		switch b.kind {
		case kindSkip, kindOutput:
		case kindHiddenScript:
			fmt.Fprintf(&s, "# %s:%d (example-script)\n%s", df.name, b.line, b.text)
		default:
			block := fmt.Sprintf("docblock %s %d\n", filepath.Base(df.name), i)
			if b.lang == "fish" {
				// Run by fish, which a machine may lack: outside CI the
				// block is left out, saying so, and the page goes on.
				fmt.Fprintf(&s, "[fish] %s[!fish] docskipped %s:%d fish\n", block, df.name, b.line)
				continue
			}
			s.WriteString(block)
		}
	}
	return s.String(), nil
}

// The pages' ports come from below Linux's ephemeral range (32768 and up by
// default): every page's ports are chosen before any page runs, and a port
// the kernel handed out for a moment (to a listener on port 0, or to a
// client's connection in another page) could be taken by then.
const docPortMin, docPortMax = 20000, 32768

// docPortsGiven are the ports freePort has handed out, so no two blocks
// share one.
var docPortsGiven = map[int]bool{}

// freePort returns a loopback port below the ephemeral range that nothing
// listens on now and that no other page was given.
func freePort() (string, error) {
	for range 1000 {
		port := docPortMin + rand.IntN(docPortMax-docPortMin)
		if docPortsGiven[port] {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue
		}
		l.Close()
		docPortsGiven[port] = true
		return strconv.Itoa(port), nil
	}
	return "", fmt.Errorf("no free port between %d and %d", docPortMin, docPortMax)
}

// docRun is the state of one page's run: its shell state file and the
// cproxy serve it started, if any.
type docRun struct {
	df    *docFile
	repo  string
	dir   string // $WORK/.doc
	state string // the shell's exported variables and folder, for the next block
	serve *exec.Cmd
	done  chan struct{} // closed when serve exits
	log   string        // the running serve's output file
	// tmp stands in for /tmp in the page's commands: pages run side by
	// side, and an example's /tmp/conv-42-claude must be its own. It is
	// short, as a Unix socket's path must be.
	tmp string
}

// docinit PAGE: the shell every block of PAGE runs in starts from the
// script's environment with cproxy's default addresses moved to free ports,
// the state folder where a user's would be, Claude Code, pnpm and yarn on
// PATH, and no real credential.
func cmdDocInit(ts *testscript.TestScript, docs map[string]*docFile, repo string, args []string) {
	r := ts.Value("docrun").(*docRun)
	r.df, r.repo = docs[args[0]], repo
	r.dir = ts.MkAbs(".doc")
	tmp, err := testutil.NewSocketDir("cpxd")
	ts.Check(err)
	r.tmp = tmp + "/"
	ts.Defer(func() { os.RemoveAll(tmp) })
	r.state = filepath.Join(r.dir, "state")
	ts.Check(os.MkdirAll(filepath.Join(r.dir, "bin"), 0o755))
	for name, path := range map[string]string{"claude": os.Getenv("CPROXY_TEST_CLAUDE"), "pnpm": pnpmBinary(), "yarn": yarnBinary()} {
		if path != "" {
			ts.Check(os.Symlink(path, filepath.Join(r.dir, "bin", name)))
		}
	}
	ports := r.df.ports
	env := [][2]string{
		{"XDG_STATE_HOME", filepath.Join(ts.Getenv("HOME"), ".local", "state")},
		{"CPROXY_PROXY_ADDR", "127.0.0.1:" + ports["8080"]},
		{"CPROXY_ADMIN_ADDR", "127.0.0.1:" + ports["9001"]},
		{"CPROXY_URL", "http://127.0.0.1:" + ports["8080"]},
		{"CPROXY_DOC_FAKES", "1"},
		// A user's git knows who they are.
		{"GIT_AUTHOR_NAME", "You"}, {"GIT_AUTHOR_EMAIL", "you@example.com"},
		{"GIT_COMMITTER_NAME", "You"}, {"GIT_COMMITTER_EMAIL", "you@example.com"},
		// install.sh builds with the Go of the test, from its caches.
		{"GOCACHE", goEnv(ts, "GOCACHE")},
		{"GOMODCACHE", goEnv(ts, "GOMODCACHE")},
		{"GOPATH", goEnv(ts, "GOPATH")},
		{"PATH", filepath.Join(r.dir, "bin") + ":" + ts.Getenv("PATH")},
	}
	var init strings.Builder
	init.WriteString("unset GITHUB_TOKEN ANTHROPIC_API_KEY NPM_TOKEN\n")
	for _, kv := range env {
		fmt.Fprintf(&init, "export %s=%s\n", kv[0], shellQuote(kv[1]))
	}
	fmt.Fprintf(&init, "{ export -p; printf 'cd %%q\\n' \"$PWD\"; } > %s\n", shellQuote(r.state))
	if err := ts.Exec("bash", "-c", init.String()); err != nil {
		ts.Fatalf("docinit: %v", err)
	}
	ts.Defer(r.stopServe)
}

// docblock PAGE N: run or check block N of PAGE, by its kind.
func cmdDocBlock(ts *testscript.TestScript, args []string) {
	r := ts.Value("docrun").(*docRun)
	n, _ := strconv.Atoi(args[1])
	b := r.df.blocks[n]
	where := fmt.Sprintf("%s:%d", r.df.name, b.line)
	var want *docBlock
	if b.output >= 0 {
		want = &r.df.blocks[b.output]
	}
	if b.kind == kindSession {
		want = &b // a session holds its own output
	}
	switch b.kind {
	case kindCommand, kindSession, kindHiddenSh:
		out, err := r.runShell(ts, b, want != nil)
		if want == nil {
			if err != nil {
				ts.Fatalf("%s: %v\n%s", where, err, out)
			}
			return
		}
		r.compare(ts, where, want, out)
	case kindServe:
		r.startServe(ts, where, b)
		if want != nil {
			r.waitLog(ts, fmt.Sprintf("%s:%d", r.df.name, want.line), want.text)
		}
	case kindLog:
		r.waitLog(ts, where, b.text)
	case kindTOML:
		name := "example-" + strconv.Itoa(b.line) + ".toml"
		directive, arg, _ := strings.Cut(b.marker, " ")
		if (directive == "file" || directive == "invalid") && strings.TrimSpace(arg) != "" {
			name = strings.TrimSpace(arg)
		}
		r.writeFile(ts, where, name, b.text)
		check := docBlock{kind: kindCommand, lang: "sh", text: "cproxy policy check " + shellQuote(name) + "\n"}
		out, err := r.runShell(ts, check, true)
		if directive == "invalid" {
			if err == nil {
				ts.Fatalf("%s: cproxy policy check accepts this example, which the doc says is refused", where)
			}
		} else if err != nil {
			ts.Fatalf("%s: cproxy policy check refuses this example:\n%s", where, out)
		}
		if want != nil {
			r.compare(ts, where, want, out)
		}
	case kindFile:
		_, arg, _ := strings.Cut(b.marker, " ")
		r.writeFile(ts, where, strings.TrimSpace(arg), b.text)
	case kindJSON:
		dec := json.NewDecoder(strings.NewReader(b.text))
		for {
			var v any
			if err := dec.Decode(&v); err == io.EOF {
				break
			} else if err != nil {
				ts.Fatalf("%s: not JSON (nor JSON lines): %v", where, err)
			}
		}
	case kindMetrics:
		r.checkMetricNames(ts, where, b.text)
	case kindSameAs:
		_, path, _ := strings.Cut(b.marker, " ")
		src, err := os.ReadFile(filepath.Join(r.repo, strings.TrimSpace(path)))
		ts.Check(err)
		if !strings.Contains(trimLines(string(src)), trimLines(b.text)) {
			ts.Fatalf("%s: the block is not (any longer) in %s", where, path)
		}
	default:
		ts.Fatalf("%s: docblock of a block of kind %d", where, b.kind)
	}
}

// writeFile writes a block's text to name in the page's current folder,
// from the page's shell, so that the text gets a command's substitutions
// (a config's ports and credentials become the page's).
func (r *docRun) writeFile(ts *testscript.TestScript, where, name, text string) {
	write := docBlock{kind: kindCommand, lang: "sh", text: "cat > " + shellQuote(name) + " <<'CPROXY_DOC_EOF'\n" + text + "CPROXY_DOC_EOF\n"}
	if out, err := r.runShell(ts, write, false); err != nil {
		ts.Fatalf("%s: writing %s: %v\n%s", where, name, err, out)
	}
}

// docSubstitutions are the placeholders of the examples and what a command
// gets instead: the canary credentials the fakes accept.
var docSubstitutions = []struct{ doc, env string }{
	{"sk-ant-oat01-...", "CANARY_OAUTH"},
	{"sk-ant-...", "CANARY_API_KEY"},
	{"github_pat_...", "CANARY_GITHUB"},
	{"ghp_...", "CANARY_GITHUB"},
	{"npm_...", "CANARY_NPM"},
	// A database of the page's own on the test's server (pgdatabase).
	{"postgres://cproxy:PASSWORD@db.internal:5432/cproxy?sslmode=verify-full", "PG_DSN"},
}

// commandText is a block's text as the shell runs it: placeholder
// credentials become the canaries, and each loopback port its free port.
func (r *docRun) commandText(ts *testscript.TestScript, text string) string {
	// The ports first: a value substituted in (a database's address)
	// keeps its own.
	text = docPortRE.ReplaceAllStringFunc(text, func(m string) string {
		host, port, _ := strings.Cut(m, ":")
		return host + ":" + r.df.ports[port]
	})
	text = strings.ReplaceAll(text, "/tmp/", r.tmp)
	for _, s := range docSubstitutions {
		text = strings.ReplaceAll(text, s.doc, ts.Getenv(s.env))
	}
	return text
}

// docBlockTimeout bounds one block: the slowest examples run Claude Code or
// npm install.
const docBlockTimeout = 5 * time.Minute

// runShell runs a block in bash from the state the blocks before it left
// (exported variables and folder), and saves the state it leaves. A
// session echoes each "$ command" line before running it, so that its
// output reads like the block. Without expected output the block runs
// under set -e and must succeed.
func (r *docRun) runShell(ts *testscript.TestScript, b docBlock, hasOutput bool) (string, error) {
	var sh strings.Builder
	fmt.Fprintf(&sh, ". %s\n", shellQuote(r.state))
	fmt.Fprintf(&sh, "trap 'st=$?; { export -p; printf \"cd %%q\\n\" \"$PWD\"; } > %s.new && mv %s.new %s; exit $st' EXIT\n",
		shellQuote(r.state), shellQuote(r.state), shellQuote(r.state))
	if !hasOutput && b.kind != kindSession {
		sh.WriteString("set -e\n")
	}
	switch {
	case b.kind == kindSession:
		// Each command runs in the session's shell, its output through a
		// file so that the next prompt starts a line of its own, as in a
		// terminal, after output that does not end in a newline (curl's
		// JSON). The status of each command is kept for a "$ echo $?".
		out := shellQuote(filepath.Join(r.dir, "session.out"))
		for _, c := range sessionCommands(b.text) {
			fmt.Fprintf(&sh, "cproxy_doc_st=$?; printf '%%s\\n' %s; (exit $cproxy_doc_st)\n{ %s\n} >%s 2>&1\n", shellQuote(c), r.commandText(ts, strings.TrimPrefix(c, "$ ")), out)
			fmt.Fprintf(&sh, "cproxy_doc_st=$?; cat %s; test -z \"$(tail -c1 %s)\" || echo; (exit $cproxy_doc_st)\n", out, out)
		}
	case b.lang == "fish":
		fmt.Fprintf(&sh, "fish -c %s\n", shellQuote(r.commandText(ts, b.text)))
	default:
		sh.WriteString(r.commandText(ts, b.text))
	}
	ctx, cancel := context.WithTimeout(context.Background(), docBlockTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", sh.String())
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin"}
	cmd.Stdin = nil
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	err := cmd.Run()
	r.noCanaries(ts, out.String())
	return out.String(), err
}

// sessionCommands splits a session into its commands, each with the "$ "
// prompt and any continuation lines (after a trailing backslash, or inside
// a here-document up to its end marker).
func sessionCommands(text string) []string {
	var cmds []string
	lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
	heredocRE := regexp.MustCompile(`<<-?\s*'?"?(\w+)'?"?`)
	for i := 0; i < len(lines); i++ {
		if !strings.HasPrefix(lines[i], "$ ") {
			continue
		}
		c := lines[i]
		for strings.HasSuffix(lines[i], "\\") && i+1 < len(lines) {
			i++
			c += "\n" + lines[i]
		}
		if m := heredocRE.FindStringSubmatch(c); m != nil {
			for i+1 < len(lines) {
				i++
				c += "\n" + lines[i]
				if strings.TrimSpace(lines[i]) == m[1] {
					break
				}
			}
		}
		cmds = append(cmds, c)
	}
	return cmds
}

// noCanaries fails the script if a canary credential reached an example's
// output: the examples are a user's view, and a credential must never
// appear in it.
func (r *docRun) noCanaries(ts *testscript.TestScript, out string) {
	for _, name := range []string{"CANARY_API_KEY", "CANARY_OAUTH", "CANARY_GITHUB", "CANARY_NPM", "CANARY_HUB", "CANARY_MOD"} {
		if v := ts.Getenv(name); v != "" && strings.Contains(out, v) {
			ts.Fatalf("%s: the credential %s reached an example's output:\n%s", r.df.name, name, out)
		}
	}
}

// readyFileRE finds the ready file a serve example names.
var readyFileRE = regexp.MustCompile(`--ready-file[= ](\S+)`)

// startServe stops the cproxy serve an earlier block started, then runs
// this block in the background with its last command exec'd (so that the
// process is cproxy serve itself), and waits for its ready file.
func (r *docRun) startServe(ts *testscript.TestScript, where string, b docBlock) {
	r.stopServe()
	lines := strings.Split(strings.TrimRight(r.commandText(ts, b.text), "\n"), "\n")
	last := lines[len(lines)-1]
	if !strings.Contains(last, "cproxy serve") {
		ts.Fatalf("%s: a serve block ends with the cproxy serve command, not %q", where, last)
	}
	// exec the last command of the line, after any "&&" and variable
	// assignments: "./install.sh && A=b cproxy serve" becomes
	// "./install.sh && A=b exec cproxy serve".
	head, tail := "", last
	if i := strings.LastIndex(last, "&& "); i >= 0 {
		head, tail = last[:i+3], last[i+3:]
	}
	assign := regexp.MustCompile(`^\s*((?:[A-Z_][A-Z0-9_]*=\S*\s+)*)(.*)$`).FindStringSubmatch(tail)
	lines[len(lines)-1] = head + assign[1] + "exec " + assign[2]
	ready := filepath.Join(r.dir, fmt.Sprintf("ready-%d.json", b.line))
	if m := readyFileRE.FindStringSubmatch(last); m != nil {
		// The example names its own ready file, which wins over
		// CPROXY_READY_FILE: wait for that one, in the page's folder.
		ready = m[1]
		if !filepath.IsAbs(ready) {
			pwd, err := r.runShell(ts, docBlock{kind: kindCommand, lang: "sh", text: "pwd\n"}, false)
			ts.Check(err)
			ready = filepath.Join(strings.TrimSpace(pwd), ready)
		}
		os.Remove(ready) // one an earlier serve left is not this one's
	}
	r.log = filepath.Join(r.dir, fmt.Sprintf("serve-%d.log", b.line))
	logf, err := os.Create(r.log)
	ts.Check(err)
	defer logf.Close()
	sh := fmt.Sprintf(". %s\nexport CPROXY_READY_FILE=%s\n%s\n", shellQuote(r.state), shellQuote(ready), strings.Join(lines, "\n"))
	cmd := exec.Command("bash", "-c", sh)
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin"}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	ts.Check(cmd.Start())
	r.serve, r.done = cmd, make(chan struct{})
	go func(done chan struct{}) { cmd.Wait(); close(done) }(r.done)
	// As long as any block may take: a serve block can build cproxy first
	// (README's ./install.sh && cproxy serve), minutes on a fresh machine.
	deadline := time.After(docBlockTimeout)
	for {
		if _, err := os.Stat(ready); err == nil {
			// Hidden set-up can signal it (kill -HUP "$DOC_SERVE_PID"), as a
			// reader would with the pid they know.
			f, err := os.OpenFile(r.state, os.O_APPEND|os.O_WRONLY, 0)
			ts.Check(err)
			_, err = fmt.Fprintf(f, "export DOC_SERVE_PID=%d\n", cmd.Process.Pid)
			ts.Check(errors.Join(err, f.Close()))
			return
		}
		select {
		case <-r.done:
			out, _ := os.ReadFile(r.log)
			ts.Fatalf("%s: cproxy serve exited before it was ready:\n%s", where, out)
		case <-deadline:
			ts.Fatalf("%s: cproxy serve not ready after %v", where, docBlockTimeout)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// stopServe stops the running cproxy serve, as Ctrl-C would.
func (r *docRun) stopServe() {
	if r.serve == nil {
		return
	}
	syscall.Kill(-r.serve.Process.Pid, syscall.SIGINT)
	select {
	case <-r.done:
	case <-time.After(30 * time.Second):
		syscall.Kill(-r.serve.Process.Pid, syscall.SIGKILL)
		<-r.done
	}
	r.serve = nil
}

// waitLog waits until every line of want matches a line the running
// cproxy serve logged, in order (audit lines are written asynchronously).
func (r *docRun) waitLog(ts *testscript.TestScript, where, want string) {
	if r.serve == nil {
		ts.Fatalf("%s: log lines, but no cproxy serve is running (mark its command <!-- example: serve -->)", where)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		got, _ := os.ReadFile(r.log)
		actual := r.normalize(ts, string(got))
		if logLinesMatch(normalizeShapes(want), actual) {
			r.noCanaries(ts, string(got))
			return
		}
		if time.Now().After(deadline) {
			ts.Fatalf("%s: cproxy serve did not log these lines:\n%s\nit logged:\n%s", where, normalizeShapes(want), actual)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// logLinesMatch reports whether each line of want matches a line of got,
// in order.
func logLinesMatch(want, got string) bool {
	gotLines := strings.Split(got, "\n")
	for _, w := range strings.Split(strings.TrimSpace(want), "\n") {
		re := regexp.MustCompile("^" + lineRE(strings.TrimRight(w, " ")) + "$")
		i := slices.IndexFunc(gotLines, func(g string) bool { return re.MatchString(strings.TrimRight(g, " ")) })
		if i < 0 {
			return false
		}
		gotLines = gotLines[i+1:]
	}
	return true
}

// docMetricRE finds the names of cproxy's metrics, and of the Go and
// process collectors', in a PromQL query or an alert rule. Prometheus' own
// series (up, ALERTS) are not cproxy's to serve.
var docMetricRE = regexp.MustCompile(`\b(?:cproxy|go|process)_[a-zA-Z0-9_:]+`)

// checkMetricNames fails the script unless every metric a query names is
// one the running cproxy serve's GET /metrics has: there is no Prometheus
// here to run the query, but a query of a metric that does not exist
// (renamed, or never served) would silently find nothing.
func (r *docRun) checkMetricNames(ts *testscript.TestScript, where, text string) {
	if r.serve == nil {
		ts.Fatalf("%s: metric names to check, but no cproxy serve is running (start one first, shown or example-serve)", where)
	}
	resp, err := http.Get("http://127.0.0.1:" + r.df.ports["9001"] + "/metrics")
	ts.Check(err)
	defer resp.Body.Close()
	served := map[string]bool{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if line := sc.Text(); line != "" && !strings.HasPrefix(line, "#") {
			served[strings.FieldsFunc(line, func(c rune) bool { return c == '{' || c == ' ' })[0]] = true
		}
	}
	ts.Check(sc.Err())
	var missing []string
	for _, name := range docMetricRE.FindAllString(text, -1) {
		if !served[name] && !slices.Contains(missing, name) {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		ts.Fatalf("%s: the running cproxy serve's /metrics has no %s", where, strings.Join(missing, ", "))
	}
}

// compare fails the script unless a block's output matches its expected
// output block.
func (r *docRun) compare(ts *testscript.TestScript, where string, want *docBlock, out string) {
	w, g := normalizeShapes(want.text), r.normalize(ts, out)
	if !outputMatches(w, g) {
		ts.Fatalf("%s: the output differs from the block at line %d.\nthe doc (normalized):\n%s\nthe binary printed (normalized):\n%s", where, want.line, w, g)
	}
}

// normalize turns a run's output into what the doc shows: the free ports
// back into the doc's, the fakes' URLs into the real APIs', the test's
// home into /home/you, and the shapes that vary from run to run (tokens,
// ids, times, durations) into placeholders.
func (r *docRun) normalize(ts *testscript.TestScript, out string) string {
	for doc, free := range r.df.ports {
		out = strings.ReplaceAll(out, ":"+free, ":"+doc)
	}
	for _, k := range config.UpstreamKinds {
		if v := ts.Getenv("FAKE_" + strings.ToUpper(k.Name)); v != "" {
			out = strings.ReplaceAll(out, v, k.URL)
		}
		if v := ts.Getenv("FAKE_" + strings.ToUpper(k.Name) + "_FILES"); v != "" && k.FilesURL != "" {
			out = strings.ReplaceAll(out, v, k.FilesURL)
		}
	}
	if where := ts.Getenv("PG_WHERE"); where != "" {
		out = strings.ReplaceAll(out, where, "db.internal:5432/cproxy")
	}
	out = strings.ReplaceAll(out, ts.Getenv("HOME"), "/home/you")
	out = strings.ReplaceAll(out, r.tmp, "/tmp/")
	out = strings.ReplaceAll(out, ts.MkAbs("."), "/work")
	return normalizeShapes(out)
}

// The shapes that differ from run to run, and the placeholder each becomes
// on both sides of a comparison.
var docShapes = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`cpx_[A-Za-z0-9]{20,}`), "cpx_TOKEN"},
	{regexp.MustCompile(`tok_[0-9a-f]{12}`), "tok_ID"},
	{regexp.MustCompile(`apr_[0-9a-f]{16}`), "apr_ID"},
	{regexp.MustCompile(`\b[0-9a-f]{40}\b`), "OBJECT_ID"},
	{regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)`), "TIME"},
	{regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`), "UUID"},
	{regexp.MustCompile(`\b(duration|bytes_in|bytes_out|pid|usage\.[a-z_]+)=[^ \n]+`), "$1=N"},
	{regexp.MustCompile(`"(duration|duration_ms|bytes_in|bytes_out|pid|input_tokens|output_tokens|cache_read_input_tokens|cache_creation_input_tokens)":[0-9.]+`), `"$1":N`},
	{regexp.MustCompile(`\b\d+\.\d+(ns|µs|us|ms|s)\b`), "DURATION"},
}

func normalizeShapes(s string) string {
	for _, sh := range docShapes {
		s = sh.re.ReplaceAllString(s, sh.with)
	}
	return s
}

// outputMatches compares output with a doc's expected output: lines
// compare without trailing spaces; "…" in a line stands for any text, and a
// line that is only "…" for any number of lines.
func outputMatches(want, got string) bool {
	var re strings.Builder
	re.WriteString(`^`)
	wantLines := strings.Split(strings.TrimRight(want, "\n "), "\n")
	for i, w := range wantLines {
		w = strings.TrimRight(w, " ")
		if strings.TrimSpace(w) == "…" {
			re.WriteString(`(?:[^\n]*\n)*?`)
			continue
		}
		re.WriteString(lineRE(w))
		if i < len(wantLines)-1 {
			re.WriteString(`\n`)
		}
	}
	re.WriteString(`\n?$`)
	return regexp.MustCompile(re.String()).MatchString(trimLines(got))
}

// lineRE is one expected line as a regular expression, "…" matching any text.
func lineRE(line string) string {
	parts := strings.Split(line, "…")
	for i, p := range parts {
		parts[i] = regexp.QuoteMeta(p)
	}
	return strings.Join(parts, `[^\n]*`)
}

// trimLines removes trailing spaces from every line and blank lines at the end.
func trimLines(s string) string {
	var b strings.Builder
	sc := bufio.NewScanner(strings.NewReader(s))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		b.WriteString(strings.TrimRight(sc.Text(), " \t\r"))
		b.WriteByte('\n')
	}
	return strings.TrimRight(b.String(), "\n") + "\n"
}

func goEnv(ts *testscript.TestScript, name string) string {
	out, err := exec.Command("go", "env", name).Output()
	ts.Check(err)
	return strings.TrimSpace(string(out))
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// docListenerAddr is what the CLI reaches, in the examples, for the default
// listener addresses (as in a config that names none): where
// CPROXY_PROXY_ADDR and CPROXY_ADMIN_ADDR moved the examples' cproxy serve,
// as each address the examples name is moved to a port of its own.
func docListenerAddr(addr string) string {
	switch addr {
	case "127.0.0.1:8080":
		return os.Getenv("CPROXY_PROXY_ADDR")
	case "127.0.0.1:9001":
		return os.Getenv("CPROXY_ADMIN_ADDR")
	}
	return addr
}

// docFakes is adjustServeConfig in the docs' examples (CPROXY_DOC_FAKES=1):
// the upstreams of any config an example serves on become the script's
// loopback fakes (FAKE_NAME for [upstream.name]), so no example reaches a
// real API.
func docFakes(cfg *config.Config) error {
	for _, k := range config.UpstreamKinds {
		cfg.Upstream[k.Name].URL = os.Getenv("FAKE_" + strings.ToUpper(k.Name))
		if k.FilesURL != "" {
			cfg.Upstream[k.Name].FilesURL = os.Getenv("FAKE_" + strings.ToUpper(k.Name) + "_FILES")
		}
	}
	for name, relay := range cfg.Relays {
		u, err := url.Parse(relay.URL)
		if err != nil {
			return fmt.Errorf("relay %s: %w", name, err)
		}
		if host := u.Hostname(); host != "127.0.0.1" && host != "localhost" {
			fake, err := url.Parse(os.Getenv("FAKE_RELAY"))
			if err != nil {
				return err
			}
			u.Scheme, u.Host = fake.Scheme, fake.Host
			relay.URL = u.String()
		}
	}
	for name, up := range cfg.Upstream {
		if !strings.HasPrefix(up.URL, "http://127.0.0.1:") || up.FilesURL != "" && !strings.HasPrefix(up.FilesURL, "http://127.0.0.1:") {
			return errors.New("doc examples: upstream." + name + " is not a loopback fake: " + up.URL)
		}
	}
	return nil
}
