package main

// Requests in flight against the token's and the policy's state: the real
// `cproxy serve`, clients on raw sockets that hold a request open (its body
// sent but for its last byte) while the harness revokes the token, the
// token expires or the policy is reloaded, and upstreams that record what
// reached them. What lets a request reach the upstream is decided as things
// are when it is forwarded, not when its headers came.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cproxy/cproxy/internal/fakes"
)

// heldDeadline ends a test that would otherwise hang; nothing waits for it.
const heldDeadline = 30 * time.Second

// inflightPolicy allows two models, every relay, and pushes (and deletes)
// to acme/app's agent/* branches.
const inflightPolicy = `
[profile.default]
models = ["claude-sonnet-*", "claude-haiku-*"]
repos = [{ repo = "acme/app", access = "push", refs = ["refs/heads/agent/*"], delete = true }]
relays = ["mod"]
`

// inflightServe starts serve with the model route in front of a fake
// Anthropic API, the github route in front of a fake GitHub, and the relay
// mod in front of relay, with policy as its policy file and listen's lines
// added to the config's [listen].
func inflightServe(t *testing.T, policy string, relay string, listen ...string) (*served, *fakes.Anthropic, *fakes.GitServer, string) {
	t.Helper()
	fake, gs, dir := inflightConfig(t, policy, relay, listen...)
	return startServe(t, dir), fake, gs, dir
}

// inflightConfig writes inflightServe's config into a new directory, which
// it returns, without starting serve.
func inflightConfig(t *testing.T, policy string, relay string, listen ...string) (*fakes.Anthropic, *fakes.GitServer, string) {
	t.Helper()
	fake := fakes.NewAnthropic(fakes.AnthropicOptions{APIKey: canaryAPIKey})
	t.Cleanup(fake.Close)
	dir := t.TempDir()
	gs, err := fakes.NewGitServer(dir, fakes.GitServerOptions{Token: canaryGitHub})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(gs.Close)
	if relay == "" {
		relay = "http://127.0.0.1:9"
	}
	advWrite(t, dir, fmt.Sprintf(`
[upstream.anthropic]
url = %q
credential = "file:anthropic.key"

[upstream.github]
url = %q
credential = "file:github.key"

[relay.mod]
prefix = "/mod/"
url = "%s/"
methods = ["GET", "POST"]
paths = ["stream", "upload"]

[relay.mod.headers]
Authorization = { credential = "file:hub.key", prefix = "Bearer " }
`, fake.URL, gs.URL, relay), policy)
	if len(listen) > 0 {
		path := filepath.Join(dir, "cproxy.toml")
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		cfg := strings.Replace(string(b), "[listen]\n", "[listen]\n"+strings.Join(listen, "\n")+"\n", 1)
		if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return fake, gs, dir
}

// heldRequest is a request whose body has been sent but for its end.
type heldRequest struct {
	t    *testing.T
	c    net.Conn
	br   *bufio.Reader
	rest string
}

// holdRequest sends the request line and headers on a new connection,
// with Expect: 100-continue, and once cproxy has authenticated the request
// and started reading its body (its 100 Continue), all of the body but its
// last byte.
func holdRequest(t *testing.T, s *served, line string, headers []string, body string) *heldRequest {
	t.Helper()
	return holdBody(t, s, line, append(headers, fmt.Sprintf("Content-Length: %d", len(body))), body[:len(body)-1], body[len(body)-1:])
}

// holdChunked is holdRequest with a chunked body: the whole body in one
// chunk, and then, held, the last chunk that ends it.
func holdChunked(t *testing.T, s *served, line string, headers []string, body string) *heldRequest {
	t.Helper()
	return holdBody(t, s, line, append(headers, "Transfer-Encoding: chunked"), rawHTTPChunk(body), "0\r\n\r\n")
}

// holdBody sends the request line and headers, and once cproxy reads the
// body, sent; finish sends rest.
func holdBody(t *testing.T, s *served, line string, headers []string, sent, rest string) *heldRequest {
	t.Helper()
	c, err := net.Dial("tcp", rawHTTPAddr(s))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(heldDeadline))
	headers = append(headers, "Connection: close", "Expect: 100-continue")
	if _, err := io.WriteString(c, rawHTTPRequest(line, headers, "")); err != nil {
		t.Fatal(err)
	}
	h := &heldRequest{t: t, c: c, br: bufio.NewReader(c), rest: rest}
	resp, err := http.ReadResponse(h.br, nil)
	if err != nil || resp.StatusCode != http.StatusContinue {
		t.Fatalf("no 100 Continue: %v %v", resp, err)
	}
	if _, err := io.WriteString(c, sent); err != nil {
		t.Fatal(err)
	}
	return h
}

// finish sends the last byte and reads the answer.
func (h *heldRequest) finish() (*http.Response, string) {
	h.t.Helper()
	// cproxy may have answered and closed already (a revocation ends the
	// read of a held body): the answer is what counts.
	io.WriteString(h.c, h.rest)
	resp, err := http.ReadResponse(h.br, nil)
	for err == nil && resp.StatusCode < 200 {
		// The upstream's own 100 Continue, passed on.
		resp, err = http.ReadResponse(h.br, nil)
	}
	if err != nil {
		h.t.Fatalf("no answer to the held request: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	rawHTTPNoSecrets(h.t, "an answer", string(b))
	return resp, string(b)
}

// holdMessage holds a Messages API request for model.
func holdMessage(t *testing.T, s *served, tok, model string) *heldRequest {
	body := fmt.Sprintf(`{"model":%q,"max_tokens":16,"messages":[{"role":"user","content":"hi"}]}`, model)
	return holdRequest(t, s, "POST /v1/messages HTTP/1.1", rawHTTPModelHeaders(tok), body)
}

// messagesSeen counts the Messages API requests the fake received.
func messagesSeen(fake *fakes.Anthropic) int {
	n := 0
	for _, r := range fake.Requests() {
		if r.Path == "/v1/messages" {
			n++
		}
	}
	return n
}

// waitStatus sends a token count request for model with tok until it is
// answered with want: how a test learns that a token expired or a reload
// was applied, without a timer of its own.
func waitStatus(t *testing.T, s *served, tok, model string, want int) {
	t.Helper()
	deadline := time.Now().Add(heldDeadline)
	body := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"hi"}]}`, model)
	for {
		req, _ := http.NewRequest("POST", s.proxy+"/v1/messages/count_tokens", strings.NewReader(body))
		req.Header.Set("X-Api-Key", tok)
		req.Header.Set("Anthropic-Version", "2023-06-01")
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("still %s, want %d", resp.Status, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func wantRefused(t *testing.T, resp *http.Response, body string, status int, says string) {
	t.Helper()
	if resp.StatusCode != status || !strings.Contains(body, says) {
		t.Fatalf("got %s %s, want %d saying %q", resp.Status, body, status, says)
	}
}

// A request whose body ends after its sandbox's tokens were revoked is
// refused, and never reaches the upstream.
func TestHeldRequestAfterRevocation(t *testing.T) {
	t.Parallel()
	s, fake, _, _ := inflightServe(t, inflightPolicy, "")
	tok := s.mint("conv-1")
	held := []*heldRequest{holdMessage(t, s, tok, "claude-sonnet-4-5"), holdMessage(t, s, tok, "claude-haiku-4-5")}
	s.revoke("conv-1")
	for _, h := range held {
		resp, body := h.finish()
		wantRefused(t, resp, body, 401, "was revoked")
	}
	if n := messagesSeen(fake); n != 0 {
		t.Fatalf("the upstream received %d held messages requests after the revocation", n)
	}
}

// The same when the token expires while its request is held.
func TestHeldRequestAfterExpiry(t *testing.T) {
	t.Parallel()
	s, fake, _, _ := inflightServe(t, inflightPolicy, "")
	tok := s.mintTTL("conv-1", "2s")
	h := holdMessage(t, s, tok, "claude-sonnet-4-5")
	waitStatus(t, s, tok, "claude-sonnet-4-5", 401)
	resp, body := h.finish()
	wantRefused(t, resp, body, 401, "expired at")
	if n := messagesSeen(fake); n != 0 {
		t.Fatalf("the upstream received %d held messages requests after the token expired", n)
	}
}

// A reload that takes a model away refuses a held request for it.
func TestHeldRequestAfterReload(t *testing.T) {
	t.Parallel()
	s, fake, _, dir := inflightServe(t, inflightPolicy, "")
	tok := s.mint("conv-1")
	h := holdMessage(t, s, tok, "claude-haiku-4-5")
	pol := strings.Replace(inflightPolicy, `, "claude-haiku-*"`, "", 1)
	if err := os.WriteFile(filepath.Join(dir, "policy.toml"), []byte(pol), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, s, tok, "claude-haiku-4-5", 403)
	resp, body := h.finish()
	wantRefused(t, resp, body, 403, "no longer allows it: model claude-haiku-4-5 is not allowed")
	if n := messagesSeen(fake); n != 0 {
		t.Fatalf("the upstream received %d held messages requests after the reload", n)
	}
}

// gitOut runs git in dir, isolated from the machine's configuration, and
// returns its output trimmed; stdin, when not empty, is its input.
func gitOut(t *testing.T, dir, stdin string, args ...string) string {
	t.Helper()
	return strings.TrimSpace(gitRaw(t, dir, stdin, args...))
}

// gitRaw is gitOut with the output as it came.
func gitRaw(t *testing.T, dir, stdin string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1", "HOME="+dir,
		"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com")
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git %s: %v", strings.Join(args, " "), err)
	}
	return string(out)
}

// pushBody is the body of a push that creates ref at a new commit on top
// of acme/app's main, pack included, as git sends it.
func pushBody(t *testing.T, gs *fakes.GitServer, ref string) (body, commit string) {
	t.Helper()
	work := t.TempDir()
	gitOut(t, work, "", "init", "--quiet", "--bare")
	gitOut(t, work, "", "fetch", "--quiet", filepath.Join(gs.Root, "acme", "app.git"), "main:main")
	main := gitOut(t, work, "", "rev-parse", "main")
	commit = gitOut(t, work, "", "commit-tree", "-p", main, "-m", "held", "main^{tree}")
	pack := gitRaw(t, work, commit+"\n^"+main+"\n", "pack-objects", "--stdout", "--revs")
	line := strings.Repeat("0", 40) + " " + commit + " " + ref + "\x00report-status\n"
	return fmt.Sprintf("%04x%s0000", len(line)+4, line) + pack, commit
}

// waitPushUpstream waits until the fake GitHub has more than seen
// requests: a held push reached it.
func waitPushUpstream(t *testing.T, gs *fakes.GitServer, seen int) {
	t.Helper()
	deadline := time.Now().Add(heldDeadline)
	for len(gs.Requests()) == seen {
		if time.Now().After(deadline) {
			t.Fatal("the push never reached the upstream")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A push whose body ends after its token was revoked never completes
// upstream: cproxy was already streaming it (the upstream had its headers
// and all but the last byte), and withholds the end.
func TestHeldPushAfterRevocation(t *testing.T) {
	t.Parallel()
	s, _, gs, _ := inflightServe(t, inflightPolicy, "")
	if err := gs.CreateRepo("acme/app"); err != nil {
		t.Fatal(err)
	}
	line := "POST /github/acme/app.git/git-receive-pack HTTP/1.1"
	headers := func(tok string) []string {
		return []string{"Host: cproxy.test", "Authorization: Bearer " + tok, "Content-Type: application/x-git-receive-pack-request"}
	}
	for i, hold := range []func(*testing.T, *served, string, []string, string) *heldRequest{holdRequest, holdChunked} {
		ref := fmt.Sprintf("refs/heads/agent/held-%d", i)
		body, _ := pushBody(t, gs, ref)
		sandbox := fmt.Sprintf("conv-%d", i)
		seen := len(gs.Requests())
		h := hold(t, s, line, headers(s.mint(sandbox)), body)
		waitPushUpstream(t, gs, seen)
		s.revoke(sandbox)
		resp, answer := h.finish()
		wantRefused(t, resp, answer, 401, "was revoked")
		if got := gs.Ref("acme/app", ref); got != "" {
			t.Fatalf("the upstream completed the push after the revocation: %s is %s", ref, got)
		}
		// The same push from a live token completes.
		h = hold(t, s, line, headers(s.mint("live")), body)
		if resp, answer := h.finish(); resp.StatusCode != 200 || !strings.Contains(answer, "ok "+ref) {
			t.Fatalf("a live token's push: %s %q", resp.Status, answer)
		}
	}
}

// heldStreams is a relay upstream whose /stream answers send one event and
// then one more each time next is sent to, until the client goes away.
type heldStreams struct {
	URL  string
	next chan struct{}
	// open counts the streams being served: a stream cproxy cut may still
	// wait on next for a moment, and would take the event meant for another.
	open atomic.Int32
}

// waitOpen waits until n streams are being served.
func (h *heldStreams) waitOpen(t *testing.T, n int32) {
	t.Helper()
	deadline := time.Now().Add(heldDeadline)
	for h.open.Load() != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d streams open upstream, want %d", h.open.Load(), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func newHeldStreams(t *testing.T) *heldStreams {
	h := &heldStreams{next: make(chan struct{})}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.open.Add(1)
		defer h.open.Add(-1)
		w.Header().Set("Content-Type", "text/event-stream")
		for i := 1; ; i++ {
			fmt.Fprintf(w, "event: tick\ndata: %d\n\n", i)
			w.(http.Flusher).Flush()
			select {
			case <-h.next:
			case <-r.Context().Done():
				return
			}
		}
	}))
	t.Cleanup(srv.Close)
	h.URL = srv.URL
	return h
}

// openStream sends req with tok and returns its answer's body once its
// headers are in; its context ends the test's wait.
func openStream(t *testing.T, req *http.Request, tok string) *bufio.Reader {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), heldDeadline)
	t.Cleanup(cancel)
	req = req.WithContext(ctx)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("%s %s: %s %s", req.Method, req.URL.Path, resp.Status, b)
	}
	return bufio.NewReader(resp.Body)
}

// readEvent reads one server-sent event, up to its blank line.
func readEvent(t *testing.T, br *bufio.Reader) string {
	t.Helper()
	var ev strings.Builder
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("reading an event: %v (read %q)", err, ev.String())
		}
		if line == "\n" {
			return ev.String()
		}
		ev.WriteString(line)
	}
}

// wantCut reads the rest of a stream: it must end before its own end, cut
// by cproxy, and not by the test's deadline.
func wantCut(t *testing.T, what string, br *bufio.Reader) {
	t.Helper()
	rest, err := io.ReadAll(br)
	if err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("%s was not cut: %v after %q", what, err, rest)
	}
	if strings.Contains(string(rest), "message_stop") {
		t.Fatalf("%s ran to its end: %q", what, rest)
	}
}

// streamingMessage is a streamed Messages API request to the proxy at base.
func streamingMessage(t *testing.T, base string) *http.Request {
	return streamingModel(t, base, "claude-sonnet-4-5")
}

// streamingModel is a streamed Messages API request for model to the
// proxy at base.
func streamingModel(t *testing.T, base, model string) *http.Request {
	body := fmt.Sprintf(`{"model":%q,"max_tokens":64,"stream":true,"messages":[{"role":"user","content":"hi"}]}`, model)
	req, err := http.NewRequest("POST", base+"/v1/messages", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Anthropic-Version", "2023-06-01")
	req.Header.Set("Content-Type", "application/json")
	return req
}

// relayStream opens the relay mod's /stream with tok and reads its first
// event.
func relayStream(t *testing.T, s *served, tok string) *bufio.Reader {
	t.Helper()
	get, err := http.NewRequest("GET", s.proxy+"/mod/stream", nil)
	if err != nil {
		t.Fatal(err)
	}
	br := openStream(t, get, tok)
	readEvent(t, br)
	return br
}

// A revocation cuts its sandbox's streams at once: a model stream and a
// relay stream. Another sandbox's stream runs on.
func TestStreamsCutOnRevocation(t *testing.T) {
	t.Parallel()
	relay := newHeldStreams(t)
	s, fake, _, _ := inflightServe(t, inflightPolicy, relay.URL)
	fake.StallStreams(3)
	tok := s.mint("conv-1")
	model := openStream(t, streamingMessage(t, s.proxy), tok)
	if ev := readEvent(t, model); !strings.Contains(ev, "message_start") {
		t.Fatalf("first event %q", ev)
	}
	mod := relayStream(t, s, tok)
	other := relayStream(t, s, s.mint("conv-2"))

	s.revoke("conv-1")
	wantCut(t, "the model stream", model)
	wantCut(t, "the relay stream", mod)
	relay.waitOpen(t, 1)
	relay.next <- struct{}{}
	if ev := readEvent(t, other); !strings.Contains(ev, "data: 2") {
		t.Fatalf("another sandbox's stream: %q", ev)
	}
	waitLog(t, s, "requests in flight cut by a revocation")
}

// One token's revocation (DELETE /tokens/ID) cuts that token's stream at
// once; the stream of its sandbox's other token runs on.
func TestStreamCutOnTokenRevocation(t *testing.T) {
	t.Parallel()
	relay := newHeldStreams(t)
	s, _, _, _ := inflightServe(t, inflightPolicy, relay.URL)
	leaked, sibling := s.mint("conv-1"), s.mint("conv-1")
	cut := relayStream(t, s, leaked)
	other := relayStream(t, s, sibling)

	id := s.revokeToken(leaked)
	wantCut(t, "the revoked token's stream", cut)
	relay.waitOpen(t, 1)
	relay.next <- struct{}{}
	if ev := readEvent(t, other); !strings.Contains(ev, "data: 2") {
		t.Fatalf("the sandbox's other token's stream: %q", ev)
	}
	waitLog(t, s, `msg="requests in flight cut by a revocation" token_id=`+id+" count=1")
}

// A token's expiry cuts its streams.
func TestStreamCutAtExpiry(t *testing.T) {
	t.Parallel()
	s, fake, _, _ := inflightServe(t, inflightPolicy, "")
	fake.StallStreams(3)
	tok := s.mintTTL("conv-1", "2s")
	model := openStream(t, streamingMessage(t, s.proxy), tok)
	readEvent(t, model)
	wantCut(t, "the model stream", model)
	waitLog(t, s, "expired at")
}

// waitLog waits until serve's log holds want.
func waitLog(t *testing.T, s *served, want string) {
	t.Helper()
	deadline := time.Now().Add(heldDeadline)
	for !strings.Contains(s.stderr.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("serve's log never said %q:\n%s", want, s.stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A body that arrives too slowly is refused once listen.body_timeout (and
// the time its bytes earn) has passed, and its connection closed.
func TestTrickledBodyRefused(t *testing.T) {
	t.Parallel()
	s, fake, _, _ := inflightServe(t, inflightPolicy, "", `body_timeout = "1s"`)
	h := holdMessage(t, s, s.mint("conv-1"), "claude-sonnet-4-5")
	resp, err := http.ReadResponse(h.br, nil)
	if err != nil {
		t.Fatalf("no answer to a trickled body: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	wantRefused(t, resp, string(b), 408, "the request body arrived too slowly")
	if n := messagesSeen(fake); n != 0 {
		t.Fatalf("the upstream received %d trickled requests", n)
	}
}

// A request is in flight from its authentication: under concurrent = 2,
// two requests whose bodies are still arriving hold both slots, and the
// others are refused before their bodies are read.
func TestTrickledBodiesHoldSlots(t *testing.T) {
	t.Parallel()
	s, fake, _, _ := inflightServe(t, inflightPolicy+"budget = { concurrent = 2 }\n", "")
	tok := s.mint("conv-1")
	body := `{"model":"claude-sonnet-4-5","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}`
	held := []*heldRequest{holdMessage(t, s, tok, "claude-sonnet-4-5"), holdMessage(t, s, tok, "claude-sonnet-4-5")}
	for range 10 {
		c := rawHTTPDial(t, s)
		c.send(rawHTTPRequest("POST /v1/messages HTTP/1.1", append(rawHTTPModelHeaders(tok),
			fmt.Sprintf("Content-Length: %d", len(body)), "Expect: 100-continue", "Connection: close"), ""))
		r := c.read("POST")
		wantRefused(t, r.Response, r.Body, 429, "requests of sandbox conv-1's token are in flight")
	}
	for _, h := range held {
		if resp, answer := h.finish(); resp.StatusCode != 200 {
			t.Fatalf("a held request: %s %s", resp.Status, answer)
		}
	}
	if n := messagesSeen(fake); n != 2 {
		t.Fatalf("the upstream received %d messages requests, want 2", n)
	}
}

// bodyRecorder is a relay upstream that reads each request's body to its
// end and records whether it arrived whole (true) or broke off.
type bodyRecorder struct {
	URL     string
	started chan struct{} // a request's headers are in
	bodies  chan bool
}

func newBodyRecorder(t *testing.T) *bodyRecorder {
	u := &bodyRecorder{started: make(chan struct{}, 8), bodies: make(chan bool, 8)}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.started <- struct{}{}
		_, err := io.Copy(io.Discard, r.Body)
		u.bodies <- err == nil
	}))
	t.Cleanup(srv.Close)
	u.URL = srv.URL
	return u
}

// A relay upload whose body ends after a reload took the relay away never
// arrives whole upstream, by length or chunked: cproxy was already
// streaming it, and decides it again at its end.
func TestHeldRelayUploadAfterReload(t *testing.T) {
	t.Parallel()
	up := newBodyRecorder(t)
	s, _, _, dir := inflightServe(t, inflightPolicy, up.URL)
	tok := s.mint("conv-1")
	var held []*heldRequest
	for _, hold := range []func(*testing.T, *served, string, []string, string) *heldRequest{holdRequest, holdChunked} {
		held = append(held, hold(t, s, "POST /mod/upload HTTP/1.1", []string{"Host: cproxy.test", "Authorization: Bearer " + tok}, strings.Repeat("data ", 1000)))
		<-up.started
	}
	pol := strings.Replace(inflightPolicy, `relays = ["mod"]`, "", 1)
	if err := os.WriteFile(filepath.Join(dir, "policy.toml"), []byte(pol), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitLog(t, s, `msg="policy reloaded"`)
	for i, h := range held {
		resp, answer := h.finish()
		wantRefused(t, resp, answer, 403, "no longer allows it: relay mod is not allowed")
		if whole := <-up.bodies; whole {
			t.Fatalf("upload %d: the upstream received the whole body after the reload", i)
		}
	}
}

// reloadPolicy writes pol as serve's policy file, sends SIGHUP and waits
// until serve has put it in force.
func reloadPolicy(t *testing.T, s *served, dir, pol string) {
	t.Helper()
	before := strings.Count(s.stderr.String(), `msg="policy reloaded"`)
	if err := os.WriteFile(filepath.Join(dir, "policy.toml"), []byte(pol), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(heldDeadline)
	for strings.Count(s.stderr.String(), `msg="policy reloaded"`) == before {
		if time.Now().After(deadline) {
			t.Fatalf("serve never reloaded the policy:\n%s", s.stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// mintProfile mints a token for sandbox with profile.
func (s *served) mintProfile(sandbox, profile string) string {
	s.t.Helper()
	return s.mintQuery("sandbox=" + sandbox + "&profile=" + profile)
}

// reloadCutPolicy is inflightPolicy with a second profile, wide, that the
// reload leaves as it is.
const reloadCutPolicy = inflightPolicy + `
[profile.wide]
models = ["claude-*"]
relays = ["mod"]
`

// A reload that takes a model and a relay away cuts the streams it no
// longer allows, at once, with a refusal that says so: a model stream for
// the model, a relay stream. Streams it still allows run on: another
// model's on the same profile, and the same model's and the relay's on a
// profile the reload leaves alone.
func TestStreamsCutOnReload(t *testing.T) {
	t.Parallel()
	relay := newHeldStreams(t)
	s, fake, _, dir := inflightServe(t, reloadCutPolicy, relay.URL)
	gate := fake.StallStreams(1)
	tok, wide := s.mint("conv-1"), s.mintProfile("conv-2", "wide")
	haiku := openStream(t, streamingModel(t, s.proxy, "claude-haiku-4-5"), tok)
	sonnet := openStream(t, streamingModel(t, s.proxy, "claude-sonnet-4-5"), tok)
	wideHaiku := openStream(t, streamingModel(t, s.proxy, "claude-haiku-4-5"), wide)
	for _, br := range []*bufio.Reader{haiku, sonnet, wideHaiku} {
		if ev := readEvent(t, br); !strings.Contains(ev, "message_start") {
			t.Fatalf("first event %q", ev)
		}
	}
	mod := relayStream(t, s, tok)
	wideMod := relayStream(t, s, wide)

	pol := strings.Replace(strings.Replace(reloadCutPolicy, `, "claude-haiku-*"`, "", 1), "relays = [\"mod\"]\n", "", 1)
	reloadPolicy(t, s, dir, pol)
	wantCut(t, "the haiku stream", haiku)
	wantCut(t, "the relay stream", mod)
	waitLog(t, s, `msg="requests in flight cut by a policy reload" count=2`)
	for _, what := range []string{"model claude-haiku-4-5 is not allowed", "relay mod is not allowed"} {
		waitLog(t, s, "the policy put in force while this request was under way no longer allows it: "+what+" for sandbox conv-1")
	}

	relay.waitOpen(t, 1)
	relay.next <- struct{}{}
	if ev := readEvent(t, wideMod); !strings.Contains(ev, "data: 2") {
		t.Fatalf("the wide profile's relay stream: %q", ev)
	}
	gate.Release()
	for what, br := range map[string]*bufio.Reader{"the sonnet stream": sonnet, "the wide profile's haiku stream": wideHaiku} {
		rest, err := io.ReadAll(br)
		if err != nil || !strings.Contains(string(rest), "event: message_stop") {
			t.Fatalf("%s did not run to its end: %v %q", what, err, rest)
		}
	}
}

// A reload that lowers a budget below what a token has spent refuses its
// request held while the budget was lowered, with the budget's 429, before
// the upstream hears a byte of it.
func TestHeldRequestAfterBudgetLowered(t *testing.T) {
	t.Parallel()
	pol := inflightPolicy + "budget = { requests = 5 }\n"
	s, fake, _, dir := inflightServe(t, pol, "")
	tok := s.mint("conv-1")
	if resp, body := holdMessage(t, s, tok, "claude-sonnet-4-5").finish(); resp.StatusCode != 200 {
		t.Fatalf("the first request: %s %s", resp.Status, body)
	}
	h := holdMessage(t, s, tok, "claude-sonnet-4-5")
	reloadPolicy(t, s, dir, strings.Replace(pol, "requests = 5", "requests = 1", 1))
	resp, body := h.finish()
	wantRefused(t, resp, body, 429, "no longer allows it: sandbox conv-1's token is over its budget: requests: 1 of 1 used")
	if !strings.Contains(body, `"type":"rate_limit_error"`) {
		t.Fatalf("not in the budget's shape: %s", body)
	}
	if n := messagesSeen(fake); n != 1 {
		t.Fatalf("the upstream received %d messages requests, want 1", n)
	}
}

// A reload that lowers a budget below what a token has spent, with its
// stream's share, cuts the stream; another token's, which has spent
// nothing, runs on.
func TestStreamCutOnBudgetLowered(t *testing.T) {
	t.Parallel()
	pol := inflightPolicy + "budget = { requests = 5 }\n"
	s, fake, _, dir := inflightServe(t, pol, "")
	spent, fresh := s.mint("conv-1"), s.mint("conv-2")
	if resp, body := holdMessage(t, s, spent, "claude-sonnet-4-5").finish(); resp.StatusCode != 200 {
		t.Fatalf("the first request: %s %s", resp.Status, body)
	}
	gate := fake.StallStreams(1)
	over := openStream(t, streamingMessage(t, s.proxy), spent)
	fits := openStream(t, streamingMessage(t, s.proxy), fresh)
	readEvent(t, over)
	readEvent(t, fits)

	reloadPolicy(t, s, dir, strings.Replace(pol, "requests = 5", "requests = 1", 1))
	wantCut(t, "the stream over the lowered budget", over)
	waitLog(t, s, "no longer allows it: sandbox conv-1's token is over its budget: requests: 1 of 1 used")
	gate.Release()
	if rest, err := io.ReadAll(fits); err != nil || !strings.Contains(string(rest), "event: message_stop") {
		t.Fatalf("the stream within the lowered budget did not run to its end: %v %q", err, rest)
	}
}

// The same on a replica sharing a PostgreSQL store, whose budgets are
// counted in the store: a reload that lowers the budget below what the
// token has spent cuts its stream, and refuses its request held while the
// budget was lowered before the upstream hears it.
func TestReplicaBudgetLoweredInFlight(t *testing.T) {
	t.Setenv("CPROXY_PG_DSN", pgTestDatabase(t))
	fake := fakes.NewAnthropic(fakes.AnthropicOptions{APIKey: canaryAPIKey})
	t.Cleanup(fake.Close)
	pol := "[profile.default]\nmodels = [\"claude-*\"]\nbudget = { requests = 5 }\n"
	s := startReplicaWith(t, fake.URL, "", pol)
	dir := filepath.Dir(s.cmd.Args[len(s.cmd.Args)-1])
	tok := s.mint("conv-1")
	if got := status(t, s, tok); got != 200 {
		t.Fatalf("the first request: %d", got)
	}
	gate := fake.StallStreams(1)
	defer gate.Release()
	stream := openStream(t, streamingMessage(t, s.proxy), tok)
	readEvent(t, stream)
	h := holdMessage(t, s, tok, "claude-sonnet-4-5")

	reloadPolicy(t, s, dir, strings.Replace(pol, "requests = 5", "requests = 1", 1))
	wantCut(t, "the stream over the lowered budget", stream)
	resp, body := h.finish()
	wantRefused(t, resp, body, 429, "no longer allows it: sandbox conv-1's token is over its budget")
	if n := messagesSeen(fake); n != 2 {
		t.Fatalf("the upstream received %d messages requests, want 2", n)
	}
}

// A reload that takes a repository away cuts a push the upstream is
// receiving as the reload goes in force, before its body ends: the push
// never completes upstream, and git is told why.
func TestPushCutOnReload(t *testing.T) {
	t.Parallel()
	s, _, gs, dir := inflightServe(t, inflightPolicy, "")
	if err := gs.CreateRepo("acme/app"); err != nil {
		t.Fatal(err)
	}
	ref := "refs/heads/agent/held"
	body, _ := pushBody(t, gs, ref)
	seen := len(gs.Requests())
	h := holdRequest(t, s, "POST /github/acme/app.git/git-receive-pack HTTP/1.1",
		[]string{"Host: cproxy.test", "Authorization: Bearer " + s.mint("conv-1"), "Content-Type: application/x-git-receive-pack-request"}, body)
	waitPushUpstream(t, gs, seen)
	pol := strings.Replace(inflightPolicy, `repos = [{ repo = "acme/app", access = "push", refs = ["refs/heads/agent/*"], delete = true }]`, "", 1)
	reloadPolicy(t, s, dir, pol)
	waitLog(t, s, `msg="requests in flight cut by a policy reload" count=1`)
	resp, answer := h.finish()
	wantRefused(t, resp, answer, 403, "no longer allows it: push to repository acme/app is not allowed for sandbox conv-1")
	if got := gs.Ref("acme/app", ref); got != "" {
		t.Fatalf("the upstream completed the push after the reload: %s is %s", ref, got)
	}
}

// fetchPolicy lets the default profile fetch acme/app.
const fetchPolicy = `
[profile.default]
repos = [{ repo = "acme/app", access = "read" }]
`

// A reload that takes a repository away cuts a fetch whose pack is
// streaming back to git, as it cuts a push: the upstream's answer stops
// reaching the client, the upstream sees its request cancelled, and the
// log says why.
func TestFetchCutOnReload(t *testing.T) {
	t.Parallel()
	cancelled := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasSuffix(r.URL.Path, "/git-upload-pack") {
			http.NotFound(w, r)
			return
		}
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/x-git-upload-pack-result")
		io.WriteString(w, "0008NAK\n")
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
			close(cancelled)
		case <-time.After(heldDeadline):
		}
	}))
	t.Cleanup(up.Close)
	dir := t.TempDir()
	advWrite(t, dir, fmt.Sprintf(`
[upstream.github]
url = %q
credential = "file:github.key"
`, up.URL), fetchPolicy)
	s := startServe(t, dir)

	req, err := http.NewRequest("POST", s.proxy+"/github/acme/app.git/git-upload-pack", strings.NewReader("0000"))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-git-upload-pack-request")
	br := openStream(t, req, s.mint("conv-1"))
	if line, err := br.ReadString('\n'); err != nil || line != "0008NAK\n" {
		t.Fatalf("the pack's first line: %q %v", line, err)
	}
	reloadPolicy(t, s, dir, strings.Replace(fetchPolicy, "acme/app", "acme/other", 1))
	wantCut(t, "the fetch", br)
	select {
	case <-cancelled:
	case <-time.After(heldDeadline):
		t.Fatal("the upstream's answer was never cancelled")
	}
	waitLog(t, s, `msg="requests in flight cut by a policy reload" count=1`)
	waitLog(t, s, "no longer allows it: repository acme/app is not allowed for sandbox conv-1")
}
