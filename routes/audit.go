package routes

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/cproxy/cproxy/routes/metrics"
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

// Call is one proxied request as the Call line tells it. Routes fill in
// what they learn; finish writes the line. It never holds a token or a
// credential: only the token's id.
type Call struct {
	srv     *Server
	log     *slog.Logger
	metrics *metrics.Metrics
	w       *auditWriter
	r       *http.Request
	start   time.Time
	route   string
	rt      Route // nil until the path picked one
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
	// usage is what a model request cost, as the upstream reported it
	// (or, where it did not, as its budget was charged: Usage.NotReported).
	usage Usage
	// meter settles a model request's budget; nil for the other routes.
	meter *meter
	// held is what the request's body holds of the memory for bodies read
	// whole; finish gives back what the upstream has not read yet.
	held BodyHold
	// flight is the request as its token's revocation or expiry ends it,
	// from its authentication on.
	flight flight
	// decide asks the route's policy question again of another profile,
	// when a reload has changed the token's (Server.recheck); nil: the
	// request is refused then.
	decide Decide
}

// recheck is Server.recheck, called where the request is served (not
// where its body streams): the rule that decided goes on the audit line.
func (a *Call) recheck(ctx context.Context) error {
	rule, err := a.srv.recheck(ctx, a)
	if rule != "" {
		a.rule = rule
	}
	return err
}

// startAudit begins the audit of r and returns the request routes work on:
// a shallow copy whose body counts what is read of it. Counting what is
// read, not what Content-Length claims, matters because a refused request's
// body is never read. The copy leaves net/http's own request untouched: the
// server decides from its Body whether an unread body (after an Expect:
// 100-continue that was never answered) may be skipped or must be drained.
func (s *Server) startAudit(w http.ResponseWriter, r *http.Request) (*Call, *http.Request) {
	// One allocation for what lives exactly as long as the request.
	st := &auditState{
		audit: Call{srv: s, log: s.audit, metrics: s.metrics, start: s.now(), sink: s.auditLog},
		w:     auditWriter{ResponseWriter: w},
		body:  countingBody{ReadCloser: r.Body},
		r:     *r,
	}
	a := &st.audit
	a.w, a.body, a.r = &st.w, &st.body, &st.r
	a.held.m = s.bodies
	st.r.Body = a.body
	return a, a.r
}

// auditState is an audit with what it points to, allocated together.
type auditState struct {
	audit Call
	w     auditWriter
	body  countingBody
	r     http.Request
}

// countingBody counts the request body bytes read, and once the request
// is authenticated moves its deadline on (flight.bodyRead).
type countingBody struct {
	io.ReadCloser
	n int64
	f *flight // nil: no deadline
}

func (c *countingBody) Read(p []byte) (int, error) {
	n, err := c.ReadCloser.Read(p)
	c.n += int64(n)
	if c.f != nil {
		c.f.bodyRead(n, c.n, err)
	}
	return n, err
}

// fail answers the request with err in the route's format.
func (a *Call) fail(write func(http.ResponseWriter, error) int, err error) {
	if cause := a.flight.ended(); cause != nil {
		// Whatever failed, it failed because the token's work was ended.
		err = cause
	}
	a.reason = Message(err)
	a.decision = decisionOf(err)
	write(a.w, err)
}

func (a *Call) finish() {
	if a.meter != nil {
		// A metered request its route did not settle: charged what it
		// reserved if the upstream has it, else nothing.
		a.meter.unanswered()
	}
	a.srv.flights.remove(&a.flight)
	a.held.release()
	status := a.w.status
	if status == 0 {
		// Nothing was written: the client went away first.
		status = 499
	}
	d := time.Since(a.start)
	rec := a.record(status, d)
	// Before the line: once a request's line is out, it is counted.
	a.metrics.Request(rec.Route, rec.Profile, status, rec.BytesIn, rec.BytesOut)
	if a.sink != nil {
		a.writeRecord(&rec)
		return
	}
	if h, ok := a.log.Handler().(*textHandler); ok {
		// The same line, formatted for the audit record alone.
		if h.Enabled(a.r.Context(), slog.LevelInfo) {
			h.writeAuditLine(&rec, d, time.Now())
		}
		return
	}
	a.log.LogAttrs(a.r.Context(), slog.LevelInfo, "request", auditAttrs(&rec, d)...)
}

// auditAttrs are the audit line's attributes, in order: the record's
// fields, each left out where the JSON record leaves it out (path and
// method excepted), the duration as a duration. textHandler's
// writeAuditLine writes the same line without them, and must follow any
// change here.
func auditAttrs(rec *AuditRecord, d time.Duration) []slog.Attr {
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
	if rec.Target != "" {
		attrs = append(attrs, slog.String("target", rec.Target))
	}
	if rec.Rule != "" {
		attrs = append(attrs, slog.String("rule", rec.Rule))
	}
	attrs = append(attrs,
		slog.Int("status", rec.Status),
		slog.Duration("duration", d),
		slog.Int64("bytes_in", rec.BytesIn),
		slog.Int64("bytes_out", rec.BytesOut),
	)
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

// withheldToken stands for the token-shaped part of a client's text in
// audit records and refusals (tokens.Withhold).
const withheldToken = "[token-withheld]"

// Clip bounds what a client-chosen string can put in a refusal or an audit
// record, and withholds any token-shaped part of it. It is the one place
// that decides what of a client's text is kept, for every field and format.
func Clip(s string, n int) string {
	s, _ = cut(s, n)
	return s
}

// cut is clip, also saying whether s was cut to n bytes (and "…" added).
func cut(s string, n int) (string, bool) {
	s, _ = tokens.Withhold(s, withheldToken)
	if len(s) > n {
		return s[:n] + "…", true
	}
	return s, false
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
	// Truncated names the fields cut to their bound, in the record's order:
	// "session_id", "method", "path", "target", "refs" (a ref name cut, or
	// more than 100 updates), "reason". A cut string ends in "…". Empty:
	// nothing was cut.
	Truncated []string `json:"truncated,omitempty"`
	// RefsOmitted is how many of a push's ref updates Refs does not list.
	RefsOmitted int `json:"refs_omitted,omitempty"`
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

// record is the audit record of the finished request. Every string a
// client chose goes through clip's rule here, and nowhere else: the JSON
// record and the text line both write what it holds.
func (a *Call) record(status int, d time.Duration) AuditRecord {
	rec := AuditRecord{
		Time:       a.start.Add(d).UTC().Format(AuditTimeFormat),
		Route:      a.route,
		Decision:   a.decision,
		Rule:       a.rule,
		Status:     status,
		DurationMS: float64(d.Microseconds()) / 1000,
		BytesIn:    a.body.n,
		BytesOut:   a.w.bytes,
	}
	if a.session != nil {
		rec.Sandbox, rec.TokenID = a.session.Sandbox, a.session.TokenID
		if a.session.Profile != nil {
			rec.Profile = a.session.Profile.Name
		}
		rec.SessionID = rec.bound("session_id", a.r.Header.Get("X-Claude-Code-Session-Id"), 128)
	}
	rec.Method = rec.bound("method", a.r.Method, 32)
	rec.Path = rec.bound("path", a.r.URL.Path, 256)
	target := a.target
	if a.version != "" {
		target += "@" + a.version
	}
	rec.Target = rec.bound("target", target, 256)
	for i, u := range a.refs {
		if i == maxAuditRefs {
			rec.RefsOmitted = len(a.refs) - maxAuditRefs
			rec.markCut("refs")
			break
		}
		rec.Refs = append(rec.Refs, RefUpdate{Ref: rec.bound("refs", u.Ref, 256), Old: rec.bound("refs", u.Old, 64), New: rec.bound("refs", u.New, 64)})
	}
	rec.Reason = rec.bound("reason", a.reason, 1024)
	if rec.Decision == "" {
		rec.Decision = decisionAllow
	}
	if !a.usage.IsZero() {
		u := a.usage
		rec.Usage = &u
	}
	return rec
}

// bound is clip(s, n) for the record's field, which Truncated names if s
// was cut.
func (rec *AuditRecord) bound(field, s string, n int) string {
	s, cut := cut(s, n)
	if cut {
		rec.markCut(field)
	}
	return s
}

func (rec *AuditRecord) markCut(field string) {
	if !slices.Contains(rec.Truncated, field) {
		rec.Truncated = append(rec.Truncated, field)
	}
}

// writeRecord writes the record as one JSON line, in one Write, so lines
// of concurrent requests never interleave. The line is json.Marshal's
// encoding of the record (appendAuditRecord), built in a pooled buffer: the
// sink, an io.Writer, must not keep it (cmd/cproxy's copies it).
func (a *Call) writeRecord(rec *AuditRecord) {
	bp := lineBuffers.Get().(*[]byte)
	line := append(appendAuditRecord((*bp)[:0], rec), '\n')
	if _, err := a.sink.Write(line); err != nil {
		a.log.Error("audit record not written", "route", a.route, "err", err)
	}
	putLineBuffer(bp, line)
}
