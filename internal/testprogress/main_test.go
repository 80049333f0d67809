package main

import (
	"strings"
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
{"Action":"pass","Package":"m/a","Test":"TestSlow","Elapsed":61.5}
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

func TestRun(t *testing.T) {
	var out strings.Builder
	clock := time.Unix(0, 0)
	now := func() time.Time { clock = clock.Add(30 * time.Second); return clock }
	if code := run(strings.NewReader(stream), &out, now); code != 1 {
		t.Errorf("exit code %d, want 1 for a failed test", code)
	}
	got := out.String()
	for _, want := range []string{
		"ok  \tm/a\t61.6s\n",
		"test: m/a: 2 tests done in 1m0s, still running\n",
		"    b_test.go:7: got 1, want 2\n--- FAIL: TestBroken (0.00s)\n",
		"FAIL\tm/b\t0.1s\n",
		"c.go:3:1: syntax error\n",
		"test:     61.5s  m/a TestSlow\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "passing chatter") {
		t.Errorf("a passing test's output was printed:\n%s", got)
	}
}

func TestRunPassing(t *testing.T) {
	in := `{"Action":"start","Package":"m/a"}
{"Action":"pass","Package":"m/a","Test":"TestOne","Elapsed":1}
{"Action":"pass","Package":"m/a","Elapsed":1}
`
	var out strings.Builder
	if code := run(strings.NewReader(in), &out, time.Now); code != 0 {
		t.Errorf("exit code %d, want 0:\n%s", code, out.String())
	}
}

func TestRunCutShort(t *testing.T) {
	in := `{"Action":"start","Package":"m/a"}
{"Action":"pass","Package":"m/a","Test":"TestOne","Elapsed":1}
`
	var out strings.Builder
	if code := run(strings.NewReader(in), &out, time.Now); code != 1 {
		t.Errorf("exit code %d, want 1 when go test stopped mid-package", code)
	}
	if !strings.Contains(out.String(), "test: m/a: go test stopped before the package ended") {
		t.Errorf("no word of the cut:\n%s", out.String())
	}
}
