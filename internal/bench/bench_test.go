package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cproxy/cproxy/policy"
	"github.com/cproxy/cproxy/routes"
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

// TestGoProxyAndUpstream checks the in-process parts of the harness: the
// upstream wants the key the proxy sets, answers both ways, and holds a
// stream until released.
func TestGoProxyAndUpstream(t *testing.T) {
	up := httptest.NewServer(NewUpstream(testKey))
	defer up.Close()
	u, _ := url.Parse(up.URL)
	gp := httptest.NewServer(NewGoProxy(u, testKey))
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
		o := Options{Cproxy: os.Getenv("CPROXY_BENCH_CPROXY"), RequireNginx: os.Getenv("CI") == "true"}
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
	srv, token := newRoutesServer(b, u)
	defer srv.Close()
	body := Body(false)
	for _, h := range []struct {
		name    string
		handler http.Handler
		header  http.Header
	}{
		{"goproxy", NewGoProxy(u, testKey), bearer("cpx_ignored")},
		{"cproxy", srv.ProxyHandler(), bearer(token)},
	} {
		b.Run(h.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
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
		})
	}
}

// newRoutesServer builds routes.Server as `cproxy serve` does: a bbolt
// store with one token, the policy of the out-of-process target, the
// api-key credential, and audit lines formatted by slog's text handler
// (written nowhere).
func newRoutesServer(tb testing.TB, upstream *url.URL) (*routes.Server, string) {
	dir := tb.TempDir()
	store, err := tokens.OpenBolt(filepath.Join(dir, "cproxy.db"))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { store.Close() })
	polPath := filepath.Join(dir, "policy.toml")
	if err := os.WriteFile(polPath, []byte(cproxyPolicy), 0o600); err != nil {
		tb.Fatal(err)
	}
	pol, err := policy.LoadPolicy(polPath)
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
		Policy: pol,
		Anthropic: routes.Upstream{
			URL: upstream, Credential: secrets.New(testKey), Auth: policy.AuthAPIKey, HeaderTimeout: 10 * time.Minute,
		},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	return srv, tok.Reveal()
}
