package audit

import (
	"io"
	"math"
	"strconv"
	"unicode/utf8"
)

// WriteJSON writes rec to w as one JSON line, in one Write, so lines of
// concurrent requests never interleave. The line is json.Marshal's
// encoding of the record (appendJSON), built in a pooled buffer: w must
// not keep it (Writer copies it).
func WriteJSON(w io.Writer, rec *Record) error {
	bp := lineBuffers.Get().(*[]byte)
	line := append(appendJSON((*bp)[:0], rec), '\n')
	_, err := w.Write(line)
	putLineBuffer(bp, line)
	return err
}

// appendJSON appends rec as json.Marshal encodes it, byte for byte, but
// for the characters EscapeLineBreakers escapes: the fields in Record's
// order, omitempty as tagged, strings escaped as encoding/json escapes them
// (HTML characters, U+2028 and U+2029 included; invalid UTF-8 as U+FFFD)
// and the C1 controls and bidirectional formatting characters as \u
// escapes too, and duration_ms as it formats a float64. The audit log is
// written once per request, and reflection, the encoder's state and the
// copy it returns cost more than the record.
// TestAuditRecordAsJSONMarshalsIt and FuzzAuditRecord hold it to
// EscapeLineBreakers(json.Marshal(rec)); a field added to Record must be
// added here too.
func appendJSON(b []byte, rec *Record) []byte {
	b = append(b, `{"time":`...)
	b = appendJSONString(b, rec.Time)
	b = appendJSONField(b, `,"sandbox":`, rec.Sandbox)
	b = appendJSONField(b, `,"token_id":`, rec.TokenID)
	b = appendJSONField(b, `,"profile":`, rec.Profile)
	b = appendJSONField(b, `,"session_id":`, rec.SessionID)
	b = append(b, `,"route":`...)
	b = appendJSONString(b, rec.Route)
	b = append(b, `,"method":`...)
	b = appendJSONString(b, rec.Method)
	b = append(b, `,"path":`...)
	b = appendJSONString(b, rec.Path)
	b = appendJSONField(b, `,"target":`, rec.Target)
	if len(rec.Refs) > 0 {
		b = append(b, `,"refs":[`...)
		for i, u := range rec.Refs {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"ref":`...)
			b = appendJSONString(b, u.Ref)
			b = append(b, `,"old":`...)
			b = appendJSONString(b, u.Old)
			b = append(b, `,"new":`...)
			b = appendJSONString(b, u.New)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	b = appendJSONField(b, `,"pin":`, rec.Pin)
	b = appendJSONField(b, `,"args":`, rec.Args)
	if len(rec.Question) > 0 {
		b = append(b, `,"question":`...)
		b = append(b, EscapeLineBreakers(rec.Question)...)
		b = appendJSONField(b, `,"answer":`, rec.Answer)
	}
	b = append(b, `,"decision":`...)
	b = appendJSONString(b, rec.Decision)
	b = appendJSONField(b, `,"rule":`, rec.Rule)
	b = appendJSONField(b, `,"approval":`, rec.Approval)
	b = append(b, `,"status":`...)
	b = strconv.AppendInt(b, int64(rec.Status), 10)
	b = appendJSONField(b, `,"code":`, rec.Code)
	b = appendJSONField(b, `,"reason":`, rec.Reason)
	if u := rec.Usage; u != nil {
		b = append(b, `,"usage":{"input_tokens":`...)
		b = strconv.AppendInt(b, u.Input, 10)
		b = append(b, `,"output_tokens":`...)
		b = strconv.AppendInt(b, u.Output, 10)
		b = append(b, `,"cache_read_input_tokens":`...)
		b = strconv.AppendInt(b, u.CacheRead, 10)
		b = append(b, `,"cache_creation_input_tokens":`...)
		b = strconv.AppendInt(b, u.CacheWrite, 10)
		if u.NotReported {
			b = append(b, `,"not_reported":true`...)
		}
		b = append(b, '}')
	}
	b = append(b, `,"duration_ms":`...)
	b = appendJSONFloat(b, rec.DurationMS)
	b = append(b, `,"bytes_in":`...)
	b = strconv.AppendInt(b, rec.BytesIn, 10)
	b = append(b, `,"bytes_out":`...)
	b = strconv.AppendInt(b, rec.BytesOut, 10)
	if len(rec.Truncated) > 0 {
		b = append(b, `,"truncated":[`...)
		for i, f := range rec.Truncated {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, f)
		}
		b = append(b, ']')
	}
	if rec.RefsOmitted != 0 {
		b = append(b, `,"refs_omitted":`...)
		b = strconv.AppendInt(b, int64(rec.RefsOmitted), 10)
	}
	return append(b, '}')
}

// appendJSONField appends key and s, unless s is empty (omitempty).
func appendJSONField(b []byte, key, s string) []byte {
	if s == "" {
		return b
	}
	return appendJSONString(append(b, key...), s)
}

// appendJSONString appends s quoted as encoding/json quotes a string (its
// appendString with HTML escaping, which json.Marshal turns on), and with
// the characters breaksLine reports escaped too.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= ' ' && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if breaksLine(r) {
			b = append(b, s[start:i]...)
			b = appendRuneEscape(b, r)
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// breaksLine reports whether r is a character that a reader of a line
// log can take for a line break, or that changes how the text around it
// looks: a C1 control (U+0085 is a line break to some readers, U+009B a
// terminal's escape), the line and paragraph separators U+2028 and U+2029,
// or a bidirectional formatting character (U+061C, U+200E, U+200F, U+202A
// to U+202E, U+2066 to U+2069), with which a sandbox's text could make a
// line read as something else. encoding/json escapes only U+2028 and
// U+2029; the audit log escapes them all.
func breaksLine(r rune) bool {
	switch {
	case 0x80 <= r && r <= 0x9f, r == 0x2028, r == 0x2029, r == 0x061c, r == 0x200e, r == 0x200f,
		0x202a <= r && r <= 0x202e, 0x2066 <= r && r <= 0x2069:
		return true
	}
	return false
}

// appendRuneEscape appends r, below U+10000, as a JSON \u escape.
func appendRuneEscape(b []byte, r rune) []byte {
	const hex = "0123456789abcdef"
	return append(b, '\\', 'u', hex[r>>12&0xF], hex[r>>8&0xF], hex[r>>4&0xF], hex[r&0xF])
}

// EscapeLineBreakers returns the JSON text j (valid UTF-8, as encoding/json
// and log/slog write it) with each character breaksLine reports written as
// a \u escape: the same JSON value, which a line-oriented reader and a
// terminal take as it is. In such text those characters can only be inside
// strings. j is returned as it is when it has none.
func EscapeLineBreakers(j []byte) []byte {
	var out []byte
	start := 0
	for i := 0; i < len(j); {
		if j[i] < utf8.RuneSelf {
			i++
			continue
		}
		r, size := utf8.DecodeRune(j[i:])
		if breaksLine(r) {
			out = appendRuneEscape(append(out, j[start:i]...), r)
			start = i + size
		}
		i += size
	}
	if out == nil {
		return j
	}
	return append(out, j[start:]...)
}

// appendJSONFloat appends f as encoding/json writes a float64: like
// strconv's shortest 'f', in exponent form below 1e-6 and from 1e21 on,
// without a leading zero in the exponent. f is a duration, never NaN or
// infinite.
func appendJSONFloat(b []byte, f float64) []byte {
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
}
