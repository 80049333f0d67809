package routes

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/cproxy/cproxy/secrets"
	"github.com/cproxy/cproxy/tokens"
)

// ReadyTimeout bounds the token store's answer to the readiness check's
// look-up. Every proxied request waits on a look-up like it (its token's),
// so a store slower than this is as good as down for the sandboxes; and it
// is shorter than a load balancer's probe timeout, so that the probe gets
// cproxy's reason rather than its own timeout.
const ReadyTimeout = 2 * time.Second

// readyProbe is the hash the readiness check looks up. No token hashes to
// all zeros, so the store answers ErrNotFound, which counts as answering;
// and no cache keeps an answer that found nothing, so on PostgreSQL each
// check takes a connection from the pool and makes a round trip.
var readyProbe tokens.Hash

// notReady is one readiness check that failed.
type notReady struct {
	check  string // "store", "policy", "credential"
	reason string // for the answer: the problem and its fix, never a credential or a path
	err    error  // for the log; nil when reason says it all
}

// readiness remembers which checks failed last, so that the log gets a
// line when that changes rather than one per probe.
type readiness struct {
	mu      sync.Mutex
	failing string // the failed checks' reasons, joined; "": ready
}

// ready serves GET /readyz: 200 when this replica can serve requests, 503
// with the checks that failed otherwise. GET /healthz, by contrast, says
// only that the process answers.
func (s *Server) ready(w http.ResponseWriter, r *http.Request) {
	if _, ok := adminQuery(w, r); !ok {
		return
	}
	failed := s.readinessChecks(r.Context())
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
		checks[i], reasons[i] = f.check, f.reason
	}
	writeJSON(w, http.StatusServiceUnavailable, struct {
		Status string   `json:"status"`
		Failed []string `json:"failed"`
		Error  string   `json:"error"`
	}{"not ready", checks, "cproxy: not ready: " + strings.Join(reasons, "; ")})
}

// readinessChecks runs every check and returns those that failed: the
// token store answers a look-up within ReadyTimeout, a policy is in force,
// and every credential source the config names can still be read
// (secrets.Live.Readable).
func (s *Server) readinessChecks(ctx context.Context) []notReady {
	var failed []notReady
	lookup, cancel := context.WithTimeout(ctx, ReadyTimeout)
	_, err := s.store.Lookup(lookup, readyProbe)
	late := lookup.Err() != nil
	cancel()
	switch {
	case err == nil || errors.Is(err, tokens.ErrNotFound):
	case late:
		failed = append(failed, notReady{"store", fmt.Sprintf("the token store did not answer a look-up within %s: check that its database is up and reachable from this replica (the log has the error)", ReadyTimeout), err})
	default:
		failed = append(failed, notReady{"store", "the token store failed a look-up: check that its database is up and reachable from this replica (the log has the error)", err})
	}
	if s.policy() == nil {
		failed = append(failed, notReady{"policy", "no policy is loaded: fix the policy file; cproxy loads it when it changes or on SIGHUP", nil})
	}
	for _, c := range s.credentials() {
		err := c.Live.Readable()
		switch {
		case err == nil:
		case errors.Is(err, secrets.ErrExpired):
			// Written for a client: no path, no value.
			failed = append(failed, notReady{"credential", c.Name + ": " + err.Error(), err})
		default:
			failed = append(failed, notReady{"credential", fmt.Sprintf("the credential source of %s (%s) cannot be read: fix it, then send SIGHUP (the log has why; requests still get the credential loaded before)", c.Name, c.Live.Source().Kind()), err})
		}
	}
	return failed
}

// credentials are the routes' credentials that come from a source.
func (s *Server) credentials() []Source {
	var creds []Source
	for _, rt := range s.routes {
		if src, ok := rt.(Sourced); ok {
			creds = append(creds, src.Sources()...)
		}
	}
	return creds
}

// logReadiness logs when the checks that fail change: a WARN for each
// failed check, with its error, when the replica turns not ready, and an
// INFO when it is ready again.
func (s *Server) logReadiness(failed []notReady) {
	reasons := make([]string, len(failed))
	for i, f := range failed {
		reasons[i] = f.reason
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
		s.log.Info("ready: every readiness check passes again")
		return
	}
	for _, f := range failed {
		attrs := []any{"check", f.check, "reason", f.reason}
		if f.err != nil {
			attrs = append(attrs, "err", f.err.Error())
		}
		s.log.Warn("not ready: GET /readyz answers 503", attrs...)
	}
}
