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

// TestMCPBenchRunsBothWays runs the MCP benchmark small, one round of a
// few calls and lists each way: the SDK's client gets the tool's answer
// directly and through the real cproxy, which logged the calls and showed
// only the tools its policy allows, and the tables come out. It checks
// that the harness works, not how fast anything is; it needs nothing
// beyond Go, so it never skips.
func TestMCPBenchRunsBothWays(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := RunMCP(ctx, MCPOptions{Cproxy: os.Getenv("CPROXY_BENCH_CPROXY"), Dir: t.TempDir(), Rounds: 1, Calls: 5, Lists: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Rounds) != 2 || res.Tools != 203 || res.Allowed != 101 {
		t.Fatalf("%d rounds, %d tools, %d allowed; want 2, 203 and 101: %+v", len(res.Rounds), res.Tools, res.Allowed, res)
	}
	for _, r := range res.Rounds {
		if r.Heard != 5 || r.CallP50 == 0 || r.ListP50 == 0 {
			t.Errorf("%s: the server heard %d calls; p50s %s and %s", r.Way, r.Heard, r.CallP50, r.ListP50)
		}
		if (r.Way == wayDirect) != (r.Audited == 0) {
			t.Errorf("%s: cproxy logged %d calls and lists", r.Way, r.Audited)
		}
	}
	if res.Use.Peak == 0 || res.Use.CPU == 0 {
		t.Errorf("cproxy's memory or CPU not read: %+v", res.Use)
	}
	var b bytes.Buffer
	res.Markdown(&b)
	if !strings.Contains(b.String(), "| 1 | cproxy |") || !strings.Contains(b.String(), "| tools/call p50 |") {
		t.Errorf("tables:\n%s", b.String())
	}
	rep, err := NewReport(res, nil, "0.10 0.20 0.30")
	if err != nil {
		t.Fatal(err)
	}
	j, err := rep.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if back, err := ParseReport(j); err != nil || back.MCP == nil || !reflect.DeepEqual(back.MCP.Rounds, rep.MCP.Rounds) {
		t.Errorf("report read back as %+v, %v; wrote %+v", back, err, rep)
	}
}
