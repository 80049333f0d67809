package routes

import (
	"bytes"
	"crypto/sha256"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"testing"
)

// The transport writes a request body to an upstream connection with
// io.Copy. Through dialUpstream's connections that copy goes through a lent
// buffer: the upstream gets every byte, and a 21.9 KB body (a Claude Code
// request) no longer leaves a buffer of its size behind for the collector.
func TestUpstreamConnLendsBodyCopyBuffers(t *testing.T) {
	body := bytes.Repeat([]byte(`{"role":"user","content":"0123456789"},`), 600) // 22 KB
	want := sha256.Sum256(body)
	var got [sha256.Size]byte
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := sha256.New()
		io.Copy(h, r.Body)
		h.Sum(got[:0])
	}))
	defer up.Close()

	// allocated is what one request allocates, in bytes, sent by a
	// transport dialing with dial (the upstream's handler, in this process
	// too, allocates the same for every dial).
	allocated := func(transport *http.Transport) uint64 {
		t.Helper()
		defer transport.CloseIdleConnections()
		send := func() {
			// onlyReader hides bytes.Reader, as the model route's body is
			// not one: the transport's path for an unknown reader.
			req, _ := http.NewRequest(http.MethodPost, up.URL, onlyReader{bytes.NewReader(body)})
			req.ContentLength = int64(len(body))
			resp, err := transport.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if got != want {
				t.Fatal("the upstream did not get the body sent")
			}
		}
		send() // the connection, and the buffers it keeps
		const n = 200
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for range n {
			send()
		}
		runtime.ReadMemStats(&after)
		return (after.TotalAlloc - before.TotalAlloc) / n
	}
	plain := allocated(&http.Transport{})
	lent := allocated(&http.Transport{DialContext: dialUpstream})
	t.Logf("allocated per request: %d bytes with a plain connection, %d through dialUpstream's", plain, lent)
	// A third: under the race detector sync.Pool drops a quarter of what it
	// is given back, on purpose.
	if plain < lent+uint64(len(body))/3 {
		t.Errorf("dialUpstream's connections saved %d bytes per request of a %d-byte body; want most of it", int64(plain)-int64(lent), len(body))
	}
}

type onlyReader struct{ io.Reader }
