package bench

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cproxy/cproxy/client"
	"github.com/cproxy/cproxy/config"
	"github.com/cproxy/cproxy/policy"
	"github.com/cproxy/cproxy/tokens"
)

// loadVariant writes a cproxy variant's files as startCproxy does and loads
// them as `cproxy serve` would.
func loadVariant(t *testing.T, v cproxyVariant) (*config.Config, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), v.dir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	for name, content := range v.files("http://127.0.0.1:9", testKey) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := config.LoadConfig(filepath.Join(dir, "cproxy.toml"))
	if err != nil {
		t.Fatalf("%s: %v", v.name, err)
	}
	return cfg, dir
}

// TestLimitsConfig checks that the +limits target's config is valid and
// turns on what cproxy+limits measures, and that plain cproxy stays on defaults.
func TestLimitsConfig(t *testing.T) {
	cfg, dir := loadVariant(t, limitsCproxy)
	if want := filepath.Join(dir, "audit.jsonl"); cfg.Log.Audit != want {
		t.Errorf("log.audit = %q, want %q", cfg.Log.Audit, want)
	}
	prof := cfg.Rules.Profiles["default"]
	if prof == nil {
		t.Fatal("no profile default")
	}
	b := prof.Budget
	if b.Window != policy.WindowDay {
		t.Errorf("budget window %q, want day", b.Window)
	}
	// Far above one repetition: ~10^5 requests of 5,120 input tokens, each
	// holding its 32,000 max_tokens and 22 KB per input kind, 1,000 streams
	// at once, and a rate far above the driver's.
	for _, l := range []struct {
		key      string
		got, min int64
	}{
		{"requests", b.Requests, 10_000_000},
		{"input_tokens", b.InputTokens, 100_000_000_000},
		{"output_tokens", b.OutputTokens, 100_000_000_000},
		{"cache_read_tokens", b.CacheReadTokens, 100_000_000_000},
		{"cache_write_tokens", b.CacheWriteTokens, 100_000_000_000},
		{"requests_per_minute", b.RequestsPerMinute, 10_000_000},
		{"concurrent", b.Concurrent, 10 * int64(DefaultPlan.Streams)},
	} {
		if l.got < l.min {
			t.Errorf("budget %s = %d: below %d, a run could hit it", l.key, l.got, l.min)
		}
	}

	// The plain target meters nothing, and its rate and concurrency are
	// above cproxy's defaults as far as the limits target's.
	plain, _ := loadVariant(t, plainCproxy)
	pb := plain.Rules.Profiles["default"].Budget
	if plain.Log.Audit != "" || pb.Requests != 0 || pb.InputTokens != 0 || pb.OutputTokens != 0 || pb.CacheReadTokens != 0 || pb.CacheWriteTokens != 0 ||
		pb.RequestsPerMinute < 10_000_000 || pb.Concurrent < 10*int64(DefaultPlan.Streams) {
		t.Errorf("plain cproxy: log.audit %q, budget %+v: want no audit file, nothing metered, rate and concurrency far above a run", plain.Log.Audit, pb)
	}
}

func TestUsageOf(t *testing.T) {
	list := `{"tokens":[{"id":"tok_0","sandbox":"bench-1","state":"live","budget":{"requests":5},"usage":{"requests":1}},` +
		`{"id":"tok_1","sandbox":"bench-1","state":"live","budget":{"window":"day","requests":5},"usage":{"requests":3,"input_tokens":15360,"output_tokens":93,"cache_read_tokens":12288,"cache_write_tokens":0}}]}`
	u, err := usageOf(page(t, list), "tok_1")
	if want := (tokens.Usage{Requests: 3, Input: 15360, Output: 93, CacheRead: 12288}); err != nil || u != want {
		t.Errorf("usage %+v, %v; want %+v", u, err, want)
	}
	for _, bad := range []string{
		`{"tokens":[{"id":"tok_1","sandbox":"bench-1","state":"live"}]}`, // no budget in force
		`{"tokens":[{"id":"tok_0","budget":{"requests":5},"usage":{"requests":1}}]}`,
	} {
		if _, err := usageOf(page(t, bad), "tok_1"); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
}

// page decodes a GET /tokens answer.
func page(t *testing.T, answer string) []client.TokenInfo {
	t.Helper()
	var p client.TokenPage
	if err := json.Unmarshal([]byte(answer), &p); err != nil {
		t.Fatal(err)
	}
	return p.Tokens
}

func TestParseRefused(t *testing.T) {
	metrics := `# HELP cproxy_requests_total Requests.
# TYPE cproxy_requests_total counter
cproxy_requests_total{profile="default",route="model",status="200"} 118
cproxy_requests_total{profile="default",route="model",status="429"} 2
cproxy_requests_total{profile="",route="model",status="401"} 1
cproxy_requests_total{profile="",route="github",status="401"} 7
`
	if n, err := parseRefused([]byte(metrics)); err != nil || n != 3 {
		t.Errorf("refused %v, %v; want 3", n, err)
	}
	if _, err := parseRefused([]byte("go_goroutines 12\n")); err == nil {
		t.Error("no model series: no error")
	}
}

// TestGrowthTable checks the cproxy+limits table: ratios of overheads, and the
// verdict from the judged rows.
func TestGrowthTable(t *testing.T) {
	rep := func(limitsCPU time.Duration) Rep {
		r := Rep{Stats: map[string]map[string]Stats{}, Idle: map[string]Mem{}, Held: map[string]Mem{},
			Metered: Metered{Answered: 10, AuditLines: 10, Scrapes: 3, Usage: tokens.Usage{Requests: 10, Input: 51200, Output: 310}}}
		for _, m := range measures {
			r.Stats[m.name] = map[string]Stats{
				"direct":     {P50: 100 * time.Microsecond, P99: 900 * time.Microsecond, PerSec: 10000},
				"cproxy":     {P50: 300 * time.Microsecond, P99: 2000 * time.Microsecond, PerSec: 5000, CPU: 150 * time.Microsecond},
				LimitsTarget: {P50: 320 * time.Microsecond, P99: 2600 * time.Microsecond, PerSec: 4800, CPU: limitsCPU},
			}
		}
		for _, n := range []string{"cproxy", LimitsTarget} {
			r.Idle[n], r.Held[n] = Mem{RSS: 18 << 20}, Mem{Peak: 110 << 20}
		}
		return r
	}
	res := &Result{Plan: DefaultPlan, Targets: []string{"direct", "cproxy", LimitsTarget}, Reps: []Rep{rep(160 * time.Microsecond), rep(170 * time.Microsecond)}}
	wantMarkdown(t, res,
		// added p50: 200 → 220 µs; p99 is not judged, however far it moves
		"| added latency p50, 1 client | µs | 200 | 220 | 1.10 (1.10–1.10) | ≤ 1.10× | yes (2/2) |",
		"| added latency p99, 1 client | µs | 1100 | 1700 | 1.55 (1.55–1.55) |  |  |",
		"| throughput, 16 clients | req/s | 5000 | 4800 | 0.96 (0.96–0.96) | ≥ 0.91× (1/1.10) | yes (2/2) |",
		"| proxy CPU per request, 16 clients | µs | 150 | 165 | 1.10 (1.07–1.13) | ≤ 1.10× | mixed (1/2) |",
		"| added first SSE event p50, 1 client | µs | 200 | 220 |",
		"**missed** in some repetition on 2 of 8 judged rows: proxy CPU per request, 1 client (1/2); proxy CPU per request, 16 clients (1/2)",
		"- repetition 1: 10 requests answered, all 200; token usage: 10 requests, 51200 input",
	)
}
