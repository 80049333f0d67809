package routes

import (
	"log/slog"
	"net/http"
	"time"

	"github.com/cproxy/cproxy/policy"
	"github.com/cproxy/cproxy/routes/audit"
	"github.com/cproxy/cproxy/routes/budget"
	"github.com/cproxy/cproxy/routes/metrics"
	"github.com/cproxy/cproxy/tokens"
)

// This file is what a Route may do with the request it serves: read it,
// tell the audit line what it learned, ask the policy, hold budget, refuse.

// Decide is a route's policy question, asked of a profile: the rule that
// answered, and a refusal in the route's words when the answer is no. A
// request's question is asked again of the token's profile as it is when
// the request is sent (Call.Decide).
type Decide func(*policy.Profile) (rule string, err error)

// AnyProfile is the question of a request every profile may make.
func AnyProfile(*policy.Profile) (string, error) { return "", nil }

// Request is the request the route serves: a shallow copy of the
// listener's, whose body counts what is read of it.
func (a *Call) Request() *http.Request { return a.r }

// ResponseWriter is where the route writes an answer of its own (a git
// push report); a refusal goes through Fail.
func (a *Call) ResponseWriter() http.ResponseWriter { return a.w }

// Session is the authenticated sandbox.
func (a *Call) Session() *Session { return a.session }

// Log is cproxy's diagnostic log (not the audit log).
func (a *Call) Log() *slog.Logger { return a.srv.log }

// Now is the Server's clock.
func (a *Call) Now() time.Time { return a.srv.now() }

// Store is the token store, for what a route keeps that every replica on
// the store must agree on (the MCP route's tool pins).
func (a *Call) Store() tokens.Store { return a.srv.store }

// Metrics are the Server's metrics, for the counts a route keeps of its
// own (the MCP route's pin changes).
func (a *Call) Metrics() *metrics.Metrics { return a.srv.metrics }

// SetTarget says what the request is about, for its audit line: the
// model, OWNER/REPO, the package, a relay's path.
func (a *Call) SetTarget(target string) { a.target = target }

// SetVersion is an npm tarball's version: the audit line's target becomes
// name@version.
func (a *Call) SetVersion(v string) { a.version = v }

// SetRefs are a push's ref updates, as git sent them, for the audit line.
func (a *Call) SetRefs(refs []audit.RefUpdate) { a.refs = refs }

// SetMCPCall records an MCP tool call's pinned definition digest (empty:
// none) and its arguments as compact JSON (empty: not recorded), for the
// audit line, which bounds them and withholds token-shaped parts as it
// does every client text.
func (a *Call) SetMCPCall(pin, args string) { a.pin, a.args = pin, args }

// SetRule names the policy rule that decided, for the audit line.
func (a *Call) SetRule(rule string) { a.rule = rule }

// Decide makes d the request's policy question and asks it of the
// session's profile: the rule that answered goes on the audit line, and a
// refusal is returned for the route to Fail with. Before the request is
// sent, and when a body that streams to the upstream ends, d is asked
// again if a policy reload has given the token another profile.
func (a *Call) Decide(d Decide) error {
	a.decide = d
	rule, err := d(a.session.Profile)
	a.rule = rule
	a.Answered(err == nil)
	return a.warned(a.session.Profile, err)
}

// warned is err, unless it is the policy's refusal (not a deferred
// question, a budget or anything else) and prof is in warn mode, or its
// warn list names the refusal's code: then the
// request goes on, and its audit line says decision warn with the
// refusal it would have had. Decide asks it, and so does the question
// asked again at forward (Server.decideAgain).
func (a *Call) warned(prof *policy.Profile, err error) error {
	if err == nil || !policyRefusal(err) || !prof.WarnsOf(Code(err)) {
		return err
	}
	if a.warning == "" {
		a.warning, a.warnCode = Message(err), Code(err)
		a.metrics.PolicyWarned(a.route, prof.Name)
	}
	return nil
}

// Warned is for a route that asks its policy question its own way (a
// push's ref updates): err, the policy's refusal, unless the profile is in
// warn mode (nil then, and the audit line says warn).
func (a *Call) Warned(err error) error { return a.warned(a.session.Profile, err) }

// Answered records the policy's answer to the request's question, for
// the JSON audit record: what Decide does, for a route that asks its
// question its own way.
func (a *Call) Answered(allowed bool) {
	a.answer = audit.Deny
	if allowed {
		a.answer = audit.Allow
	}
}

// SetQuestion records the request's policy question as the route asked
// it, for the JSON audit record, so that it can be asked again of another
// policy (cproxy policy replay). A route sets it before it Decides, and
// again as it learns more (a push's ref updates, a version's publish time).
// Without a JSON audit log nothing keeps it, and it costs nothing.
func (a *Call) SetQuestion(q policy.Question) {
	if a.sink != nil {
		a.question, a.asked = q, true
	}
}

// AskAgain makes d the request's policy question from now on, without
// asking it: for a route that asked its parts itself (a push's ref
// updates, once read) and wants the whole asked again before sending.
func (a *Call) AskAgain(d Decide) { a.decide = d }

// Fail answers the request with err, written as the route writes a
// refusal.
func (a *Call) Fail(err error) { a.fail(a.errorWriter(), err) }

// WriteErrorsWith makes write the writer of this request's refusals from
// now on, in place of the route's WriteError: Fail's, and those the core
// writes when it forwards (the credential, the re-decision, the
// upstream's failure). For a route whose refusal carries something of the
// request (a JSON-RPC error, the request's id).
func (a *Call) WriteErrorsWith(write func(http.ResponseWriter, error) int) { a.writeErr = write }

// errorWriter writes the request's refusals.
func (a *Call) errorWriter() func(http.ResponseWriter, error) int {
	if a.writeErr != nil {
		return a.writeErr
	}
	return a.rt.WriteError
}

// FailWith answers the request with err, written by write: for a route
// whose client reads refusals differently in one place (git's ref
// advertisement).
func (a *Call) FailWith(write func(http.ResponseWriter, error) int, err error) { a.fail(write, err) }

// Denied records that the route refused the request with an answer of its
// own (a git push report), for err, a refusal: its message and code.
func (a *Call) Denied(err error) { a.reason, a.code, a.decision = Message(err), Code(err), audit.Deny }

// ReadBody reads the request's body whole, at most limit bytes, within the
// memory for bodies read whole and the body deadline, and puts the bytes
// read back as the body that is sent: what the route checks is what the
// upstream gets. It refuses an encoded body.
func (a *Call) ReadBody(limit int64) ([]byte, error) { return readBody(a.r, limit, &a.held) }

// ReadEncodedBody is ReadBody for a body that may also come in one of
// encodings ("gzip"): the bytes are returned, and sent, as they came,
// still encoded. The route decodes them to check them, and bounds what it
// decodes.
func (a *Call) ReadEncodedBody(limit int64, encodings ...string) ([]byte, error) {
	return readBody(a.r, limit, &a.held, encodings...)
}

// ShrinkBody makes b the body that is sent in place of the one ReadBody
// read: a route that takes something out of what it checked (the MCP
// route, a client capability the policy does not give the server) sends
// the bytes it built from the checked ones, in the memory the read body
// holds. b must be no longer than the body read; ShrinkBody reports
// whether it was.
func (a *Call) ShrinkBody(b []byte) bool {
	cb, ok := a.r.Body.(*checkedBody)
	if !ok || cb.off != 0 || len(b) == 0 || len(b) > len(cb.b) {
		return false
	}
	cb.b = cb.b[:copy(cb.b, b)]
	a.r.ContentLength = int64(len(cb.b))
	return true
}

// Held is the request's share of the memory for bodies read whole, for a
// route that reads a body its own way (BodyHold.Reader).
func (a *Call) Held() *BodyHold { return &a.held }

// Acquire takes the request's concurrency slot and a place in its rate,
// as its token's budget sets them, and meters the request from then on:
// Reserve holds its spending, Settle charges it. The slot is given back
// when the request ends.
func (a *Call) Acquire() error {
	s := a.session
	res, err := a.srv.budgets.Acquire(a.r.Context(), budget.Token{ID: s.TokenID, Sandbox: s.Sandbox, Limits: s.Budget})
	if err != nil {
		return budgetRefusal(err)
	}
	a.meter = &meter{a: a, res: res, s: a.srv}
	return nil
}

// Reserve holds want of the token's budget for the request, refusing it
// when the budget cannot cover it (or, under a budget's ask, asking for an
// approval of it); charged says whether the request is charged at all (a
// token count is not). Call after Acquire.
func (a *Call) Reserve(want tokens.Usage, charged bool) error {
	m := a.meter
	if m == nil {
		// A route's defect, not a client's: say which.
		panic("routes: " + a.route + " route called Call.Reserve before Call.Acquire")
	}
	if err := m.res.Hold(a.r.Context(), want, charged); err != nil {
		if err = a.askPastBudget(want, err); err != nil {
			return err
		}
	}
	m.want, m.charged = want, charged
	return nil
}

// Charged reports whether the request is charged: Reserve said so.
func (a *Call) Charged() bool { return a.meter != nil && a.meter.charged }

// Settle charges the request what the upstream reported it used; input
// and output say whether it reported those counts (what it did not is
// charged what Reserve held). Only the first Settle counts. A metered
// request the route never settles is charged what it held if the upstream
// got it, else nothing.
func (a *Call) Settle(u tokens.Usage, input, output bool) {
	if a.meter != nil {
		a.meter.answered(u, input, output)
	}
}

// InputReported tells the budget the input counts u (input, cache read,
// cache write) the upstream reported before its answer ended (a stream's
// first event), so that what the request holds of them is what was
// reported rather than what Reserve held. Settle still charges the
// request.
func (a *Call) InputReported(u tokens.Usage) {
	if a.meter != nil {
		a.meter.inputKnown(u)
	}
}

// CallOf is the Call of a response's request, for a Forwarder's
// checkResponse.
func CallOf(resp *http.Response) *Call { return outboundOf(resp.Request).a }
