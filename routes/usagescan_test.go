package routes

import (
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/cproxy/cproxy/tokens"
)

const sseStream = "event: message_start\r\n" +
	`data: {"type":"message_start","message":{"id":"msg_1","usage":{"input_tokens":25,"cache_creation_input_tokens":7,"cache_read_input_tokens":3,"output_tokens":1}}}` + "\r\n\r\n" +
	"event: content_block_delta\n" +
	`data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello"}}` + "\n\n" +
	"event: ping\ndata: {\"type\":\"ping\"}\n\n" +
	"event: message_delta\n" +
	`data: {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":15}}` + "\n\n" +
	"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"

func readUsage(t *testing.T, body, ct string, oneByte bool, closeEarly int) (tokens.Usage, bool, string) {
	t.Helper()
	var got tokens.Usage
	var complete bool
	calls := 0
	var r io.Reader = strings.NewReader(body)
	if oneByte {
		r = iotest.OneByteReader(r)
	}
	ub := newUsageBody(io.NopCloser(r), ct, func(u tokens.Usage, c bool) { got, complete = u, c; calls++ })
	var out []byte
	if closeEarly > 0 {
		out = make([]byte, closeEarly)
		io.ReadFull(ub, out)
	} else {
		out, _ = io.ReadAll(ub)
	}
	ub.Close()
	ub.Close()
	if calls != 1 {
		t.Errorf("done called %d times", calls)
	}
	return got, complete, string(out)
}

func TestUsageFromSSE(t *testing.T) {
	for _, oneByte := range []bool{false, true} {
		u, complete, out := readUsage(t, sseStream, "text/event-stream; charset=utf-8", oneByte, 0)
		if out != sseStream {
			t.Fatal("the stream was changed on its way through")
		}
		want := tokens.Usage{Input: 25, Output: 15, CacheRead: 3, CacheWrite: 7}
		if u != want || !complete {
			t.Errorf("oneByte=%v: usage %+v complete %v, want %+v", oneByte, u, complete, want)
		}
	}
}

func TestUsageWhenCutOff(t *testing.T) {
	// The client leaves after the first delta: charged the estimate of what
	// was streamed, not the message_start's single output token.
	cut := strings.Index(sseStream, "event: ping")
	u, complete, _ := readUsage(t, sseStream, "text/event-stream", false, cut)
	if complete || u.Input != 25 || u.Output < 2 {
		t.Errorf("cut off: usage %+v complete %v", u, complete)
	}
}

func TestUsageFromJSON(t *testing.T) {
	body := `{"id":"msg_1","type":"message","content":[{"type":"text","text":"hi"}],"usage":{"input_tokens":12,"output_tokens":4,"cache_read_input_tokens":100}}`
	u, complete, out := readUsage(t, body, "application/json", true, 0)
	if out != body || !complete || u != (tokens.Usage{Input: 12, Output: 4, CacheRead: 100}) {
		t.Errorf("usage %+v complete %v", u, complete)
	}
	u, complete, _ = readUsage(t, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`, "application/json", false, 0)
	if complete || u != (tokens.Usage{}) {
		t.Errorf("an error answer: usage %+v complete %v", u, complete)
	}
}
