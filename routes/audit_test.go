package routes

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/cproxy/cproxy/internal/testutil"
	"github.com/cproxy/cproxy/routes/audit"
)

// auditRecords decodes the JSON lines of an audit sink, each line checked
// to be one whole object.
func auditRecords(t *testing.T, sink *testutil.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.SplitAfter(sink.String(), "\n") {
		if line == "" {
			continue
		}
		if !strings.HasSuffix(line, "\n") {
			t.Fatalf("a record does not end its line: %q", line)
		}
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("not a JSON line: %q: %v", line, err)
		}
		out = append(out, rec)
	}
	return out
}

func sonnetOnly(t *testing.T) envOpt {
	return func(o *testOptions) { o.Policy = mustPolicy(t, "[profile.default]\nmodels = [\"claude-sonnet-*\"]\n") }
}

func withAuditLog(sink *testutil.Buffer) envOpt {
	return func(o *testOptions) { o.AuditLog = sink }
}

// TestAuditRecordJSON: with Options.AuditLog every request is one JSON line
// with the documented fields, the decision and the rule behind it, and the
// log gets no msg=request line.
func TestAuditRecordJSON(t *testing.T) {
	sink := &testutil.Buffer{}
	e := newEnv(t, withAuditLog(sink), func(o *testOptions) {
		o.Policy = mustPolicy(t, "[profile.default]\nmodels = [\"claude-sonnet-*\"]\n")
	})
	tok := e.token("conv-42")
	h := bearer(tok)
	h["X-Claude-Code-Session-Id"] = "sess-1"
	if r := e.do("POST", "/v1/messages", h, hello); r.status != 200 {
		t.Fatalf("allowed: %d %s", r.status, r.body)
	}
	if r := e.do("POST", "/v1/messages", h, `{"model":"claude-opus-4-1","max_tokens":8,"messages":[]}`); r.status != 403 {
		t.Fatalf("denied: %d %s", r.status, r.body)
	}
	if r := e.do("GET", "/v1/models", map[string]string{"X-Api-Key": "cpx_nottoken"}, ""); r.status != 401 {
		t.Fatalf("bad token: %d", r.status)
	}
	e.proxy.Close() // every handler, and so every record, is done

	recs := auditRecords(t, sink)
	if len(recs) != 3 {
		t.Fatalf("%d records, want 3:\n%s", len(recs), sink.String())
	}
	allow, deny, unauth := recs[0], recs[1], recs[2]
	for k, want := range map[string]any{
		"sandbox": "conv-42", "profile": "default", "session_id": "sess-1", "route": "model",
		"method": "POST", "path": "/v1/messages", "target": "claude-sonnet-4-5", "decision": "allow",
		"rule": `profile.default.models["claude-sonnet-*"]`, "status": 200.0, "bytes_in": float64(len(hello)),
	} {
		if allow[k] != want {
			t.Errorf("allowed record %s = %v, want %v", k, allow[k], want)
		}
	}
	if id, _ := allow["token_id"].(string); !strings.HasPrefix(id, "tok_") {
		t.Errorf("token_id = %v", allow["token_id"])
	}
	if _, err := time.Parse(time.RFC3339, allow["time"].(string)); err != nil || !strings.HasSuffix(allow["time"].(string), "Z") || len(allow["time"].(string)) != len("2026-11-30T05:43:28.499Z") {
		t.Errorf("time %v: not RFC 3339 UTC with milliseconds", allow["time"])
	}
	if _, ok := allow["duration_ms"].(float64); !ok {
		t.Errorf("duration_ms = %v", allow["duration_ms"])
	}
	if n, _ := allow["bytes_out"].(float64); n == 0 {
		t.Errorf("bytes_out = %v", allow["bytes_out"])
	}
	if _, ok := allow["reason"]; ok {
		t.Errorf("an allowed request has a reason: %v", allow["reason"])
	}
	if deny["decision"] != "deny" || deny["status"] != 403.0 || deny["target"] != "claude-opus-4-1" ||
		deny["rule"] != "profile.default: no models entry matches" || !strings.Contains(deny["reason"].(string), "model claude-opus-4-1 is not allowed") {
		t.Errorf("denied record: %v", deny)
	}
	if unauth["decision"] != "deny" || unauth["status"] != 401.0 || unauth["sandbox"] != nil || unauth["token_id"] != nil {
		t.Errorf("unauthenticated record: %v", unauth)
	}
	if strings.Contains(sink.String(), tok) || strings.Contains(sink.String(), "cpx_") || strings.Contains(sink.String(), canaryKey) {
		t.Errorf("a record holds a token or the credential:\n%s", sink.String())
	}
	if strings.Contains(e.logs.String(), `"msg":"request"`) {
		t.Errorf("with an audit log, the log still has request lines:\n%s", e.logs.String())
	}
}

// TestAuditRecordErrorAndUsage: an upstream that cannot be reached is an
// error, not a denial; usage is written when the route set it, left out
// when zero.
func TestAuditRecordErrorAndUsage(t *testing.T) {
	sink := &testutil.Buffer{}
	e := newEnv(t, withAuditLog(sink))
	e.fake.Close()
	tok := e.token("conv-1")
	if r := e.do("POST", "/v1/messages", bearer(tok), hello); r.status != 502 {
		t.Fatalf("upstream down: %d", r.status)
	}
	e.proxy.Close()
	recs := auditRecords(t, sink)
	if len(recs) != 1 || recs[0]["decision"] != "error" || recs[0]["status"] != 502.0 || recs[0]["usage"] != nil {
		t.Fatalf("records: %v", recs)
	}

	// The record itself, for usage and the other route-set fields.
	sink2 := &testutil.Buffer{}
	a := &Call{
		w: &auditWriter{ResponseWriter: httptest.NewRecorder(), status: 200}, r: httptest.NewRequest("GET", "/npm/is-thing/-/is-thing-1.1.0.tgz", nil),
		start: time.Now(), route: "npm", target: "is-thing", version: "1.1.0", rule: "r", body: &countingBody{ReadCloser: http.NoBody},
		sink: sink2, usage: audit.Usage{Input: 12, Output: 40, CacheRead: 100, CacheWrite: 7},
	}
	r := a.record(200, 1500*time.Microsecond)
	audit.WriteJSON(a.sink, &r)
	rec := auditRecords(t, sink2)[0]
	if rec["target"] != "is-thing@1.1.0" || rec["decision"] != "allow" || rec["duration_ms"] != 1.5 {
		t.Errorf("record: %v", rec)
	}
	u, _ := rec["usage"].(map[string]any)
	if u["input_tokens"] != 12.0 || u["output_tokens"] != 40.0 || u["cache_read_input_tokens"] != 100.0 || u["cache_creation_input_tokens"] != 7.0 {
		t.Errorf("usage: %v", rec["usage"])
	}
}

// TestAuditRecordBoundsClientStrings: what a client chooses is clipped,
// with the cut named in truncated, and only the token-shaped part of a
// string is withheld, in every field.
func TestAuditRecordBoundsClientStrings(t *testing.T) {
	sink := &testutil.Buffer{}
	e := newEnv(t, withAuditLog(sink), sonnetOnly(t))
	tok := e.token("conv-42")
	h := bearer(tok)
	h["X-Claude-Code-Session-Id"] = "s-" + tok
	e.do("POST", "/v1/"+strings.Repeat("x", 5000), h, "")
	e.do("POST", "/v1/messages", bearer(tok), `{"model":"claude-`+tok+`-x","max_tokens":8,"messages":[]}`)
	e.proxy.Close()
	out := sink.String()
	if strings.Contains(out, "cpx_") || strings.Contains(out, tok[len("cpx_"):]) || len(out) > 4000 {
		t.Errorf("records not bounded or hold the token (%d bytes):\n%s", len(out), out)
	}
	recs := auditRecords(t, sink)
	if recs[0]["session_id"] != "s-[token-withheld]" || len(recs[0]["path"].(string)) != 256+len("…") {
		t.Errorf("long path: %v", recs[0])
	}
	if cut, _ := json.Marshal(recs[0]["truncated"]); string(cut) != `["path","reason"]` {
		t.Errorf("truncated = %s, want [\"path\",\"reason\"]", cut)
	}
	if recs[1]["target"] != "claude-[token-withheld]-x" || !strings.HasPrefix(recs[1]["reason"].(string), "cproxy: model claude-[token-withheld]-x is not allowed") || recs[1]["truncated"] != nil {
		t.Errorf("token in the model: %v", recs[1])
	}
}

// TestAuditLineBoundsClientStrings: the text line keeps of a client's text
// what the JSON record keeps: the refusal's reason too has the token
// withheld, and a cut is named.
func TestAuditLineBoundsClientStrings(t *testing.T) {
	var buf testutil.Buffer
	e := newEnv(t, func(o *testOptions) { o.Audit = slog.New(audit.NewTextHandler(&buf, nil)) }, sonnetOnly(t))
	tok := e.token("conv-42")
	e.do("POST", "/v1/messages", bearer(tok), `{"model":"CPX_`+tok[len("cpx_"):]+`","max_tokens":8,"messages":[]}`)
	e.do("GET", "/v1/"+strings.Repeat("y", 300), bearer(tok), "")
	e.proxy.Close()
	out := buf.String()
	if strings.Contains(out, tok[len("cpx_"):]) {
		t.Errorf("the audit lines hold the token:\n%s", out)
	}
	for _, want := range []string{` target=[token-withheld] `, ` reason="cproxy: model [token-withheld] is not allowed`, ` truncated=path`} {
		if !strings.Contains(out, want) {
			t.Errorf("audit lines lack %q:\n%s", want, out)
		}
	}
}

// TestAuditLineThroughServer: with cproxy serve's audit logger
// (audit.NewTextHandler), a request's audit line comes out whole, once.
func TestAuditLineThroughServer(t *testing.T) {
	var buf testutil.Buffer
	e := newEnv(t, func(o *testOptions) { o.Audit = slog.New(audit.NewTextHandler(&buf, nil)) })
	tok := e.token("sb-1")
	if r := e.do("POST", "/v1/messages", bearer(tok), hello); r.status != 200 {
		t.Fatalf("allowed: %d %s", r.status, r.body)
	}
	e.proxy.Close()
	line := buf.String()
	for _, want := range []string{" level=INFO msg=request route=model sandbox=sb-1 token_id=", " method=POST path=/v1/messages target=", " status=200 duration=", " usage.input_tokens="} {
		if !strings.Contains(line, want) {
			t.Errorf("audit line %q lacks %q", line, want)
		}
	}
	if n := strings.Count(line, "\n"); n != 1 || !strings.HasPrefix(line, "time=") {
		t.Errorf("want one line starting with time=, got %q", line)
	}
}

// refsRoute answers every request 200, having told its audit line of n
// ref updates, as a push of n refs does.
type refsRoute struct{ n int }

func (refsRoute) Name() string   { return "refs" }
func (refsRoute) Prefix() string { return "/refs/" }
func (refsRoute) Close()         {}
func (refsRoute) WriteError(w http.ResponseWriter, err error) int {
	return WritePlainError(w, err)
}

func (rt refsRoute) Serve(c *Call) {
	var refs []audit.RefUpdate
	var names []string
	for i := range rt.n {
		ref := fmt.Sprintf("refs/heads/agent/b%03d", i)
		refs = append(refs, audit.RefUpdate{Ref: ref, Old: strings.Repeat("0", 40), New: strings.Repeat("2", 40)})
		names = append(names, ref)
	}
	c.SetTarget("acme/app " + strings.Join(names, ","))
	c.SetRefs(refs)
	if err := c.Decide(AnyProfile); err != nil {
		c.Fail(err)
		return
	}
	c.ResponseWriter().WriteHeader(http.StatusOK)
}

// TestAuditRecordPushCut: a push with more refs than a record lists says
// how many it left out, and that the target was cut, in both formats.
func TestAuditRecordPushCut(t *testing.T) {
	sink := &testutil.Buffer{}
	u := newEnv(t, withAuditLog(sink), func(o *testOptions) { o.Extra = append(o.Extra, refsRoute{audit.MaxRefs + 3}) })
	if r := u.do("POST", "/refs/acme/app", bearer(u.token("conv-42")), ""); r.status != 200 {
		t.Fatalf("got %d %s", r.status, r.body)
	}
	u.proxy.Close()
	rec := auditRecords(t, sink)[0]
	refs, _ := rec["refs"].([]any)
	cut, _ := json.Marshal(rec["truncated"])
	if len(refs) != audit.MaxRefs || rec["refs_omitted"] != 3.0 || string(cut) != `["target","refs"]` || !strings.HasSuffix(rec["target"].(string), "…") {
		t.Errorf("%d refs, refs_omitted %v, truncated %s, target %v", len(refs), rec["refs_omitted"], cut, rec["target"])
	}

	var line bytes.Buffer
	a := &Call{r: httptest.NewRequest("POST", "/github/acme/app/git-receive-pack", nil), w: &auditWriter{}, body: &countingBody{}, route: "github", target: "acme/app " + strings.Repeat("refs/heads/x,", 101)}
	for range 101 {
		a.refs = append(a.refs, audit.RefUpdate{Ref: "refs/heads/x"})
	}
	r := a.record(200, time.Second)
	audit.Log(context.Background(), slog.New(audit.NewTextHandler(&line, nil)), &r, time.Second)
	if !strings.Contains(line.String(), `…" status=200 `) || !strings.HasSuffix(line.String(), " truncated=target,refs refs_omitted=1\n") {
		t.Errorf("text line: %s", line.String())
	}
}

// TestAuditRecordEscapesLineBreakers: characters a line reader takes for a
// line break, and those that reorder text, are written as \u escapes in
// the JSON record; decoded, the record holds them as sent.
func TestAuditRecordEscapesLineBreakers(t *testing.T) {
	sink := &testutil.Buffer{}
	e := newEnv(t, withAuditLog(sink), sonnetOnly(t))
	tok := e.token("conv-42")
	model := `claude-\u0085x\u009b\u2028\u2029\u202ey\u2066\u200f\u061c`
	e.do("POST", "/v1/messages", bearer(tok), `{"model":"`+model+`","max_tokens":8,"messages":[]}`)
	e.proxy.Close()
	out := sink.String()
	if string(audit.EscapeLineBreakers([]byte(out))) != out || !strings.Contains(out, `"target":"`+model+`"`) {
		t.Errorf("record:\n%s", out)
	}
	if rec := auditRecords(t, sink)[0]; rec["target"] != "claude-\u0085x\u009b\u2028\u2029\u202ey\u2066\u200f\u061c" {
		t.Errorf("target decodes to %q", rec["target"])
	}
}
