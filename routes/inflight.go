package routes

import (
	"context"
	"errors"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/cproxy/cproxy/tokens"
)

// flight is one authenticated request, from its authentication to its
// audit line, as the token's revocation or expiry sees it: end cuts it.
// It lives in the request's audit; inflight holds it while it runs.
type flight struct {
	call    *Call               // the request, to decide it again (Server.SetPolicy)
	w       http.ResponseWriter // the request's, to fail a body read
	sandbox string
	tokenID string
	hash    tokens.Hash
	expiry  *time.Timer // ends it at the token's expiry; nil: not registered

	mu     sync.Mutex
	cause  error                   // why it was ended; nil while it runs
	cancel context.CancelCauseFunc // the forwarded request's, once forwarding
	// The body's deadline (startBody): it must have arrived by bodyStart
	// plus bodyGrace plus a second per minBodyRate bytes received, and no
	// read of it may wait more than bodyGrace (bodyReading).
	bodyStart time.Time
	bodyGrace time.Duration
	bodyLeft  int64 // bytes until the declared length; -1: unknown
	bodyDone  bool  // no deadline (any more): read whole, failed, or none set
	// bodyStalled says the deadline set is the stall's (a read's start
	// plus bodyGrace), not the average rate's.
	bodyStalled bool
}

// minBodyRate is the slowest a request body may arrive, on average, once
// its first listen.body_timeout has passed: 16 KiB a second (128 kbit/s),
// slower than any link a sandbox works over. A 32 MiB conversation may take
// 35 minutes at it; a client trickling bytes to hold a connection and its
// request's slot is cut off. Bytes sent early do not buy silence later:
// besides the average, no read of the body waits longer than
// listen.body_timeout for its next bytes (bodyReading).
const minBodyRate = 16 << 10

// startBody puts a deadline on reading the body, declared to be n bytes
// (-1: unknown): grace, and a second more for each minBodyRate bytes
// received; zero grace sets none. It runs at authentication, before the
// body is read.
func (f *flight) startBody(grace time.Duration, n int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.bodyStart, f.bodyGrace, f.bodyLeft = time.Now(), grace, n
	if grace > 0 {
		f.setReadDeadline(f.bodyStart.Add(grace))
	} else {
		// The deadline of a body not yet authenticated ends.
		f.setReadDeadline(time.Time{})
	}
}

// stopBody ends the body's deadline for good, before the request is
// answered with its body still arriving: the answer's connection takes
// its own deadline (closeUnread), which reads of the body must not move on.
func (f *flight) stopBody() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.bodyDone = true
}

// bodyReading sets the deadline of a read of the body about to start,
// total bytes into it: the average rate's (bodyStart plus bodyGrace plus a
// second per minBodyRate bytes), or bodyGrace from now if that is sooner.
// It counts from the read's start, not from the last bytes: a body that
// cproxy reads no faster than its upstream takes it (a push, an upload)
// does not stall while the upstream does.
func (f *flight) bodyReading(total int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.bodyDone || f.bodyStart.IsZero() || f.bodyGrace <= 0 || f.cause != nil {
		return
	}
	avg := f.bodyStart.Add(f.bodyGrace + time.Duration(total)*time.Second/minBodyRate)
	stall := time.Now().Add(f.bodyGrace)
	if f.bodyStalled = stall.Before(avg); f.bodyStalled {
		avg = stall
	}
	f.setReadDeadline(avg)
}

// bodyRead records a read of n bytes of the body that returned err; total
// is what has been read in all. The deadline ends when the body does: the
// connection's later reads (net/http's watch for the client going away)
// must not fail on it. A read that failed on the deadline ends the
// request, answered 408.
func (f *flight) bodyRead(n int, total int64, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.bodyDone || f.bodyStart.IsZero() {
		return
	}
	if f.bodyLeft >= 0 {
		f.bodyLeft -= int64(n)
	}
	switch {
	case f.bodyGrace <= 0:
		f.bodyDone = err != nil || f.bodyLeft == 0 // no deadline: only where the body is
	case errors.Is(err, os.ErrDeadlineExceeded):
		f.bodyDone = true
		if f.bodyStalled {
			f.endLocked(Refuse(ErrBodyTimeout, "the request body arrived too slowly: nothing of it came for listen.body_timeout (%s) after %d bytes; do not retry on this link", f.bodyGrace, total))
			return
		}
		f.endLocked(Refuse(ErrBodyTimeout, "the request body arrived too slowly: it must come within listen.body_timeout (%s) and at least %d KiB a second after that; do not retry on this link", f.bodyGrace, minBodyRate>>10))
	case err != nil || f.bodyLeft == 0:
		f.bodyDone = true
		if f.cause == nil {
			f.setReadDeadline(time.Time{})
		}
	}
}

// setReadDeadline sets the deadline of the request's connection's reads.
func (f *flight) setReadDeadline(t time.Time) { setReadDeadline(f.w, t) }

// forwarding records the context of the request being forwarded, which end
// cancels. It returns the reason the request was ended, if it already was:
// then it must not be forwarded.
func (f *flight) forwarding(cancel context.CancelCauseFunc) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cancel = cancel
	return f.cause
}

// sending reports whether the request is being forwarded (forwarding has
// run) and has not been ended.
func (f *flight) sending() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cancel != nil && f.cause == nil
}

// ended is why the request was ended; nil while it runs.
func (f *flight) ended() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cause
}

// end cuts the request with cause: a forward under way is cancelled (an
// answer streaming back stops, a body streaming up is not completed), and a
// read of the client's body fails at once, so that a body held open frees
// its connection and the request's slot. The caller holds inflight.mu: a
// request that has finished is no longer registered, so end never touches
// the connection of the request that follows it.
func (f *flight) end(cause error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.endLocked(cause)
}

func (f *flight) endLocked(cause error) {
	if f.cause != nil {
		return
	}
	f.cause = cause
	if f.cancel != nil {
		f.cancel(cause)
	}
	if !f.bodyStart.IsZero() && !f.bodyDone {
		// The body is still arriving: its read fails at once. Not once
		// it has arrived: net/http would then take the failed read for
		// the client gone, and a later request on the connection would
		// start out cancelled.
		f.bodyDone = true
		f.setReadDeadline(time.Now())
	}
}

// inflight is every authenticated request being served, by sandbox, so that
// a revocation can end its sandbox's requests and an expiry its token's. Its
// lock is held to add and remove a request and to end them, never while a
// request is served.
type inflight struct {
	mu        sync.Mutex
	bySandbox map[string]map[*flight]struct{}
}

// add registers a's request, authenticated as sess, and arms its end at
// the token's expiry (in d).
func (in *inflight) add(a *Call, sess *Session, d time.Duration) {
	f := &a.flight
	f.call, f.w, f.sandbox, f.tokenID, f.hash = a, a.w, sess.Sandbox, sess.TokenID, sess.hash
	in.mu.Lock()
	if in.bySandbox == nil {
		in.bySandbox = map[string]map[*flight]struct{}{}
	}
	set := in.bySandbox[f.sandbox]
	if set == nil {
		set = map[*flight]struct{}{}
		in.bySandbox[f.sandbox] = set
	}
	set[f] = struct{}{}
	in.mu.Unlock()
	f.expiry = time.AfterFunc(d, func() { in.endOne(f, expiredError(sess.TokenID, sess.expires)) })
}

// remove forgets f, if it was registered; its request has ended.
func (in *inflight) remove(f *flight) {
	if f.expiry == nil {
		return
	}
	f.expiry.Stop()
	in.mu.Lock()
	defer in.mu.Unlock()
	set := in.bySandbox[f.sandbox]
	delete(set, f)
	if len(set) == 0 {
		delete(in.bySandbox, f.sandbox)
	}
}

// endOne ends f with cause if it is still registered, and reports whether
// it was.
func (in *inflight) endOne(f *flight, cause error) bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	if _, ok := in.bySandbox[f.sandbox][f]; ok {
		f.end(cause)
		return true
	}
	return false
}

// endToken ends every request of the token whose hash is h with cause.
func (in *inflight) endToken(sandbox string, h tokens.Hash, cause error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	for f := range in.bySandbox[sandbox] {
		if f.hash == h {
			f.end(cause)
		}
	}
}

// flightSweep is how often a replica sharing its store looks up again the
// tokens of its requests in flight: what bounds how long a request runs on
// here after another replica revoked its token.
const flightSweep = 2 * time.Second

// sweepFlights ends the requests in flight whose token the store no longer
// holds live (revoked through another replica), every flightSweep until
// stop is closed. A token the store cannot look up is left running: the
// next sweep tries again. It reads the store itself, never a look-up cache
// in front of it (tokens.Uncached): the cache learns of another replica's
// revocation from a notification, and a lagging or stalled listener must
// not stretch the sweep's bound.
func (s *Server) sweepFlights(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	store := tokens.Uncached(s.store)
	t := time.NewTicker(flightSweep)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		type token struct {
			sandbox string
			hash    tokens.Hash
		}
		live := map[token]struct{}{}
		s.flights.mu.Lock()
		for sandbox, set := range s.flights.bySandbox {
			for f := range set {
				live[token{sandbox, f.hash}] = struct{}{}
			}
		}
		s.flights.mu.Unlock()
		for tok := range live {
			ctx, cancel := context.WithTimeout(context.Background(), flightSweep)
			rec, err := store.Lookup(ctx, tok.hash)
			cancel()
			if err != nil {
				continue
			}
			if cause := notLive(rec, s.now()); cause != nil {
				s.flights.endToken(tok.sandbox, tok.hash, cause)
			}
		}
	}
}

// EndSandbox ends the requests in flight of sandbox's tokens, revoked:
// through this replica's admin API, or through another replica's, when the
// store tells of it (tokens.PostgresCache.OnRevoke). Each route that keeps
// something per sandbox (Ender) drops it.
func (s *Server) EndSandbox(sandbox string) {
	for _, rt := range s.routes {
		if e, ok := rt.(Ender); ok {
			e.EndSandbox(sandbox)
		}
	}
	if cut := s.flights.endSandbox(sandbox); cut > 0 {
		s.log.Info("requests in flight cut by a revocation", "sandbox", sandbox, "count", cut)
	}
}

// EndToken ends the requests in flight of the token whose id is id,
// revoked: through this replica's admin API, or another's, when the store
// tells of it (tokens.PostgresCache.OnRevokeToken). The sandbox's other
// tokens' requests go on.
func (s *Server) EndToken(id string) {
	if cut := s.flights.endTokenID(id); cut > 0 {
		s.log.Info("requests in flight cut by a revocation", "token_id", id, "count", cut)
	}
}

// endTokenID ends every request of the token whose id is id with its
// revocation, and returns how many it ended.
func (in *inflight) endTokenID(id string) int {
	in.mu.Lock()
	defer in.mu.Unlock()
	n := 0
	for _, set := range in.bySandbox {
		for f := range set {
			if f.tokenID == id {
				f.end(revokedError(id))
				n++
			}
		}
	}
	return n
}

// endSandbox ends every request of sandbox's tokens with their revocation,
// and returns how many it ended.
func (in *inflight) endSandbox(sandbox string) int {
	in.mu.Lock()
	defer in.mu.Unlock()
	set := in.bySandbox[sandbox]
	for f := range set {
		f.end(revokedError(f.tokenID))
	}
	return len(set)
}

// policyCheckTimeout bounds the look-ups (token, budget) a policy reload
// makes to decide again one request in flight.
const policyCheckTimeout = 10 * time.Second

// endRefused decides again every request being forwarded, as recheck does
// when a request is sent, under the policy now in force, and ends each it
// now refuses with that refusal: a stream, a relay's answer, a git
// transfer, a body streaming upstream. A request whose body is still
// arriving is decided again when it is sent. One the token store or the
// budget cannot be read for is left running. It returns how many it ended.
func (s *Server) endRefused() int {
	s.flights.mu.Lock()
	var sending []*flight
	for _, set := range s.flights.bySandbox {
		for f := range set {
			if f.sending() {
				sending = append(sending, f)
			}
		}
	}
	s.flights.mu.Unlock()
	n := 0
	for _, f := range sending {
		ctx, cancel := context.WithTimeout(context.Background(), policyCheckTimeout)
		// Server.recheck, not Call.recheck: the audit line is the
		// handler's.
		_, err := s.recheck(ctx, f.call)
		cancel()
		if IsRefusal(err) && !errors.Is(err, ErrUnavailable) && s.flights.endOne(f, err) {
			n++
		}
	}
	return n
}
