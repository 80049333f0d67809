package audit

import (
	"context"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"
)

// NewTextHandler is slog.NewTextHandler(w, opts) for the audit log: every
// record is written as slog's text handler writes it, and the audit line of
// a request (one per request, on the hot path) is formatted by a path made
// for its fixed attributes, into the same bytes. That path skips what
// slog.Logger and the generic handler do per record (finding the caller,
// copying the attributes into a Record, formatting each by its kind), and
// still writes each line in one Write. With opts.AddSource or
// opts.ReplaceAttr, which it does not reproduce, it is slog's handler alone.
func NewTextHandler(w io.Writer, opts *slog.HandlerOptions) slog.Handler {
	if opts == nil {
		opts = &slog.HandlerOptions{}
	}
	if opts.AddSource || opts.ReplaceAttr != nil {
		return slog.NewTextHandler(w, opts)
	}
	lw := &lockedWriter{w: w}
	return &textHandler{Handler: slog.NewTextHandler(lw, opts), w: lw}
}

// textHandler is slog's text handler with a faster way for the audit line.
// Both write through w, so no two lines are written at once.
type textHandler struct {
	slog.Handler
	w *lockedWriter
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// lineBuffers hold audit lines while they are formatted.
var lineBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// maxPooledLine bounds the buffers kept for reuse: a line with a long
// reason should not keep its buffer.
const maxPooledLine = 16 << 10

// putLineBuffer gives bp back to lineBuffers holding line, the buffer it
// grew into, unless that is over maxPooledLine.
func putLineBuffer(bp *[]byte, line []byte) {
	if cap(line) <= maxPooledLine {
		*bp = line
		lineBuffers.Put(bp)
	}
}

// Log writes rec as the audit line (msg=request) of a request that took d,
// to log at INFO: by NewTextHandler's own path when log has that handler,
// else as attributes (attrs) through slog.
func Log(ctx context.Context, log *slog.Logger, rec *Record, d time.Duration) {
	if h, ok := log.Handler().(*textHandler); ok {
		// The same line, formatted for the audit record alone.
		if h.Enabled(ctx, slog.LevelInfo) {
			h.writeLine(rec, d, time.Now())
		}
		return
	}
	log.LogAttrs(ctx, slog.LevelInfo, "request", attrs(rec, d)...)
}

// attrs are the audit line's attributes, in order: the record's fields,
// each left out where the JSON record leaves it out (path and method
// excepted), the duration as a duration. textHandler's writeLine writes
// the same line without them, and must follow any change here.
func attrs(rec *Record, d time.Duration) []slog.Attr {
	attrs := make([]slog.Attr, 0, 16)
	attrs = append(attrs, slog.String("route", rec.Route))
	for _, f := range [...]struct{ key, value string }{{"sandbox", rec.Sandbox}, {"token_id", rec.TokenID}, {"profile", rec.Profile}, {"session_id", rec.SessionID}} {
		if f.value != "" {
			attrs = append(attrs, slog.String(f.key, f.value))
		}
	}
	attrs = append(attrs,
		slog.String("method", rec.Method),
		slog.String("path", rec.Path),
	)
	for _, f := range [...]struct{ key, value string }{{"target", rec.Target}, {"pin", rec.Pin}, {"args", rec.Args}} {
		if f.value != "" {
			attrs = append(attrs, slog.String(f.key, f.value))
		}
	}
	if rec.Rule != "" {
		attrs = append(attrs, slog.String("rule", rec.Rule))
	}
	if rec.Decision == Warn {
		attrs = append(attrs, slog.String("decision", Warn))
	}
	if rec.Approval != "" {
		attrs = append(attrs, slog.String("approval", rec.Approval))
	}
	attrs = append(attrs,
		slog.Int("status", rec.Status),
		slog.Duration("duration", d),
		slog.Int64("bytes_in", rec.BytesIn),
		slog.Int64("bytes_out", rec.BytesOut),
	)
	if rec.Code != "" {
		attrs = append(attrs, slog.String("code", rec.Code))
	}
	if rec.Reason != "" {
		attrs = append(attrs, slog.String("reason", rec.Reason))
	}
	if u := rec.Usage; u != nil {
		usage := []slog.Attr{slog.Int64("input_tokens", u.Input), slog.Int64("output_tokens", u.Output),
			slog.Int64("cache_read_input_tokens", u.CacheRead), slog.Int64("cache_creation_input_tokens", u.CacheWrite)}
		if u.NotReported {
			usage = append(usage, slog.Bool("not_reported", true))
		}
		attrs = append(attrs, slog.GroupAttrs("usage", usage...))
	}
	if len(rec.Truncated) > 0 {
		attrs = append(attrs, slog.String("truncated", strings.Join(rec.Truncated, ",")))
	}
	if rec.RefsOmitted > 0 {
		attrs = append(attrs, slog.Int("refs_omitted", rec.RefsOmitted))
	}
	return attrs
}

// writeLine writes rec's audit line, with the attributes attrs gives slog
// in the same order, as slog's text handler would format it at time now.
func (h *textHandler) writeLine(rec *Record, d time.Duration, now time.Time) {
	bp := lineBuffers.Get().(*[]byte)
	b := (*bp)[:0]
	b = append(b, "time="...)
	b = appendRFC3339Millis(b, now)
	b = append(b, " level=INFO msg=request"...)
	b = appendTextAttr(b, "route", rec.Route)
	b = appendTextField(b, "sandbox", rec.Sandbox)
	b = appendTextField(b, "token_id", rec.TokenID)
	b = appendTextField(b, "profile", rec.Profile)
	b = appendTextField(b, "session_id", rec.SessionID)
	b = appendTextAttr(b, "method", rec.Method)
	b = appendTextAttr(b, "path", rec.Path)
	b = appendTextField(b, "target", rec.Target)
	b = appendTextField(b, "pin", rec.Pin)
	b = appendTextField(b, "args", rec.Args)
	b = appendTextField(b, "rule", rec.Rule)
	if rec.Decision == Warn {
		b = append(b, " decision=warn"...)
	}
	b = appendTextField(b, "approval", rec.Approval)
	b = append(b, " status="...)
	b = strconv.AppendInt(b, int64(rec.Status), 10)
	b = append(b, " duration="...)
	b = append(b, d.String()...)
	b = append(b, " bytes_in="...)
	b = strconv.AppendInt(b, rec.BytesIn, 10)
	b = append(b, " bytes_out="...)
	b = strconv.AppendInt(b, rec.BytesOut, 10)
	b = appendTextField(b, "code", rec.Code)
	b = appendTextField(b, "reason", rec.Reason)
	if u := rec.Usage; u != nil {
		b = append(b, " usage.input_tokens="...)
		b = strconv.AppendInt(b, u.Input, 10)
		b = append(b, " usage.output_tokens="...)
		b = strconv.AppendInt(b, u.Output, 10)
		b = append(b, " usage.cache_read_input_tokens="...)
		b = strconv.AppendInt(b, u.CacheRead, 10)
		b = append(b, " usage.cache_creation_input_tokens="...)
		b = strconv.AppendInt(b, u.CacheWrite, 10)
		if u.NotReported {
			b = append(b, " usage.not_reported=true"...)
		}
	}
	for i, f := range rec.Truncated {
		if i == 0 {
			b = append(b, " truncated="...)
		} else {
			b = append(b, ',')
		}
		b = append(b, f...)
	}
	if rec.RefsOmitted > 0 {
		b = append(b, " refs_omitted="...)
		b = strconv.AppendInt(b, int64(rec.RefsOmitted), 10)
	}
	b = append(b, '\n')
	h.w.Write(b) // as slog.Logger does, a failed write is not reported
	putLineBuffer(bp, b)
}

// appendTextField is appendTextAttr, or nothing for an empty value (the
// JSON record's omitempty).
func appendTextField(b []byte, key, value string) []byte {
	if value == "" {
		return b
	}
	return appendTextAttr(b, key, value)
}

// appendTextAttr appends " key=value", the key being one of the audit
// line's own (which need no quoting).
func appendTextAttr(b []byte, key, value string) []byte {
	b = append(b, ' ')
	b = append(b, key...)
	b = append(b, '=')
	if needsQuoting(value) {
		return strconv.AppendQuote(b, value)
	}
	return append(b, value...)
}

// rfc3339Millis is the time layout of slog's text handler: RFC 3339 with
// milliseconds, always three digits (a layout, unlike RFC3339Nano, keeps
// trailing zeros and truncates rather than rounds, as slog does).
const rfc3339Millis = "2006-01-02T15:04:05.000Z07:00"

func appendRFC3339Millis(b []byte, t time.Time) []byte {
	return t.AppendFormat(b, rfc3339Millis)
}

// needsQuoting reports whether slog's text handler writes s quoted: when it
// is empty, or holds a space, '=', '"' or an ASCII control byte, or a rune
// that is invalid UTF-8, a space or not printable. TestAuditLineAsSlogWritesIt
// and FuzzAuditLine hold it to slog's own output.
func needsQuoting(s string) bool {
	if s == "" {
		return true
	}
	for _, r := range s {
		switch {
		case r == utf8.RuneError:
			// Invalid UTF-8 decodes to RuneError too; a literal U+FFFD is
			// printable but slog quotes it just the same.
			return true
		case r < utf8.RuneSelf:
			if r <= ' ' || r == '=' || r == '"' {
				return true
			}
		case unicode.IsSpace(r) || !unicode.IsPrint(r):
			return true
		}
	}
	return false
}
