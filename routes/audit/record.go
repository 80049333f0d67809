// Package audit is cproxy's audit log: the record of one request on the
// proxy listener (Record), how it is written (a JSON line, AppendJSON and
// WriteJSON; a text line through NewTextHandler's slog handler, Log), the
// asynchronous writer of the audit file (Writer), and the rule that bounds
// what a client's text puts in a record or a refusal (Clip). The proxy core
// builds a Record when a request ends and hands it here; this package
// knows nothing of requests or routes.
package audit

import (
	"encoding/json"
	"slices"

	"github.com/cproxy/cproxy/tokens"
)

// Record is one line of the audit log (log.audit): one request on the
// proxy listener, written as JSON when it ends. The field names are stable;
// docs/operations.md describes each. It never holds a token or a
// credential, and every string a client chose is bounded (Bound).
type Record struct {
	// Time is when the request ended, RFC 3339 in UTC with milliseconds
	// (TimeFormat).
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
	// Pin is the digest of the pinned definition of the MCP tool a
	// tools/call calls; Args the call's arguments, as compact JSON, when
	// the operator asked for them ([mcp.NAME] audit_arguments).
	Pin  string `json:"pin,omitempty"`
	Args string `json:"args,omitempty"`
	// Question is the request's policy question as JSON (a
	// policy.Question), for asking it again of another policy (cproxy
	// policy replay), and Answer the policy's answer to it then, Allow or
	// Deny (a request the policy allowed may still have been refused
	// for something else: its budget, its body). Empty: the request got
	// no policy question (no token, a path no route has, a malformed
	// request). The JSON record has them; the text line does not.
	Question json.RawMessage `json:"question,omitempty"`
	Answer   string          `json:"answer,omitempty"`
	// Decision is Allow, Deny or Error.
	Decision string `json:"decision"`
	Rule     string `json:"rule,omitempty"`
	// Approval is the id of the approval request a request that needs
	// one filed or found ("apr_…"), or of the grant it used. Empty: none.
	Approval string `json:"approval,omitempty"`
	Status   int    `json:"status"`
	// Code is the refusal's stable code ("cproxy-ref-not-allowed",
	// docs/refusals.md) when cproxy refused or failed the request, or a
	// profile in warn mode let a refusal pass. Empty: allowed.
	Code       string  `json:"code,omitempty"`
	Reason     string  `json:"reason,omitempty"`
	Usage      *Usage  `json:"usage,omitempty"`
	DurationMS float64 `json:"duration_ms"`
	BytesIn    int64   `json:"bytes_in"`
	BytesOut   int64   `json:"bytes_out"`
	// Truncated names the fields cut to their bound, in the record's order:
	// "session_id", "method", "path", "target", "refs" (a ref name cut, or
	// more than MaxRefs updates), "question" (left out whole), "pin",
	// "args", "reason". A cut string ends in "…".
	// Empty: nothing was cut.
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

// Usage is what a model request cost, in tokens, as the upstream reported
// it. The model route tells the request's Call as the answer streams by;
// the record carries it when it is not zero.
type Usage struct {
	Input      int64 `json:"input_tokens"`
	Output     int64 `json:"output_tokens"`
	CacheRead  int64 `json:"cache_read_input_tokens"`
	CacheWrite int64 `json:"cache_creation_input_tokens"`
	// NotReported: the upstream had the request but did not report all of
	// these counts (a stream cut short or left by the client, an answer
	// too large to read, no answer at all); each count it did not report
	// is what the request reserved, which its budget was charged. False:
	// every count is the upstream's.
	NotReported bool `json:"not_reported,omitempty"`
}

// IsZero reports whether u counts nothing: no usage was reported.
func (u Usage) IsZero() bool { return u == Usage{} }

// The decisions a record tells.
const (
	Allow = "allow" // cproxy forwarded the request (whatever the upstream answered)
	Deny  = "deny"  // cproxy refused it: token, policy, or a request it does not forward
	Error = "error" // cproxy could not serve it: no credential, store or upstream down, time-out
	Warn  = "warn"  // the policy would have refused it, but its profile is in warn mode: forwarded
)

// TimeFormat is the record's time: RFC 3339 with milliseconds.
const TimeFormat = "2006-01-02T15:04:05.000Z07:00"

// MaxRefs bounds the ref updates one record lists; the policy still
// decides every one.
const MaxRefs = 100

// The bounds of the strings a client chooses, in bytes before the "…".
const (
	maxSessionID = 128
	maxMethod    = 32
	maxPath      = 256
	maxTarget    = 256
	maxRef       = 256
	maxObjectID  = 64
	maxReason    = 1024
	maxPin       = 80
	maxArgs      = 1024
	maxQuestion  = 4096
)

// Bound bounds every string a client chose (the session id, method, path,
// target, refs, MCP pin and arguments, and reason) by Clip's rule, lists at most MaxRefs ref
// updates, and names what it cut in Truncated. The caller fills those
// fields in as the request had them and calls Bound once: it is the one
// place that decides what of them a record keeps, for the JSON record and
// the text line alike. rec.Refs is replaced, never written to.
func (rec *Record) Bound() {
	rec.SessionID = rec.bound("session_id", rec.SessionID, maxSessionID)
	rec.Method = rec.bound("method", rec.Method, maxMethod)
	rec.Path = rec.bound("path", rec.Path, maxPath)
	rec.Target = rec.bound("target", rec.Target, maxTarget)
	refs := rec.Refs
	rec.Refs = nil
	for i, u := range refs {
		if i == MaxRefs {
			rec.RefsOmitted = len(refs) - MaxRefs
			rec.markCut("refs")
			break
		}
		rec.Refs = append(rec.Refs, RefUpdate{Ref: rec.bound("refs", u.Ref, maxRef), Old: rec.bound("refs", u.Old, maxObjectID), New: rec.bound("refs", u.New, maxObjectID)})
	}
	if len(rec.Question) > 0 {
		// Token-shaped parts withheld as everywhere; the marker keeps the
		// JSON valid. A question too long to keep whole is left out, not
		// cut: asked again, a cut one could be answered otherwise.
		q, _ := tokens.Withhold(string(rec.Question), withheldToken)
		rec.Question = json.RawMessage(q)
		if len(q) > maxQuestion {
			rec.Question, rec.Answer = nil, ""
			rec.markCut("question")
		}
	}
	rec.Pin = rec.bound("pin", rec.Pin, maxPin)
	rec.Args = rec.bound("args", rec.Args, maxArgs)
	rec.Reason = rec.bound("reason", rec.Reason, maxReason)
}

// bound is Clip(s, n) for the record's field, which Truncated names if s
// was cut.
func (rec *Record) bound(field, s string, n int) string {
	s, cut := cut(s, n)
	if cut {
		rec.markCut(field)
	}
	return s
}

func (rec *Record) markCut(field string) {
	if !slices.Contains(rec.Truncated, field) {
		rec.Truncated = append(rec.Truncated, field)
	}
}

// withheldToken stands for the token-shaped part of a client's text in
// records and refusals (tokens.Withhold).
const withheldToken = "[token-withheld]"

// Clip bounds what a client-chosen string can put in a refusal or an audit
// record, and withholds any token-shaped part of it. It is the one place
// that decides what of a client's text is kept, for every field and format.
func Clip(s string, n int) string {
	s, _ = cut(s, n)
	return s
}

// cut is Clip, also saying whether s was cut to n bytes (and "…" added).
func cut(s string, n int) (string, bool) {
	s, _ = tokens.Withhold(s, withheldToken)
	if len(s) > n {
		return s[:n] + "…", true
	}
	return s, false
}
