package model

import (
	"encoding/json"
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

// readUsage reads body through the usage scanner, whole or only its first
// closeEarly bytes, and returns the usage reported to done, which counts it
// says the upstream reported, and what passed through.
func readUsage(t *testing.T, body, ct string, oneByte bool, closeEarly int) (u tokens.Usage, input, output bool, out string) {
	t.Helper()
	calls := 0
	var r io.Reader = strings.NewReader(body)
	if oneByte {
		r = iotest.OneByteReader(r)
	}
	ub := newUsageBody(io.NopCloser(r), ct, nil, func(got tokens.Usage, in, o bool) { u, input, output = got, in, o; calls++ })
	var b []byte
	if closeEarly > 0 {
		b = make([]byte, closeEarly)
		io.ReadFull(ub, b)
	} else {
		b, _ = io.ReadAll(ub)
	}
	ub.Close()
	ub.Close()
	if calls != 1 {
		t.Errorf("done called %d times", calls)
	}
	return u, input, output, string(b)
}

func TestUsageFromSSE(t *testing.T) {
	for _, oneByte := range []bool{false, true} {
		u, input, output, out := readUsage(t, sseStream, "text/event-stream; charset=utf-8", oneByte, 0)
		if out != sseStream {
			t.Fatal("the stream was changed on its way through")
		}
		want := tokens.Usage{Input: 25, Output: 15, CacheRead: 3, CacheWrite: 7}
		if u != want || !input || !output {
			t.Errorf("oneByte=%v: usage %+v reported input %v output %v, want %+v", oneByte, u, input, output, want)
		}
	}
}

// A stream that stops before message_delta reported its input (with
// message_start) but not its output: the client left after the first
// delta, inside one huge event, or the stream ended without a usage report.
func TestUsageWhenCutOff(t *testing.T) {
	cut := strings.Index(sseStream, "event: ping")
	huge := sseStream[:cut] + "event: content_block_delta\ndata: " + strings.Repeat("x", 3*maxUsageLine) + "\n\n" + sseStream[cut:]
	noUsage := strings.Replace(sseStream, `,"usage":{"output_tokens":15}`, "", 1)
	for _, c := range []struct {
		name, body string
		closeAt    int
	}{
		{"client left after a delta", sseStream, cut},
		{"client left inside a huge event", huge, cut + 2*maxUsageLine},
		{"no message_delta usage", noUsage, 0},
		{"stream ends after message_start", sseStream[:cut], 0},
	} {
		u, input, output, _ := readUsage(t, c.body, "text/event-stream", false, c.closeAt)
		if !input || output || u.Input != 25 {
			t.Errorf("%s: usage %+v reported input %v output %v, want input 25 reported and output not", c.name, u, input, output)
		}
	}
}

func TestUsageFromJSON(t *testing.T) {
	body := `{"id":"msg_1","type":"message","content":[{"type":"text","text":"hi"}],"usage":{"input_tokens":12,"output_tokens":4,"cache_read_input_tokens":100}}`
	u, input, output, out := readUsage(t, body, "application/json", true, 0)
	if out != body || !input || !output || u != (tokens.Usage{Input: 12, Output: 4, CacheRead: 100}) {
		t.Errorf("usage %+v reported input %v output %v", u, input, output)
	}
	u, input, output, _ = readUsage(t, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`, "application/json", false, 0)
	if input || output || u != (tokens.Usage{}) {
		t.Errorf("an error answer: usage %+v reported input %v output %v", u, input, output)
	}
	// An answer over what the scanner holds is passed on whole, its usage
	// unread.
	big := `{"content":[{"type":"text","text":"` + strings.Repeat("x", maxUsageJSON) + `"}],"usage":{"input_tokens":12,"output_tokens":123456}}`
	u, input, output, out = readUsage(t, big, "application/json", false, 0)
	if out != big || input || output || u != (tokens.Usage{}) {
		t.Errorf("an answer over %d bytes: usage %+v reported input %v output %v", maxUsageJSON, u, input, output)
	}
}

// Counts no request can have pass to the meter as they are, which takes
// them for not reported; a usage object without input_tokens does not give
// the input.
func TestUsageImpossibleCounts(t *testing.T) {
	negative := strings.Replace(sseStream, `"output_tokens":15`, `"output_tokens":-5`, 1)
	u, input, output, _ := readUsage(t, negative, "text/event-stream", false, 0)
	if u.Output != -5 || !output || !input {
		t.Errorf("message_delta output_tokens -5: usage %+v reported input %v output %v, want -5 given", u, input, output)
	}
	u, input, output, _ = readUsage(t, `{"usage":{"output_tokens":4}}`, "application/json", false, 0)
	if input || !output || u.Output != 4 {
		t.Errorf("no input_tokens: usage %+v reported input %v output %v, want only the output given", u, input, output)
	}
}

// FuzzUsageInto: on valid JSON, the in-place walk reads the same counts as
// decoding the answer with encoding/json (keys matched exactly, the last of
// a repeated key winning, a negative count as it is), and finds nothing
// where encoding/json finds no usage object with integer counts.
func FuzzUsageInto(f *testing.F) {
	f.Add(`{"id":"msg_1","usage":{"input_tokens":12,"output_tokens":4,"cache_read_input_tokens":100}}`)
	f.Add(`{"usage":{"input_tokens":1.5}}`)
	f.Add(`{"usage":null,"usage":{"output_tokens":-3,"input_tokens":null}}`)
	f.Add(`{"u\u0073age":{"output_tokens":7}} `)
	f.Add(`{"usage":{"output_tokens":"7"}}`)
	f.Add(`[{"usage":{"output_tokens":7}}]`)
	f.Fuzz(func(t *testing.T, doc string) {
		if !json.Valid([]byte(doc)) {
			return
		}
		start := tokens.Usage{Input: 1, Output: 2, CacheRead: 3, CacheWrite: 4}
		got, gotIn, gotOut := start, false, false
		if raw, ok := jsonMember([]byte(doc), "usage"); ok {
			gotIn, gotOut = usageInto(raw, &got)
		}
		want, wantIn, wantOut, wantOK := start, false, false, false
		var top map[string]json.RawMessage
		var fields map[string]json.RawMessage
		if json.Unmarshal([]byte(doc), &top) == nil && json.Unmarshal(top["usage"], &fields) == nil && fields != nil {
			wantOK = true
			var counts [4]*int64
			for i, name := range usageFields {
				if raw, ok := fields[name]; ok && json.Unmarshal(raw, &counts[i]) != nil {
					wantOK = false
				}
			}
			if wantOK {
				wantIn, wantOut = counts[0] != nil, counts[1] != nil
				for i, dst := range []*int64{&want.Input, &want.Output, &want.CacheRead, &want.CacheWrite} {
					if counts[i] != nil {
						*dst = *counts[i]
					}
				}
			}
		}
		if !wantOK {
			want, wantIn, wantOut = start, false, false
		}
		if got != want || gotIn != wantIn || gotOut != wantOut {
			t.Fatalf("%s: walk read %+v (input %v, output %v), encoding/json %+v (input %v, output %v)", doc, got, gotIn, gotOut, want, wantIn, wantOut)
		}
	})
}

// BenchmarkUsageBody reads a model answer through the usage scanner, as
// every model response is: a JSON message and an SSE stream.
func BenchmarkUsageBody(b *testing.B) {
	message := `{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"text","text":"` +
		strings.Repeat("The test fails because get3 returns the wrapped error first. ", 4) + `"}],"stop_reason":"end_turn",` +
		`"usage":{"input_tokens":5120,"cache_creation_input_tokens":0,"cache_read_input_tokens":4096,"output_tokens":31,"service_tier":"standard"}}`
	for _, c := range []struct{ name, body, ct string }{
		{"json", message, "application/json"},
		{"sse", sseStream, "text/event-stream; charset=utf-8"},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(c.body)))
			buf := make([]byte, 8<<10)
			r := strings.NewReader(c.body)
			for b.Loop() {
				r.Reset(c.body)
				ub := newUsageBody(io.NopCloser(r), c.ct, nil, func(tokens.Usage, bool, bool) {})
				for {
					if _, err := ub.Read(buf); err != nil {
						break
					}
				}
				ub.Close()
			}
		})
	}
}
