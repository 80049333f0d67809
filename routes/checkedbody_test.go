package routes

import (
	"bytes"
	"fmt"
	"io"
	"maps"
	"strings"
	"sync"
	"testing"
	"testing/iotest"
)

// A checked body gives the upstream exactly the bytes that were checked,
// however it is read, and lets go of its buffer once they have all been read.
func TestCheckedBody(t *testing.T) {
	for _, n := range []int{1, 100, 16 << 10, 16<<10 + 1, 22 << 10, 3 << 20} {
		want := bytes.Repeat([]byte("0123456789abcdef"), n/16+1)[:n]
		for _, oneByte := range []bool{false, true} {
			b, lent := getBodyBuffer(n)
			if len(b) != n || (lent != nil) != (n <= 1<<maxBodyBufferShift) {
				t.Fatalf("getBodyBuffer(%d): %d bytes, lent %v", n, len(b), lent != nil)
			}
			copy(b, want)
			cb := &checkedBody{b: b, lent: lent}
			var r io.Reader = cb
			if oneByte {
				r = iotest.OneByteReader(r)
			}
			got, err := io.ReadAll(r)
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("%d bytes (one at a time: %v): read %d bytes, %v", n, oneByte, len(got), err)
			}
			if cb.b != nil {
				t.Errorf("%d bytes: the buffer is still held after the last byte was read", n)
			}
			if m, err := cb.Read(make([]byte, 8)); m != 0 || err != io.EOF {
				t.Errorf("%d bytes: a read after the end gave %d, %v", n, m, err)
			}
		}
	}
}

func TestBodyBufferClass(t *testing.T) {
	for _, c := range []struct{ n, class int }{
		{0, -1}, {1, 0}, {16 << 10, 0}, {16<<10 + 1, 1}, {32 << 10, 1}, {1 << 20, 6}, {2 << 20, 7}, {2<<20 + 1, -1},
	} {
		if got := bodyBufferClass(c.n); got != c.class {
			t.Errorf("bodyBufferClass(%d) = %d, want %d", c.n, got, c.class)
		}
	}
}

// Lent buffers never mix requests: of many model requests at once, with
// bodies of sizes that share buffer classes (and some refused after their
// body was read, whose buffers must not be lent again half-filled), the
// upstream receives each allowed body exactly as its client sent it.
func TestCheckedBodiesNeverMix(t *testing.T) {
	e := newEnv(t, func(o *testOptions) {
		// All 200 at once from one token: above the default concurrency.
		o.Policy = mustPolicy(t, "[profile.default]\nmodels = [\"claude-sonnet-*\"]\nbudget = { concurrent = 200 }\n")
	})
	tok := e.token("conv-1")
	sent := make(chan string, 200)
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Go(func() {
			model := "claude-sonnet-4-5"
			if i%5 == 0 {
				model = "claude-opus-4-1" // refused once its body is read
			}
			filler := strings.Repeat(string(rune('a'+i%26)), 9000+i*257%40000)
			body := fmt.Sprintf(`{"model":%q,"max_tokens":16,"messages":[{"role":"user","content":"%d %s"}]}`, model, i, filler)
			r := e.do("POST", "/v1/messages", bearer(tok), body)
			switch {
			case i%5 == 0 && r.status != 403, i%5 != 0 && r.status != 200:
				t.Errorf("request %d (%s): %d %s", i, model, r.status, r.body)
			case i%5 != 0:
				sent <- body
			}
		})
	}
	wg.Wait()
	close(sent)
	want := map[string]int{}
	for b := range sent {
		want[b]++
	}
	got := map[string]int{}
	for _, req := range e.fake.Requests() {
		got[string(req.Body)]++
	}
	if len(got) != 160 || !maps.Equal(got, want) {
		t.Errorf("the upstream received %d distinct bodies, %d of them as sent; want the 160 allowed bodies exactly", len(got), countSame(got, want))
	}
}

func countSame(got, want map[string]int) int {
	n := 0
	for b := range got {
		if want[b] > 0 {
			n++
		}
	}
	return n
}
