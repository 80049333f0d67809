package bench

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"
)

// TestStoreTargets runs the PostgreSQL store benchmark on a few requests
// and revocations: every target answers, and without the cache every
// revocation is in force from the next request. It needs CPROXY_BENCH=1
// and a PostgreSQL server (.ci/bench-store runs it under .ci/postgres).
func TestStoreTargets(t *testing.T) {
	if os.Getenv("CPROXY_BENCH") == "" {
		t.Skip("starts cproxy on PostgreSQL: set CPROXY_BENCH=1 (.ci/bench-store does)")
	}
	dsn := os.Getenv("CPROXY_TEST_PG_DSN")
	if dsn == "" {
		t.Skip("CPROXY_TEST_PG_DSN is not set: run through .ci/postgres")
	}
	res, err := RunStore(context.Background(), StoreOptions{Cproxy: os.Getenv("CPROXY_BENCH_CPROXY"), DSN: dsn,
		PGData: os.Getenv("CPROXY_TEST_PG_DATA"), Rounds: 1, Slice: 100 * time.Millisecond, Revocations: 3})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{Latency1, Latency16} {
		for _, name := range []string{"direct", StoreBolt, StorePG, StorePGCached} {
			if s := res.Stats[m][name]; s.Ops == 0 {
				t.Errorf("%s, %s: %+v", m, name, s)
			}
		}
	}
	if len(res.Revocations) != 2 {
		t.Fatalf("%d revocation modes, want 2", len(res.Revocations))
	}
	if p := res.Revocations[0]; p.Served != 0 || p.FirstRefused != 6 || len(p.Times) != 6 {
		t.Errorf("without the cache: %+v; want every revocation in force from the next request", p)
	}
	if p := res.Revocations[1]; len(p.Times) != 6 {
		t.Errorf("with the cache: %+v", p)
	}
	var b bytes.Buffer
	res.Markdown(&b)
	t.Log("\n" + b.String())
	if strings.Contains(b.String(), strings.SplitN(strings.TrimPrefix(dsn, "postgres://"), "@", 2)[0]) {
		t.Error("the report holds the database's user and password")
	}
}

// The tables from a made-up result: ratios to the embedded store, and the
// propagation's percentiles.
func TestStoreMarkdown(t *testing.T) {
	ms := time.Millisecond
	res := &StoreResult{
		Targets: []string{"direct", StoreBolt, StorePG, StorePGCached},
		Stats: map[string]map[string]Stats{
			Latency1:  {"direct": {P50: ms, P99: 2 * ms}, StoreBolt: {P50: 2 * ms, P99: 4 * ms}, StorePG: {P50: 3 * ms, P99: 6 * ms}, StorePGCached: {P50: 2 * ms, P99: 4 * ms}},
			Latency16: {"direct": {P50: ms, PerSec: 4000}, StoreBolt: {P50: 2 * ms, PerSec: 2000, CPU: 300 * time.Microsecond}, StorePG: {P50: 3 * ms, PerSec: 1000, CPU: 400 * time.Microsecond}, StorePGCached: {P50: 2 * ms, PerSec: 2000, CPU: 300 * time.Microsecond}},
		},
		Revocations: []Propagation{{Mode: "no cache", Times: []time.Duration{ms, 2 * ms, 3 * ms, 4 * ms}, FirstRefused: 4}},
	}
	var b bytes.Buffer
	res.Markdown(&b)
	for _, want := range []string{
		"| | direct | cproxy, embedded store | cproxy, PostgreSQL | cproxy, PostgreSQL + lookup_cache |",
		"| latency p50, 1 client | 1.000 ms (0.50×) | 2.000 ms | 3.000 ms (1.50×) | 2.000 ms (1.00×) |",
		"| throughput, 16 clients | 4000 req/s (2.00×) | 2000 req/s | 1000 req/s (0.50×) | 2000 req/s (1.00×) |",
		"| proxy CPU per request, 16 clients | – | 300 µs | 400 µs (1.33×) | 300 µs (1.00×) |",
		"| no cache | 2 × 2 | 4 of 4 | 0 | 2.00 ms | 4.00 ms | 4.00 ms |",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("no line\n%s\nin\n%s", want, b.String())
		}
	}
}
