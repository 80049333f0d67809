package main

// The sandbox connection slots (runtime.max_connections), through the real
// `cproxy serve`: connections without a token, or one token's, cannot take
// them all.

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
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
