// Command testprogress reads `go test -json` on standard input and prints
// what plain `go test` would (each package's closing line, and the output
// of a test that failed or skipped nothing else), plus a progress line now
// and then while a long package runs, so a suite that takes minutes is
// never silent for long. At the end it names the slowest tests. It exits 1
// if any package or test failed, or if the input ended early.
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

// progressEvery is how long a package may run before a progress line says
// how far it is.
const progressEvery = 45 * time.Second

// slowest is how many of the slowest top-level tests the summary names.
const slowest = 12

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Time    time.Time
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
	os.Exit(run(os.Stdin, os.Stdout, time.Now))
}

func run(in io.Reader, out io.Writer, now func() time.Time) int {
	// A test's output is kept until it ends: shown if it failed, dropped
	// if it passed, as plain go test does.
	held := map[string][]string{}
	var (
		failed   bool
		ended    = map[string]bool{}
		started  = map[string]time.Time{}
		passed   = map[string]int{}
		lastLine = map[string]time.Time{}
		times    []timing
	)
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			// Not an event: go test's own error (a build failure),
			// printed as it came.
			fmt.Fprintln(out, sc.Text())
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
			t := now()
			started[e.Package], lastLine[e.Package] = t, t
		case "output":
			if e.Test == "" {
				// The package's own lines: "ok", "FAIL", "PASS",
				// a panic outside any test, coverage.
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
				ended[e.Package] = true
				if e.Action == "fail" {
					failed = true
				}
				continue
			}
			if e.Action == "fail" {
				failed = true
				fmt.Fprint(out, strings.Join(held[key], ""))
			}
			delete(held, key)
			if !strings.Contains(e.Test, "/") {
				passed[e.Package]++
				times = append(times, timing{shortPkg(e.Package) + " " + e.Test, e.Elapsed})
				if t := now(); t.Sub(lastLine[e.Package]) >= progressEvery {
					lastLine[e.Package] = t
					fmt.Fprintf(out, "test: %s: %d tests done in %s, still running\n",
						shortPkg(e.Package), passed[e.Package], t.Sub(started[e.Package]).Round(time.Second))
				}
			}
		}
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintf(out, "test: reading go test's output: %v\n", err)
		return 1
	}
	for pkg := range started {
		if !ended[pkg] {
			fmt.Fprintf(out, "test: %s: go test stopped before the package ended\n", shortPkg(pkg))
			failed = true
		}
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

// shortPkg is pkg under the module's path: cmd/cproxy for
// github.com/cproxy/cproxy/cmd/cproxy.
func shortPkg(pkg string) string {
	if s, ok := strings.CutPrefix(pkg, "github.com/cproxy/cproxy/"); ok {
		return s
	}
	return pkg
}
