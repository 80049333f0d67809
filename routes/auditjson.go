package routes

import (
	"math"
	"strconv"
	"unicode/utf8"
)

// appendAuditRecord appends rec as json.Marshal encodes it, byte for byte:
// the fields in AuditRecord's order, omitempty as tagged, strings escaped
// as encoding/json escapes them (HTML characters, U+2028 and U+2029
// included; invalid UTF-8 as U+FFFD) and duration_ms as it formats a
// float64. The audit log is written once per request, and reflection, the
// encoder's state and the copy it returns cost more than the record.
// TestAuditRecordAsJSONMarshalsIt and FuzzAuditRecord hold it to
// json.Marshal; a field added to AuditRecord must be added here too.
func appendAuditRecord(b []byte, rec *AuditRecord) []byte {
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
	b = append(b, `,"decision":`...)
	b = appendJSONString(b, rec.Decision)
	b = appendJSONField(b, `,"rule":`, rec.Rule)
	b = append(b, `,"status":`...)
	b = strconv.AppendInt(b, int64(rec.Status), 10)
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
		b = append(b, '}')
	}
	b = append(b, `,"duration_ms":`...)
	b = appendJSONFloat(b, rec.DurationMS)
	b = append(b, `,"bytes_in":`...)
	b = strconv.AppendInt(b, rec.BytesIn, 10)
	b = append(b, `,"bytes_out":`...)
	b = strconv.AppendInt(b, rec.BytesOut, 10)
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
// appendString with HTML escaping, which json.Marshal turns on).
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
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
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
