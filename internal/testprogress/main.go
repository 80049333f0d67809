// Command testprogress reads `go test -json` on standard input and prints
// what plain `go test` would (each package's closing line, and the output
// of a test that failed), the reason of each test that skipped, plus a line every minute naming the packages
// still running and how far they are, so a suite that takes minutes is
// never silent for long. At the end it names the slowest tests. It exits 1
// if a package or test failed, a package did not build, or the input
// ended before a package did.
//
//	go test -json ./... | go run ./internal/testprogress
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"
)

// progressEvery is how often a line says which packages are still running.
const progressEvery = time.Minute

// slowest is how many of the slowest top-level tests the summary names.
const slowest = 12

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Action  string
	Package string
	Test    string
	Elapsed float64
	Output  string
}

type timing struct {
	name    string
	elapsed float64
}

func main() {
	lines := make(chan string)
	errc := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(os.Stdin)
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		for sc.Scan() {
			lines <- sc.Text()
		}
		errc <- sc.Err()
		close(lines)
	}()
	tick := time.NewTicker(progressEvery)
	defer tick.Stop()
	code := run(lines, tick.C, os.Stdout, time.Now)
	if err := <-errc; err != nil {
		fmt.Printf("test: reading go test's output: %v\n", err)
		code = 1
	}
	os.Exit(code)
}

// run reads go test's events from lines until it is closed, and writes a
// progress line at each tick.
func run(lines <-chan string, tick <-chan time.Time, out io.Writer, now func() time.Time) int {
	// A test's output is kept until it ends: shown if it failed, dropped
	// if it passed, as plain go test does.
	held := map[string][]string{}
	var (
		failed  bool
		running = map[string]time.Time{} // package → when it started
		done    = map[string]int{}       // package → tests and subtests ended
		times   []timing
	)
	for {
		var line string
		select {
		case <-tick:
			var names []string
			for pkg := range running {
				names = append(names, pkg)
			}
			slices.Sort(names)
			for _, pkg := range names {
				fmt.Fprintf(out, "test: still running %s after %s, %d tests done\n",
					shortPkg(pkg), now().Sub(running[pkg]).Round(time.Second), done[pkg])
			}
			continue
		case l, ok := <-lines:
			if !ok {
				return finish(out, failed, running, times)
			}
			line = l
		}
		var e event
		if err := json.Unmarshal([]byte(line), &e); err != nil || e.Action == "" {
			// Not an event: go test's own words (a bad flag, a
			// package that cannot be found), printed as they came.
			fmt.Fprintln(out, line)
			continue
		}
		key := e.Package + " " + e.Test
		switch e.Action {
		case "build-output":
			// A package that does not build: the compiler's words.
			fmt.Fprint(out, e.Output)
		case "build-fail":
			failed = true
		case "start":
			running[e.Package] = now()
		case "output":
			if e.Test == "" {
				// The package's own lines: "ok", "FAIL", a panic
				// outside any test.
				if t := strings.TrimSpace(e.Output); t != "PASS" && t != "FAIL" && !strings.HasPrefix(t, "=== ") {
					fmt.Fprint(out, e.Output)
				}
				continue
			}
			if !strings.HasPrefix(e.Output, "=== ") {
				held[key] = append(held[key], e.Output)
			}
		case "pass", "skip", "fail":
			if e.Test == "" {
				delete(running, e.Package)
				failed = failed || e.Action == "fail"
				continue
			}
			switch e.Action {
			case "fail":
				failed = true
				fmt.Fprint(out, strings.Join(held[key], ""))
			case "skip":
				// Plain go test says nothing of a skip; a test that
				// skips for want of a client says which, and that
				// is worth a line.
				fmt.Fprintf(out, "test: skipped %s %s: %s\n", shortPkg(e.Package), e.Test, skipReason(held[key]))
			}
			delete(held, key)
			done[e.Package]++
			if !strings.Contains(e.Test, "/") {
				times = append(times, timing{shortPkg(e.Package) + " " + e.Test, e.Elapsed})
			}
		}
	}
}

// finish reports what the end of the input leaves: packages it cut short,
// and the slowest tests.
func finish(out io.Writer, failed bool, running map[string]time.Time, times []timing) int {
	for pkg := range running {
		fmt.Fprintf(out, "test: %s: go test stopped before the package ended\n", shortPkg(pkg))
		failed = true
	}
	slices.SortFunc(times, func(a, b timing) int {
		switch {
		case a.elapsed > b.elapsed:
			return -1
		case a.elapsed < b.elapsed:
			return 1
		}
		return strings.Compare(a.name, b.name)
	})
	if len(times) > 0 {
		fmt.Fprintf(out, "test: the slowest tests:\n")
		for _, t := range times[:min(slowest, len(times))] {
			fmt.Fprintf(out, "test:   %6.1fs  %s\n", t.elapsed, t.name)
		}
	}
	if failed {
		return 1
	}
	return 0
}

// skipReason is the last line a skipped test wrote before go test's own
// "--- SKIP" line: the reason it gave t.Skip.
func skipReason(output []string) string {
	lines := strings.Split(strings.Join(output, ""), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		l := strings.TrimSpace(lines[i])
		if l != "" && !strings.HasPrefix(l, "--- SKIP") {
			return l
		}
	}
	return "no reason given"
}

// shortPkg is pkg under the module's path: cmd/cproxy for
// github.com/cproxy/cproxy/cmd/cproxy.
func shortPkg(pkg string) string {
	if s, ok := strings.CutPrefix(pkg, "github.com/cproxy/cproxy/"); ok {
		return s
	}
	return pkg
}
