package main

import (
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// A run as go test -json writes it: a package that passes with a slow
// test, one whose test fails, and a package that does not build.
const stream = `{"Action":"start","Package":"m/a"}
{"Action":"run","Package":"m/a","Test":"TestQuick"}
{"Action":"output","Package":"m/a","Test":"TestQuick","Output":"=== RUN   TestQuick\n"}
{"Action":"output","Package":"m/a","Test":"TestQuick","Output":"    a_test.go:9: passing chatter\n"}
{"Action":"pass","Package":"m/a","Test":"TestQuick","Elapsed":0.01}
{"Action":"pass","Package":"m/a","Test":"TestSlow/sub","Elapsed":61.4}
TICK
{"Action":"pass","Package":"m/a","Test":"TestSlow","Elapsed":61.5}
{"Action":"output","Package":"m/a","Test":"TestFish","Output":"    fish_test.go:12: fish is not installed (apt-get install fish)\n"}
{"Action":"output","Package":"m/a","Test":"TestFish","Output":"--- SKIP: TestFish (0.00s)\n"}
{"Action":"skip","Package":"m/a","Test":"TestFish","Elapsed":0}
{"Action":"output","Package":"m/a","Output":"PASS\n"}
{"Action":"output","Package":"m/a","Output":"ok  \tm/a\t61.6s\n"}
{"Action":"pass","Package":"m/a","Elapsed":61.6}
{"Action":"start","Package":"m/b"}
{"Action":"output","Package":"m/b","Test":"TestBroken","Output":"=== RUN   TestBroken\n"}
{"Action":"output","Package":"m/b","Test":"TestBroken","Output":"    b_test.go:7: got 1, want 2\n"}
{"Action":"output","Package":"m/b","Test":"TestBroken","Output":"--- FAIL: TestBroken (0.00s)\n"}
{"Action":"fail","Package":"m/b","Test":"TestBroken","Elapsed":0}
{"Action":"output","Package":"m/b","Output":"FAIL\n"}
{"Action":"output","Package":"m/b","Output":"FAIL\tm/b\t0.1s\n"}
{"Action":"fail","Package":"m/b","Elapsed":0.1}
{"ImportPath":"m/c","Action":"build-output","Output":"c.go:3:1: syntax error\n"}
{"ImportPath":"m/c","Action":"build-fail"}
`

// feed runs run on text's lines, a line "TICK" standing for a tick of the
// progress clock, the clock moving on a minute with each line.
func feed(text string) (int, string) {
	lines, tick := make(chan string), make(chan time.Time)
	var clock atomic.Int64 // minutes
	now := func() time.Time { return time.Unix(clock.Load()*60, 0) }
	var out strings.Builder
	code := make(chan int)
	go func() { code <- run(lines, tick, &out, now) }()
	for _, l := range strings.SplitAfter(text, "\n") {
		if l = strings.TrimSuffix(l, "\n"); l == "" {
			continue
		}
		clock.Add(1)
		if l == "TICK" {
			tick <- now()
		} else {
			lines <- l
		}
	}
	close(lines)
	c := <-code
	return c, out.String()
}

func TestRun(t *testing.T) {
	code, got := feed(stream)
	if code != 1 {
		t.Errorf("exit code %d, want 1 for a failed test", code)
	}
	for _, want := range []string{
		"test: skipped m/a TestFish: fish_test.go:12: fish is not installed (apt-get install fish)\n",
		"ok  \tm/a\t61.6s\n",
		"    b_test.go:7: got 1, want 2\n--- FAIL: TestBroken (0.00s)\n",
		"FAIL\tm/b\t0.1s\n",
		"c.go:3:1: syntax error\n",
		"test:     61.5s  m/a TestSlow\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	// The clock moves on as the lines are sent: how long m/a has run is
	// about six minutes at the tick, and how many of its tests are done
	// is exact.
	if !regexp.MustCompile(`(?m)^test: still running m/a after [5-7]m0s, 2 tests done$`).MatchString(got) {
		t.Errorf("no progress line for m/a at the tick:\n%s", got)
	}
	for _, unwanted := range []string{"passing chatter", "=== RUN", "TestSlow/sub"} {
		if strings.Contains(got, unwanted) {
			t.Errorf("output has %q:\n%s", unwanted, got)
		}
	}
}

func TestRunPassing(t *testing.T) {
	code, got := feed(`{"Action":"start","Package":"m/a"}
{"Action":"pass","Package":"m/a","Test":"TestOne","Elapsed":1}
{"Action":"pass","Package":"m/a","Elapsed":1}
`)
	if code != 0 {
		t.Errorf("exit code %d, want 0:\n%s", code, got)
	}
}

func TestRunCutShort(t *testing.T) {
	code, got := feed(`{"Action":"start","Package":"m/a"}
{"Action":"pass","Package":"m/a","Test":"TestOne","Elapsed":1}
`)
	if code != 1 {
		t.Errorf("exit code %d, want 1 when go test stopped mid-package", code)
	}
	if !strings.Contains(got, "test: m/a: go test stopped before the package ended") {
		t.Errorf("no word of the cut:\n%s", got)
	}
}

func TestRunGoTestError(t *testing.T) {
	code, got := feed("go: unknown flag -frob\n")
	if !strings.Contains(got, "go: unknown flag -frob\n") {
		t.Errorf("go test's own error was not printed:\n%s", got)
	}
	_ = code // the exit status of go test itself decides, in .ci/test
}
