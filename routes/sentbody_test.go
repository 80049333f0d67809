package routes

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http/httptest"
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
				a := &audit{srv: e.srv, r: req, session: sess, decide: anyProfile}
				n := int64(-1)
				if declared {
					n = int64(len(body))
				}
				b := &sentBody{ReadCloser: io.NopCloser(iotest.HalfReader(strings.NewReader(body))), c: &call{a: a, ctx: context.Background()}, recheck: true, left: n}
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
