package routes

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/cproxy/cproxy/policy"
	"github.com/cproxy/cproxy/routes/audit"
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

// sendAnswer sends the client an answer of declared length, written whole,
// before the request's audit line is written. net/http holds the end of an
// answer in its buffer until the handler returns, and the handler's last
// step is the audit line: a write(2) to the log, which the client would
// otherwise wait for (a non-streaming model message, every Go module file).
// An answer without a length is left to net/http, which ends it as before
// (it may set the length itself); so is one that was never begun.
func (a *Call) sendAnswer() {
	if a.w.status == 0 || a.w.Header().Get("Content-Length") == "" {
		return
	}
	a.w.Flush()
}

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
	limit   *tokenCount // the token's count on the route, its place taken; nil: none
	target  string      // the model; the repository (and refs); the package
	rule    string      // the policy rule that decided
	reason  string      // why cproxy refused, when it did
	code    string      // the refusal's stable code (Code), when it did
	body    *countingBody
	// sink, if not nil, takes the audit record as one JSON line instead
	// of the log line (Options.AuditLog).
	sink io.Writer
	// version is an npm tarball's version: the record's target is
	// name@version.
	version string
	// refs are a push's ref updates, as git sent them.
	refs []audit.RefUpdate
	// pin and args are an MCP tool call's pinned definition digest and
	// its arguments (only when the operator asked for them).
	pin, args string
	// question is the request's policy question, for the JSON record;
	// answer the policy's answer to it (audit.Allow or audit.Deny) when
	// Decide asked it.
	question policy.Question
	asked    bool // question is set
	answer   string
	// warning is the refusal a profile in warn mode let pass: the record's
	// decision is warn, with it as the reason.
	warning string
	// warnCode is the code of the refusal warning is.
	warnCode string
	// decision is audit.Deny or audit.Error once cproxy refused or failed
	// the request; empty means it was allowed.
	decision string
	// usage is what a model request cost, as the upstream reported it
	// (or, where it did not, as its budget was charged:
	// audit.Usage.NotReported).
	usage audit.Usage
	// meter settles a model request's budget; nil for the other routes.
	meter *meter
	// held is what the request's body holds of the memory for bodies read
	// whole; finish gives back what the upstream has not read yet.
	held BodyHold
	// flight is the request as its token's revocation or expiry ends it,
	// from its authentication on.
	flight flight
	// approval is the id of the approval request the request filed or
	// found, or of the grant it used; empty: none.
	approval string
	// grant is the approved grant NeedApproval found, used when the
	// request is sent (useGrant); nil: none.
	grant *tokens.Approval
	// decide asks the route's policy question again of another profile,
	// when a reload has changed the token's (Server.recheck); nil: the
	// request is refused then.
	decide Decide
	// writeErr, when not nil, writes this request's refusals in place of
	// the route's WriteError (Call.WriteErrorsWith).
	writeErr func(http.ResponseWriter, error) int
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
// is authenticated sets the deadline of each read (flight.bodyReading).
type countingBody struct {
	io.ReadCloser
	n   int64
	eof bool    // the body was read to its end
	f   *flight // nil: no deadline
}

func (c *countingBody) Read(p []byte) (int, error) {
	if c.f != nil {
		c.f.bodyReading(c.n)
	}
	n, err := c.ReadCloser.Read(p)
	c.n += int64(n)
	if err == io.EOF {
		c.eof = true
	}
	if c.f != nil {
		c.f.bodyRead(n, c.n, err)
	}
	return n, err
}

// arrived reports whether the whole body has been read: there is none, or
// a read met its end.
func (c *countingBody) arrived() bool {
	return c.eof || c.ReadCloser == http.NoBody || c.ReadCloser == nil
}

// fail answers the request with err in the route's format. A request
// whose body has not all been read (refused before its body was, or while
// it came) loses its connection with the answer (closeUnread).
func (a *Call) fail(write func(http.ResponseWriter, error) int, err error) {
	if cause := a.flight.ended(); cause != nil {
		// Whatever failed, it failed because the token's work was ended.
		err = cause
	}
	a.reason, a.code = Message(err), Code(err)
	a.decision = decisionOf(err)
	if !a.body.arrived() {
		a.flight.stopBody()
		closeUnread(a.w)
	}
	write(a.w, err)
}

func (a *Call) finish() {
	if a.meter != nil {
		// A metered request its route did not settle: charged what it
		// reserved if the upstream has it, else nothing.
		a.meter.unanswered()
	}
	a.srv.flights.remove(&a.flight)
	if a.limit != nil {
		a.limit.release()
	}
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
	if a.srv.watch != nil {
		a.srv.watch(&rec)
	}
	if a.sink != nil {
		if err := audit.WriteJSON(a.sink, &rec); err != nil {
			a.log.Error("audit record not written", "route", a.route, "err", err)
		}
		return
	}
	audit.Log(a.r.Context(), a.log, &rec, d)
}

// Clip bounds what a client-chosen string can put in a refusal, and
// withholds any token-shaped part of it, by the audit record's rule
// (audit.Clip): a route words its refusals with it.
func Clip(s string, n int) string { return audit.Clip(s, n) }

// decisionOf is the decision behind a failure: a refusal of the request
// itself is a denial; anything else is cproxy or an upstream failing.
func decisionOf(err error) string {
	for _, kind := range []error{ErrBadRequest, ErrUnauthorized, ErrForbidden, ErrNotFound, ErrTooLarge} {
		if errors.Is(err, kind) {
			return audit.Deny
		}
	}
	return audit.Error
}

// record is the audit record of the finished request, every string a
// client chose bounded (audit.Record.Bound).
func (a *Call) record(status int, d time.Duration) audit.Record {
	target := a.target
	if a.version != "" {
		target += "@" + a.version
	}
	rec := audit.Record{
		Time:       a.start.Add(d).UTC().Format(audit.TimeFormat),
		Route:      a.route,
		Method:     a.r.Method,
		Path:       a.r.URL.Path,
		Target:     target,
		Refs:       a.refs,
		Pin:        a.pin,
		Args:       a.args,
		Answer:     a.answer,
		Decision:   a.decision,
		Rule:       a.rule,
		Approval:   a.approval,
		Status:     status,
		Code:       a.code,
		Reason:     a.reason,
		DurationMS: float64(d.Microseconds()) / 1000,
		BytesIn:    a.body.n,
		BytesOut:   a.w.bytes,
	}
	if a.session != nil {
		rec.Sandbox, rec.TokenID = a.session.Sandbox, a.session.TokenID
		if a.session.Profile != nil {
			rec.Profile = a.session.Profile.Name
		}
		rec.SessionID = a.r.Header.Get("X-Claude-Code-Session-Id")
	}
	if a.asked {
		// Only the JSON record carries it (SetQuestion keeps it only then).
		if a.session != nil {
			a.question.Profile = a.session.Minted
		}
		rec.Question, _ = json.Marshal(&a.question)
	}
	if a.warning != "" && rec.Decision == "" {
		rec.Decision, rec.Reason, rec.Code = audit.Warn, a.warning, a.warnCode
	}
	rec.Bound()
	if rec.Decision == "" {
		rec.Decision = audit.Allow
	}
	if !a.usage.IsZero() {
		u := a.usage
		rec.Usage = &u
	}
	return rec
}
