package main

// Adversarial HTTP: the real `cproxy serve` against hostile
// bytes on its proxy listener and a hostile upstream behind it. Raw
// sockets where the point is which bytes travel; a real client where one
// is natural. Every case asserts what the client gets, what reached the
// upstream, and that no canary credential shows in a response or in
// serve's log. docs/security-tests.md lists the cases.

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cproxy/cproxy/internal/fakes"
)

// rawHTTPMessage is a Messages API body the default policy allows.
const rawHTTPMessage = `{"model":"claude-sonnet-4-5","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}`

// rawHTTPModelHeaders are the headers of a model request with token tok,
// Host first.
func rawHTTPModelHeaders(tok string) []string {
	return []string{"Host: cproxy.test", "X-Api-Key: " + tok, "Anthropic-Version: 2023-06-01", "Content-Type: application/json"}
}

// rawHTTPSentinel is a request sent after the one under test on the same
// connection: its 200 proves the connection was still in step (nothing
// smuggled between), and its Connection: close ends the exchange without
// a timer.
func rawHTTPSentinel(tok string) string {
	return rawHTTPRequest("GET /v1/models HTTP/1.1", []string{"Host: cproxy.test", "X-Api-Key: " + tok, "Anthropic-Version: 2023-06-01", "Connection: close"}, "")
}

// fakeSince returns the fake's requests after the first n, failing the
// test if any carried a sandbox token.
func fakeSince(t *testing.T, fake *fakes.Anthropic, n int) []fakes.Request {
	t.Helper()
	reqs := fake.Requests()[n:]
	for _, r := range reqs {
		for k, vs := range r.Header {
			for _, v := range vs {
				if strings.Contains(v, "cpx_") {
					t.Errorf("%s %s: the upstream received a sandbox token in %s", r.Method, r.Path, k)
				}
			}
		}
		if strings.Contains(string(r.Body), "cpx_") {
			t.Errorf("%s %s: the upstream received a sandbox token in the body", r.Method, r.Path)
		}
	}
	return reqs
}

func TestAdversarialHTTPParsing(t *testing.T) {
	t.Parallel()
	s, fake, _ := serveWithFake(t)
	t.Cleanup(func() { rawHTTPNoSecrets(t, "serve's log", s.stderr.String()) })
	tok := s.mint("conv-1")
	h := rawHTTPModelHeaders(tok)
	withHeaders := func(extra ...string) []string { return append(append([]string(nil), h...), extra...) }
	cl := fmt.Sprintf("Content-Length: %d", len(rawHTTPMessage))

	// run sends raw then the sentinel on one connection and returns the
	// statuses of every response up to the close, and what reached the
	// upstream.
	run := func(t *testing.T, raw string, sentinel bool) (statuses []int, reqs []fakes.Request, firstBody string) {
		t.Helper()
		n := len(fake.Requests())
		c := rawHTTPDial(t, s)
		if sentinel {
			raw += rawHTTPSentinel(tok)
		}
		c.send(raw)
		for {
			if _, err := c.br.Peek(1); err != nil {
				break
			}
			r := c.read("GET")
			if statuses == nil {
				firstBody = r.Body
			}
			statuses = append(statuses, r.StatusCode)
			if r.Close {
				break
			}
		}
		c.rest()
		return statuses, fakeSince(t, fake, n), firstBody
	}
	want := func(t *testing.T, got []int, want ...int) {
		t.Helper()
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("statuses %v, want %v", got, want)
		}
	}
	wantUpstream := func(t *testing.T, got []fakes.Request, want ...string) {
		t.Helper()
		var lines []string
		for _, r := range got {
			lines = append(lines, r.Method+" "+r.Path)
		}
		if fmt.Sprint(lines) != fmt.Sprint(want) {
			t.Fatalf("the upstream received %q, want %q", lines, want)
		}
	}

	t.Run("content-length with transfer-encoding", func(t *testing.T) {
		// Read by Content-Length the body would end after 4 bytes and the
		// rest would be a second request; Transfer-Encoding wins, the
		// whole body goes up as one request, and the connection stays in
		// step.
		st, up, _ := run(t, rawHTTPRequest("POST /v1/messages HTTP/1.1", withHeaders("Content-Length: 4", "Transfer-Encoding: chunked"),
			rawHTTPChunk(rawHTTPMessage)+"0\r\n\r\n"), true)
		want(t, st, 200, 200)
		wantUpstream(t, up, "POST /v1/messages", "GET /v1/models")
		if string(up[0].Body) != rawHTTPMessage {
			t.Fatalf("the upstream got body %q", up[0].Body)
		}
	})
	t.Run("two content-lengths", func(t *testing.T) {
		st, up, _ := run(t, rawHTTPRequest("POST /v1/messages HTTP/1.1", withHeaders("Content-Length: 4", cl), rawHTTPMessage), true)
		want(t, st, 400)
		wantUpstream(t, up)
	})
	t.Run("malformed chunk size", func(t *testing.T) {
		st, up, _ := run(t, rawHTTPRequest("POST /v1/messages HTTP/1.1", withHeaders("Transfer-Encoding: chunked"),
			"zz\r\n"+rawHTTPMessage+"\r\n0\r\n\r\n"), true)
		want(t, st, 400)
		wantUpstream(t, up)
	})
	t.Run("chunk shorter than its size", func(t *testing.T) {
		st, up, _ := run(t, rawHTTPRequest("POST /v1/messages HTTP/1.1", withHeaders("Transfer-Encoding: chunked"),
			fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(rawHTTPMessage)+40, rawHTTPMessage)), true)
		// The chunk swallows the terminator and the sentinel's first
		// bytes; what is left is not a request.
		if len(st) == 0 || st[0] != 400 {
			t.Fatalf("statuses %v, want 400 first", st)
		}
		wantUpstream(t, up)
	})
	t.Run("unsupported transfer-encoding", func(t *testing.T) {
		st, up, _ := run(t, rawHTTPRequest("POST /v1/messages HTTP/1.1", withHeaders("Transfer-Encoding: gzip, chunked"),
			rawHTTPChunk(rawHTTPMessage)+"0\r\n\r\n"), true)
		want(t, st, 501)
		wantUpstream(t, up)
	})
	t.Run("chunk extensions", func(t *testing.T) {
		st, up, _ := run(t, rawHTTPRequest("POST /v1/messages HTTP/1.1", withHeaders("Transfer-Encoding: chunked"),
			fmt.Sprintf("%x;ext=\"X-Api-Key: %s\"\r\n%s\r\n0;last\r\n\r\n", len(rawHTTPMessage), tok, rawHTTPMessage)), true)
		want(t, st, 200, 200)
		wantUpstream(t, up, "POST /v1/messages", "GET /v1/models")
		if string(up[0].Body) != rawHTTPMessage {
			t.Fatalf("the upstream got body %q", up[0].Body)
		}
	})
	t.Run("bare LF in the head", func(t *testing.T) {
		// RFC 9112 lets a recipient take a lone LF as a line end; net/http
		// does, the same way for every header, so it is one request.
		raw := strings.ReplaceAll(rawHTTPRequest("POST /v1/messages HTTP/1.1", withHeaders(cl), ""), "\r\n", "\n") + rawHTTPMessage
		st, up, _ := run(t, raw, true)
		want(t, st, 200, 200)
		wantUpstream(t, up, "POST /v1/messages", "GET /v1/models")
		if string(up[0].Body) != rawHTTPMessage {
			t.Fatalf("the upstream got body %q", up[0].Body)
		}
	})
	t.Run("bare LF in chunk framing", func(t *testing.T) {
		st, up, _ := run(t, rawHTTPRequest("POST /v1/messages HTTP/1.1", withHeaders("Transfer-Encoding: chunked"),
			fmt.Sprintf("%x\n%s\n0\n\n", len(rawHTTPMessage), rawHTTPMessage)), true)
		want(t, st, 400)
		wantUpstream(t, up)
	})
	t.Run("absolute-form URI naming another host", func(t *testing.T) {
		st, up, body := run(t, rawHTTPRequest("GET http://evil.example/v1/models HTTP/1.1", h[:3], ""), true)
		want(t, st, 403, 200)
		wantUpstream(t, up, "GET /v1/models") // the sentinel's
		if !strings.Contains(body, "only requests for cproxy's own routes") {
			t.Fatalf("403 body %q", body)
		}
	})
	t.Run("absolute-form URI naming the upstream itself", func(t *testing.T) {
		st, up, _ := run(t, rawHTTPRequest("GET "+fake.URL+"/v1/models HTTP/1.1", h[:3], ""), true)
		want(t, st, 403, 200)
		wantUpstream(t, up, "GET /v1/models") // the sentinel's
	})
	t.Run("CONNECT", func(t *testing.T) {
		// No tunnel: the bytes after the CONNECT are read as the next
		// HTTP request (the sentinel) by cproxy itself.
		st, up, _ := run(t, rawHTTPRequest("CONNECT evil.example:443 HTTP/1.1", []string{"Host: evil.example:443", "X-Api-Key: " + tok}, ""), true)
		want(t, st, 403, 200)
		wantUpstream(t, up, "GET /v1/models")
	})
	t.Run("HTTP/2 prior-knowledge preface", func(t *testing.T) {
		c := rawHTTPDial(t, s)
		n := len(fake.Requests())
		c.send("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")
		r := c.read("PRI")
		if r.StatusCode != 403 || r.ProtoMajor != 1 {
			t.Fatalf("%s %d, want HTTP/1.1 403", r.Proto, r.StatusCode)
		}
		c.rest()
		if !strings.HasPrefix(c.raw.String(), "HTTP/1.1 403 ") {
			t.Fatalf("the answer is not HTTP/1.1: %q", c.raw.String())
		}
		wantUpstream(t, fakeSince(t, fake, n))
	})
	for _, up := range []struct{ name, headers string }{
		{"h2c", "Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA"},
		{"websocket", "Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ=="},
	} {
		t.Run("Upgrade: "+up.name, func(t *testing.T) {
			// cproxy answers in HTTP/1.1 and the upstream gets a plain
			// request: no Upgrade, no Connection, no HTTP2-Settings.
			st, reqs, _ := run(t, rawHTTPRequest("GET /v1/models HTTP/1.1", append(h[:3:3], up.headers), ""), true)
			want(t, st, 200, 200)
			wantUpstream(t, reqs, "GET /v1/models", "GET /v1/models")
			for _, k := range []string{"Upgrade", "Connection", "Http2-Settings"} {
				if v := reqs[0].Header.Get(k); v != "" {
					t.Errorf("the upstream got %s: %s", k, v)
				}
			}
		})
	}

	// Expect: 100-continue. A good token gets 100 Continue, then the body
	// is read; a bad one gets 401 at once, without 100 Continue and
	// without the body, which this client never sends.
	expect := func(t *testing.T, token string) (*rawHTTPConn, rawHTTPReply) {
		c := rawHTTPDial(t, s)
		hs := rawHTTPModelHeaders(token)
		if token == "" {
			hs = append(hs[:1:1], hs[2:]...)
		}
		c.send(rawHTTPRequest("POST /v1/messages HTTP/1.1", append(hs, cl, "Expect: 100-continue"), ""))
		return c, c.read("POST")
	}
	t.Run("Expect 100-continue with a good token", func(t *testing.T) {
		n := len(fake.Requests())
		c, r := expect(t, tok)
		if r.StatusCode != 100 {
			t.Fatalf("status %d, want 100 Continue before the body", r.StatusCode)
		}
		c.send(rawHTTPMessage)
		// cproxy relays the upstream's own 100 Continue as well: 1xx
		// answers may come any number of times before the final one.
		r = c.read("POST")
		for r.StatusCode == 100 {
			r = c.read("POST")
		}
		if r.StatusCode != 200 {
			t.Fatalf("status %d after the body", r.StatusCode)
		}
		wantUpstream(t, fakeSince(t, fake, n), "POST /v1/messages")
	})
	s.mint("conv-revoked")
	revoked := s.mint("conv-revoked")
	s.revoke("conv-revoked")
	for name, bad := range map[string]string{"no token": "", "revoked token": revoked, "malformed token": "cpx_notatoken"} {
		t.Run("Expect 100-continue with "+name, func(t *testing.T) {
			n := len(fake.Requests())
			c, r := expect(t, bad)
			if r.StatusCode != 401 {
				t.Fatalf("status %d, want 401 without 100 Continue", r.StatusCode)
			}
			if !r.Close {
				t.Error("the 401 does not say Connection: close with an unread body announced")
			}
			if !strings.HasPrefix(c.raw.String(), "HTTP/1.1 401 ") {
				t.Fatalf("something came before the 401: %q", c.raw.String())
			}
			wantUpstream(t, fakeSince(t, fake, n))
		})
	}

	t.Run("headers over MaxHeaderBytes", func(t *testing.T) {
		st, up, _ := run(t, rawHTTPRequest("GET /v1/models HTTP/1.1", append(h[:3:3], "X-Big: "+strings.Repeat("a", 2*maxHeaderBytes)), ""), true)
		want(t, st, 431)
		wantUpstream(t, up)
	})
	t.Run("declared body over 32 MiB", func(t *testing.T) {
		// Refused on the declared length: the client sends no body at
		// all and still gets its 413.
		c := rawHTTPDial(t, s)
		n := len(fake.Requests())
		c.send(rawHTTPRequest("POST /v1/messages HTTP/1.1", withHeaders(fmt.Sprintf("Content-Length: %d", 32<<20+1)), ""))
		if r := c.read("POST"); r.StatusCode != 413 || !strings.Contains(r.Body, "request_too_large") {
			t.Fatalf("%d %s, want 413 request_too_large", r.StatusCode, r.Body)
		}
		wantUpstream(t, fakeSince(t, fake, n))
	})
	t.Run("chunked body over 32 MiB", func(t *testing.T) {
		c := rawHTTPDial(t, s)
		n := len(fake.Requests())
		c.send(rawHTTPRequest("POST /v1/messages HTTP/1.1", withHeaders("Transfer-Encoding: chunked"), ""))
		var wg sync.WaitGroup
		wg.Go(func() {
			// 33 chunks of 1 MiB: one more than the limit. The write
			// may fail once cproxy has answered and closed.
			chunk := rawHTTPChunk(strings.Repeat("x", 1<<20))
			for range 33 {
				if _, err := io.WriteString(c.c, chunk); err != nil {
					return
				}
			}
			io.WriteString(c.c, "0\r\n\r\n")
		})
		r := c.read("POST")
		wg.Wait()
		if r.StatusCode != 413 {
			t.Fatalf("status %d, want 413", r.StatusCode)
		}
		wantUpstream(t, fakeSince(t, fake, n))
	})
}

// A client that trickles its headers is cut off ReadHeaderTimeout after
// it connected, without a response, however often it sends a byte. serve
// has no knob for the timeout, so this waits it out (30 s), in parallel
// with the rest.
func TestAdversarialHTTPSlowHeaders(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out serve's 30s ReadHeaderTimeout")
	}
	t.Parallel()
	s, fake, _ := serveWithFake(t)
	tok := s.mint("conv-1")
	c := rawHTTPDial(t, s)
	c.c.SetDeadline(time.Now().Add(readHeaderTimeout + 30*time.Second))
	start := time.Now()
	c.send("GET /v1/models HTTP/1.1\r\nHost: cproxy.test\r\nX-Api-Key: " + tok + "\r\n")
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				if _, err := io.WriteString(c.c, "X-Trickle: 1\r\n"); err != nil {
					return
				}
			}
		}
	})
	got := c.rest() // returns when serve closes the connection
	close(stop)
	wg.Wait()
	elapsed := time.Since(start)
	if got != "" {
		t.Fatalf("serve answered a request whose headers never ended: %q", got)
	}
	if elapsed > readHeaderTimeout+20*time.Second {
		t.Fatalf("the connection stayed open %s, beyond ReadHeaderTimeout (%s)", elapsed, readHeaderTimeout)
	}
	if n := len(fake.Requests()); n != 0 {
		t.Fatalf("the upstream received %d requests", n)
	}
}

// TestAdversarialHTTPHeaders puts serve in front of an upstream of the
// test's own, which records every byte and answers as each case needs.
func TestAdversarialHTTPHeaders(t *testing.T) {
	t.Parallel()
	other, otherLog := rawHTTPOtherHost(t)
	up := newRawHTTPUpstream(t, other.URL+"/steal?from=cproxy")
	dir := t.TempDir()
	writeServeConfig(t, dir, up.URL)
	s := startServe(t, dir)
	t.Cleanup(func() { rawHTTPNoSecrets(t, "serve's log", s.stderr.String()) })
	tok := s.mint("conv-1")
	other2 := s.mint("conv-2")
	h := rawHTTPModelHeaders(tok)
	cl := fmt.Sprintf("Content-Length: %d", len(rawHTTPMessage))
	withHeaders := func(extra ...string) []string { return append(append([]string(nil), h...), extra...) }

	// exchange sends one request (with Connection: close) and returns the
	// response and what the upstream received for it.
	exchange := func(t *testing.T, method, raw string) (rawHTTPReply, []rawHTTPSeen) {
		t.Helper()
		n := up.log.len()
		c := rawHTTPDial(t, s)
		c.send(raw)
		r := c.read(method)
		c.rest()
		seen := up.log.all()[n:]
		rawHTTPCheckSeen(t, seen)
		return r, seen
	}
	one := func(t *testing.T, seen []rawHTTPSeen) rawHTTPSeen {
		t.Helper()
		if len(seen) != 1 {
			t.Fatalf("the upstream received %d requests, want 1", len(seen))
		}
		return seen[0]
	}
	realKey := func(t *testing.T, r rawHTTPSeen) {
		t.Helper()
		if got := r.Header.Get("X-Api-Key"); got != canaryAPIKey {
			t.Errorf("the upstream got X-Api-Key %.12q, want the real key", got)
		}
		if got := r.Header.Get("Authorization"); got != "" {
			t.Errorf("the upstream got Authorization %.16q", got)
		}
	}

	// A client that names the credential headers in Connection does not
	// make cproxy drop the real credential, nor keep its own token.
	for name, hs := range map[string][]string{
		"Connection: X-Api-Key":                   {"X-Api-Key: " + tok, "Connection: X-Api-Key, close"},
		"Connection: Authorization":               {"Authorization: Bearer " + tok, "Connection: Authorization, close"},
		"Connection: both, token in both":         {"Authorization: Bearer " + tok, "X-Api-Key: " + tok, "Connection: close, X-Api-Key, Authorization"},
		"Connection: Proxy-Authorization, Cookie": {"X-Api-Key: " + tok, "Proxy-Authorization: Bearer " + tok, "Cookie: t=" + tok, "Connection: Proxy-Authorization, Cookie, close"},
	} {
		t.Run(name, func(t *testing.T) {
			raw := rawHTTPRequest("POST /v1/messages HTTP/1.1", append([]string{"Host: cproxy.test", "Anthropic-Version: 2023-06-01", "Content-Type: application/json", cl}, hs...), rawHTTPMessage)
			r, seen := exchange(t, "POST", raw)
			if r.StatusCode != 200 {
				t.Fatalf("status %d: %s", r.StatusCode, r.Body)
			}
			got := one(t, seen)
			realKey(t, got)
			for _, k := range []string{"Proxy-Authorization", "Cookie"} {
				if v := got.Header.Get(k); v != "" {
					t.Errorf("the upstream got %s", k)
				}
			}
		})
	}

	t.Run("spoofed forwarding headers and Host", func(t *testing.T) {
		r, seen := exchange(t, "POST", rawHTTPRequest("POST /v1/messages HTTP/1.1", []string{"Host: evil.example",
			"X-Api-Key: " + tok, "Anthropic-Version: 2023-06-01", "Content-Type: application/json", cl, "Connection: close",
			"X-Forwarded-For: 10.0.0.1", "X-Forwarded-Host: evil.example", "X-Forwarded-Proto: https",
			"Forwarded: for=10.0.0.1;host=evil.example;proto=https", "X-Real-Ip: 10.0.0.1", "True-Client-Ip: 10.0.0.1",
			"X-Client-Ip: 10.0.0.1", "Cf-Connecting-Ip: 10.0.0.1"}, rawHTTPMessage))
		if r.StatusCode != 200 {
			t.Fatalf("status %d: %s", r.StatusCode, r.Body)
		}
		got := one(t, seen)
		realKey(t, got)
		for _, k := range []string{"X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto", "Forwarded", "X-Real-Ip", "True-Client-Ip", "X-Client-Ip", "Cf-Connecting-Ip"} {
			if v := got.Header.Values(k); len(v) != 0 {
				t.Errorf("the upstream got %s: %q", k, v)
			}
		}
		if want := strings.TrimPrefix(up.URL, "http://"); got.Host != want {
			t.Errorf("the upstream got Host %q, want its own %q", got.Host, want)
		}
	})

	t.Run("token only in a trailer", func(t *testing.T) {
		r, seen := exchange(t, "POST", rawHTTPRequest("POST /v1/messages HTTP/1.1",
			[]string{"Host: cproxy.test", "Anthropic-Version: 2023-06-01", "Transfer-Encoding: chunked", "Trailer: Authorization, X-Api-Key", "Connection: close"},
			rawHTTPChunk(rawHTTPMessage)+"0\r\nAuthorization: Bearer "+tok+"\r\nX-Api-Key: "+tok+"\r\n\r\n"))
		if r.StatusCode != 401 {
			t.Fatalf("status %d, want 401: a trailer is no credential", r.StatusCode)
		}
		if len(seen) != 0 {
			t.Fatalf("the upstream received %d requests", len(seen))
		}
	})
	for name, trailer := range map[string]string{
		"declared":   "Trailer: Authorization, X-Api-Key",
		"undeclared": "X-Trailer-Test: undeclared",
	} {
		t.Run(name+" credential trailers", func(t *testing.T) {
			// The request is let in on its header token; the trailers (the
			// same and another sandbox's token) go nowhere.
			r, seen := exchange(t, "POST", rawHTTPRequest("POST /v1/messages HTTP/1.1", withHeaders("Transfer-Encoding: chunked", trailer, "Connection: close"),
				rawHTTPChunk(rawHTTPMessage)+"0\r\nAuthorization: Bearer "+other2+"\r\nX-Api-Key: "+tok+"\r\n\r\n"))
			if r.StatusCode != 200 {
				t.Fatalf("status %d: %s", r.StatusCode, r.Body)
			}
			got := one(t, seen)
			realKey(t, got)
			if len(got.Trailer) != 0 || got.Header.Get("Trailer") != "" {
				t.Errorf("the upstream got trailers %v (Trailer: %q)", got.Trailer, got.Header.Get("Trailer"))
			}
			if got.Body != rawHTTPMessage {
				t.Errorf("the upstream got body %q", got.Body)
			}
		})
	}

	t.Run("Upgrade the upstream would accept", func(t *testing.T) {
		// This upstream switches to whatever protocol it is asked for;
		// cproxy never asks, so no tunnel opens past its checks.
		c := rawHTTPDial(t, s)
		n := up.log.len()
		c.send(rawHTTPRequest("GET /v1/models HTTP/1.1", append(h[:3:3], "Connection: Upgrade", "Upgrade: websocket",
			"Sec-WebSocket-Version: 13", "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ=="), "") +
			"GET /v1/organizations/secret HTTP/1.1\r\nHost: tunnel\r\n\r\n")
		r := c.read("GET")
		if r.StatusCode == http.StatusSwitchingProtocols {
			t.Fatalf("cproxy switched protocols: a raw tunnel to the upstream")
		}
		c.c.Close()
		got := one(t, up.log.all()[n:])
		if got.Header.Get("Upgrade") != "" {
			t.Errorf("the upstream was asked to switch protocols: Upgrade: %s", got.Header.Get("Upgrade"))
		}
		if tun := up.tunnelled(); tun != "" {
			t.Errorf("bytes reached the upstream through a tunnel: %q", tun)
		}
	})
	t.Run("upstream switches protocols unasked", func(t *testing.T) {
		r, seen := exchange(t, "GET", rawHTTPRequest("GET /v1/models HTTP/1.1", append(h[:3:3], rawHTTPUpstreamCase+": upgrade-unasked", "Connection: close"), ""))
		if r.StatusCode != 502 {
			t.Fatalf("status %d, want 502", r.StatusCode)
		}
		one(t, seen)
		if tun := up.tunnelled(); tun != "" {
			t.Errorf("bytes reached the upstream through a tunnel: %q", tun)
		}
	})

	t.Run("hop-by-hop response headers", func(t *testing.T) {
		// The fields the upstream's Connection names, in one field or
		// several, are for its own hop: none of them reaches the client.
		c := rawHTTPDial(t, s)
		c.send(rawHTTPRequest("GET /v1/models HTTP/1.1", append(h[:3:3], rawHTTPUpstreamCase+": hop-headers"), "") + rawHTTPSentinel(tok))
		r := c.read("GET")
		if r.StatusCode != 200 || r.Body != `{"ok":true}` {
			t.Fatalf("%d %q", r.StatusCode, r.Body)
		}
		if r.Close {
			t.Error("the upstream's Connection: close reached the client")
		}
		for _, k := range []string{"X-Secret", "X-Secret-2", "Keep-Alive", "Proxy-Connection", "Upgrade", "Te", "Connection"} {
			if v := r.Header.Get(k); v != "" {
				t.Errorf("the client got %s: %s", k, v)
			}
		}
		if r.Header.Get("X-Kept") != "yes" {
			t.Error("an end-to-end header was dropped")
		}
		if r := c.read("GET"); r.StatusCode != 200 {
			t.Fatalf("sentinel: %d", r.StatusCode)
		}
		c.rest()
	})
	t.Run("upstream closes its connection", func(t *testing.T) {
		// The upstream's Connection: close ends cproxy's upstream
		// connection, not the client's, which stays open for the
		// sentinel. (net/http's client drops a response's whole
		// Connection field when it says close, so fields named next to
		// close would pass: docs/security-tests.md, known gaps.)
		c := rawHTTPDial(t, s)
		c.send(rawHTTPRequest("GET /v1/models HTTP/1.1", append(h[:3:3], rawHTTPUpstreamCase+": hop-close"), "") + rawHTTPSentinel(tok))
		r := c.read("GET")
		if r.StatusCode != 200 || r.Body != `{"ok":true}` || r.Close || r.Header.Get("Keep-Alive") != "" {
			t.Fatalf("%d %q close=%v Keep-Alive=%q", r.StatusCode, r.Body, r.Close, r.Header.Get("Keep-Alive"))
		}
		if r := c.read("GET"); r.StatusCode != 200 {
			t.Fatalf("sentinel: %d", r.StatusCode)
		}
		c.rest()
	})
	t.Run("upstream sends Content-Length and chunked", func(t *testing.T) {
		c := rawHTTPDial(t, s)
		c.send(rawHTTPRequest("GET /v1/models HTTP/1.1", append(h[:3:3], rawHTTPUpstreamCase+": cl-and-te", "Connection: close"), ""))
		r := c.read("GET")
		c.rest()
		if r.StatusCode != 200 || r.Body != `{"ok":true}` {
			t.Fatalf("%d %q", r.StatusCode, r.Body)
		}
		head, _, _ := strings.Cut(c.raw.String(), "\r\n\r\n")
		head = strings.ToLower(head)
		if strings.Contains(head, "content-length:") && strings.Contains(head, "transfer-encoding:") {
			t.Fatalf("the client got both framings:\n%s", head)
		}
	})
	for _, bad := range []string{"two-cl", "te-gzip"} {
		t.Run("upstream framing "+bad, func(t *testing.T) {
			r, _ := exchange(t, "GET", rawHTTPRequest("GET /v1/models HTTP/1.1", append(h[:3:3], rawHTTPUpstreamCase+": "+bad, "Connection: close"), ""))
			if r.StatusCode != 502 || !strings.Contains(r.Body, `"type":"error"`) {
				t.Fatalf("%d %q, want 502 in the API's error format", r.StatusCode, r.Body)
			}
		})
	}

	for _, code := range []string{"302", "307"} {
		t.Run("upstream redirect "+code, func(t *testing.T) {
			// A real client that does not follow redirects by itself sees
			// the upstream's answer as sent; cproxy followed nothing.
			req, _ := http.NewRequest("POST", s.proxy+"/v1/messages", strings.NewReader(rawHTTPMessage))
			req.Header.Set("X-Api-Key", tok)
			req.Header.Set("Anthropic-Version", "2023-06-01")
			req.Header.Set(rawHTTPUpstreamCase, "redirect-"+code)
			client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
			n := up.log.len()
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			rawHTTPNoSecrets(t, "the redirect", fmt.Sprint(resp.Header)+string(body))
			if fmt.Sprint(resp.StatusCode) != code || resp.Header.Get("Location") != up.Location || string(body) != `{"moved":true}` {
				t.Fatalf("%d Location %q %q, want %s to %s as sent", resp.StatusCode, resp.Header.Get("Location"), body, code, up.Location)
			}
			realKey(t, one(t, up.log.all()[n:]))
			if otherLog.len() != 0 {
				t.Fatalf("the Location host received %d requests", otherLog.len())
			}
		})
	}
}
