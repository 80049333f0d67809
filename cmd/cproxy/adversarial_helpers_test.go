package main

// Helpers for the adversarial HTTP suite (adversarial_http_test.go): raw
// sockets against the real `cproxy serve`, and upstreams whose every byte
// the test decides. Their names start with rawHTTP so that other suites'
// helpers in this package do not clash with them.

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// rawHTTPDeadline bounds every raw exchange: far above what any answer
// takes, so that it only ends a test that would otherwise hang.
const rawHTTPDeadline = 15 * time.Second

// rawHTTPCanaries are the real credentials no response and no log may hold.
var rawHTTPCanaries = []string{canaryAPIKey, canaryOAuth, canaryOAuth2, canaryGitHub, canaryNPM, canaryHub, canaryMod}

// rawHTTPNoSecrets fails the test if s holds a canary credential: raw,
// base64, URL-encoded, or its last 24 characters.
func rawHTTPNoSecrets(t *testing.T, where, s string) {
	t.Helper()
	for _, c := range rawHTTPCanaries {
		for _, form := range []string{c, base64.StdEncoding.EncodeToString([]byte(c)), url.QueryEscape(c), c[len(c)-24:]} {
			if strings.Contains(s, form) {
				t.Errorf("%s holds a canary credential (%.12s…)", where, c)
			}
		}
	}
}

// rawHTTPAddr is the proxy listener's host:port.
func rawHTTPAddr(s *served) string { return strings.TrimPrefix(s.proxy, "http://") }

// rawHTTPConn is one raw connection to the proxy listener.
type rawHTTPConn struct {
	t   *testing.T
	c   net.Conn
	br  *bufio.Reader
	raw *bytes.Buffer // every byte read so far, as it came
}

func rawHTTPDial(t *testing.T, s *served) *rawHTTPConn {
	t.Helper()
	c, err := net.Dial("tcp", rawHTTPAddr(s))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(rawHTTPDeadline))
	raw := &bytes.Buffer{}
	return &rawHTTPConn{t: t, c: c, br: bufio.NewReader(io.TeeReader(c, raw)), raw: raw}
}

// send writes bytes exactly as given.
func (rc *rawHTTPConn) send(raw string) {
	rc.t.Helper()
	if _, err := io.WriteString(rc.c, raw); err != nil {
		rc.t.Fatalf("writing the request: %v", err)
	}
}

// rawHTTPReply is one response as read off the wire.
type rawHTTPReply struct {
	*http.Response
	Body string
}

// read reads one response (to a request of method) and its whole body,
// checking both for canaries.
func (rc *rawHTTPConn) read(method string) rawHTTPReply {
	rc.t.Helper()
	resp, err := http.ReadResponse(rc.br, &http.Request{Method: method})
	if err != nil {
		rc.t.Fatalf("reading a response: %v", err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		rc.t.Fatalf("reading a response body: %v", err)
	}
	rawHTTPNoSecrets(rc.t, "a response", rc.raw.String())
	return rawHTTPReply{resp, string(b)}
}

// rest reads until the server closes the connection and returns what came;
// a test uses it after a request with Connection: close, so it never waits
// on a timer.
func (rc *rawHTTPConn) rest() string {
	rc.t.Helper()
	b, err := io.ReadAll(rc.br)
	if err != nil && !rawHTTPIsReset(err) {
		rc.t.Fatalf("reading to the end of the connection: %v", err)
	}
	rawHTTPNoSecrets(rc.t, "the rest of a connection", string(b))
	return string(b)
}

// rawHTTPIsReset reports a connection the peer reset: how a server that
// closes with unread request bytes in its buffer ends it.
func rawHTTPIsReset(err error) bool { return errors.Is(err, syscall.ECONNRESET) }

// rawHTTPRequest builds an HTTP/1.1 request with CRLF line ends: the
// request line, then each header line, then a blank line and the body.
func rawHTTPRequest(line string, headers []string, body string) string {
	var b strings.Builder
	b.WriteString(line + "\r\n")
	for _, h := range headers {
		b.WriteString(h + "\r\n")
	}
	b.WriteString("\r\n")
	b.WriteString(body)
	return b.String()
}

// rawHTTPChunk is data as one chunk of a chunked body.
func rawHTTPChunk(data string) string { return fmt.Sprintf("%x\r\n%s\r\n", len(data), data) }

// rawHTTPSeen is one request an upstream of the test's own received.
type rawHTTPSeen struct {
	Method, Path, RawQuery, Host string
	Header, Trailer              http.Header
	Body                         string
	Proto                        string
}

// rawHTTPLog records what an upstream or "other host" received.
type rawHTTPLog struct {
	mu   sync.Mutex
	reqs []rawHTTPSeen
}

func (l *rawHTTPLog) add(r *http.Request, body []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.reqs = append(l.reqs, rawHTTPSeen{Method: r.Method, Path: r.URL.Path, RawQuery: r.URL.RawQuery, Host: r.Host,
		Header: r.Header.Clone(), Trailer: r.Trailer.Clone(), Body: string(body), Proto: r.Proto})
}

func (l *rawHTTPLog) all() []rawHTTPSeen {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]rawHTTPSeen(nil), l.reqs...)
}

func (l *rawHTTPLog) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.reqs)
}

// rawHTTPCheckSeen fails the test if a request an upstream received holds
// a sandbox token anywhere (headers, trailers, body).
func rawHTTPCheckSeen(t *testing.T, reqs []rawHTTPSeen) {
	t.Helper()
	for _, r := range reqs {
		var b bytes.Buffer
		r.Header.Write(&b)
		r.Trailer.Write(&b)
		b.WriteString(r.Body)
		if strings.Contains(b.String(), "cpx_") {
			t.Errorf("%s %s: the upstream received a sandbox token:\n%s", r.Method, r.Path, b.String())
		}
	}
}

// rawHTTPUpstreamCase is the request header that tells rawHTTPUpstream how
// to answer; cproxy passes it through like any other header.
const rawHTTPUpstreamCase = "X-Adversarial-Case"

// rawHTTPUpstream is an upstream of the test's own on loopback: it records
// every request (headers, trailers, framing, body) and answers as its
// X-Adversarial-Case header says, with raw bytes where net/http would
// refuse to write them:
//
//   - "" (none): 200 {"ok":true}; a request that asks for a protocol
//     switch (Upgrade) gets 101 and a tunnel whose bytes are recorded.
//   - "upgrade-unasked": 101 and a tunnel, whatever was asked.
//   - "hop-headers": 200 with Connection naming X-Secret and X-Secret-2
//     (in two Connection fields) and other hop-by-hop fields.
//   - "hop-close": 200 with Connection: close and Keep-Alive, then a close.
//   - "cl-and-te": 200 with both Content-Length and a chunked body.
//   - "two-cl": 200 with two different Content-Lengths.
//   - "te-gzip": 200 with Transfer-Encoding: gzip, chunked.
//   - "redirect-302", "redirect-307": a redirect to Location.
type rawHTTPUpstream struct {
	URL string
	// Location is where the redirect cases point: another host.
	Location string
	log      rawHTTPLog
	srv      *httptest.Server

	mu     sync.Mutex
	tunnel bytes.Buffer // what came through a tunnel after a 101
}

func newRawHTTPUpstream(t *testing.T, location string) *rawHTTPUpstream {
	u := &rawHTTPUpstream{Location: location}
	u.srv = httptest.NewServer(http.HandlerFunc(u.serve))
	t.Cleanup(u.srv.Close)
	u.URL = u.srv.URL
	return u
}

func (u *rawHTTPUpstream) tunnelled() string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.tunnel.String()
}

func (u *rawHTTPUpstream) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body) // to the end, so that r.Trailer is filled
	u.log.add(r, body)
	raw := func(s string) {
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			panic(err)
		}
		defer c.Close()
		brw.WriteString(s)
		brw.Flush()
	}
	tunnel := func(upgrade string) {
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			panic(err)
		}
		defer c.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + upgrade + "\r\n\r\n")
		brw.Flush()
		c.SetReadDeadline(time.Now().Add(rawHTTPDeadline))
		b := make([]byte, 4096)
		for {
			n, err := brw.Read(b)
			u.mu.Lock()
			u.tunnel.Write(b[:n])
			u.mu.Unlock()
			if err != nil {
				return
			}
		}
	}
	switch r.Header.Get(rawHTTPUpstreamCase) {
	case "":
		if up := r.Header.Get("Upgrade"); up != "" {
			tunnel(up)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"ok":true}`)
	case "upgrade-unasked":
		tunnel("websocket")
	case "hop-headers":
		raw("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: X-Secret\r\nConnection: keep-alive, X-Secret-2\r\nX-Secret: s3cret\r\nX-Secret-2: s3cret\r\n" +
			"Keep-Alive: timeout=5, max=100\r\nProxy-Connection: keep-alive\r\nUpgrade: h2c\r\nTE: trailers\r\nX-Kept: yes\r\nContent-Length: 11\r\n\r\n{\"ok\":true}")
	case "hop-close":
		raw("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\nKeep-Alive: timeout=5\r\nContent-Length: 11\r\n\r\n{\"ok\":true}")
	case "cl-and-te":
		raw("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n" +
			rawHTTPChunk(`{"ok":true}`) + "0\r\n\r\n")
	case "two-cl":
		raw("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\nContent-Length: 2\r\n\r\n{\"ok\":true}")
	case "te-gzip":
		raw("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: gzip, chunked\r\n\r\n" +
			rawHTTPChunk(`{"ok":true}`) + "0\r\n\r\n")
	case "redirect-302", "redirect-307":
		w.Header().Set("Location", u.Location)
		w.Header().Set("Content-Type", "application/json")
		status := http.StatusFound
		if strings.HasSuffix(r.Header.Get(rawHTTPUpstreamCase), "307") {
			status = http.StatusTemporaryRedirect
		}
		w.WriteHeader(status)
		io.WriteString(w, `{"moved":true}`)
	default:
		http.Error(w, "unknown case", http.StatusTeapot)
	}
}

// rawHTTPOtherHost is a loopback server that stands for another host: it
// records whatever reaches it, which should be nothing.
func rawHTTPOtherHost(t *testing.T) (*httptest.Server, *rawHTTPLog) {
	log := &rawHTTPLog{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		log.add(r, body)
	}))
	t.Cleanup(srv.Close)
	return srv, log
}
