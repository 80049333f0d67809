package main

// Bounds a sandbox cannot push past, through the real `cproxy serve`: its
// token's streams and rate when the policy sets neither.

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cproxy/cproxy/config"
	"github.com/cproxy/cproxy/internal/fakes"
	"github.com/cproxy/cproxy/policy"
	"github.com/cproxy/cproxy/routes"
)

// boundsStream opens a streamed model request and returns its response
// once the headers are in; the body stays open until the caller closes it.
func boundsStream(t *testing.T, hc *http.Client, s *served, tok string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest("POST", s.proxy+"/v1/messages",
		strings.NewReader(`{"model":"claude-sonnet-4-5","max_tokens":16,"stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Anthropic-Version", "2023-06-01")
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// A token whose budget sets no concurrent has policy.DefaultConcurrent
// requests in flight at most: the next is refused with the budget's 429,
// which says the limit is the default and can be changed.
func TestDefaultConcurrentBoundsAToken(t *testing.T) {
	s, fake, _ := serveWithFake(t)
	tok := s.mint("conv-1")
	gate := fake.StallStreams(0)
	defer gate.Release()
	hc := &http.Client{Transport: &http.Transport{}}
	defer hc.CloseIdleConnections()

	var open []*http.Response
	defer func() {
		for _, r := range open {
			r.Body.Close()
		}
	}()
	for i := range policy.DefaultConcurrent {
		resp := boundsStream(t, hc, s, tok)
		open = append(open, resp)
		if resp.StatusCode != 200 {
			b, _ := io.ReadAll(resp.Body)
			t.Fatalf("stream %d of %d: %s %s", i+1, policy.DefaultConcurrent, resp.Status, b)
		}
	}
	resp := boundsStream(t, hc, s, tok)
	if resp.StatusCode == 200 {
		resp.Body.Close()
		t.Fatalf("stream %d of one token was accepted too", policy.DefaultConcurrent+1)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	want := fmt.Sprintf("budget concurrent = %d, cproxy's default", policy.DefaultConcurrent)
	if resp.StatusCode != 429 || !strings.Contains(string(b), want) || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("stream %d: %s %s %v, want 429 naming %q with Retry-After", policy.DefaultConcurrent+1, resp.Status, b, resp.Header, want)
	}
	// Another token has its own count.
	other := boundsStream(t, hc, s, s.mint("conv-2"))
	open = append(open, other)
	if other.StatusCode != 200 {
		t.Fatalf("another token's stream: %s", other.Status)
	}
	gate.Release()
	for _, r := range open {
		if _, err := io.Copy(io.Discard, r.Body); err != nil {
			t.Errorf("a held stream did not finish: %v", err)
		}
	}
}

// untilRateRefused sends newReq's requests from 8 clients at once, as
// fast as they go, until one is refused 429 or most have been sent; each
// other answer must have status ok. It returns how many were sent and the
// refusal's Retry-After and body, "" when none was refused. A token
// bucket refills at a sixtieth of its rate a second: far more requests
// than it holds can only all pass at a rate no faster than the refill,
// which a loopback client outruns.
func untilRateRefused(t *testing.T, most int64, ok int, newReq func() *http.Request) (int64, string) {
	t.Helper()
	var sent, refused atomic.Int64
	var refusal atomic.Value
	var wg sync.WaitGroup
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8}}
	defer hc.CloseIdleConnections()
	for range 8 {
		wg.Go(func() {
			for refused.Load() == 0 && sent.Add(1) <= most {
				resp, err := hc.Do(newReq())
				if err != nil {
					t.Error(err)
					return
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				switch resp.StatusCode {
				case ok:
				case 429:
					refusal.Store(resp.Header.Get("Retry-After") + " " + string(b))
					refused.Add(1)
				default:
					t.Errorf("%s %s", resp.Status, b)
					return
				}
			}
		})
	}
	wg.Wait()
	got, _ := refusal.Load().(string)
	return min(sent.Load(), most), got
}

// A token whose budget sets no requests_per_minute is throttled to
// policy.DefaultRequestsPerMinute: requests sent as fast as the client
// can meet a 429 once the bucket is empty, and none of the refused ones
// reaches the upstream.
func TestDefaultRateThrottlesAToken(t *testing.T) {
	s, fake, _ := serveWithFake(t)
	tok := s.mint("conv-1")
	const most = 20 * policy.DefaultRequestsPerMinute
	sent, refusal := untilRateRefused(t, most, 200, func() *http.Request {
		req, _ := http.NewRequest("GET", s.proxy+"/v1/models", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("Anthropic-Version", "2023-06-01")
		return req
	})
	want := fmt.Sprintf("budget requests_per_minute = %d, cproxy's default", policy.DefaultRequestsPerMinute)
	if !strings.Contains(refusal, want) || strings.HasPrefix(refusal, " ") {
		t.Fatalf("%d requests from one token: refused with %q; want a 429 with Retry-After naming %q", sent, refusal, want)
	}
	if got := len(fake.Requests()); got < policy.DefaultRequestsPerMinute {
		t.Errorf("the upstream got %d requests before the first refusal, want the bucket's %d at least", got, policy.DefaultRequestsPerMinute)
	}
}

// Every route bounds a token even where neither the route nor the config
// sets a limit: the core gives it routes.DefaultLimits. A relay holds at
// most that many of one token's requests open (the next is refused 429,
// naming relay.NAME.concurrent), another token keeps its own count; and a
// token's requests to the github route and to a relay are refused 429 past
// their rate, counted at authentication, before the route reads a request
// (here requests the policy refuses, so the upstream is not involved).
func TestDefaultRouteLimits(t *testing.T) {
	t.Parallel()
	relay := newHeldStreams(t)
	s, _, _, _ := inflightServe(t, inflightPolicy, relay.URL)
	lim := routes.DefaultLimits

	t.Run("concurrent", func(t *testing.T) {
		tok := s.mint("conv-1")
		for range lim.Concurrent {
			relayStream(t, s, tok)
		}
		req, _ := http.NewRequest("GET", s.proxy+"/mod/stream", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		want := fmt.Sprintf("(relay.mod.concurrent = %d)", lim.Concurrent)
		if resp.StatusCode != 429 || !strings.Contains(string(b), want) || resp.Header.Get("Retry-After") == "" {
			t.Fatalf("stream %d of one token: %s %s, want 429 naming %q with Retry-After", lim.Concurrent+1, resp.Status, b, want)
		}
		relayStream(t, s, s.mint("conv-2"))
		if n := int64(relay.open.Load()); n != lim.Concurrent+1 {
			t.Errorf("%d streams open upstream, want %d", n, lim.Concurrent+1)
		}
	})

	for _, c := range []struct {
		route, target, key string
		status             int // of a request within the rate
	}{
		{"github", "/github/acme/other.git/HEAD", "upstream.github", 403},
		{"relay", "/mod/not-a-path", "relay.mod", 403},
	} {
		t.Run("rate "+c.route, func(t *testing.T) {
			tok := s.mint("rate-" + c.route)
			sent, got := untilRateRefused(t, 20*lim.RequestsPerMinute, c.status, func() *http.Request {
				req, _ := http.NewRequest("GET", s.proxy+c.target, nil)
				req.Header.Set("Authorization", "Bearer "+tok)
				return req
			})
			want := fmt.Sprintf("over its rate on the %s route (%s.requests_per_minute = %d)", strings.TrimPrefix(c.key, "upstream."), c.key, lim.RequestsPerMinute)
			if !strings.Contains(got, want) || strings.HasPrefix(got, " ") {
				t.Fatalf("%d requests of one token: refused with %q; want a 429 with Retry-After naming %q", sent, got, want)
			}
			if sent <= lim.RequestsPerMinute {
				t.Errorf("refused after %d requests, before the bucket's %d", sent, lim.RequestsPerMinute)
			}
		})
	}
}

// boundsHeld is the heap memory cproxy holds from the OS (what it has
// mapped for its heap less what it has given back), from the Go runtime's
// figures on its /metrics. Not the process's resident size: under the race
// detector, as .ci/test runs, that also counts the detector's shadow
// memory, which grows with the heap and is never given back.
func boundsHeld(t *testing.T, s *served) int64 {
	t.Helper()
	value := readMetrics(t, s)
	return value("go_memstats_heap_sys_bytes") - value("go_memstats_heap_released_bytes")
}

// readMetrics reads serve's /metrics once and returns the value of a metric
// without labels by its name, failing the test if there is none.
func readMetrics(t *testing.T, s *served) func(name string) int64 {
	t.Helper()
	resp, err := http.Get(s.admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return func(name string) int64 {
		t.Helper()
		for line := range strings.SplitSeq(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, name+" "); ok {
				f, err := strconv.ParseFloat(v, 64)
				if err != nil {
					t.Fatalf("%s: %q", name, v)
				}
				return int64(f)
			}
		}
		t.Fatalf("/metrics has no %s", name)
		return 0
	}
}

// The memory all buffered request bodies hold is bounded as a whole: of 16
// model requests of 16 sandboxes that each declare the largest body
// (32 MiB) and send all of it but its last byte, those past
// runtime.body_memory_mib (64 MiB here, two of them) are answered 503 with
// Retry-After, in the API's error shape; cproxy's heap stays within a few
// times that, where the 16 bodies unbounded would hold 512 MiB; and once
// the clients give up, its memory comes back near where it started. (One
// sandbox's bodies stop at its share: TestBodyMemorySandboxShare.)
func TestBodyMemoryIsBounded(t *testing.T) {
	fake := fakes.NewAnthropic(fakes.AnthropicOptions{APIKey: canaryAPIKey})
	t.Cleanup(fake.Close)
	dir := t.TempDir()
	writeServeConfig(t, dir, fake.URL)
	const memory = 64 << 20
	appendFile(t, filepath.Join(dir, "cproxy.toml"), fmt.Sprintf("\n[runtime]\nbody_memory_mib = %d\n", memory>>20))
	s := startServe(t, dir)
	base := boundsHeld(t, s)

	const n, size = 16, 32 << 20
	chunk := bytes.Repeat([]byte(" "), 1<<20)
	conns := make([]net.Conn, n)
	var wg sync.WaitGroup
	for i := range conns {
		head := rawHTTPRequest("POST /v1/messages HTTP/1.1", []string{"Host: cproxy", "Authorization: Bearer " + s.mint(fmt.Sprintf("conv-%d", i)),
			"Anthropic-Version: 2023-06-01", "Content-Type: application/json", "Content-Length: " + strconv.Itoa(size)}, "")
		c, err := net.Dial("tcp", rawHTTPAddr(s))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		conns[i] = c
		// Writes until all but the last byte is sent, or cproxy answers
		// and closes: a request it refuses is never read to its end.
		wg.Go(func() {
			if _, err := io.WriteString(c, head+"{"); err != nil {
				return
			}
			for left := size - 2; left > 0; left -= len(chunk) {
				if _, err := c.Write(chunk[:min(left, len(chunk))]); err != nil {
					return
				}
			}
		})
	}
	wg.Wait()
	// Every writer is done: the held bodies are all in, and the refused
	// requests have their answer waiting.
	refused := 0
	for _, c := range conns {
		c.SetReadDeadline(time.Now().Add(time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: "POST"})
		if err != nil {
			continue // held: no answer until the body ends
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(b), `"type":"error"`) ||
			!strings.Contains(string(b), "runtime.body_memory_mib") {
			t.Errorf("a request past the memory for bodies: %s %v %s", resp.Status, resp.Header, b)
		}
		refused++
	}
	if held := n - refused; held*size > memory || refused == 0 {
		t.Errorf("%d of %d large bodies refused, %d held: want at most %d MiB held and the rest refused", refused, n, held, memory>>20)
	}
	// The heap keeps more than the bodies: the buffers each body grew out
	// of (it doubles as it arrives), and those of the bodies refused on
	// the way, stay until the runtime gives them back, as much again as
	// the bodies or more while a loaded machine's GC lags. Three times the
	// memory allows for that and is still far below the 512 MiB that 16
	// bodies unbounded would hold, not counting their garbage.
	if peak := boundsHeld(t, s); peak > base+3*memory {
		t.Errorf("memory went from %d MiB to %d MiB with the bodies held", base>>20, peak>>20)
	}
	if len(fake.Requests()) != 0 {
		t.Errorf("an unfinished body reached the upstream")
	}
	for _, c := range conns {
		c.Close()
	}
	// The held bodies go with their connections, and cproxy gives their
	// memory back to the OS once the last is gone. Left to itself, Go's
	// scavenger would give it back too, but only over a minute or so; the
	// deadline, far longer than cproxy needs, tells the two apart.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		held := boundsHeld(t, s)
		if held < base+64<<20 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("memory stayed at %d MiB after the bodies' clients left (%d MiB at the start)", held>>20, base>>20)
		}
	}
}

// adminPatience is how long the harness waits for a revocation before it
// gives up on it.
const adminPatience = 15 * time.Second

// A sandbox cannot starve the harness of file descriptors: with cproxy's
// open-file limit lowered to 400, a sandbox that opens 300 streams at once
// (a profile allowing that many) gets as many as runtime.max_connections'
// default for that limit allows and the rest closed at once, logged in a
// line per interval rather than one per connection, and the harness can
// still revoke that sandbox's tokens through the admin listener.
func TestSandboxCannotStarveTheAdminListener(t *testing.T) {
	if _, err := exec.LookPath("prlimit"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI=true but prlimit(1) is not installed (Debian's util-linux has it)")
		}
		t.Skip("no prlimit(1) to lower cproxy's open-file limit")
	}
	fake := fakes.NewAnthropic(fakes.AnthropicOptions{APIKey: canaryAPIKey})
	t.Cleanup(fake.Close)
	gate := fake.StallStreams(0)
	defer gate.Release()
	dir := t.TempDir()
	writeServeConfig(t, dir, fake.URL)
	cfg, _ := os.ReadFile(filepath.Join(dir, "cproxy.toml"))
	os.WriteFile(filepath.Join(dir, "cproxy.toml"), append([]byte("policy = \"policy.toml\"\n"), cfg...), 0o600)
	os.WriteFile(filepath.Join(dir, "policy.toml"), []byte("[profile.default]\nmodels = [\"claude-*\"]\nbudget = { concurrent = 1000 }\n"), 0o600)
	const nofile, streams = 400, 450
	s := startServeUnder(t, dir, "prlimit", fmt.Sprintf("--nofile=%d:%d", nofile, nofile))
	tok := s.mint("conv-1")
	bound := config.DefaultMaxConnections(nofile)

	// Each stream on a connection of its own, held open whatever the
	// answer, as a hostile sandbox would: a connection cproxy closes at
	// once is refused. The read deadline only ends a test that would
	// otherwise hang.
	head := rawHTTPRequest("POST /v1/messages HTTP/1.1", []string{"Host: cproxy", "Authorization: Bearer " + tok,
		"Anthropic-Version: 2023-06-01", "Content-Type: application/json"}, "")
	body := `{"model":"claude-sonnet-4-5","max_tokens":16,"stream":true,"messages":[{"role":"user","content":"hi"}]}`
	request := strings.Replace(head, "\r\n\r\n", fmt.Sprintf("\r\nContent-Length: %d\r\n\r\n", len(body)), 1) + body
	var mu sync.Mutex
	open, refused := 0, 0
	var wg sync.WaitGroup
	for range streams {
		c, err := net.Dial("tcp", rawHTTPAddr(s))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		wg.Go(func() {
			c.SetReadDeadline(time.Now().Add(time.Minute))
			_, err := io.WriteString(c, request)
			var resp *http.Response
			if err == nil {
				resp, err = http.ReadResponse(bufio.NewReader(c), &http.Request{Method: "POST"})
			}
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil, resp.StatusCode == 429: // 429: past the token's share of the connections
				refused++
			case resp.StatusCode == 200:
				open++
			default:
				t.Errorf("a stream: %s", resp.Status)
			}
		})
	}
	wg.Wait()
	if int64(open) > bound || refused == 0 {
		t.Errorf("%d streams open and %d connections refused with %d open files: want at most %d open", open, refused, nofile, bound)
	}

	// A new connection, as a harness running curl makes (the one that
	// minted the token may still be open), which gives up as a harness
	// would: without the bound, the revocation waited 30 s for a
	// descriptor to come free; with it, milliseconds.
	admin := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: adminPatience}
	req, _ := http.NewRequest("DELETE", s.admin+"/tokens?sandbox=conv-1", nil)
	resp, err := admin.Do(req)
	if err != nil {
		t.Fatalf("DELETE /tokens with the sandbox's streams open: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 204 {
		t.Fatalf("DELETE /tokens with the sandbox's streams open: %s", resp.Status)
	}

	lines := strings.Count(s.stderr.String(), "sandbox connections refused") + strings.Count(s.stderr.String(), "sandbox connections without a token closed")
	if lines == 0 || lines > max(1, refused/10) {
		t.Errorf("%d log lines for %d refused connections: want one per interval", lines, refused)
	}
	resp, err = admin.Get(s.admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{fmt.Sprintf("cproxy_sandbox_connections_limit %d\n", bound), "cproxy_sandbox_connections_refused_total "} {
		if !strings.Contains(string(b), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if strings.Contains(string(b), "cproxy_sandbox_connections_refused_total 0\n") {
		t.Error("/metrics counts no refused connection")
	}
}
