package admin

import (
	"net/http"
	"strings"
	"sync"

	"github.com/cproxy/cproxy/routes"
)

// readiness remembers which checks failed last, so that the log gets a
// line when that changes rather than one per probe.
type readiness struct {
	mu      sync.Mutex
	failing string // the failed checks' reasons, joined; "": ready
}

// ready serves GET /readyz: 200 when this replica can serve requests, 503
// with the checks that failed otherwise. GET /healthz, by contrast, says
// only that the process answers.
func (s *server) ready(w http.ResponseWriter, r *http.Request) {
	if _, ok := adminQuery(w, r); !ok {
		return
	}
	failed := s.Readiness(r.Context())
	if r.Context().Err() != nil {
		// The prober gave up: a store check it cut short says nothing
		// about the store.
		return
	}
	s.logReadiness(failed)
	if len(failed) == 0 {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
		return
	}
	checks := make([]string, len(failed))
	reasons := make([]string, len(failed))
	for i, f := range failed {
		checks[i], reasons[i] = f.Check, f.Reason
	}
	writeJSON(w, http.StatusServiceUnavailable, struct {
		Status string   `json:"status"`
		Failed []string `json:"failed"`
		Error  string   `json:"error"`
	}{"not ready", checks, "cproxy: not ready: " + strings.Join(reasons, "; ")})
}

// logReadiness logs when the checks that fail change: a WARN for each
// failed check, with its error, when the replica turns not ready, and an
// INFO when it is ready again.
func (s *server) logReadiness(failed []routes.NotReady) {
	reasons := make([]string, len(failed))
	for i, f := range failed {
		reasons[i] = f.Reason
	}
	now := strings.Join(reasons, "; ")
	s.readiness.mu.Lock()
	changed := now != s.readiness.failing
	s.readiness.failing = now
	s.readiness.mu.Unlock()
	if !changed {
		return
	}
	if len(failed) == 0 {
		s.Log().Info("ready: every readiness check passes again")
		return
	}
	for _, f := range failed {
		attrs := []any{"check", f.Check, "reason", f.Reason}
		if f.Err != nil {
			attrs = append(attrs, "err", f.Err.Error())
		}
		s.Log().Warn("not ready: GET /readyz answers 503", attrs...)
	}
}
