package main

// The memory for request bodies against one sandbox that tries to fill it,
// and a body's deadline against bytes sent early to buy silence later,
// through the real `cproxy serve` and raw sockets.

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cproxy/cproxy/internal/fakes"
)

// bodyMemServe starts serve as inflightServe does, with 64 MiB for request
// bodies (runtime.body_memory_mib), which leaves one sandbox 32 MiB of it.
func bodyMemServe(t *testing.T, listen ...string) (*served, *fakes.Anthropic) {
	t.Helper()
	fake, _, dir := inflightConfig(t, inflightPolicy, "", listen...)
	appendFile(t, filepath.Join(dir, "cproxy.toml"), "\n[runtime]\nbody_memory_mib = 64\n")
	return startServe(t, dir), fake
}

// bodyMessage is a Messages API request body of exactly size bytes, padded
// with spaces.
func bodyMessage(size int) string {
	m := `{"model":"claude-sonnet-4-5","max_tokens":16,"messages":[{"role":"user","content":"hi"}]`
	return m + strings.Repeat(" ", size-len(m)-1) + "}"
}

// bodyMemOther is another sandbox's ordinary request, sent while the first
// sandbox holds what it can: it must be answered at once, not told the
// memory is full.
func bodyMemOther(t *testing.T, s *served, size int) {
	t.Helper()
	req, _ := http.NewRequest("POST", s.proxy+"/v1/messages", strings.NewReader(bodyMessage(size)))
	req.Header.Set("X-Api-Key", s.mint("conv-2"))
	req.Header.Set("Anthropic-Version", "2023-06-01")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	// Memory that stayed taken would have it wait bodyMemoryWait, then
	// answer 503: a 200 is memory found.
	if resp.StatusCode != 200 {
		t.Fatalf("another sandbox's request of %d bytes: %s %s", size, resp.Status, b)
	}
	if n := readMetrics(t, s)("cproxy_body_memory_refused_total"); n != 0 {
		t.Errorf("%d requests were refused for want of body memory", n)
	}
}

// bodyMemHeld is what bodies hold now, from /metrics.
func bodyMemHeld(t *testing.T, s *served) int64 {
	return readMetrics(t, s)("cproxy_body_memory_bytes")
}

// bodyMemLittle checks that the bodies held, what says which, hold less
// than 1 MiB, and that another sandbox's request passes beside them.
func bodyMemLittle(t *testing.T, s *served, what string) {
	t.Helper()
	if held := bodyMemHeld(t, s); held > 1<<20 {
		t.Errorf("%s hold %d KiB", what, held>>10)
	}
	bodyMemOther(t, s, 1<<20)
}

// Bodies take memory as their bytes arrive, not on the length they
// declare: two requests declaring 32 MiB each that send one byte hold a
// step each, not the whole 64 MiB, and another sandbox's request passes.
func TestBodyMemoryTakenAsBytesArrive(t *testing.T) {
	t.Parallel()
	s, _ := bodyMemServe(t)
	tok := s.mint("conv-1")
	for range 2 {
		holdBody(t, s, "POST /v1/messages HTTP/1.1", append(rawHTTPModelHeaders(tok), "Content-Length: 33554432"), "{", "")
	}
	bodyMemLittle(t, s, "two bodies that declared 32 MiB and sent a byte")
}

// A push's ref updates take memory as they arrive, a pkt-line at a time:
// 66 pushes that each send 24 bytes hold little, and another sandbox's
// request passes.
func TestBodyMemoryOfStalledPushes(t *testing.T) {
	t.Parallel()
	s, _ := bodyMemServe(t)
	// Three tokens of one sandbox: each token has 32 git requests in
	// flight at most.
	toks := []string{s.mint("conv-1"), s.mint("conv-1"), s.mint("conv-1")}
	start := "00a4" + strings.Repeat("0", 20) // the start of a pkt-line of 164 bytes
	for i := range 66 {
		holdBody(t, s, "POST /github/acme/app.git/git-receive-pack HTTP/1.1", []string{"Host: cproxy.test",
			"Authorization: Bearer " + toks[i%len(toks)], "Content-Type: application/x-git-receive-pack-request", "Transfer-Encoding: chunked"},
			rawHTTPChunk(start), "")
	}
	bodyMemLittle(t, s, "66 pushes that sent 24 bytes each")
}

// One sandbox's bodies hold at most its share of the memory
// (runtime.body_memory_sandbox_mib, a quarter of body_memory_mib but at
// least 32 MiB): a second 20 MiB body beside one held is answered 429 with
// Retry-After in the API's shape, naming the key, and never reaches the
// upstream; another sandbox's 20 MiB body passes, and the held one goes on.
func TestBodyMemorySandboxShare(t *testing.T) {
	t.Parallel()
	s, fake := bodyMemServe(t)
	tok := s.mint("conv-1")
	const size = 20 << 20
	body := bodyMessage(size)
	first := holdRequest(t, s, "POST /v1/messages HTTP/1.1", rawHTTPModelHeaders(tok), body)
	for deadline := time.Now().Add(heldDeadline); bodyMemHeld(t, s) != size; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the first body was never read: %d bytes held", bodyMemHeld(t, s))
		}
	}

	c, err := net.Dial("tcp", rawHTTPAddr(s))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(heldDeadline))
	go io.WriteString(c, rawHTTPRequest("POST /v1/messages HTTP/1.1",
		append(rawHTTPModelHeaders(tok), fmt.Sprintf("Content-Length: %d", size), "Connection: close"), body))
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: "POST"})
	if err != nil {
		t.Fatalf("no answer to the sandbox's second body: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(b), `"type":"rate_limit_error"`) ||
		!strings.Contains(string(b), "runtime.body_memory_sandbox_mib") || !strings.Contains(string(b), "sandbox conv-1") {
		t.Fatalf("a body past the sandbox's share: %s %v %s", resp.Status, resp.Header, b)
	}

	bodyMemOther(t, s, size)
	if resp, answer := first.finish(); resp.StatusCode != 200 {
		t.Fatalf("the held body: %s %s", resp.Status, answer)
	}
	if n := messagesSeen(fake); n != 2 {
		t.Errorf("the upstream received %d messages requests, want the held one and the other sandbox's", n)
	}
	waitLog(t, s, "retry once they are done")
}

// Bytes sent early do not buy silence later: half a body sent at once,
// then nothing, is cut listen.body_timeout after its last bytes (not the
// half hour the average rate would allow), answered 408 in the API's
// shape, and never reaches the upstream; the audit line says why.
func TestStalledBodyCut(t *testing.T) {
	t.Parallel()
	s, fake, _, _ := inflightServe(t, inflightPolicy, "", `body_timeout = "1s"`)
	body := bodyMessage(1 << 20)
	h := holdBody(t, s, "POST /v1/messages HTTP/1.1", append(rawHTTPModelHeaders(s.mint("conv-1")), "Content-Length: 1048576"),
		body[:len(body)/2], "")
	stalled := time.Now()
	resp, err := http.ReadResponse(h.br, nil)
	if err != nil {
		t.Fatalf("no answer to a stalled body: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	if d := time.Since(stalled); d > 5*time.Second {
		t.Errorf("a body stalled for %s before it was cut (body_timeout 1s)", d.Round(time.Millisecond))
	}
	wantRefused(t, resp, string(b), 408, "nothing of it came for listen.body_timeout (1s)")
	if n := messagesSeen(fake); n != 0 {
		t.Fatalf("the upstream received %d stalled requests", n)
	}
	waitLog(t, s, `reason="cproxy: the request body arrived too slowly: nothing of it came for listen.body_timeout (1s)`)
}
