package main

// The sandbox connection slots (runtime.max_connections), through the real
// `cproxy serve`: connections without a token, or one token's, cannot take
// them all.

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cproxy/cproxy/internal/fakes"
)

// serveWithConnections is serve with the fake Anthropic API and
// runtime.max_connections = n.
func serveWithConnections(t *testing.T, n int) (*served, *fakes.Anthropic) {
	t.Helper()
	fake := fakes.NewAnthropic(fakes.AnthropicOptions{APIKey: canaryAPIKey})
	t.Cleanup(fake.Close)
	dir := t.TempDir()
	writeServeConfig(t, dir, fake.URL)
	cfg, _ := os.ReadFile(filepath.Join(dir, "cproxy.toml"))
	cfg = fmt.Appendf([]byte("policy = \"policy.toml\"\n"), "%s\n[runtime]\nmax_connections = %d\n", cfg, n)
	os.WriteFile(filepath.Join(dir, "cproxy.toml"), cfg, 0o600)
	os.WriteFile(filepath.Join(dir, "policy.toml"), []byte("[profile.default]\nmodels = [\"claude-*\"]\n"), 0o600)
	return startServe(t, dir), fake
}

// connMessage is a model request with tok, kept alive.
func connMessage(tok string) string {
	body := `{"model":"claude-sonnet-4-5","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}`
	return rawHTTPRequest("POST /v1/messages HTTP/1.1", []string{"Host: cproxy", "Authorization: Bearer " + tok,
		"Anthropic-Version: 2023-06-01", "Content-Type: application/json", fmt.Sprintf("Content-Length: %d", len(body))}, body)
}

// connDo sends a model request with tok on c and returns its response,
// read whole.
func connDo(t *testing.T, c net.Conn, br *bufio.Reader, tok string) (*http.Response, string, error) {
	t.Helper()
	c.SetDeadline(time.Now().Add(20 * time.Second)) // ends a test that would hang
	if _, err := io.WriteString(c, connMessage(tok)); err != nil {
		return nil, "", err
	}
	resp, err := http.ReadResponse(br, &http.Request{Method: "POST"})
	if err != nil {
		return nil, "", err
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b), err
}

// Every slot held by a connection that sent nothing: a sandbox with a
// token still gets its answer at once (the oldest tokenless connection
// makes room), and a tokenless connection is closed after
// UnauthenticatedTimeout, not the 30 s header or 120 s idle timeout.
func TestTokenlessConnectionsCannotTakeTheSlots(t *testing.T) {
	const slots = 10
	s, fake := serveWithConnections(t, slots)
	tok := s.mint("conv-1")
	// A stream with a token outlives the deadline of connections without
	// one.
	gate := fake.StallStreams(0)
	defer gate.Release()
	hc := &http.Client{Transport: &http.Transport{}}
	defer hc.CloseIdleConnections()
	stream := boundsStream(t, hc, s, tok)
	defer stream.Body.Close()
	if stream.StatusCode != 200 {
		t.Fatalf("a stream: %s", stream.Status)
	}
	var idle []net.Conn
	for range 4 * slots {
		c, err := net.Dial("tcp", rawHTTPAddr(s))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		idle = append(idle, c)
	}
	time.Sleep(200 * time.Millisecond) // every one accepted (or refused) by now
	start := time.Now()
	c, err := net.Dial("tcp", rawHTTPAddr(s))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	resp, body, err := connDo(t, c, bufio.NewReader(c), tok)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("a request with a token, every slot held by idle connections without one: %v %v %s", resp, err, body)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("the request with a token took %s", d)
	}
	// The last idle connection accepted is closed by cproxy well before
	// the header timeout.
	last := idle[len(idle)-1]
	last.SetReadDeadline(time.Now().Add(25 * time.Second))
	start = time.Now()
	_, err = last.Read(make([]byte, 1))
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("a connection without a token was kept open 25s")
	}
	if d := time.Since(start); d > 15*time.Second {
		t.Errorf("a connection without a token was closed after %s, want about 10s", d)
	}
	gate.Release()
	if b, err := io.ReadAll(stream.Body); err != nil || !strings.Contains(string(b), "message_stop") {
		t.Errorf("the stream held past the deadline of connections without a token ended: %v %q", err, b)
	}
}

// One token holding keep-alive connections gets at most half the slots:
// past them its request is answered 429 and the connection closed, and
// another token still gets a connection and its answer.
func TestOneTokenCannotTakeEveryConnection(t *testing.T) {
	const slots = 10
	s, _ := serveWithConnections(t, slots)
	hog, other := s.mint("conv-1"), s.mint("conv-2")
	ok, refused := 0, 0
	for i := range slots {
		c, err := net.Dial("tcp", rawHTTPAddr(s))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		br := bufio.NewReader(c)
		resp, body, err := connDo(t, c, br, hog)
		switch {
		case err != nil:
			t.Fatalf("connection %d of one token: %v", i+1, err)
		case resp.StatusCode == 200:
			ok++
		case resp.StatusCode == 429:
			refused++
			if !strings.Contains(body, "runtime.max_connections") || resp.Header.Get("Retry-After") == "" || !resp.Close {
				t.Errorf("connection %d refused as %v %s, want a 429 naming runtime.max_connections with Retry-After, closing the connection", i+1, resp.Header, body)
			}
		default:
			t.Fatalf("connection %d of one token: %s %s", i+1, resp.Status, body)
		}
	}
	if ok != slots/2 || refused != slots-slots/2 {
		t.Fatalf("one token's %d connections: %d answered, %d refused; want %d and %d", slots, ok, refused, slots/2, slots-slots/2)
	}
	time.Sleep(200 * time.Millisecond) // the refused connections closed
	c, err := net.Dial("tcp", rawHTTPAddr(s))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if resp, body, err := connDo(t, c, bufio.NewReader(c), other); err != nil || resp.StatusCode != 200 {
		t.Fatalf("another token's request while one holds its share: %v %v %s", resp, err, body)
	}
}

// On the TLS listener, which speaks HTTP/2, a connection is still one
// slot however many requests it carries at once, and a token past its
// share of the slots gets its 429 on a connection that is then closed
// (GOAWAY): HTTP/2 neither multiplies nor escapes the bound.
func TestHTTP2ConnectionsCountAsConnections(t *testing.T) {
	const slots = 4
	fake := fakes.NewAnthropic(fakes.AnthropicOptions{APIKey: canaryAPIKey})
	t.Cleanup(fake.Close)
	dir := t.TempDir()
	writeServeConfig(t, dir, fake.URL)
	cfg, _ := os.ReadFile(filepath.Join(dir, "cproxy.toml"))
	cfg = []byte(strings.Replace(string(cfg), "[listen]\n", "[listen]\nproxy_tls = \"127.0.0.1:0\"\nca_dir = \"ca\"\n", 1))
	cfg = fmt.Appendf([]byte("policy = \"policy.toml\"\n"), "%s\n[runtime]\nmax_connections = %d\n", cfg, slots)
	os.WriteFile(filepath.Join(dir, "cproxy.toml"), cfg, 0o600)
	os.WriteFile(filepath.Join(dir, "policy.toml"), []byte("[profile.default]\nmodels = [\"claude-*\"]\n"), 0o600)
	s := startServe(t, dir)
	var ready struct {
		ProxyTLS string `json:"proxy_tls"`
	}
	if b, err := os.ReadFile(filepath.Join(dir, "ready.json")); err != nil || json.Unmarshal(b, &ready) != nil || ready.ProxyTLS == "" {
		t.Fatalf("no TLS listener in the ready file: %v", err)
	}
	ca, err := exec.Command("cproxy", "ca", "--config", filepath.Join(dir, "cproxy.toml")).Output()
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca)
	hog, other := s.mint("conv-1"), s.mint("conv-2")

	// Each client its own connection.
	send := func(c *http.Client, tok string) (*http.Response, string) {
		t.Helper()
		body := `{"model":"claude-sonnet-4-5","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}`
		req, _ := http.NewRequest("POST", "https://"+ready.ProxyTLS+"/v1/messages", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("Anthropic-Version", "2023-06-01")
		req.Header.Set("Content-Type", "application/json")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(b)
	}
	newClient := func() *http.Client {
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}, ForceAttemptHTTP2: true}
		t.Cleanup(tr.CloseIdleConnections)
		return &http.Client{Transport: tr, Timeout: 20 * time.Second}
	}

	first := newClient()
	if resp, body := send(first, hog); resp.StatusCode != 200 || resp.ProtoMajor != 2 {
		t.Fatalf("the first request: %s %s %s, want 200 over HTTP/2", resp.Proto, resp.Status, body)
	}
	var wg sync.WaitGroup
	codes := make([]int, 3*slots)
	for i := range codes {
		wg.Go(func() {
			resp, _ := send(first, hog)
			if resp.ProtoMajor != 2 {
				t.Errorf("request %d went over %s, want HTTP/2", i, resp.Proto)
			}
			codes[i] = resp.StatusCode
		})
	}
	wg.Wait()
	for i, c := range codes {
		if c != 200 {
			t.Fatalf("request %d of %d at once on one HTTP/2 connection: %d, want 200 (one connection is one slot)", i+1, len(codes), c)
		}
	}
	if resp, body := send(newClient(), hog); resp.StatusCode != 200 {
		t.Fatalf("the token's second connection: %s %s", resp.Status, body)
	}
	third := newClient()
	resp, body := send(third, hog)
	if resp.StatusCode != 429 || !strings.Contains(body, "runtime.max_connections") || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("the token's third connection of %d slots: %s %v %s, want a 429 naming runtime.max_connections with Retry-After", slots, resp.Status, resp.Header, body)
	}
	if resp, body := send(newClient(), other); resp.StatusCode != 200 {
		t.Fatalf("another token's request while one holds its share: %s %s", resp.Status, body)
	}
}
