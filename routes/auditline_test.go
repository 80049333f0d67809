package routes

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/cproxy/cproxy/internal/testutil"
	"github.com/cproxy/cproxy/policy"
)

// auditLinePair formats a's audit line both ways at the same time: as slog's
// text handler writes the attributes (*audit).finish gives it, and as
// textHandler's fast path writes it.
func auditLinePair(t *testing.T, a *Call, status int, d time.Duration, now time.Time) (slogLine, fastLine string) {
	t.Helper()
	var want bytes.Buffer
	rec := slog.NewRecord(now, slog.LevelInfo, "request", 0)
	ar := a.record(status, d)
	rec.AddAttrs(auditAttrs(&ar, d)...)
	if err := slog.NewTextHandler(&want, nil).Handle(context.Background(), rec); err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	h, ok := NewTextHandler(&got, nil).(*textHandler)
	if !ok {
		t.Fatal("NewTextHandler without options has no fast path")
	}
	h.writeAuditLine(&ar, d, now)
	return want.String(), got.String()
}

// testAudit is an audit of one request, its strings chosen by the caller.
func testAudit(route, sandbox, tokenID, profile, sid, method, path, target, rule, reason string, usage Usage, withSession, withProfile bool) *Call {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.Method = method
	r.URL.Path = path
	if sid != "" {
		r.Header["X-Claude-Code-Session-Id"] = []string{sid}
	}
	a := &Call{r: r, w: &auditWriter{status: 200, bytes: 541}, body: &countingBody{n: 21900}, route: route,
		target: target, rule: rule, reason: reason, usage: usage}
	if withSession {
		a.session = &Session{Sandbox: sandbox, TokenID: tokenID}
		if withProfile {
			a.session.Profile = &policy.Profile{Name: profile}
		}
	}
	return a
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
		a    *Call
		now  time.Time
		d    time.Duration
	}{
		{"allowed model request", testAudit("model", "bench-1", "tok_0123456789ab", "default", "0b6f5e8c-2f61-4a7e-9c1d-3f3c2b1a0e99", "POST", "/v1/messages", "claude-sonnet-4-5", `profile.default.models["claude-*"]`, "", usage, true, true), at, 1234567 * time.Nanosecond},
		{"no token", testAudit("model", "", "", "", "sess", "GET", "/v1/models", "", "", "no sandbox token: send it as Authorization: Bearer or X-Api-Key", Usage{}, false, false), local, 0},
		{"revoked: no profile", testAudit("github", "sb", "tok_1", "", "", "GET", "/github/o/r.git/info/refs", "o/r", "", "sandbox token tok_1 was revoked", Usage{}, true, false), at.Add(999 * time.Microsecond), 90 * time.Second},
		{"strings to quote", testAudit("none", "a b", "tok=1", `quo"te`, "tab\there", "GET", "/x y/é/\u00a0/\x7f/\\", "ünïcode", "rule with spaces", "line\nbreak \ufffd", Usage{CacheWrite: 7}, true, true), at, time.Millisecond},
		{"empty strings", testAudit("", "", "", "", "", "", "", "", "", "", Usage{}, true, true), at, -time.Second},
		{"usage not reported", testAudit("model", "sb", "tok", "p", "", "POST", "/v1/messages", "claude-sonnet-4-5", "", "client disconnected", Usage{Input: 203, Output: 40, NotReported: true}, true, true), at, time.Second},
		{"invalid UTF-8", testAudit("model", "\xff", "tok", "p", "s\xc3", "POST", "/v1/\xe2\x82", "m\x80", "", "", Usage{Output: 1}, true, true), at, 5},
		{"line breakers", testAudit("model", "s", "t", "p", "\u0085", "POST", "/v1/\u2028", "a\u009b[2J\u202eb", "", "\u2066x\u2069\u200f", Usage{}, true, true), at, 5},
		{"cut", testAudit("model", "s", "t", "p", "", "POST", "/"+strings.Repeat("p", 300), strings.Repeat("m", 300), "", "", Usage{}, true, true), at, 5},
		{"a sandbox token in the session id", testAudit("model", "s", "t", "p", "cpx_abc", "POST", "/v1/messages", strings.Repeat("m", 300), "", "", Usage{}, true, true), at, 5},
	} {
		t.Run(c.name, func(t *testing.T) {
			want, got := auditLinePair(t, c.a, 200, c.d, c.now)
			if got != want {
				t.Errorf("fast path wrote\n%q\nslog writes\n%q", got, want)
			}
			if strings.ContainsFunc(got, breaksLine) {
				t.Errorf("a line breaker written raw: %q", got)
			}
		})
	}
}

// TestAuditLineThroughServer: with cproxy serve's audit logger
// (NewTextHandler), a request's audit line comes out whole, once.
func TestAuditLineThroughServer(t *testing.T) {
	var buf testutil.Buffer
	e := newEnv(t, func(o *testOptions) { o.Audit = slog.New(NewTextHandler(&buf, nil)) })
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

// FuzzAuditLine: whatever strings a client or the config puts in the audit
// line, the fast path writes what slog's text handler writes.
func FuzzAuditLine(f *testing.F) {
	f.Add("model", "bench-1", "tok_0123456789ab", "default", "sess", "POST", "/v1/messages", "claude-sonnet-4-5", "rule", "", int64(5), int64(31), int64(1234567), int64(1764496753987654321), 200)
	f.Add("", "a b", "x=y", "\"", "\t", "", "/é\u00a0", "\xff", "\\", "why\n", int64(0), int64(-1), int64(-5), int64(0), 499)
	f.Fuzz(func(t *testing.T, route, sandbox, tokenID, profile, sid, method, path, target, rule, reason string, in, out, d, unixNano int64, status int) {
		a := testAudit(route, sandbox, tokenID, profile, sid, method, path, target, rule, reason, Usage{Input: in, Output: out}, len(sandbox)%2 == 0, len(profile)%2 == 0)
		now := time.Unix(0, unixNano).In(time.FixedZone("Z", int(unixNano%50000)))
		want, got := auditLinePair(t, a, status, time.Duration(d), now)
		if got != want {
			t.Fatalf("fast path wrote\n%q\nslog writes\n%q", got, want)
		}
		if strings.ContainsFunc(got, breaksLine) {
			t.Fatalf("a line breaker written raw: %q", got)
		}
	})
}
