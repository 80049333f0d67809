package bench

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"
)

// TestStoreSizeTargets runs the store-size benchmark on small stores and a
// few months of churn: every size is measured through cproxy, and a store
// that keeps everything grows where a pruned one stays smaller. It needs CPROXY_BENCH=1 (.ci/bench-store-size sets
// it).
func TestStoreSizeTargets(t *testing.T) {
	if os.Getenv("CPROXY_BENCH") == "" {
		t.Skip("builds token stores and starts cproxy: set CPROXY_BENCH=1 (.ci/bench-store-size does)")
	}
	res, err := RunStoreSize(context.Background(), StoreSizeOptions{Cproxy: os.Getenv("CPROXY_BENCH_CPROXY"),
		Sizes: []int{100, 2000}, Lookups: 1000, Requests: 200, Days: 90, PerDay: 200, Retention: 7 * 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Sizes) != 2 {
		t.Fatalf("%d sizes measured, want 2", len(res.Sizes))
	}
	for _, s := range res.Sizes {
		if s.Lookup.Ops != 1000 || s.Request.Ops != 200 || s.Start.RSS == 0 || s.After.Anon == 0 || s.FileBytes == 0 || s.Prune == 0 || s.AfterPrune.RSS == 0 {
			t.Errorf("%d tokens: %+v", s.Tokens, s)
		}
	}
	if len(res.Churn) != 2 {
		t.Fatalf("%d churn runs, want 2", len(res.Churn))
	}
	kept, pruned := res.Churn[0], res.Churn[1]
	last := func(c ChurnRun) int64 { return c.Points[len(c.Points)-1].FileBytes }
	if kept.Pruned || len(kept.Points) < 2 || last(kept) <= kept.Points[0].FileBytes {
		t.Errorf("churn without pruning: %+v; want a file that grows", kept)
	}
	if !pruned.Pruned || last(pruned) >= last(kept) {
		t.Errorf("churn with pruning: %+v; want a file smaller than without (%d bytes)", pruned, last(kept))
	}
	for _, c := range res.Churn {
		if c.Request.Ops != 200 || c.After.Anon == 0 {
			t.Errorf("cproxy on the store of the churn (pruned: %v): %+v", c.Pruned, c.Served)
		}
	}
	var b bytes.Buffer
	res.Markdown(&b)
	t.Log("\n" + b.String())
	if !strings.Contains(b.String(), "| 2000 | ") {
		t.Error("no row for 2000 tokens")
	}
}

// The tables from a made-up result.
func TestStoreSizeMarkdown(t *testing.T) {
	us, mib := time.Microsecond, int64(1<<20)
	res := &StoreSizeResult{
		Options: StoreSizeOptions{Days: 365, Lookups: 10, Requests: 5, PerDay: 1000, TTL: 24 * time.Hour, Retention: 30 * 24 * time.Hour},
		Sizes: []SizeRun{{Tokens: 10000, FileBytes: 8 * mib, Build: 1500 * time.Millisecond, Lookup: Stats{P50: us / 2, P99: 3 * us},
			Served: Served{Request: Stats{P50: 300 * us, P99: 900 * us}, Start: Mem{RSS: 20 * mib, Anon: 12 * mib}, After: Mem{RSS: 24 * mib, Peak: 25 * mib, Anon: 14 * mib}},
			Prune:  250 * time.Millisecond, AfterPrune: Mem{RSS: 30 * mib, Anon: 15 * mib}}},
		Churn: []ChurnRun{
			{Points: []ChurnPoint{{Day: 1, Minted: 1000, FileBytes: mib}, {Day: 365, Minted: 365000, FileBytes: 200 * mib}},
				Served: Served{Request: Stats{P50: 310 * us, P99: 800 * us}, Start: Mem{RSS: 21 * mib, Anon: 4 * mib}, After: Mem{RSS: 26 * mib, Anon: 13 * mib}}},
			{Pruned: true, Points: []ChurnPoint{{Day: 1, Minted: 1000, FileBytes: mib}, {Day: 365, Minted: 365000, FileBytes: 20 * mib}}},
		},
	}
	var b bytes.Buffer
	res.Markdown(&b)
	for _, want := range []string{
		"| 10000 | 8.0 MiB | 1.5 s | 0.5 / 3.0 µs | 300 / 900 µs | 20.0 MiB (12.0) | 24.0 MiB (14.0) | 0.25 s | 30.0 MiB (15.0) |",
		"| nothing pruned | 310 / 800 µs | 21.0 MiB (4.0) | 26.0 MiB (13.0) |",
		"| day | tokens minted | nothing pruned | pruned 30 days after the end |",
		"| 365 | 365000 | 200.0 MiB | 20.0 MiB |",
		"Churn in simulated time: 365 days, 1000 tokens minted a day, each expiring 24 h after;",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("no line\n%s\nin\n%s", want, b.String())
		}
	}
}
