package routes

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"testing"
)

// BenchmarkReadBody is the hot path's body read: a model request's body of
// declared length read whole under its sandbox's share of the memory for
// bodies, then taken by the upstream. What a request costs beyond the
// benchmark's own request and reader is the body's buffer, lent again.
func BenchmarkReadBody(b *testing.B) {
	for _, size := range []int{2 << 10, 50 << 10} {
		b.Run(fmt.Sprintf("%dKiB", size>>10), func(b *testing.B) {
			body := bytes.Repeat([]byte("x"), size)
			m := newBodyMemory(256<<20, 0, nil)
			src := bytes.NewReader(body)
			rc := io.NopCloser(src)
			r := (&http.Request{Header: http.Header{}}).WithContext(context.Background())
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				src.Reset(body)
				r.Body, r.ContentLength = rc, int64(size)
				h := BodyHold{m: m, sandbox: "conv-1"}
				if _, err := readBody(r, 32<<20, &h); err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, r.Body)
				h.release()
			}
		})
	}
}
