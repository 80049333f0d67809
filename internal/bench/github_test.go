package bench

import (
	"bytes"
	"context"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestGitHubBenchRunsEveryWay runs the GitHub API benchmark small, one
// round of a few requests each way: the REST read and gh pr view's query
// answered directly, through the Go proxy and through cproxy on every CPU
// and on one, cproxy's audit log holding a line for each request it
// answered, gh run each way where it is installed, and the tables come out.
// It checks that the harness works, not how fast anything is.
func TestGitHubBenchRunsEveryWay(t *testing.T) {
	if os.Getenv("CPROXY_BENCH") == "" {
		t.Skip("builds and starts cproxy and the Go proxy: set CPROXY_BENCH=1")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := RunGitHub(ctx, GitHubOptions{Cproxy: os.Getenv("CPROXY_BENCH_CPROXY"), Proxy: os.Getenv("CPROXY_BENCH_PROXY"),
		Dir: t.TempDir(), Rounds: 1, Reads: 5, Queries: 3, Slice: 50 * time.Millisecond, Gh: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Turns) != len(githubWays) {
		t.Fatalf("%d turns, want %d: %+v", len(res.Turns), len(githubWays), res)
	}
	for _, x := range res.Turns {
		if x.Read.Ops != 5 || x.Query.Ops != 3 || x.Reads16.Ops == 0 || x.Read.P50 == 0 || x.Query.P50 == 0 {
			t.Errorf("%s: %+v", x.Way, x)
		}
	}
	for _, way := range []string{wayCproxy, OneCPUCproxyTarget} {
		if res.Answered[way] == 0 || res.Audited[way] != res.Answered[way] || res.Use[way].Peak == 0 {
			t.Errorf("%s: answered %d, audited %d, used %+v", way, res.Answered[way], res.Audited[way], res.Use[way])
		}
	}
	if res.GhMissing == "" && len(res.GhTurns) != len(githubGhWays) {
		t.Errorf("gh: %d turns, want %d", len(res.GhTurns), len(githubGhWays))
	}
	var b bytes.Buffer
	res.Markdown(&b)
	for _, want := range []string{"| REST read, added latency p50, 1 client | µs |", "| proxy CPU per GraphQL query, 1 client |", "Audit: cproxy logged"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("no %q in the tables:\n%s", want, b.String())
		}
	}
	rep, err := NewReport(res, nil, "0.10 0.20 0.30")
	if err != nil {
		t.Fatal(err)
	}
	j, err := rep.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if back, err := ParseReport(j); err != nil || back.GitHubAPI == nil || !reflect.DeepEqual(back.GitHubAPI.Turns, rep.GitHubAPI.Turns) {
		t.Errorf("report read back as %+v, %v; wrote %+v", back, err, rep)
	}
	t.Logf("\n%s", b.String())
}
