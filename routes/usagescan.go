package routes

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"sync"

	"github.com/cproxy/cproxy/tokens"
)

// usageBody passes a model response through untouched while reading the
// usage the upstream reports in it: from an SSE stream, message_start's and
// message_delta's usage, line by line as the events go by; from a JSON
// answer, its top-level usage, from a bounded copy. Nothing is held back
// from the client. When the body ends (or the client goes away and it is
// closed early), done gets the usage once.
type usageBody struct {
	io.ReadCloser
	sse bool

	// SSE: the current partial line, and what the events said so far.
	line      []byte
	skipLine  bool // the current line is over maxUsageLine: not parsed
	event     string
	u         tokens.Usage
	deltaSeen bool  // a message_delta reported output tokens
	streamed  int64 // bytes of content_block_delta data lines, for an estimate
	// JSON: a copy of the answer, up to maxUsageJSON.
	copy     bytes.Buffer
	overflow bool

	once sync.Once
	done func(u tokens.Usage, complete bool)
	eof  bool
}

// Bounds on what is held to find usage: an SSE line (message_start carries
// the whole message shell, small), and a JSON answer (a message with its
// content; larger ones are still passed on, but charged from the reservation).
const (
	maxUsageLine = 1 << 20
	maxUsageJSON = 4 << 20
)

func newUsageBody(rc io.ReadCloser, contentType string, done func(tokens.Usage, bool)) *usageBody {
	return &usageBody{ReadCloser: rc, sse: strings.HasPrefix(strings.ToLower(contentType), "text/event-stream"), done: done}
}

func (b *usageBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		if b.sse {
			b.scan(p[:n])
		} else if !b.overflow {
			if b.copy.Len()+n > maxUsageJSON {
				b.overflow = true
				b.copy = bytes.Buffer{}
			} else {
				b.copy.Write(p[:n])
			}
		}
	}
	if err == io.EOF {
		b.eof = true
		b.finish()
	}
	return n, err
}

func (b *usageBody) Close() error {
	err := b.ReadCloser.Close()
	b.finish()
	return err
}

// finish reports the usage once: complete when the body was read to its
// end, else what was seen before the client went away.
func (b *usageBody) finish() {
	b.once.Do(func() {
		if !b.sse {
			var doc struct {
				Usage *usageJSON `json:"usage"`
			}
			if !b.overflow && json.Unmarshal(b.copy.Bytes(), &doc) == nil && doc.Usage != nil {
				doc.Usage.into(&b.u)
				b.deltaSeen = true
			}
		}
		if !b.deltaSeen {
			// The stream stopped before its final usage: charge what was
			// streamed, about four bytes of event data per token (JSON
			// framing included, so more rather than less).
			if est := (b.streamed + 3) / 4; est > b.u.Output {
				b.u.Output = est
			}
		}
		b.done(b.u, b.eof && b.deltaSeen)
	})
}

// scan splits what passes into lines and reads the events that carry usage.
func (b *usageBody) scan(p []byte) {
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			b.keep(p)
			return
		}
		b.keep(p[:i])
		if !b.skipLine {
			b.handle(bytes.TrimSuffix(b.line, []byte("\r")))
		}
		b.line, b.skipLine = b.line[:0], false
		p = p[i+1:]
	}
}

func (b *usageBody) keep(p []byte) {
	if b.skipLine {
		return
	}
	if len(b.line)+len(p) > maxUsageLine {
		b.skipLine, b.line = true, b.line[:0]
		return
	}
	b.line = append(b.line, p...)
}

// handle reads one SSE line.
func (b *usageBody) handle(line []byte) {
	switch {
	case len(line) == 0:
		b.event = ""
	case bytes.HasPrefix(line, []byte("event:")):
		b.event = string(bytes.TrimSpace(line[len("event:"):]))
	case bytes.HasPrefix(line, []byte("data:")):
		data := bytes.TrimSpace(line[len("data:"):])
		switch b.event {
		case "message_start":
			var ev struct {
				Message struct {
					Usage *usageJSON `json:"usage"`
				} `json:"message"`
			}
			if json.Unmarshal(data, &ev) == nil && ev.Message.Usage != nil {
				ev.Message.Usage.into(&b.u)
			}
		case "message_delta":
			var ev struct {
				Usage *usageJSON `json:"usage"`
			}
			if json.Unmarshal(data, &ev) == nil && ev.Usage != nil {
				ev.Usage.into(&b.u)
				b.deltaSeen = b.deltaSeen || ev.Usage.Output != nil
			}
		case "content_block_delta":
			b.streamed += int64(len(data))
		}
	}
}

// usageJSON is the API's usage object; absent fields leave what is known.
// message_delta's counts are cumulative, so a later one replaces an
// earlier one.
type usageJSON struct {
	Input      *int64 `json:"input_tokens"`
	Output     *int64 `json:"output_tokens"`
	CacheRead  *int64 `json:"cache_read_input_tokens"`
	CacheWrite *int64 `json:"cache_creation_input_tokens"`
}

func (j *usageJSON) into(u *tokens.Usage) {
	for _, f := range []struct {
		src *int64
		dst *int64
	}{{j.Input, &u.Input}, {j.Output, &u.Output}, {j.CacheRead, &u.CacheRead}, {j.CacheWrite, &u.CacheWrite}} {
		if f.src != nil && *f.src >= 0 {
			*f.dst = *f.src
		}
	}
}
