package routes

import (
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/cproxy/cproxy/tokens"
)

// auditWriter counts what a response sends, for the audit line. It unwraps
// to the real writer so http.ResponseController can flush each SSE event.
type auditWriter struct {
	http.ResponseWriter
	status int
	bytes  int64
}

func (w *auditWriter) WriteHeader(code int) {
	if w.status == 0 && code >= 200 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *auditWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	w.bytes += int64(n)
	return n, err
}

func (w *auditWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *auditWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// audit is one proxied request as the audit line tells it. Routes fill in
// what they learn; finish writes the line. It never holds a token or a
// credential: only the token's id.
type audit struct {
	log     *slog.Logger
	w       *auditWriter
	r       *http.Request
	start   time.Time
	route   string
	session *Session
	target  string // the model (later: repository and refs, package)
	rule    string // the policy rule that decided
	reason  string // why cproxy refused, when it did
	body    *countingBody
}

// startAudit begins the audit of r and returns the request routes work on:
// a shallow copy whose body counts what is read of it. Counting what is
// read, not what Content-Length claims, matters because a refused request's
// body is never read. The copy leaves net/http's own request untouched: the
// server decides from its Body whether an unread body (after an Expect:
// 100-continue that was never answered) may be skipped or must be drained.
func (s *Server) startAudit(w http.ResponseWriter, r *http.Request) (*audit, *http.Request) {
	body := &countingBody{ReadCloser: r.Body}
	r2 := new(http.Request)
	*r2 = *r
	r2.Body = body
	return &audit{log: s.audit, w: &auditWriter{ResponseWriter: w}, r: r2, start: s.now(), body: body}, r2
}

// countingBody counts the request body bytes read.
type countingBody struct {
	io.ReadCloser
	n int64
}

func (c *countingBody) Read(p []byte) (int, error) {
	n, err := c.ReadCloser.Read(p)
	c.n += int64(n)
	return n, err
}

// fail answers the request with err in the route's format.
func (a *audit) fail(write func(http.ResponseWriter, error) int, err error) {
	a.reason = message(err)
	write(a.w, err)
}

func (a *audit) finish() {
	status := a.w.status
	if status == 0 {
		// Nothing was written: the client went away first.
		status = 499
	}
	attrs := make([]slog.Attr, 0, 14)
	attrs = append(attrs, slog.String("route", a.route))
	if a.session != nil {
		attrs = append(attrs, slog.String("sandbox", a.session.Sandbox), slog.String("token_id", a.session.TokenID))
		if a.session.Profile != nil {
			attrs = append(attrs, slog.String("profile", a.session.Profile.Name))
		}
	}
	if sid := a.r.Header.Get("X-Claude-Code-Session-Id"); sid != "" && a.session != nil {
		attrs = append(attrs, slog.String("session_id", clip(sid, 128)))
	}
	attrs = append(attrs,
		slog.String("method", a.r.Method),
		slog.String("path", clip(a.r.URL.Path, 256)),
	)
	if a.target != "" {
		attrs = append(attrs, slog.String("target", clip(a.target, 256)))
	}
	if a.rule != "" {
		attrs = append(attrs, slog.String("rule", a.rule))
	}
	attrs = append(attrs,
		slog.Int("status", status),
		slog.Duration("duration", time.Since(a.start)),
		slog.Int64("bytes_in", a.body.n),
		slog.Int64("bytes_out", a.w.bytes),
	)
	if a.reason != "" {
		attrs = append(attrs, slog.String("reason", a.reason))
	}
	a.log.LogAttrs(a.r.Context(), slog.LevelInfo, "request", attrs...)
}

// clip bounds what a client-chosen string can put in a log line, and keeps
// anything shaped like a sandbox token out of it.
func clip(s string, n int) string {
	if strings.Contains(s, tokens.Prefix) {
		return "(withheld: looks like a sandbox token)"
	}
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
