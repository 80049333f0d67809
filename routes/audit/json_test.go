package audit

import (
	"bytes"
	"encoding/json"
	"math"
	"slices"
	"strings"
	"testing"
)

// recordPair encodes rec both ways: with json.Marshal, as the audit log
// was written before appendJSON, its line breakers escaped
// (EscapeLineBreakers), and with appendJSON. Neither holds a line
// breaker raw.
func recordPair(t *testing.T, rec Record) (marshalled, appended string) {
	t.Helper()
	want, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	got := appendJSON(nil, &rec)
	if bytes.ContainsFunc(got, breaksLine) {
		t.Errorf("appendJSON wrote a line breaker raw: %q", got)
	}
	return string(EscapeLineBreakers(want)), string(got)
}

// TestAuditRecordAsJSONMarshalsIt: the audit log's JSON lines are, byte for
// byte, what json.Marshal writes for the same record, so no reader of the
// log sees a change and no client-chosen string escapes differently.
func TestAuditRecordAsJSONMarshalsIt(t *testing.T) {
	usage := &Usage{Input: 5120, Output: 31, CacheRead: 4096}
	for _, c := range []struct {
		name string
		rec  Record
	}{
		{"allowed model request", Record{Time: "2026-11-30T09:59:13.987Z", Sandbox: "bench-1", TokenID: "tok_0123456789ab", Profile: "default",
			SessionID: "0b6f5e8c-2f61-4a7e-9c1d-3f3c2b1a0e99", Route: "model", Method: "POST", Path: "/v1/messages", Target: "claude-sonnet-4-5",
			Decision: "allow", Rule: `profile.default.models["claude-*"]`, Status: 200, Usage: usage, DurationMS: 0.343, BytesIn: 21903, BytesOut: 541}},
		{"refused, nothing set", Record{Decision: "deny"}},
		{"a push", Record{Route: "github", Method: "POST", Path: "/github/o/r.git/git-receive-pack", Target: "o/r", Decision: "deny",
			Refs:   []RefUpdate{{Ref: "refs/heads/main", Old: strings.Repeat("0", 40), New: strings.Repeat("a", 40)}, {Ref: "refs/tags/<v1>", Old: "", New: ""}},
			Status: 403, Code: "cproxy-ref-not-allowed", Reason: "push to refs/tags/<v1> & more is refused", DurationMS: 1500}},
		{"strings to escape", Record{Sandbox: "a\"b\\c", TokenID: "\x00\x01\x1f\x7f", Profile: "\b\f\n\r\t", SessionID: "<script>&</script>",
			Route: "\u2028\u2029", Method: "é\u00a0\ufffd", Path: "/\xff\xc3/\xe2\x82", Target: "ünïcode 😀", Rule: "=", Reason: "line\nbreak"}},
		{"line breakers", Record{Target: "a\u0085b\u009b[2J\u0080\u009f", Reason: "\u202eevil\u202c \u2066x\u2069\u200e\u200f\u061c\u202a\u202b\u202d\u2067\u2068",
			Refs: []RefUpdate{{Ref: "refs/heads/\u2028"}}, Truncated: []string{"path", "\u0085"}, RefsOmitted: 7}},
		{"durations", Record{DurationMS: 1e-7}},
		{"long duration", Record{DurationMS: 1e21}},
		{"negative duration", Record{DurationMS: -0.001, Usage: &Usage{}}},
		{"large numbers", Record{RefsOmitted: -3, Status: -1, BytesIn: math.MaxInt64, BytesOut: math.MinInt64, Usage: &Usage{CacheWrite: -7}}},
		{"an MCP call", Record{Route: "mcp", Target: "docs tools/call search", Pin: "sha256:" + strings.Repeat("ab", 32), Args: `{"q":"<x>"}`,
			Question: json.RawMessage(`{"route":"mcp","server":"docs","method":"tools/call","name":"search","args":{"q":"\u003cx\u003e"}}`), Answer: "allow", Decision: "allow"}},
		{"usage not reported", Record{Status: 200, Usage: &Usage{Input: 203, Output: 40, CacheRead: 203, CacheWrite: 203, NotReported: true}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			want, got := recordPair(t, c.rec)
			if got != want {
				t.Errorf("appendJSON wrote\n%s\njson.Marshal writes\n%s", got, want)
			}
		})
	}
}

// FuzzAuditRecord: whatever strings a client, a push or the config puts in
// an audit record, and whatever its numbers, appendJSON writes what
// json.Marshal writes, its line breakers escaped.
func FuzzAuditRecord(f *testing.F) {
	f.Add("2026-11-30T09:59:13.987Z", "bench-1", "tok_0123456789ab", "default", "sess", "model", "POST", "/v1/messages", "claude-sonnet-4-5", "", "allow", "rule", "", int64(5), int64(31), int64(1234567), 200, 0.343, true)
	f.Add("", "a b", "x=y", "\"", "\t<>&", "", "", "/é\u00a0\u2028", "\xff", "refs/heads/\x00", "deny", "\\", "why\n", int64(0), int64(-1), int64(-5), 499, 1e-9, false)
	f.Add("", "", "", "", "\u0085", "\u009b", "", "\u202e", "\u2066", "\u061c", "", "", "\u200f", int64(3), int64(0), int64(0), 0, 0.0, true)
	f.Fuzz(func(t *testing.T, tm, sandbox, tokenID, profile, sid, route, method, path, target, ref, decision, rule, reason string, in, out, bytesIn int64, status int, ms float64, withUsage bool) {
		if math.IsNaN(ms) || math.IsInf(ms, 0) {
			return // a duration is neither; json.Marshal refuses them
		}
		rec := Record{Time: tm, Sandbox: sandbox, TokenID: tokenID, Profile: profile, SessionID: sid, Route: route, Method: method, Path: path,
			Target: target, Decision: decision, Rule: rule, Status: status, Code: rule + decision, Reason: reason, DurationMS: ms, BytesIn: bytesIn, BytesOut: out}
		if ref != "" {
			rec.Refs = []RefUpdate{{Ref: ref, Old: sid, New: reason}, {Ref: target}}
			rec.Truncated, rec.RefsOmitted = []string{route, ref}, int(in)
		}
		if withUsage {
			rec.Usage = &Usage{Input: in, Output: out, CacheRead: bytesIn, CacheWrite: int64(status)}
		}
		want, got := recordPair(t, rec)
		if got != want {
			t.Fatalf("appendJSON wrote\n%s\njson.Marshal writes\n%s", got, want)
		}
	})
}

// A question is kept whole or not at all: token-shaped parts withheld (the
// JSON stays valid), one too long left out and named in truncated.
func TestQuestionBound(t *testing.T) {
	tok := "cpx_" + strings.Repeat("A1b2", 12)
	rec := Record{Question: json.RawMessage(`{"route":"model","model":"` + tok + `"}`), Answer: "deny"}
	rec.Bound()
	if string(rec.Question) != `{"route":"model","model":"[token-withheld]"}` || !json.Valid(rec.Question) || rec.Answer != "deny" {
		t.Errorf("question %s answer %q", rec.Question, rec.Answer)
	}
	rec = Record{Question: json.RawMessage(`{"route":"model","model":"` + strings.Repeat("m", 5000) + `"}`), Answer: "deny"}
	rec.Bound()
	if rec.Question != nil || rec.Answer != "" || !slices.Contains(rec.Truncated, "question") {
		t.Errorf("a long question: %q %q %v", rec.Question, rec.Answer, rec.Truncated)
	}
}
