package routes

// The routes-level half of the adversarial suite: what the real
// binary cannot show from outside. That a malformed token never reaches the
// store, that a store whose writes fail refuses to mint and says loudly that
// a revocation may not have been recorded, and that upstream faults leave no
// goroutine behind. The end-to-end half is cmd/cproxy/adversarial_paths_test.go;
// docs/security-tests.md lists every case.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cproxy/cproxy/policy"
	"github.com/cproxy/cproxy/secrets"
	"github.com/cproxy/cproxy/tokens"
)

// advStore wraps a real store, and its shared limits when it has them: it
// counts look-ups and, while failWrites is set, fails every write the way a
// full disk does.
type advStore struct {
	tokens.Store
	limits     tokens.SharedLimits // nil: none
	lookups    atomic.Int64
	failWrites atomic.Bool
}

var errAdvDiskFull = fmt.Errorf("write cproxy.db: %w", syscall.ENOSPC)

func (s *advStore) Lookup(ctx context.Context, h tokens.Hash) (tokens.Record, error) {
	s.lookups.Add(1)
	return s.Store.Lookup(ctx, h)
}

func (s *advStore) Create(ctx context.Context, h tokens.Hash, r tokens.Record) error {
	if s.failWrites.Load() {
		return errAdvDiskFull
	}
	return s.Store.Create(ctx, h, r)
}

func (s *advStore) RevokeSandbox(ctx context.Context, sandbox string, at time.Time) (int, error) {
	if s.failWrites.Load() {
		return 0, errAdvDiskFull
	}
	return s.Store.RevokeSandbox(ctx, sandbox, at)
}

func (s *advStore) SaveUsage(ctx context.Context, key string, u tokens.Usage) error {
	if s.failWrites.Load() {
		return errAdvDiskFull
	}
	return s.Store.SaveUsage(ctx, key, u)
}

func (s *advStore) ReserveUsage(ctx context.Context, key string, want, limit tokens.Usage) (tokens.Usage, error) {
	if s.failWrites.Load() {
		return tokens.Usage{}, errAdvDiskFull
	}
	return s.limits.ReserveUsage(ctx, key, want, limit)
}

func (s *advStore) AdjustUsage(ctx context.Context, key string, delta tokens.Usage) (tokens.Usage, error) {
	if s.failWrites.Load() {
		return tokens.Usage{}, errAdvDiskFull
	}
	return s.limits.AdjustUsage(ctx, key, delta)
}

func (s *advStore) AcquireSlot(ctx context.Context, key string, limit int64, lease time.Duration) (tokens.Slot, error) {
	if s.failWrites.Load() {
		return 0, errAdvDiskFull
	}
	return s.limits.AcquireSlot(ctx, key, limit, lease)
}

func (s *advStore) TakeRate(ctx context.Context, key string, perMinute int64) (time.Duration, error) {
	return s.limits.TakeRate(ctx, key, perMinute)
}

func (s *advStore) RenewSlots(ctx context.Context, slots []tokens.Slot, lease time.Duration) error {
	return s.limits.RenewSlots(ctx, slots, lease)
}

func (s *advStore) ReleaseSlot(ctx context.Context, slot tokens.Slot) error {
	return s.limits.ReleaseSlot(ctx, slot)
}

func newAdvEnv(t *testing.T) (*env, *advStore) {
	var st *advStore
	e := newEnv(t, func(o *testOptions) {
		st = &advStore{Store: o.Store}
		o.Store = st
	})
	return e, st
}

// advBadChecksum returns tok with its last checksum character changed: the
// same shape, a checksum that cannot match.
func advBadChecksum(tok string) string {
	last := tok[len(tok)-1]
	repl := byte('0')
	if last == '0' {
		repl = '1'
	}
	return tok[:len(tok)-1] + string(repl)
}

func TestAdversarialTokensMalformedNeverLooksUp(t *testing.T) {
	e, st := newAdvEnv(t)
	tok := e.token("conv-1")
	bad := advBadChecksum(tok)
	if _, err := tokens.Parse(bad); !errors.Is(err, tokens.ErrMalformed) {
		t.Fatalf("the doctored token parses: %v", err)
	}
	for name, h := range map[string]map[string]string{
		"bad checksum, bearer":    bearer(bad),
		"bad checksum, x-api-key": {"X-Api-Key": bad},
		"bad checksum, basic":     {"Authorization": "Basic " + base64Std("x:"+bad)},
		"truncated":               bearer(tok[:len(tok)-1]),
		"one character too many":  bearer(tok + "0"),
		"upper-case prefix":       bearer("CPX_" + tok[4:]),
		"no prefix":               bearer(tok[4:]),
		"another vendor's key":    bearer(canaryKey),
		"non-ASCII look-alike":    bearer(strings.Replace(tok, "cpx_", "сpx_", 1)), // Cyrillic с
		"whitespace inside":       bearer(tok[:10] + " " + tok[10:]),
		"the token twice":         bearer(tok + tok),
		"a SQL-ish string":        bearer("cpx_' OR 1=1 --"),
		"64 KiB of token":         bearer("cpx_" + strings.Repeat("A", 60<<10)),
	} {
		before := st.lookups.Load()
		r := e.do("POST", "/v1/messages", h, hello)
		if r.status != http.StatusUnauthorized {
			t.Errorf("%s: %d %s", name, r.status, r.body)
			continue
		}
		if n := st.lookups.Load() - before; n != 0 {
			t.Errorf("%s: %d store look-ups for a malformed token", name, n)
		}
		if !strings.Contains(r.body, "malformed") && !strings.Contains(r.body, "unsupported authorization") && !strings.Contains(r.body, "no sandbox token") && !strings.Contains(r.body, "looks like a real") {
			t.Errorf("%s: refusal does not say malformed: %s", name, r.body)
		}
	}
	// A well-formed token the store does not know costs one look-up and is
	// told apart from a malformed one.
	unknown, err := tokens.New()
	if err != nil {
		t.Fatal(err)
	}
	before := st.lookups.Load()
	r := e.do("POST", "/v1/messages", bearer(unknown.Reveal()), hello)
	if _, msg := errorType(t, r); r.status != 401 || !strings.Contains(msg, "unknown sandbox token") || strings.Contains(msg, "malformed") {
		t.Errorf("unknown token: %d %s", r.status, msg)
	}
	if n := st.lookups.Load() - before; n != 1 {
		t.Errorf("unknown token: %d look-ups, want 1", n)
	}
	if len(e.fake.Requests()) != 0 {
		t.Fatalf("a refused token's request reached the upstream")
	}
}

// advFaultUpstream answers model requests according to the first segment
// of its base path: /hang never sends headers; /cut sends one event and
// aborts; /disconnect sends one event and waits for the request's context
// to end, which it reports on cancelled.
type advFaultUpstream struct {
	srv       *httptest.Server
	cancelled chan struct{}
}

func newAdvFaultUpstream(t *testing.T) *advFaultUpstream {
	u := &advFaultUpstream{cancelled: make(chan struct{}, 16)}
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		mode, _, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
		if mode == "hang" {
			<-r.Context().Done()
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		io.WriteString(w, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":1}}}\n\n")
		w.(http.Flusher).Flush()
		switch mode {
		case "cut":
			panic(http.ErrAbortHandler)
		case "disconnect":
			<-r.Context().Done()
			u.cancelled <- struct{}{}
		}
	}))
	t.Cleanup(u.srv.Close)
	return u
}

// advRSTUpstream is a raw TCP upstream that sends a response's headers and
// first chunk, then resets the connection (SO_LINGER 0).
func advRSTUpstream(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			br := bufio.NewReader(c)
			if req, err := http.ReadRequest(br); err == nil {
				io.Copy(io.Discard, req.Body)
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
				ev := "event: ping\ndata: {\"type\": \"ping\"}\n\n"
				fmt.Fprintf(c, "%x\r\n%s\r\n", len(ev), ev)
			}
			c.(*net.TCPConn).SetLinger(0)
			c.Close()
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return "http://" + ln.Addr().String()
}

// TestAdversarialFaultsNoGoroutineLeak runs every upstream fault through a
// Server and then checks that the goroutine count settles back to where it
// was. goleak would be the tool, but it is not a dependency; the count,
// taken after every server and idle connection of the test is closed and
// given a few seconds to settle, catches a handler, copy loop or timer
// goroutine left behind.
func TestAdversarialFaultsNoGoroutineLeak(t *testing.T) {
	faults := newAdvFaultUpstream(t)
	rst := advRSTUpstream(t)
	dead := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		return "http://" + ln.Addr().String()
	}()
	stream := `{"model":"claude-sonnet-4-5","max_tokens":16,"stream":true,"messages":[{"role":"user","content":"hi"}]}`
	client := &http.Transport{}
	defer client.CloseIdleConnections()

	settle := func() int {
		client.CloseIdleConnections()
		runtime.GC()
		return runtime.NumGoroutine()
	}
	run := func(name, upstream string, want int, body func(t *testing.T, resp *http.Response)) {
		t.Run(name, func(t *testing.T) {
			store, err := tokens.OpenBolt(filepath.Join(t.TempDir(), "cproxy.db"))
			if err != nil {
				t.Fatal(err)
			}
			defer store.Close()
			u, _ := url.Parse(upstream)
			o := testOptions{Options: Options{Store: store, Policy: policy.DefaultPolicy(), Logger: slog.New(slog.DiscardHandler)},
				Anthropic: Upstream{URL: u, Credential: secrets.New(canaryKey), Auth: "api-key", HeaderTimeout: 300 * time.Millisecond}}
			srv := New(o.build())
			defer srv.Close()
			proxy := httptest.NewServer(srv.ProxyHandler())
			defer proxy.Close()
			admin := httptest.NewServer(TestAdmin(srv))
			defer admin.Close()
			tok := func() string {
				resp, err := http.Post(admin.URL+"/tokens?sandbox=conv-1", "", nil)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				_, rest, _ := strings.Cut(string(b), `"token":"`)
				tok, _, _ := strings.Cut(rest, `"`)
				return tok
			}()
			req, _ := http.NewRequestWithContext(t.Context(), "POST", proxy.URL+"/v1/messages", strings.NewReader(stream))
			req.Header.Set("Authorization", "Bearer "+tok)
			resp, err := client.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != want {
				b, _ := io.ReadAll(resp.Body)
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, want, b)
			}
			body(t, resp)
			http.DefaultTransport.(*http.Transport).CloseIdleConnections()
		})
	}
	// Cut: the client gets what was sent, then an error, not a clean end.
	cutOff := func(t *testing.T, resp *http.Response) {
		b, err := io.ReadAll(resp.Body)
		if err == nil || !strings.Contains(string(b), "event: ") {
			t.Fatalf("a cut stream ended cleanly (%v) or lost what was sent: %q", err, b)
		}
	}
	refused := func(t *testing.T, resp *http.Response) {
		b, _ := io.ReadAll(resp.Body)
		if strings.Contains(string(b), canaryKey) {
			t.Fatal("the refusal holds the credential")
		}
	}

	before := settle()
	run("refused", dead, http.StatusBadGateway, refused)
	run("no headers", faults.srv.URL+"/hang", http.StatusGatewayTimeout, refused)
	run("cut mid-stream", faults.srv.URL+"/cut", http.StatusOK, cutOff)
	run("reset mid-stream", rst, http.StatusOK, cutOff)
	run("client gone mid-stream", faults.srv.URL+"/disconnect", http.StatusOK, func(t *testing.T, resp *http.Response) {
		br := bufio.NewReader(resp.Body)
		if line, err := br.ReadString('\n'); err != nil || !strings.HasPrefix(line, "event: ") {
			t.Fatalf("first line %q %v", line, err)
		}
		resp.Body.Close() // the client hangs up with the stream open
		select {
		case <-faults.cancelled:
		case <-time.After(10 * time.Second):
			t.Fatal("the upstream request was not cancelled when the client went away")
		}
	})

	var after int
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if after = settle(); after <= before {
			break
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines before the faults, %d after:\n%s", before, after, buf[:runtime.Stack(buf, true)])
		}
	}
}

// TestHeaderListsAreCanonical: the forwarder removes Connection and
// Upgrade with delete, which finds a header only under its canonical name,
// the name net/http files a request's header under and Header.Del looks
// up; the lists are written the same way (droppedHeader folds them).
func TestHeaderListsAreCanonical(t *testing.T) {
	for _, h := range slices.Concat([]string{"Connection", "Upgrade"}, credentialHeaders, clientAddressHeaders, overrideHeaders) {
		if c := http.CanonicalHeaderKey(h); c != h {
			t.Errorf("%q is not canonical: %q", h, c)
		}
	}
}
