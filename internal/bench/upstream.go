package bench

import (
	"bytes"
	"crypto/subtle"
	"io"
	"net/http"
	"strconv"
	"sync"
)

// HoldHeader, on a streaming request, makes the upstream send the stream's
// first events and then hold it open until POST /bench/release (sent to the
// upstream directly), so a proxy can be measured with many streams open.
const HoldHeader = "X-Bench-Hold"

// ReleasePath releases every held stream; it is answered by the upstream
// only, never proxied by the benchmark.
const ReleasePath = "/bench/release"

// Upstream is a lean stand-in for the Anthropic API: it checks the one header
// every proxy in the comparison must set (x-api-key), drains the body, and
// answers from bytes prepared once. internal/fakes.Anthropic is faithful
// rather than fast: it records every request and its body, parses the JSON
// and encodes every event, which on a 2-core machine would take CPU from the
// proxies being measured. This one does as little as an upstream can.
type Upstream struct {
	key []byte

	mu      sync.Mutex
	release chan struct{} // closed by ReleasePath; then replaced for later holds
}

// NewUpstream returns an upstream that accepts the API key key.
func NewUpstream(key string) *Upstream {
	return &Upstream{key: []byte(key), release: make(chan struct{})}
}

var (
	streamFlag = []byte(`"stream":true`)

	messageJSON = []byte(`{"id":"msg_01BenchBenchBenchBench01","type":"message","role":"assistant","model":"` + Model +
		`","content":[{"type":"text","text":"The test fails because get3 returns the wrapped error before checking for a missing key; I changed it to return ErrNotFound first."}],` +
		`"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":5120,"cache_creation_input_tokens":0,"cache_read_input_tokens":4096,` +
		`"cache_creation":{"ephemeral_5m_input_tokens":0,"ephemeral_1h_input_tokens":0},"output_tokens":31,"service_tier":"standard"}}`)

	// streamHead is what a stream sends before the model's first token; a
	// held stream stops after it. Its first event is the one the benchmark
	// times.
	streamHead = []byte("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_01BenchBenchBenchBench01\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"" + Model +
		"\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":5120,\"cache_creation_input_tokens\":0,\"cache_read_input_tokens\":4096,\"output_tokens\":1,\"service_tier\":\"standard\"}}}\n\n" +
		"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n" +
		"event: ping\ndata: {\"type\": \"ping\"}\n\n")

	streamTail = func() []byte {
		var b bytes.Buffer
		for _, w := range []string{"The ", "test ", "fails ", "because ", "get3 ", "returns ", "the ", "wrapped ", "error ", "first."} {
			b.WriteString(`event: content_block_delta` + "\n" + `data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"` + w + `"}}` + "\n\n")
		}
		b.WriteString("event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n" +
			"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":10}}\n\n" +
			"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
		return b.Bytes()
	}()

	unauthorizedJSON = []byte(`{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}`)
	messageLen       = strconv.Itoa(len(messageJSON))
)

func (u *Upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == ReleasePath {
		u.mu.Lock()
		close(u.release)
		u.release = make(chan struct{})
		u.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
		return
	}
	// A held stream waits on the release channel in force when it arrived:
	// taken before anything is sent, so a release that follows the stream's
	// first event always lets it go.
	u.mu.Lock()
	release := u.release
	u.mu.Unlock()
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return // the client went away
	}
	h := w.Header()
	h.Set("Request-Id", "req_011CBenchBenchBenchBench")
	if subtle.ConstantTimeCompare([]byte(r.Header.Get("X-Api-Key")), u.key) != 1 {
		h.Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		w.Write(unauthorizedJSON)
		return
	}
	if !bytes.Contains(body, streamFlag) {
		h.Set("Content-Type", "application/json")
		h.Set("Content-Length", messageLen)
		w.Write(messageJSON)
		return
	}
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	rc := http.NewResponseController(w)
	w.Write(streamHead)
	if rc.Flush() != nil {
		return
	}
	if r.Header.Get(HoldHeader) != "" {
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
	}
	w.Write(streamTail)
}
