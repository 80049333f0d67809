package audit

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// auditLinePair formats rec's audit line, with status, both ways at the
// same time: as slog's text handler writes the attributes Log gives it
// through another handler, and as NewTextHandler's own path writes it.
func auditLinePair(t *testing.T, rec Record, status int, d time.Duration, now time.Time) (slogLine, fastLine string) {
	t.Helper()
	rec.Status = status
	var want bytes.Buffer
	r := slog.NewRecord(now, slog.LevelInfo, "request", 0)
	r.AddAttrs(attrs(&rec, d)...)
	if err := slog.NewTextHandler(&want, nil).Handle(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	h, ok := NewTextHandler(&got, nil).(*textHandler)
	if !ok {
		t.Fatal("NewTextHandler without options has no fast path")
	}
	h.writeLine(&rec, d, now)
	return want.String(), got.String()
}

// testRecord is the record of one request, its strings chosen by the
// caller and bounded as the core bounds them.
func testRecord(route, sandbox, tokenID, profile, sid, method, path, target, rule, reason string, usage Usage, withSession, withProfile bool) Record {
	rec := Record{Route: route, Method: method, Path: path, Target: target, Rule: rule, Reason: reason, Decision: Allow, BytesIn: 21900, BytesOut: 541}
	if withSession {
		rec.Sandbox, rec.TokenID, rec.SessionID = sandbox, tokenID, sid
		if withProfile {
			rec.Profile = profile
		}
	}
	rec.Bound()
	if !usage.IsZero() {
		rec.Usage = &usage
	}
	return rec
}

// TestAuditLineAsSlogWritesIt: the audit line cproxy serve writes by
// default is, byte for byte, the line slog's text handler writes from the
// same attributes: the audit log's format does not depend on which path
// wrote it.
func TestAuditLineAsSlogWritesIt(t *testing.T) {
	at := time.Date(2026, 11, 30, 9, 59, 13, 987654321, time.UTC)
	local := at.In(time.FixedZone("X", -(3*3600 + 30*60)))
	usage := Usage{Input: 5120, Output: 31, CacheRead: 4096}
	for _, c := range []struct {
		name string
		rec  Record
		now  time.Time
		d    time.Duration
	}{
		{"allowed model request", testRecord("model", "bench-1", "tok_0123456789ab", "default", "0b6f5e8c-2f61-4a7e-9c1d-3f3c2b1a0e99", "POST", "/v1/messages", "claude-sonnet-4-5", `profile.default.models["claude-*"]`, "", usage, true, true), at, 1234567 * time.Nanosecond},
		{"no token", testRecord("model", "", "", "", "sess", "GET", "/v1/models", "", "", "no sandbox token: send it as Authorization: Bearer or X-Api-Key", Usage{}, false, false), local, 0},
		{"revoked: no profile", testRecord("github", "sb", "tok_1", "", "", "GET", "/github/o/r.git/info/refs", "o/r", "", "sandbox token tok_1 was revoked", Usage{}, true, false), at.Add(999 * time.Microsecond), 90 * time.Second},
		{"strings to quote", testRecord("none", "a b", "tok=1", `quo"te`, "tab\there", "GET", "/x y/é/\u00a0/\x7f/\\", "ünïcode", "rule with spaces", "line\nbreak \ufffd", Usage{CacheWrite: 7}, true, true), at, time.Millisecond},
		{"a refusal's code", func() Record {
			r := testRecord("github", "sb", "tok", "p", "", "POST", "/github/o/r.git/git-receive-pack", "o/r refs/heads/main", "", "cproxy: push to refs/heads/main is not allowed", Usage{}, true, true)
			r.Decision, r.Code = Deny, "cproxy-ref-not-allowed"
			return r
		}(), at, 5},
		{"empty strings", testRecord("", "", "", "", "", "", "", "", "", "", Usage{}, true, true), at, -time.Second},
		{"usage not reported", testRecord("model", "sb", "tok", "p", "", "POST", "/v1/messages", "claude-sonnet-4-5", "", "client disconnected", Usage{Input: 203, Output: 40, NotReported: true}, true, true), at, time.Second},
		{"invalid UTF-8", testRecord("model", "\xff", "tok", "p", "s\xc3", "POST", "/v1/\xe2\x82", "m\x80", "", "", Usage{Output: 1}, true, true), at, 5},
		{"line breakers", testRecord("model", "s", "t", "p", "\u0085", "POST", "/v1/\u2028", "a\u009b[2J\u202eb", "", "\u2066x\u2069\u200f", Usage{}, true, true), at, 5},
		{"cut", testRecord("model", "s", "t", "p", "", "POST", "/"+strings.Repeat("p", 300), strings.Repeat("m", 300), "", "", Usage{}, true, true), at, 5},
		{"a sandbox token in the session id", testRecord("model", "s", "t", "p", "cpx_abc", "POST", "/v1/messages", strings.Repeat("m", 300), "", "", Usage{}, true, true), at, 5},
		{"warned, with an MCP call's pin and arguments", func() Record {
			r := testRecord("mcp", "s", "t", "p", "", "POST", "/mcp/docs", "docs tools/call search", "profile.p.mcp.docs", "cproxy: tool search is not allowed", Usage{}, true, true)
			r.Decision, r.Pin, r.Args, r.Code = Warn, "sha256:ab", `{"q":"x y"}`, "cproxy-mcp-not-allowed"
			return r
		}(), at, 5},
	} {
		t.Run(c.name, func(t *testing.T) {
			want, got := auditLinePair(t, c.rec, 200, c.d, c.now)
			if got != want {
				t.Errorf("fast path wrote\n%q\nslog writes\n%q", got, want)
			}
			if strings.ContainsFunc(got, breaksLine) {
				t.Errorf("a line breaker written raw: %q", got)
			}
		})
	}
}

// FuzzAuditLine: whatever strings a client or the config puts in the audit
// line, the fast path writes what slog's text handler writes.
func FuzzAuditLine(f *testing.F) {
	f.Add("model", "bench-1", "tok_0123456789ab", "default", "sess", "POST", "/v1/messages", "claude-sonnet-4-5", "rule", "", int64(5), int64(31), int64(1234567), int64(1764496753987654321), 200)
	f.Add("", "a b", "x=y", "\"", "\t", "", "/é\u00a0", "\xff", "\\", "why\n", int64(0), int64(-1), int64(-5), int64(0), 499)
	f.Fuzz(func(t *testing.T, route, sandbox, tokenID, profile, sid, method, path, target, rule, reason string, in, out, d, unixNano int64, status int) {
		rec := testRecord(route, sandbox, tokenID, profile, sid, method, path, target, rule, reason, Usage{Input: in, Output: out}, len(sandbox)%2 == 0, len(profile)%2 == 0)
		now := time.Unix(0, unixNano).In(time.FixedZone("Z", int(unixNano%50000)))
		want, got := auditLinePair(t, rec, status, time.Duration(d), now)
		if got != want {
			t.Fatalf("fast path wrote\n%q\nslog writes\n%q", got, want)
		}
		if strings.ContainsFunc(got, breaksLine) {
			t.Fatalf("a line breaker written raw: %q", got)
		}
	})
}
