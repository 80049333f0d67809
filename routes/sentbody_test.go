package routes

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"testing/iotest"
)

// A streamed body reaches the upstream whole while its token is live, read
// in any sizes; once the token is revoked before the body's end, the
// upstream never gets its last byte, by declared length or not.
func TestSentBodyWithholdsTheEnd(t *testing.T) {
	e := newEnv(t)
	body := strings.Repeat("0123456789", 100)
	for _, sizes := range []int{2, 3, 7, 64, 1024} {
		for _, declared := range []bool{false, true} {
			for _, revoke := range []bool{false, true} {
				tok := e.token("conv-1")
				req := httptest.NewRequest("POST", "/v1/messages", nil)
				req.Header.Set("X-Api-Key", tok)
				sess, err := e.srv.authenticate(req)
				if err != nil {
					t.Fatal(err)
				}
				a := &Call{srv: e.srv, r: req, session: sess, decide: AnyProfile}
				n := int64(-1)
				if declared {
					n = int64(len(body))
				}
				b := &sentBody{ReadCloser: io.NopCloser(iotest.HalfReader(strings.NewReader(body))), c: &outbound{a: a, ctx: context.Background()}, recheck: true, left: n}
				var got bytes.Buffer
				buf := make([]byte, sizes)
				revoked := false
				for {
					if revoke && !revoked && got.Len() >= len(body)/2 {
						// Half the body has gone upstream, not all of it.
						e.srv.store.RevokeSandbox(context.Background(), "conv-1", e.srv.now())
						revoked = true
					}
					m, err := b.Read(buf)
					got.Write(buf[:m])
					if err == io.EOF {
						break
					}
					if err != nil {
						if !revoked || !strings.Contains(err.Error(), "was revoked") {
							t.Fatalf("reads of %d, declared %v, revoked %v: %v", sizes, declared, revoke, err)
						}
						break
					}
				}
				switch {
				case !revoked && got.String() != body:
					t.Errorf("reads of %d, declared %v: the upstream got %d of %d bytes", sizes, declared, got.Len(), len(body))
				case revoked && got.Len() >= len(body):
					t.Errorf("reads of %d, declared %v: the upstream got the whole body after the revocation", sizes, declared)
				}
			}
		}
	}
	one := &sentBody{ReadCloser: io.NopCloser(strings.NewReader("x")), recheck: true, left: -1}
	if _, err := one.Read(make([]byte, 1)); !errors.Is(err, io.ErrShortBuffer) {
		t.Errorf("a one-byte read of a body of unknown length: %v, want io.ErrShortBuffer", err)
	}
}

// A revocation cuts a stream in flight and refuses a request whose body is
// still arriving, each at once, while another sandbox's stream runs on.
// Run with -race: it ends requests from the admin API's goroutine while
// their handlers and transports run.
func TestRevocationEndsRequestsInFlight(t *testing.T) {
	e := newEnv(t)
	gate := e.fake.StallStreams(3)
	defer gate.Release()
	tok, keep := e.token("conv-1"), e.token("conv-2")
	stream := func(tok string) *http.Response {
		req, _ := http.NewRequest("POST", e.proxy.URL+"/v1/messages", strings.NewReader(`{"model":"claude-sonnet-4-5","max_tokens":64,"stream":true,"messages":[{"role":"user","content":"hi"}]}`))
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("Anthropic-Version", "2023-06-01")
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("stream: %v %v", resp, err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	cut, kept := stream(tok), stream(keep)
	<-gate.Reached()
	pr, pw := io.Pipe()
	defer pw.Close()
	held := make(chan *http.Response, 1)
	go func() {
		req, _ := http.NewRequest("POST", e.proxy.URL+"/v1/messages", pr)
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("Anthropic-Version", "2023-06-01")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
		}
		held <- resp
	}()
	pw.Write([]byte(`{"model":"claude-sonnet-4-5",`)) // and no more
	for inFlight := 0; inFlight < 2; {
		// The stream and the held request, both authenticated.
		e.srv.flights.mu.Lock()
		inFlight = len(e.srv.flights.bySandbox["conv-1"])
		e.srv.flights.mu.Unlock()
		runtime.Gosched()
	}
	req, _ := http.NewRequest("DELETE", e.admin.URL+"/tokens?sandbox=conv-1", nil)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 204 {
		t.Fatalf("DELETE: %v %v", resp, err)
	}
	if rest, err := io.ReadAll(cut.Body); err == nil || strings.Contains(string(rest), "message_stop") {
		t.Errorf("the revoked sandbox's stream was not cut: %v %q", err, rest)
	}
	if resp := <-held; resp == nil || resp.StatusCode != 401 {
		t.Errorf("the request whose body was arriving: %v, want 401", resp)
	}
	gate.Release()
	if rest, err := io.ReadAll(kept.Body); err != nil || !strings.Contains(string(rest), "message_stop") {
		t.Errorf("another sandbox's stream: %v %q", err, rest)
	}
}
