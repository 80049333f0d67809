package routes

import (
	"context"
	"errors"
	"fmt"
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

// NotReady is one readiness check that failed.
type NotReady struct {
	// Check is which: "store", "policy" or "credential".
	Check string
	// Reason is the problem and its fix, for GET /readyz's answer: never a
	// credential or a path.
	Reason string
	// Err is the error, for the log; nil when Reason says it all.
	Err error
}

// Readiness runs every readiness check and returns those that failed, in
// this order: the token store answers a look-up within ReadyTimeout, a
// policy is in force, and every credential source the routes name can
// still be read (secrets.Live.Readable). None: this replica can serve
// requests. GET /readyz answers with them; a ctx that ends before the
// store answers fails the store's check.
func (s *Server) Readiness(ctx context.Context) []NotReady {
	var failed []NotReady
	lookup, cancel := context.WithTimeout(ctx, ReadyTimeout)
	_, err := s.store.Lookup(lookup, readyProbe)
	late := lookup.Err() != nil
	cancel()
	switch {
	case err == nil || errors.Is(err, tokens.ErrNotFound):
	case late:
		failed = append(failed, NotReady{"store", fmt.Sprintf("the token store did not answer a look-up within %s: check that its database is up and reachable from this replica (the log has the error)", ReadyTimeout), err})
	default:
		failed = append(failed, NotReady{"store", "the token store failed a look-up: check that its database is up and reachable from this replica (the log has the error)", err})
	}
	if s.Policy() == nil {
		failed = append(failed, NotReady{"policy", "no policy is loaded: fix the policy file; cproxy loads it when it changes or on SIGHUP", nil})
	}
	for _, c := range s.credentials() {
		err := c.Live.Readable()
		switch {
		case err == nil:
		case errors.Is(err, secrets.ErrExpired):
			// Written for a client: no path, no value.
			failed = append(failed, NotReady{"credential", c.Name + ": " + err.Error(), err})
		default:
			failed = append(failed, NotReady{"credential", fmt.Sprintf("the credential source of %s (%s) cannot be read: fix it, then send SIGHUP (the log has why; requests still get the credential loaded before)", c.Name, c.Live.Source().Kind()), err})
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
