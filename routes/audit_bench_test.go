package routes

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/cproxy/cproxy/policy"
	"github.com/cproxy/cproxy/routes/audit"
)

// BenchmarkAuditLine is the audit line of one allowed model request, to
// nowhere: as `cproxy serve` writes it by default (audit.NewTextHandler), and as
// slog's text handler writes the same line.
func BenchmarkAuditLine(b *testing.B) {
	for _, h := range []struct {
		name    string
		handler slog.Handler
	}{
		{"serve", audit.NewTextHandler(io.Discard, nil)},
		{"slog", slog.NewTextHandler(io.Discard, nil)},
	} {
		b.Run(h.name, func(b *testing.B) { benchmarkAuditLine(b, h.handler) })
	}
}

func benchmarkAuditLine(b *testing.B, h slog.Handler) {
	s := &Server{audit: slog.New(h), now: time.Now}
	r := httptest.NewRequest(http.MethodPost, "/v1/messages?beta=true", strings.NewReader("{}"))
	r.Header.Set("X-Claude-Code-Session-Id", "0b6f5e8c-2f61-4a7e-9c1d-3f3c2b1a0e99")
	sess := &Session{TokenID: "tok_0123456789ab", Sandbox: "bench-1", Profile: &policy.Profile{Name: "default"}}
	b.ReportAllocs()
	for b.Loop() {
		a, _ := s.startAudit(httptest.NewRecorder(), r)
		a.route, a.session, a.target, a.rule = "model", sess, "claude-sonnet-4-5", `profile.default.models["claude-*"]`
		a.w.status, a.w.bytes, a.body.n = 200, 541, 21900
		a.usage = audit.Usage{Input: 5120, Output: 31, CacheRead: 4096}
		a.finish()
	}
}

// BenchmarkAuditRecord is the JSON audit record of one allowed model
// request, to nowhere: as finish writes it (audit.WriteJSON), and as
// json.Marshal did.
func BenchmarkAuditRecord(b *testing.B) {
	s := &Server{now: time.Now, auditLog: io.Discard}
	r := httptest.NewRequest(http.MethodPost, "/v1/messages?beta=true", strings.NewReader("{}"))
	r.Header.Set("X-Claude-Code-Session-Id", "0b6f5e8c-2f61-4a7e-9c1d-3f3c2b1a0e99")
	sess := &Session{TokenID: "tok_0123456789ab", Sandbox: "bench-1", Profile: &policy.Profile{Name: "default"}}
	a, _ := s.startAudit(httptest.NewRecorder(), r)
	a.route, a.session, a.target, a.rule = "model", sess, "claude-sonnet-4-5", `profile.default.models["claude-*"]`
	a.w.status, a.w.bytes, a.body.n = 200, 541, 21900
	a.usage = audit.Usage{Input: 5120, Output: 31, CacheRead: 4096}
	b.Run("append", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			rec := a.record(200, 343*time.Microsecond)
			audit.WriteJSON(a.sink, &rec)
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
