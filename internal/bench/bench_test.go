package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cproxy/cproxy/config"
	"github.com/cproxy/cproxy/policy"
	"github.com/cproxy/cproxy/routes"
	"github.com/cproxy/cproxy/routes/audit"
	"github.com/cproxy/cproxy/routes/builtin"
	"github.com/cproxy/cproxy/secrets"
	"github.com/cproxy/cproxy/tokens"
)

// The slow parts of this package run only when asked:
//
//	CPROXY_BENCH=1 go test -run TestTargets ./internal/bench   # every target answers, streams hold and end
//	go test -run '^$' -bench . ./internal/bench                  # Go benchmarks
//	go test -run '^$' -bench InProcess/cproxy -cpuprofile cpu.out ./internal/bench
//
// CPROXY_BENCH_CPROXY names a cproxy binary to use instead of building one.
func TestMain(m *testing.M) {
	RunRoleIfAsked()
	code := m.Run()
	shared.close()
	os.Exit(code)
}

const testKey = "sk-ant-api03-bench-test-key"

func TestBodyIsAClaudeCodeSizedMessagesRequest(t *testing.T) {
	for _, stream := range []bool{false, true} {
		b := Body(stream)
		if len(b) < 18<<10 || len(b) > 24<<10 {
			t.Errorf("Body(%v) is %d bytes, want about 20 KiB", stream, len(b))
		}
		var req struct {
			Model    string
			Stream   bool
			Messages []json.RawMessage
		}
		if err := json.Unmarshal(b, &req); err != nil {
			t.Fatalf("Body(%v): %v", stream, err)
		}
		if req.Model != Model || req.Stream != stream || len(req.Messages) < 3 {
			t.Errorf("Body(%v): model %q stream %v, %d messages", stream, req.Model, req.Stream, len(req.Messages))
		}
		if !bytes.Equal(b, Body(stream)) {
			t.Errorf("Body(%v) differs between calls", stream)
		}
	}
}

// TestClientSendsARequestInOneWrite: the load driver's client hands each
// request, headers and body, to its connection in one write, as Claude Code
// does, so no proxy gets the head of a request before the rest.
func TestClientSendsARequestInOneWrite(t *testing.T) {
	up := httptest.NewServer(NewUpstream(testKey))
	defer up.Close()
	hc := NewClient(1)
	var mu sync.Mutex
	var writes []int
	tr := hc.Transport.(*http.Transport)
	dial := tr.DialContext
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		return &writeCountingConn{Conn: c, record: func(n int) { mu.Lock(); writes = append(writes, n); mu.Unlock() }}, err
	}
	tg := &Target{Name: "direct", URL: up.URL, Header: http.Header{"X-Api-Key": {testKey}}}
	for _, stream := range []bool{false, true} {
		mu.Lock()
		writes = nil
		mu.Unlock()
		var err error
		if stream {
			_, err = tg.FirstEvent(context.Background(), hc, Body(true))
		} else {
			_, err = tg.Message(context.Background(), hc, Body(false))
		}
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		if len(writes) != 1 || writes[0] < len(Body(stream)) {
			t.Errorf("stream=%v: the request went out in writes of %v bytes, want one of the whole request (body %d bytes)", stream, writes, len(Body(stream)))
		}
		mu.Unlock()
	}
}

type writeCountingConn struct {
	net.Conn
	record func(int)
}

func (c *writeCountingConn) Write(p []byte) (int, error) {
	c.record(len(p))
	return c.Conn.Write(p)
}

// TestGoProxyAndUpstream checks the in-process parts of the harness: the
// upstream wants the key the proxy sets, answers both ways, and holds a
// stream until released.
func TestGoProxyAndUpstream(t *testing.T) {
	up := httptest.NewServer(NewUpstream(testKey))
	defer up.Close()
	u, _ := url.Parse(up.URL)
	gp := httptest.NewServer(NewGoProxy(u, "X-Api-Key", testKey))
	defer gp.Close()
	hc := NewClient(4)
	defer hc.CloseIdleConnections()
	ctx := context.Background()

	noKey := &Target{Name: "direct without a key", URL: up.URL}
	if _, err := noKey.Message(ctx, hc, Body(false)); err == nil {
		t.Error("the upstream answered a request without its key")
	}
	for _, tg := range []*Target{
		{Name: "direct", URL: up.URL, Header: http.Header{"X-Api-Key": {testKey}}},
		{Name: "goproxy", URL: gp.URL, Header: bearer("cpx_ignored")},
	} {
		if _, err := tg.Message(ctx, hc, Body(false)); err != nil {
			t.Errorf("message: %v", err)
		}
		if _, err := tg.FirstEvent(ctx, hc, Body(true)); err != nil {
			t.Errorf("stream: %v", err)
		}
		mem, err := tg.HoldStreams(ctx, up.URL, 5, Body(true))
		if err != nil || mem != (Mem{}) {
			t.Errorf("held streams: %v, %v (want no memory: no process)", mem, err)
		}
	}
}

// TestTargets starts the whole comparison and checks that every target
// answers, streams, and holds and ends streams.
func TestTargets(t *testing.T) {
	if os.Getenv("CPROXY_BENCH") == "" {
		t.Skip("starts nginx and cproxy: set CPROXY_BENCH=1 (.ci/bench does)")
	}
	env := shared.get(t)
	hc := NewClient(4)
	defer hc.CloseIdleConnections()
	ctx := context.Background()
	for _, tg := range env.Targets {
		if _, err := tg.Message(ctx, hc, Body(false)); err != nil {
			t.Errorf("message: %v", err)
		}
		if _, err := tg.FirstEvent(ctx, hc, Body(true)); err != nil {
			t.Errorf("stream: %v", err)
		}
		mem, err := tg.HoldStreams(ctx, env.UpstreamURL, 50, Body(true))
		if err != nil {
			t.Errorf("held streams: %v", err)
		}
		if (tg.Name == "direct") != (mem.Peak == 0) {
			t.Errorf("%s: memory %+v", tg.Name, mem)
		}
	}
	if _, err := checkMetered(ctx, env.Target(LimitsTarget), env.scraper, time.Now()); err != nil {
		t.Error(err)
	}
	wrong := &Target{Name: "cproxy with a wrong token", URL: env.Target("cproxy").URL, Header: bearer("cpx_wrong")}
	if _, err := wrong.Message(ctx, hc, Body(false)); err == nil {
		t.Error("cproxy forwarded a request with a wrong token")
	}
}

// sharedEnv is one comparison environment for every benchmark of a run:
// building cproxy and starting the processes once.
type sharedEnv struct {
	once sync.Once
	env  *Env
	err  error
}

var shared sharedEnv

func (s *sharedEnv) get(tb testing.TB) *Env {
	s.once.Do(func() {
		o := Options{Cproxy: os.Getenv("CPROXY_BENCH_CPROXY"), Proxy: os.Getenv("CPROXY_BENCH_PROXY"), RequireNginx: os.Getenv("CI") == "true"}
		s.env, s.err = Start(o)
		if s.err == nil && s.env.NginxMissing != "" {
			fmt.Fprintf(os.Stderr, "bench: nginx left out: %s\n", s.env.NginxMissing)
		}
	})
	if s.err != nil {
		tb.Fatal(s.err)
	}
	return s.env
}

func (s *sharedEnv) close() {
	if s.env != nil {
		s.env.Close()
	}
}

// timed runs b.N operations from conc goroutines and reports the
// percentiles of their times and the rate, next to ns/op (which is wall time
// divided by b.N, so 1/throughput at conc > 1).
func timed(b *testing.B, conc int, do op) {
	var next atomic.Int64
	per := make([][]time.Duration, conc)
	errs := make(chan error, conc)
	ctx := context.Background()
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for w := range conc {
		wg.Go(func() {
			for next.Add(1) <= int64(b.N) {
				d, err := do(ctx)
				if err != nil {
					errs <- err
					return
				}
				per[w] = append(per[w], d)
			}
		})
	}
	wg.Wait()
	wall := time.Since(start)
	b.StopTimer()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
	all := slices.Concat(per...)
	slices.Sort(all)
	b.ReportMetric(micros(percentile(all, 50)), "p50-µs")
	b.ReportMetric(micros(percentile(all, 99)), "p99-µs")
	b.ReportMetric(float64(len(all))/wall.Seconds(), "req/s")
}

// BenchmarkMessages is a non-streaming POST /v1/messages of about 20 KiB
// through each target, out of process.
func BenchmarkMessages(b *testing.B) {
	env := shared.get(b)
	hc := NewClient(32)
	body := Body(false)
	for _, conc := range []int{1, 16} {
		for _, tg := range env.Targets {
			b.Run(fmt.Sprintf("c%d/%s", conc, tg.Name), func(b *testing.B) {
				timed(b, conc, func(ctx context.Context) (time.Duration, error) { return tg.Message(ctx, hc, body) })
			})
		}
	}
}

// BenchmarkFirstEvent is a streaming request through each target, timed to
// its first event.
func BenchmarkFirstEvent(b *testing.B) {
	env := shared.get(b)
	hc := NewClient(32)
	body := Body(true)
	for _, conc := range []int{1, 16} {
		for _, tg := range env.Targets {
			b.Run(fmt.Sprintf("c%d/%s", conc, tg.Name), func(b *testing.B) {
				timed(b, conc, func(ctx context.Context) (time.Duration, error) { return tg.FirstEvent(ctx, hc, body) })
			})
		}
	}
}

// BenchmarkInProcess serves a non-streaming request with the do-nothing
// proxy's handler and with routes.Server's proxy handler, in this process,
// in front of the same in-process upstream: no client connection, so what
// differs between the two is the handler's own work. This is the benchmark
// to profile cproxy with (-cpuprofile, -memprofile).
func BenchmarkInProcess(b *testing.B) {
	up := httptest.NewServer(NewUpstream(testKey))
	defer up.Close()
	u, _ := url.Parse(up.URL)
	srv, token := newRoutesServer(b, u, false)
	defer srv.Close()
	limited, limitedToken := newRoutesServer(b, u, true)
	defer limited.Close()
	body := Body(false)
	for _, h := range []struct {
		name    string
		handler http.Handler
		header  http.Header
	}{
		{"goproxy", NewGoProxy(u, "X-Api-Key", testKey), bearer("cpx_ignored")},
		{"cproxy", srv.ProxyHandler(), bearer(token)},
		{"cproxy+limits", limited.ProxyHandler(), bearer(limitedToken)},
	} {
		b.Run(h.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			cpu0 := processCPU(b)
			for b.Loop() {
				req := httptest.NewRequest(http.MethodPost, "/v1/messages?beta=true", bytes.NewReader(body))
				for k, v := range clientHeader {
					req.Header[k] = v
				}
				for k, v := range h.header {
					req.Header[k] = v
				}
				rec := httptest.NewRecorder()
				h.handler.ServeHTTP(rec, req)
				if rec.Code != http.StatusOK {
					b.Fatalf("%s: %d %s", h.name, rec.Code, rec.Body)
				}
			}
			b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

// processCPU is the processor time this process has used, user and system.
// Per operation it is steadier than ns/op on a shared machine: other
// processes' load stretches wall time, not this process's own work (the
// handler, the upstream and the collector, all in this process).
func processCPU(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// newRoutesServer builds routes.Server as `cproxy serve` does: a bbolt
// store with one token, the policy of the out-of-process target, the
// api-key credential, and audit lines formatted as cproxy serve formats
// them by default (written nowhere). With limits, as the cproxy+limits
// target: its budget, and JSON audit records (written nowhere).
func newRoutesServer(tb testing.TB, upstream *url.URL, limits bool) (*routes.Server, string) {
	dir := tb.TempDir()
	store, err := tokens.OpenBolt(filepath.Join(dir, "cproxy.db"))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { store.Close() })
	polPath := filepath.Join(dir, "policy.toml")
	pol := cproxyPolicy
	var auditLog io.Writer
	if limits {
		pol, auditLog = limitsPolicy, io.Discard
	}
	if err := os.WriteFile(polPath, []byte(pol), 0o600); err != nil {
		tb.Fatal(err)
	}
	loaded, err := policy.LoadPolicy(polPath)
	if err != nil {
		tb.Fatal(err)
	}
	tok, err := tokens.New()
	if err != nil {
		tb.Fatal(err)
	}
	now := time.Now()
	if err := store.Create(context.Background(), tok.Hash(), tokens.Record{Sandbox: "bench-1", CreatedAt: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
		tb.Fatal(err)
	}
	srv := routes.New(routes.Options{
		Store:  store,
		Policy: loaded,
		Routes: builtin.Kinds.Routes(map[string]routes.Upstream{"anthropic": {
			URL: upstream, Credential: secrets.New(testKey), Auth: config.AuthAPIKey, HeaderTimeout: 10 * time.Minute,
		}}, nil, "", nil, nil),
		Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
		Audit:    slog.New(audit.NewTextHandler(io.Discard, nil)),
		AuditLog: auditLog,
	})
	return srv, tok.Reveal()
}

// BenchmarkHeldStreams opens 500 streams at once through each handler, in
// this process, each held open by the upstream after its first events, and
// reports what the process holds while they are open, per stream: the heap
// in use when the last one opened (garbage included: what RSS follows), the
// live heap after a collection, and goroutine stacks. The client and the upstream are in the process too,
// the same for both handlers, so what matters is the difference. This is
// the benchmark to look at memory per open stream with: with
// CPROXY_BENCH_HEAPPROFILE=FILE it also writes a heap profile of the live
// heap while cproxy's streams are open.
func BenchmarkHeldStreams(b *testing.B) {
	const n = 500
	if err := raiseFileLimit(4 * n); err != nil {
		b.Skip(err)
	}
	body := Body(true)
	for _, name := range []string{"goproxy", "cproxy"} {
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				heldStreams(b, name, n, body)
			}
		})
	}
}

func heldStreams(b *testing.B, name string, n int, body []byte) {
	upstream := NewUpstream(testKey)
	up := httptest.NewServer(upstream)
	defer up.Close()
	u, _ := url.Parse(up.URL)
	var h http.Handler
	tg := &Target{Name: name}
	if name == "goproxy" {
		h, tg.Header = NewGoProxy(u, "X-Api-Key", testKey), bearer("cpx_ignored")
	} else {
		srv, token := newRoutesServer(b, u, false)
		defer srv.Close()
		h, tg.Header = srv.ProxyHandler(), bearer(token)
	}
	px := httptest.NewServer(h)
	defer px.Close()
	tg.URL = px.URL
	tr := &http.Transport{Proxy: nil, MaxIdleConns: n, MaxIdleConnsPerHost: n, DisableCompression: true}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	ctx := context.Background()

	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	g0 := runtime.NumGoroutine()
	opened, ended := tg.openStreams(ctx, hc, body, n)
	for range n {
		if err := <-opened; err != nil {
			b.Fatal(err)
		}
	}
	var peak, live runtime.MemStats
	runtime.ReadMemStats(&peak)
	g := runtime.NumGoroutine()
	runtime.GC()
	runtime.ReadMemStats(&live)
	if p := os.Getenv("CPROXY_BENCH_HEAPPROFILE"); p != "" && name == "cproxy" {
		f, err := os.Create(p)
		if err != nil {
			b.Fatal(err)
		}
		pprof.WriteHeapProfile(f)
		f.Close()
	}
	if err := release(ctx, up.URL); err != nil {
		b.Fatal(err)
	}
	for range n {
		if err := <-ended; err != nil {
			b.Fatal(err)
		}
	}
	per := func(after, before uint64) float64 { return (float64(after) - float64(before)) / float64(n) }
	b.ReportMetric(per(live.HeapAlloc, before.HeapAlloc), "live-heap-B/stream")
	b.ReportMetric(per(live.StackInuse, before.StackInuse), "stack-B/stream")
	b.ReportMetric(per(uint64(g), uint64(g0)), "goroutines/stream")
	b.ReportMetric(per(peak.HeapInuse, before.HeapInuse), "heap-B/stream")
}
