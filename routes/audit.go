package routes

import (
	"errors"
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
	metrics *metrics
	w       *auditWriter
	r       *http.Request
	start   time.Time
	route   string
	session *Session
	target  string // the model; the repository (and refs); the package
	rule    string // the policy rule that decided
	reason  string // why cproxy refused, when it did
	body    *countingBody
	// sink, if not nil, takes the audit record as one JSON line instead
	// of the log line (Options.AuditLog).
	sink io.Writer
	// version is an npm tarball's version: the record's target is
	// name@version.
	version string
	// refs are a push's ref updates, as git sent them.
	refs []RefUpdate
	// decision is decisionDeny or decisionError once cproxy refused or
	// failed the request; empty means it was allowed.
	decision string
	// usage is what a model request cost, as the upstream reported it.
	usage Usage
	// meter settles a model request's budget; nil for the other routes.
	meter *meter
}

// startAudit begins the audit of r and returns the request routes work on:
// a shallow copy whose body counts what is read of it. Counting what is
// read, not what Content-Length claims, matters because a refused request's
// body is never read. The copy leaves net/http's own request untouched: the
// server decides from its Body whether an unread body (after an Expect:
// 100-continue that was never answered) may be skipped or must be drained.
func (s *Server) startAudit(w http.ResponseWriter, r *http.Request) (*audit, *http.Request) {
	// One allocation for what lives exactly as long as the request.
	st := &auditState{
		audit: audit{log: s.audit, metrics: s.metrics, start: s.now(), sink: s.auditLog},
		w:     auditWriter{ResponseWriter: w},
		body:  countingBody{ReadCloser: r.Body},
		r:     *r,
	}
	a := &st.audit
	a.w, a.body, a.r = &st.w, &st.body, &st.r
	st.r.Body = a.body
	return a, a.r
}

// auditState is an audit with what it points to, allocated together.
type auditState struct {
	audit audit
	w     auditWriter
	body  countingBody
	r     http.Request
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
	a.decision = decisionOf(err)
	write(a.w, err)
}

func (a *audit) finish() {
	status := a.w.status
	if status == 0 {
		// Nothing was written: the client went away first.
		status = 499
	}
	// Before the line: once a request's line is out, it is counted.
	a.metrics.request(a, status)
	if a.sink != nil {
		a.writeRecord(status, time.Since(a.start))
		return
	}
	if h, ok := a.log.Handler().(*textHandler); ok {
		// The same line, formatted for the audit record alone.
		if h.Enabled(a.r.Context(), slog.LevelInfo) {
			h.writeAuditLine(a, status, time.Since(a.start), time.Now())
		}
		return
	}
	a.log.LogAttrs(a.r.Context(), slog.LevelInfo, "request", a.attrs(status, time.Since(a.start))...)
}

// attrs are the audit line's attributes, in order. textHandler's
// writeAuditLine writes the same line without them, and must follow any
// change here.
func (a *audit) attrs(status int, d time.Duration) []slog.Attr {
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
		slog.Duration("duration", d),
		slog.Int64("bytes_in", a.body.n),
		slog.Int64("bytes_out", a.w.bytes),
	)
	if a.reason != "" {
		attrs = append(attrs, slog.String("reason", a.reason))
	}
	if !a.usage.IsZero() {
		attrs = append(attrs, slog.GroupAttrs("usage",
			slog.Int64("input_tokens", a.usage.Input), slog.Int64("output_tokens", a.usage.Output),
			slog.Int64("cache_read_input_tokens", a.usage.CacheRead), slog.Int64("cache_creation_input_tokens", a.usage.CacheWrite)))
	}
	return attrs
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

// The decisions an audit record tells.
const (
	decisionAllow = "allow" // cproxy forwarded the request (whatever the upstream answered)
	decisionDeny  = "deny"  // cproxy refused it: token, policy, or a request it does not forward
	decisionError = "error" // cproxy could not serve it: no credential, store or upstream down, time-out
)

// decisionOf is the decision behind a failure: a refusal of the request
// itself is a denial; anything else is cproxy or an upstream failing.
func decisionOf(err error) string {
	for _, kind := range []error{ErrBadRequest, ErrUnauthorized, ErrForbidden, ErrNotFound, ErrTooLarge} {
		if errors.Is(err, kind) {
			return decisionDeny
		}
	}
	return decisionError
}

// AuditRecord is one line of the audit log (log.audit): one request on the
// proxy listener, written as JSON when it ends. The field names are stable;
// docs/operations.md describes each. It never holds a token or a
// credential, and every string a client chose is bounded.
type AuditRecord struct {
	// Time is when the request ended, RFC 3339 in UTC with milliseconds.
	Time      string `json:"time"`
	Sandbox   string `json:"sandbox,omitempty"`
	TokenID   string `json:"token_id,omitempty"`
	Profile   string `json:"profile,omitempty"`
	SessionID string `json:"session_id,omitempty"`
	Route     string `json:"route"`
	Method    string `json:"method"`
	Path      string `json:"path"`
	// Target is what the request is about: the model; OWNER/REPO, and for
	// a push the refs it updates; the npm package, name@version for a
	// tarball; a relay's path.
	Target string      `json:"target,omitempty"`
	Refs   []RefUpdate `json:"refs,omitempty"`
	// Decision is "allow", "deny" or "error".
	Decision   string  `json:"decision"`
	Rule       string  `json:"rule,omitempty"`
	Status     int     `json:"status"`
	Reason     string  `json:"reason,omitempty"`
	Usage      *Usage  `json:"usage,omitempty"`
	DurationMS float64 `json:"duration_ms"`
	BytesIn    int64   `json:"bytes_in"`
	BytesOut   int64   `json:"bytes_out"`
}

// RefUpdate is one ref a push updates: old and new object ids, the zero id
// for a ref created or deleted.
type RefUpdate struct {
	Ref string `json:"ref"`
	Old string `json:"old"`
	New string `json:"new"`
}

// maxAuditRefs bounds the ref updates one record lists; the policy still
// decides every one.
const maxAuditRefs = 100

// AuditTimeFormat is the audit record's time: RFC 3339 with milliseconds.
const AuditTimeFormat = "2006-01-02T15:04:05.000Z07:00"

// record is the audit record of the finished request.
func (a *audit) record(status int, d time.Duration) AuditRecord {
	rec := AuditRecord{
		Time:       a.start.Add(d).UTC().Format(AuditTimeFormat),
		Route:      a.route,
		Method:     clip(a.r.Method, 32),
		Path:       clip(a.r.URL.Path, 256),
		Target:     clip(a.target, 256),
		Decision:   a.decision,
		Rule:       a.rule,
		Status:     status,
		Reason:     clip(a.reason, 1024),
		DurationMS: float64(d.Microseconds()) / 1000,
		BytesIn:    a.body.n,
		BytesOut:   a.w.bytes,
	}
	if a.session != nil {
		rec.Sandbox, rec.TokenID = a.session.Sandbox, a.session.TokenID
		if a.session.Profile != nil {
			rec.Profile = a.session.Profile.Name
		}
		rec.SessionID = clip(a.r.Header.Get("X-Claude-Code-Session-Id"), 128)
	}
	if a.version != "" && rec.Target == a.target {
		rec.Target = clip(a.target+"@"+a.version, 256)
	}
	for i, u := range a.refs {
		if i == maxAuditRefs {
			break
		}
		rec.Refs = append(rec.Refs, RefUpdate{Ref: clip(u.Ref, 256), Old: clip(u.Old, 64), New: clip(u.New, 64)})
	}
	if rec.Decision == "" {
		rec.Decision = decisionAllow
	}
	if !a.usage.IsZero() {
		u := a.usage
		rec.Usage = &u
	}
	return rec
}

// writeRecord writes the record as one JSON line, in one Write, so lines
// of concurrent requests never interleave. The line is json.Marshal's
// encoding of the record (appendAuditRecord), built in a pooled buffer: the
// sink, an io.Writer, must not keep it (cmd/cproxy's copies it).
func (a *audit) writeRecord(status int, d time.Duration) {
	rec := a.record(status, d)
	bp := lineBuffers.Get().(*[]byte)
	line := append(appendAuditRecord((*bp)[:0], &rec), '\n')
	if _, err := a.sink.Write(line); err != nil {
		a.log.Error("audit record not written", "route", a.route, "err", err)
	}
	putLineBuffer(bp, line)
}
