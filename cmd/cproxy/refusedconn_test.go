package main

// Refused requests give their connections back: the real `cproxy serve`,
// clients on raw sockets that send a request's headers without
// Expect: 100-continue and then trickle its body, a byte at a time, for as
// long as the connection takes it. A request cproxy refuses before reading
// its body (no or a bad token, its token's concurrency limit, no such
// route) is answered at once and its connection closed, however slowly the
// body comes: the refusal is not held back while net/http reads the body,
// and the connection is not held open afterwards for it.

import (
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/cproxy/cproxy/internal/testutil"
)

// refusedBodyTimeout is the listen.body_timeout of these tests: before
// cproxy closed a refused request's connection, a trickled body held it
// that long (an authenticated one) or for good (an unauthenticated one).
const refusedBodyTimeout = 30 * time.Second

// refusedPatience is how long a refusal, and the close of its connection,
// may take: generous for a loaded machine, and well under the body
// timeout, which is what they waited for before.
const refusedPatience = refusedBodyTimeout / 4

// refusedServe starts serve with inflightServe's routes and policy, with
// budget (a profile line, "" for none) and refusedBodyTimeout.
func refusedServe(t *testing.T, budget string) *served {
	t.Helper()
	s, _, _, _ := inflightServe(t, inflightPolicy+budget, "", fmt.Sprintf("body_timeout = %q", refusedBodyTimeout))
	t.Cleanup(func() { rawHTTPNoSecrets(t, "serve's log", s.stderr.String()) })
	return s
}

// trickler sends a request's headers, then its body a byte at a time, on
// one raw connection, until stopped or until the connection no longer
// takes it.
type trickler struct {
	*rawHTTPConn
	stop chan struct{}
	done sync.WaitGroup
}

// trickleEvery is how often a trickler sends a byte of its body.
const trickleEvery = 50 * time.Millisecond

// trickle sends line and headers with a body that never ends: declared 64
// KiB long (under the 256 KiB net/http reads of a body its handler left),
// or chunked, one byte to a chunk.
func trickle(t *testing.T, s *served, line string, headers []string, chunked bool) *trickler {
	t.Helper()
	piece := "x"
	if chunked {
		headers = append(headers, "Transfer-Encoding: chunked")
		piece = rawHTTPChunk("x")
	} else {
		headers = append(headers, fmt.Sprintf("Content-Length: %d", 64<<10))
	}
	tr := &trickler{rawHTTPConn: rawHTTPDial(t, s), stop: make(chan struct{})}
	tr.send(rawHTTPRequest(line, headers, piece))
	tr.done.Go(func() {
		tick := time.NewTicker(trickleEvery)
		defer tick.Stop()
		for {
			select {
			case <-tr.stop:
				return
			case <-tick.C:
			}
			if _, err := io.WriteString(tr.c, piece); err != nil {
				return // closed by cproxy
			}
		}
	})
	t.Cleanup(tr.end)
	return tr
}

// end stops the trickle.
func (tr *trickler) end() {
	select {
	case <-tr.stop:
	default:
		close(tr.stop)
	}
	tr.done.Wait()
}

// refused reads the answer, which must come within refusedPatience of
// since, with status and saying says, and then the connection's end: the
// answer says Connection: close, and cproxy closes it within
// refusedPatience while the client goes on sending its body.
func (tr *trickler) refused(since time.Time, status int, says string) {
	tr.t.Helper()
	tr.c.SetReadDeadline(since.Add(refusedPatience))
	resp, err := http.ReadResponse(tr.br, nil)
	if err != nil {
		tr.t.Fatalf("no answer within %s of the headers, with the body trickling (body_timeout %s): %v", refusedPatience, refusedBodyTimeout, err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	rawHTTPNoSecrets(tr.t, "a refusal", string(b))
	wantRefused(tr.t, resp, string(b), status, says)
	if !resp.Close {
		tr.t.Errorf("the %d to a request whose body is still coming does not say Connection: close", status)
	}
	answered := time.Now()
	tr.c.SetReadDeadline(answered.Add(refusedPatience))
	n, err := tr.br.Read(make([]byte, 1))
	switch {
	case n > 0:
		tr.t.Errorf("more bytes after the refusal")
	case err == io.EOF, rawHTTPIsReset(err):
		// Closed by cproxy: a reset when the close found bytes of the
		// body it had not read yet.
	default:
		tr.t.Fatalf("the connection of a refused request with a trickling body is still open %s after the refusal (body_timeout %s): %v", time.Since(answered).Round(time.Millisecond), refusedBodyTimeout, err)
	}
}

// A request refused before its body is read, whatever the route and
// whichever the refusal, is answered at once with its connection closed,
// by length or chunked, while its client trickles the body: no token, a
// malformed one, a revoked one, a request for no route, the bare root.
func TestRefusedTrickledBodyUnauthenticated(t *testing.T) {
	t.Parallel()
	s := refusedServe(t, "")
	s.mint("conv-gone")
	revoked := s.mint("conv-gone")
	s.revoke("conv-gone")
	cases := []struct {
		name, line string
		headers    []string
		status     int
		says       string
	}{
		{"model, no token", "POST /v1/messages HTTP/1.1", []string{"Host: cproxy.test", "Anthropic-Version: 2023-06-01"}, 401, "no sandbox token"},
		{"model, malformed token", "POST /v1/messages HTTP/1.1", rawHTTPModelHeaders("cpx_notatoken"), 401, "malformed sandbox token"},
		{"model, revoked token", "POST /v1/messages HTTP/1.1", rawHTTPModelHeaders(revoked), 401, "was revoked"},
		{"github, no token", "POST /github/acme/app.git/git-upload-pack HTTP/1.1", []string{"Host: cproxy.test", "Content-Type: application/x-git-upload-pack-request"}, 401, "no sandbox token"},
		{"relay, bad token", "POST /mod/upload HTTP/1.1", []string{"Host: cproxy.test", "Authorization: Bearer cpx_notatoken"}, 401, "malformed sandbox token"},
		{"no route", "POST /nowhere HTTP/1.1", []string{"Host: cproxy.test"}, 403, "no such route"},
		{"the bare root", "GET / HTTP/1.1", []string{"Host: cproxy.test"}, 200, "cproxy"},
	}
	for _, c := range cases {
		for _, chunked := range []bool{false, true} {
			name := c.name + ", by length"
			if chunked {
				name = c.name + ", chunked"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				start := time.Now()
				tr := trickle(t, s, c.line, c.headers, chunked)
				tr.refused(start, c.status, c.says)
			})
		}
	}
}

// A request its token's concurrency limit refuses, before its body is
// read, is answered 429 at once and its connection closed while its
// client trickles the body: the slot's holder does not make the refused
// wait for body_timeout.
func TestRefusedTrickledBodyOverLimit(t *testing.T) {
	t.Parallel()
	s := refusedServe(t, "budget = { concurrent = 1 }\n")
	tok := s.mint("conv-1")
	holder := holdMessage(t, s, tok, "claude-sonnet-4-5")
	for _, chunked := range []bool{false, true} {
		start := time.Now()
		tr := trickle(t, s, "POST /v1/messages HTTP/1.1", rawHTTPModelHeaders(tok), chunked)
		tr.refused(start, 429, "requests of sandbox conv-1's token are in flight")
	}
	if resp, answer := holder.finish(); resp.StatusCode != 200 {
		t.Fatalf("the request holding the slot: %s %s", resp.Status, answer)
	}
}

// Forty slow requests from one sandbox whose budget allows two at a time:
// the two it serves hold their connections while their bodies come, the
// thirty-eight it refuses are answered 429 and their connections closed,
// and cproxy_sandbox_connections drops back to the two.
func TestRefusedTrickledBodiesFreeConnections(t *testing.T) {
	t.Parallel()
	s := refusedServe(t, "budget = { concurrent = 2 }\n")
	tok := s.mint("conv-1")
	held := []*heldRequest{holdMessage(t, s, tok, "claude-sonnet-4-5"), holdMessage(t, s, tok, "claude-sonnet-4-5")}
	start := time.Now()
	var refused []*trickler
	for i := range 38 {
		refused = append(refused, trickle(t, s, "POST /v1/messages HTTP/1.1", rawHTTPModelHeaders(tok), i%2 == 1))
	}
	for _, tr := range refused {
		tr.refused(start, 429, "requests of sandbox conv-1's token are in flight")
	}
	open := func() float64 {
		resp, err := http.Get(s.admin + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		return testutil.ParseScrape(t, resp.Body).Value("cproxy_sandbox_connections", map[string]string{})
	}
	for n := open(); n > float64(len(held)); n = open() {
		if time.Since(start) > 2*refusedPatience {
			t.Fatalf("cproxy_sandbox_connections is %v %s after 38 of 40 trickled requests were refused, want %d", n, time.Since(start).Round(time.Millisecond), len(held))
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, h := range held {
		if resp, answer := h.finish(); resp.StatusCode != 200 {
			t.Fatalf("a held request: %s %s", resp.Status, answer)
		}
	}
}
