package model

import (
	"bytes"
	"io"
	"strconv"
	"strings"
	"sync"

	"github.com/cproxy/cproxy/tokens"
)

// usageBody passes a model response through untouched while reading the
// usage the upstream reports in it: from an SSE stream, message_start's and
// message_delta's usage, line by line as the events go by; from a JSON
// answer, its top-level usage, from a bounded copy. Nothing is held back
// from the client. When the body ends (or the client goes away and it is
// closed early), done gets the usage once, with which of its counts the
// upstream reported: a stream's input counts come with message_start, its
// output count with message_delta (message_start's is the first token
// only); a JSON answer's come together, unless it was too large to read.
type usageBody struct {
	io.ReadCloser
	sse bool

	// SSE: the current partial line, and what the events said so far.
	line       []byte
	skipLine   bool // the current line is over maxUsageLine: not parsed
	event      string
	u          tokens.Usage
	inputSeen  bool // message_start (or the JSON answer) reported the input counts
	outputSeen bool // message_delta (or the JSON answer) reported the output count
	// JSON: a copy of the answer, up to maxUsageJSON.
	copy     bytes.Buffer
	overflow bool

	once sync.Once
	// input gets a stream's input counts when message_start reports them;
	// nil: nobody asks.
	input func(u tokens.Usage)
	done  func(u tokens.Usage, input, output bool)
}

// Bounds on what is held to find usage: an SSE line (message_start carries
// the whole message shell, small), and a JSON answer (a message with its
// content; larger ones are still passed on, but their usage is not read:
// the request is charged what it reserved).
const (
	maxUsageLine = 1 << 20
	maxUsageJSON = 4 << 20
)

func newUsageBody(rc io.ReadCloser, contentType string, input func(u tokens.Usage), done func(u tokens.Usage, input, output bool)) *usageBody {
	return &usageBody{ReadCloser: rc, sse: strings.HasPrefix(strings.ToLower(contentType), "text/event-stream"), input: input, done: done}
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
		b.finish()
	}
	return n, err
}

func (b *usageBody) Close() error {
	err := b.ReadCloser.Close()
	b.finish()
	return err
}

// finish reports the usage once: what the upstream reported before the
// body ended or the client went away.
func (b *usageBody) finish() {
	b.once.Do(func() {
		if !b.sse && !b.overflow {
			if raw, ok := jsonMember(b.copy.Bytes(), "usage"); ok {
				b.inputSeen, b.outputSeen = usageInto(raw, &b.u)
			}
			b.copy = bytes.Buffer{}
		}
		b.done(b.u, b.inputSeen, b.outputSeen)
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
			if msg, ok := jsonMember(data, "message"); ok {
				if raw, ok := jsonMember(msg, "usage"); ok {
					b.inputSeen, _ = usageInto(raw, &b.u)
					if b.inputSeen && b.input != nil {
						b.input(b.u)
					}
				}
			}
		case "message_delta":
			if raw, ok := jsonMember(data, "usage"); ok {
				if _, output := usageInto(raw, &b.u); output {
					b.outputSeen = true
				}
			}
		}
	}
}

// The usage object's members, as the API names them. message_delta's
// counts are cumulative, so a later one replaces an earlier one.
var usageFields = [...]string{"input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"}

// usageInto sets the counts the usage object raw holds into u, as
// reported: an absent or null count leaves what is known, and a count that
// cannot be (a negative one, say) is set as it is, for the core's meter,
// which takes it for not reported. It says whether the object gave the
// input count (input_tokens; the cache counts come with it, zero when
// absent) and the output count. A count that is not an integer makes the
// whole object unreadable: nothing is set and neither is given, as when
// decoding it with encoding/json.
//
// These walks run on every model answer and on the events of every stream,
// so they read the few members they need in place with jsonMembers, the
// walk requestModel reads requests with, instead of decoding whole events
// with encoding/json. Keys are matched exactly (the API spells them in
// lower case).
func usageInto(raw []byte, u *tokens.Usage) (input, output bool) {
	var got [len(usageFields)]int64
	var has [len(usageFields)]bool
	err := jsonMembers(raw, func(key, val []byte) error {
		for f, name := range usageFields {
			if string(key) != name {
				continue
			}
			if string(val) == "null" {
				has[f] = false
				return nil
			}
			n, err := strconv.ParseInt(string(val), 10, 64)
			if err != nil {
				return err
			}
			got[f], has[f] = n, true
		}
		return nil
	})
	if err != nil {
		return false, false
	}
	for f, dst := range [...]*int64{&u.Input, &u.Output, &u.CacheRead, &u.CacheWrite} {
		if has[f] {
			*dst = got[f]
		}
	}
	return has[0], has[1]
}
