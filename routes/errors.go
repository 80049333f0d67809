package routes

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/cproxy/cproxy/routes/budget"
)

// The kinds of refusal a route returns. One function, status, turns each into
// an HTTP status; each route's writer renders it in its upstream's own error
// format, so the client shows the message the way it shows the upstream's.
var (
	ErrBadRequest   = errors.New("bad request")
	ErrUnauthorized = errors.New("unauthorized")
	ErrForbidden    = errors.New("forbidden")
	ErrNotFound     = errors.New("not found")
	ErrTooLarge     = errors.New("request too large")
	ErrUnavailable  = errors.New("unavailable")
	ErrUpstream     = errors.New("upstream unreachable")
	ErrTimeout      = errors.New("upstream timed out")
	// ErrTooManyRequests is a budget, rate or concurrency limit.
	ErrTooManyRequests = errors.New("too many requests")
	// ErrBodyTimeout is a request body that did not arrive in time.
	ErrBodyTimeout = errors.New("request body timeout")
	// ErrTwoCredentials is a request that carries two different
	// credentials (Authorization and X-Api-Key), an ErrUnauthorized: a
	// route whose client is known to send a second one words the fix
	// (the model route: Claude Code's ANTHROPIC_API_KEY).
	ErrTwoCredentials = fmt.Errorf("two different credentials: %w", ErrUnauthorized)
)

// refusal is an error with a message meant for the client. The message must
// never hold a credential or token: it is sent and logged as is.
type refusal struct {
	kind error
	// code is the refusal's stable code (docs/refusals.md); empty: its
	// kind's (Code).
	code string
	msg  string
	// retryAfter, when set, is how long until retrying can succeed
	// (a limit's window or rate); zero: retrying will not help.
	retryAfter time.Duration
	// firm marks a refusal that is not the policy's plain answer, which
	// warn mode must not let pass: a question that cannot be answered yet
	// (Deferred), a request that waits for an operator's approval.
	firm bool
}

func (e *refusal) Error() string { return e.msg }
func (e *refusal) Unwrap() error { return e.kind }

// Refuse builds a refusal; messages start with "cproxy: " so a user can tell
// cproxy's words from the upstream's.
func Refuse(kind error, format string, args ...any) error {
	return &refusal{kind: kind, msg: "cproxy: " + fmt.Sprintf(format, args...)}
}

// RefuseCode is Refuse with a stable code of its own, one of Codes, for a
// refusal an agent or operator acts on by what it is (a model, a ref, a
// package the profile does not allow) rather than by its kind.
func RefuseCode(kind error, code, format string, args ...any) error {
	return &refusal{kind: kind, code: code, msg: "cproxy: " + fmt.Sprintf(format, args...)}
}

// Deferred is a route's answer to its own policy question when the
// question needs more than it has (a version's publish time, not fetched
// yet): a refusal (ErrForbidden) if it is ever sent, but not the policy's,
// so a profile in warn mode does not let it pass. The route fetches what
// it needs and asks again.
func Deferred(format string, args ...any) error {
	return refuseFirm(CodePolicyChanged, format, args...)
}

// refuseFirm is an ErrForbidden refusal that warn mode does not let pass.
func refuseFirm(code, format string, args ...any) error {
	err := RefuseCode(ErrForbidden, code, format, args...).(*refusal)
	err.firm = true
	return err
}

// policyRefusal reports whether err is a refusal by the policy's answer:
// ErrForbidden, and not a firm one (Deferred, an approval's).
func policyRefusal(err error) bool {
	var r *refusal
	return errors.As(err, &r) && !r.firm && errors.Is(err, ErrForbidden)
}

// IsRefusal reports whether err is, or wraps, a refusal (Refuse): an
// error whose message is meant for the client, which a route passes on as
// it is rather than wording it again.
func IsRefusal(err error) bool {
	var r *refusal
	return errors.As(err, &r)
}

// noLongerAllowed is err, a refusal of a request decided under an earlier
// policy than the one in force (recheck), worded to say so: the client and
// the audit line learn that a policy reload, not the request, changed the
// answer. Its kind and its retry stay. A token store that failed is not the
// policy's answer, and nil is nil: both are returned as they are.
func noLongerAllowed(err error) error {
	var r *refusal
	if !errors.As(err, &r) || errors.Is(err, ErrUnavailable) {
		return err
	}
	again := *r
	again.msg = "cproxy: the policy put in force while this request was under way no longer allows it: " + strings.TrimPrefix(r.msg, "cproxy: ")
	return &again
}

// refuseRetry is Refuse for a refusal that says when retrying can succeed:
// after retry (Retry-After).
func refuseRetry(kind error, retry time.Duration, format string, args ...any) error {
	err := Refuse(kind, format, args...).(*refusal)
	err.retryAfter = retry
	return err
}

// budgetRefusal is a budget's refusal (a *budget.Refusal) as a refusal of
// the core's kinds: a limit reached is ErrTooManyRequests, a token store
// that failed ErrUnavailable, with the budget's words and when to retry.
// Another error is returned as it is.
func budgetRefusal(err error) error {
	var b *budget.Refusal
	if !errors.As(err, &b) {
		return err
	}
	kind, code := ErrTooManyRequests, CodeBudget
	if b.Unavailable {
		kind, code = ErrUnavailable, CodeUnavailable
	}
	err = refuseRetry(kind, b.RetryAfter, "%s", b.Error())
	err.(*refusal).code = code
	return err
}

// Status maps an error to its HTTP Status and Anthropic error type.
func Status(err error) (int, string) {
	switch {
	case errors.Is(err, ErrBadRequest):
		return http.StatusBadRequest, "invalid_request_error"
	case errors.Is(err, ErrUnauthorized):
		return http.StatusUnauthorized, "authentication_error"
	case errors.Is(err, ErrForbidden):
		return http.StatusForbidden, "permission_error"
	case errors.Is(err, ErrNotFound):
		return http.StatusNotFound, "not_found_error"
	case errors.Is(err, ErrTooLarge):
		return http.StatusRequestEntityTooLarge, "request_too_large"
	case errors.Is(err, ErrUnavailable):
		return http.StatusServiceUnavailable, "api_error"
	case errors.Is(err, ErrUpstream):
		return http.StatusBadGateway, "api_error"
	case errors.Is(err, ErrTimeout):
		return http.StatusGatewayTimeout, "api_error"
	case errors.Is(err, ErrBodyTimeout):
		return http.StatusRequestTimeout, "invalid_request_error"
	case errors.Is(err, ErrTooManyRequests):
		return http.StatusTooManyRequests, "rate_limit_error"
	}
	return http.StatusInternalServerError, "api_error"
}

// Message is what the client is told. Errors that are not refusals are
// internal: their text may hold details that are not the client's business.
func Message(err error) string {
	var r *refusal
	if errors.As(err, &r) {
		return r.msg
	}
	return "cproxy: internal error"
}

// SetRetryAfter sets Retry-After when err says when retrying can succeed
// (a limit's rate or window, the memory for bodies), and reports whether
// it did.
func SetRetryAfter(h http.Header, err error) bool {
	var ref *refusal
	if !errors.As(err, &ref) || ref.retryAfter <= 0 {
		return false
	}
	h.Set("Retry-After", strconv.FormatInt(budget.RetrySeconds(ref.retryAfter), 10))
	return true
}

// jsonError is the error shape of npm's registry, {"error": "..."}, which
// npm prints after the status.
type jsonError struct {
	Error string `json:"error"`
	// Code is the refusal's stable code (Code), which npm does not print
	// but a client reading the JSON can act on.
	Code string `json:"code"`
}

// WriteJSONError renders err as npm's registry renders errors,
// {"error": "...", "code": "..."}: for the npm route, and for relays, whose
// clients read JSON.
func WriteJSONError(w http.ResponseWriter, err error) int {
	code, _ := Status(err)
	body, _ := json.Marshal(jsonError{Error: Message(err), Code: Code(err)})
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	if errors.Is(err, ErrUnauthorized) {
		h.Set("WWW-Authenticate", `Bearer realm="cproxy"`)
	}
	SetRetryAfter(h, err)
	w.WriteHeader(code)
	w.Write(append(body, '\n'))
	return code
}

// WritePlainError is for routes without an upstream format of their own.
func WritePlainError(w http.ResponseWriter, err error) int {
	code, _ := Status(err)
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	SetRetryAfter(h, err)
	w.WriteHeader(code)
	fmt.Fprintln(w, Message(err))
	return code
}

// The stable codes of refusals, each in the audit record (code) and, where
// the client's error shape has a place for it, in the answer. A refusal
// built with RefuseCode has its own; any other has its kind's. They never
// change meaning once released: docs/refusals.md is their table, and a test
// holds the two together.
const (
	// A kind's code, for a refusal with none of its own.
	CodeBadRequest      = "cproxy-bad-request"
	CodeUnauthorized    = "cproxy-unauthorized"
	CodeForbidden       = "cproxy-forbidden"
	CodeNotFound        = "cproxy-not-found"
	CodeTooLarge        = "cproxy-too-large"
	CodeUnavailable     = "cproxy-unavailable"
	CodeUpstream        = "cproxy-upstream-unreachable"
	CodeTimeout         = "cproxy-upstream-timeout"
	CodeTooManyRequests = "cproxy-too-many-requests"
	CodeBodyTimeout     = "cproxy-body-timeout"
	// CodeInternal is an error that is not a refusal: cproxy failed.
	CodeInternal = "cproxy-internal"

	// The policy's refusals: what the sandbox's profile does not allow.
	CodeModelNotAllowed   = "cproxy-model-not-allowed"
	CodeRepoNotAllowed    = "cproxy-repo-not-allowed"
	CodeRefNotAllowed     = "cproxy-ref-not-allowed"
	CodeAPINotAllowed     = "cproxy-api-not-allowed"
	CodePackageNotAllowed = "cproxy-package-not-allowed"
	CodeVersionDenied     = "cproxy-version-denied"
	CodeTooNew            = "cproxy-version-too-new"
	CodeRelayNotAllowed   = "cproxy-relay-not-allowed"
	CodeMCPNotAllowed     = "cproxy-mcp-not-allowed"
	CodeNoProfile         = "cproxy-no-profile"
	// CodePolicyChanged is a request whose answer a policy reload changed
	// while it was under way.
	CodePolicyChanged = "cproxy-policy-changed"
	// The approvals' refusals (docs/approvals.md).
	CodeNeedsApproval  = "cproxy-needs-approval"
	CodeApprovalDenied = "cproxy-approval-denied"
	CodeApprovalSpent  = "cproxy-approval-spent"
	// CodeBudget is a limit of the profile's budget reached: what the
	// token may spend, or its rate or concurrency.
	CodeBudget = "cproxy-budget-limit"
)

// Codes are every code a refusal can have, for the docs' table to be
// checked against.
var Codes = []string{
	CodeBadRequest, CodeUnauthorized, CodeForbidden, CodeNotFound, CodeTooLarge, CodeUnavailable,
	CodeUpstream, CodeTimeout, CodeTooManyRequests, CodeBodyTimeout, CodeInternal,
	CodeModelNotAllowed, CodeRepoNotAllowed, CodeRefNotAllowed, CodeAPINotAllowed, CodePackageNotAllowed,
	CodeVersionDenied, CodeTooNew, CodeRelayNotAllowed, CodeMCPNotAllowed, CodeNoProfile, CodePolicyChanged,
	CodeNeedsApproval, CodeApprovalDenied, CodeApprovalSpent, CodeBudget,
}

// Code is err's stable code: its refusal's own (RefuseCode), else its
// kind's; CodeInternal for an error that is not a refusal, nil's is empty.
func Code(err error) string {
	if err == nil {
		return ""
	}
	var r *refusal
	if !errors.As(err, &r) {
		return CodeInternal
	}
	if r.code != "" {
		return r.code
	}
	for _, k := range kindCodes {
		if errors.Is(err, k.kind) {
			return k.code
		}
	}
	return CodeInternal
}

// kindCodes are the kinds' codes, in Status's order of precedence.
var kindCodes = [...]struct {
	kind error
	code string
}{
	{ErrBadRequest, CodeBadRequest},
	{ErrUnauthorized, CodeUnauthorized},
	{ErrForbidden, CodeForbidden},
	{ErrNotFound, CodeNotFound},
	{ErrTooLarge, CodeTooLarge},
	{ErrUnavailable, CodeUnavailable},
	{ErrUpstream, CodeUpstream},
	{ErrTimeout, CodeTimeout},
	{ErrBodyTimeout, CodeBodyTimeout},
	{ErrTooManyRequests, CodeTooManyRequests},
}

// maxListed is how many entries of a list a refusal names (Listed).
const maxListed = 5

// Listed is a list of what the sandbox's own profile allows, for a
// refusal to say what would be: "react, react-dom, @types/*", cut to
// maxListed entries and "and N more", or "none" for an empty list. Only the
// sandbox's own profile may be listed, never another's, and never
// anything that holds a credential.
func Listed(items []string) string {
	if len(items) == 0 {
		return "none"
	}
	var b strings.Builder
	for i, it := range items {
		if i == maxListed {
			fmt.Fprintf(&b, " and %d more", len(items)-maxListed)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(Clip(it, 128))
	}
	return b.String()
}

// RefuseTooNew refuses a version (what: "react@19.2.0") published at
// published, younger than sandbox's minimum release age, min, at now: how
// old it is, the minimum, when it will be allowed and, when the route knows
// it, newest, the newest version the sandbox may have now.
func RefuseTooNew(what, sandbox string, published, now time.Time, min time.Duration, newest string) error {
	if newest != "" {
		return RefuseCode(ErrForbidden, CodeTooNew, "%s is %s old; the minimum release age for sandbox %s is %s (newest allowed: %s; this one is allowed from %s)",
			what, Span(now.Sub(published)), sandbox, Span(min), Clip(newest, 64), published.Add(min).UTC().Format(time.RFC3339))
	}
	return RefuseCode(ErrForbidden, CodeTooNew, "%s is %s old; the minimum release age for sandbox %s is %s (it is allowed from %s; use an older version until then)",
		what, Span(now.Sub(published)), sandbox, Span(min), published.Add(min).UTC().Format(time.RFC3339))
}

// Span is a duration in a refusal's words: "7 days", "3 hours", "12
// minutes", rounded down.
func Span(d time.Duration) string {
	unit := func(n int64, one string) string {
		if n == 1 {
			return "1 " + one
		}
		return strconv.FormatInt(n, 10) + " " + one + "s"
	}
	switch {
	case d >= 48*time.Hour || d >= 24*time.Hour && d%(24*time.Hour) == 0:
		return unit(int64(d/(24*time.Hour)), "day")
	case d >= time.Hour:
		return unit(int64(d/time.Hour), "hour")
	case d >= time.Minute:
		return unit(int64(d/time.Minute), "minute")
	}
	return "less than a minute"
}
