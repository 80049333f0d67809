package routes

import (
	"bytes"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/cproxy/cproxy/policy"
)

// recordPair encodes rec both ways: with json.Marshal, as the audit log
// was written before appendAuditRecord, its line breakers escaped
// (EscapeLineBreakers), and with appendAuditRecord. Neither holds a line
// breaker raw.
func recordPair(t *testing.T, rec AuditRecord) (marshalled, appended string) {
	t.Helper()
	want, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	got := appendAuditRecord(nil, &rec)
	if bytes.ContainsFunc(got, breaksLine) {
		t.Errorf("appendAuditRecord wrote a line breaker raw: %q", got)
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
		rec  AuditRecord
	}{
		{"allowed model request", AuditRecord{Time: "2026-11-30T09:59:13.987Z", Sandbox: "bench-1", TokenID: "tok_0123456789ab", Profile: "default",
			SessionID: "0b6f5e8c-2f61-4a7e-9c1d-3f3c2b1a0e99", Route: "model", Method: "POST", Path: "/v1/messages", Target: "claude-sonnet-4-5",
			Decision: "allow", Rule: `profile.default.models["claude-*"]`, Status: 200, Usage: usage, DurationMS: 0.343, BytesIn: 21903, BytesOut: 541}},
		{"refused, nothing set", AuditRecord{Decision: "deny"}},
		{"a push", AuditRecord{Route: "github", Method: "POST", Path: "/github/o/r.git/git-receive-pack", Target: "o/r", Decision: "deny",
			Refs:   []RefUpdate{{Ref: "refs/heads/main", Old: strings.Repeat("0", 40), New: strings.Repeat("a", 40)}, {Ref: "refs/tags/<v1>", Old: "", New: ""}},
			Status: 403, Reason: "push to refs/tags/<v1> & more is refused", DurationMS: 1500}},
		{"strings to escape", AuditRecord{Sandbox: "a\"b\\c", TokenID: "\x00\x01\x1f\x7f", Profile: "\b\f\n\r\t", SessionID: "<script>&</script>",
			Route: "\u2028\u2029", Method: "é\u00a0\ufffd", Path: "/\xff\xc3/\xe2\x82", Target: "ünïcode 😀", Rule: "=", Reason: "line\nbreak"}},
		{"line breakers", AuditRecord{Target: "a\u0085b\u009b[2J\u0080\u009f", Reason: "\u202eevil\u202c \u2066x\u2069\u200e\u200f\u061c\u202a\u202b\u202d\u2067\u2068",
			Refs: []RefUpdate{{Ref: "refs/heads/\u2028"}}, Truncated: []string{"path", "\u0085"}, RefsOmitted: 7}},
		{"durations", AuditRecord{DurationMS: 1e-7}},
		{"long duration", AuditRecord{DurationMS: 1e21}},
		{"negative duration", AuditRecord{DurationMS: -0.001, Usage: &Usage{}}},
		{"large numbers", AuditRecord{RefsOmitted: -3, Status: -1, BytesIn: math.MaxInt64, BytesOut: math.MinInt64, Usage: &Usage{CacheWrite: -7}}},
		{"usage not reported", AuditRecord{Status: 200, Usage: &Usage{Input: 203, Output: 40, CacheRead: 203, CacheWrite: 203, NotReported: true}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			want, got := recordPair(t, c.rec)
			if got != want {
				t.Errorf("appendAuditRecord wrote\n%s\njson.Marshal writes\n%s", got, want)
			}
		})
	}
}

// FuzzAuditRecord: whatever strings a client, a push or the config puts in
// an audit record, and whatever its numbers, appendAuditRecord writes what
// json.Marshal writes, its line breakers escaped.
func FuzzAuditRecord(f *testing.F) {
	f.Add("2026-11-30T09:59:13.987Z", "bench-1", "tok_0123456789ab", "default", "sess", "model", "POST", "/v1/messages", "claude-sonnet-4-5", "", "allow", "rule", "", int64(5), int64(31), int64(1234567), 200, 0.343, true)
	f.Add("", "a b", "x=y", "\"", "\t<>&", "", "", "/é\u00a0\u2028", "\xff", "refs/heads/\x00", "deny", "\\", "why\n", int64(0), int64(-1), int64(-5), 499, 1e-9, false)
	f.Add("", "", "", "", "\u0085", "\u009b", "", "\u202e", "\u2066", "\u061c", "", "", "\u200f", int64(3), int64(0), int64(0), 0, 0.0, true)
	f.Fuzz(func(t *testing.T, tm, sandbox, tokenID, profile, sid, route, method, path, target, ref, decision, rule, reason string, in, out, bytesIn int64, status int, ms float64, withUsage bool) {
		if math.IsNaN(ms) || math.IsInf(ms, 0) {
			return // a duration is neither; json.Marshal refuses them
		}
		rec := AuditRecord{Time: tm, Sandbox: sandbox, TokenID: tokenID, Profile: profile, SessionID: sid, Route: route, Method: method, Path: path,
			Target: target, Decision: decision, Rule: rule, Status: status, Reason: reason, DurationMS: ms, BytesIn: bytesIn, BytesOut: out}
		if ref != "" {
			rec.Refs = []RefUpdate{{Ref: ref, Old: sid, New: reason}, {Ref: target}}
			rec.Truncated, rec.RefsOmitted = []string{route, ref}, int(in)
		}
		if withUsage {
			rec.Usage = &Usage{Input: in, Output: out, CacheRead: bytesIn, CacheWrite: int64(status)}
		}
		want, got := recordPair(t, rec)
		if got != want {
			t.Fatalf("appendAuditRecord wrote\n%s\njson.Marshal writes\n%s", got, want)
		}
	})
}

// BenchmarkAuditRecord is the JSON audit record of one allowed model
// request, to nowhere: as writeRecord writes it, and as json.Marshal did.
func BenchmarkAuditRecord(b *testing.B) {
	s := &Server{now: time.Now, auditLog: io.Discard}
	r := httptest.NewRequest(http.MethodPost, "/v1/messages?beta=true", strings.NewReader("{}"))
	r.Header.Set("X-Claude-Code-Session-Id", "0b6f5e8c-2f61-4a7e-9c1d-3f3c2b1a0e99")
	sess := &Session{TokenID: "tok_0123456789ab", Sandbox: "bench-1", Profile: &policy.Profile{Name: "default"}}
	a, _ := s.startAudit(httptest.NewRecorder(), r)
	a.route, a.session, a.target, a.rule = "model", sess, "claude-sonnet-4-5", `profile.default.models["claude-*"]`
	a.w.status, a.w.bytes, a.body.n = 200, 541, 21900
	a.usage = Usage{Input: 5120, Output: 31, CacheRead: 4096}
	b.Run("append", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			rec := a.record(200, 343*time.Microsecond)
			a.writeRecord(&rec)
		}
	})
	b.Run("json.Marshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			line, _ := json.Marshal(a.record(200, 343*time.Microsecond))
			a.sink.Write(append(line, '\n'))
		}
	})
}
