package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cproxy/cproxy/config"
	"github.com/cproxy/cproxy/internal/watch"
	"github.com/cproxy/cproxy/policy"
	"github.com/cproxy/cproxy/routes"
	"github.com/cproxy/cproxy/routes/console"
	"github.com/cproxy/cproxy/tokens"
)

// policyPollInterval is how often serve looks at the policy file for a
// change. A change is loaded once the file has looked the same for two looks
// in a row, so a file an editor is still writing is not read half-written.
// It is a variable for the test binary alone, whose scripts would otherwise
// wait seconds for each change to be seen (TestMain in main_test.go).
var policyPollInterval = time.Second

// policyReadTimeout bounds one read of the policy file. A regular file on a
// local disk reads in microseconds; one on a hung network mount may never
// return, and the reload is refused rather than waited for.
const policyReadTimeout = 10 * time.Second

// policySettleRounds is how many times a reload waits policy_settle for a
// file that keeps changing before it gives up on it.
const policySettleRounds = 10

// policyListTimeout bounds listing the live tokens after a reload, for the
// warning about the sandboxes whose profile it changed.
const policyListTimeout = 10 * time.Second

// policyMovedShown is how many sandboxes the reload warning names, the
// first in order of their ids; the rest are counted ("and 4980 more"), so
// that a reload that moves thousands still logs one line an operator can
// read.
const policyMovedShown = 20

// policyReloader puts a new policy file in force when serve gets SIGHUP or
// the file changes. It runs on goroutines of its own (run), off the signal
// path: a file that cannot be read at once delays no signal. A new policy is
// read, and put in force only once the file has stayed the same (its bytes
// and what stat says) for policy_settle, so a file still being written in
// place is not loaded half-written; it must load as it would at start (the
// config's relay names included). One that does not is refused, its problems
// logged, and the policy in force stays. A request not yet sent upstream in
// whole is decided again under the new policy, and one being forwarded that
// it refuses is ended (routes.Server.SetPolicy).
type policyReloader struct {
	cfg    *config.Config
	srv    *routes.Server
	store  tokens.Store // nil: no warning about sandboxes with live tokens
	log    *slog.Logger
	settle time.Duration
	hup    chan struct{} // SIGHUPs not yet handled; one stands for many
	// readFile reads the policy file (policy.ReadFile), for at most
	// readTimeout (policyReadTimeout); tests put a slow one in.
	readFile    func(string) ([]byte, error)
	readTimeout time.Duration

	mu      sync.Mutex // one look or reload at a time; it guards the rest
	inForce *policy.Policy
	refused bool          // the file was last read as a policy that was refused
	file    *watch.File   // the policy file; a change counts once two looks see it
	stuck   chan struct{} // closed when a read that timed out returns; nil: none is out

	// last is the last reload's result, for the console; nil: none yet.
	last atomic.Pointer[console.Reload]
}

// Last is the last reload's result: a zero At when there was none.
func (r *policyReloader) Last() console.Reload {
	if l := r.last.Load(); l != nil {
		return *l
	}
	return console.Reload{}
}

// newPolicyReloader starts from the policy cfg was loaded with. It has not
// looked at the file yet, so the watcher's first looks read it once more:
// silently when it is what cfg was loaded from, as a reload when it changed
// while serve was starting.
func newPolicyReloader(cfg *config.Config, srv *routes.Server, store tokens.Store, log *slog.Logger) *policyReloader {
	return &policyReloader{cfg: cfg, srv: srv, store: store, log: log, settle: cfg.PolicySettle.Duration, hup: make(chan struct{}, 1),
		readFile: policy.ReadFile, readTimeout: policyReadTimeout, inForce: cfg.Rules, file: watch.New(cfg.PolicyPath(), true)}
}

// sighup asks run to reload the policy file, changed or not. It never
// waits: the signal loop calls it.
func (r *policyReloader) sighup() {
	if r.cfg.Policy == "" {
		r.log.Info("SIGHUP: no policy file to reload (embedded default policy)")
		return
	}
	select {
	case r.hup <- struct{}{}:
	default: // a reload is asked for already
	}
}

// run looks at the policy file every interval, and handles SIGHUPs, until
// ctx is done.
func (r *policyReloader) run(ctx context.Context, interval time.Duration) {
	if r.cfg.Policy == "" {
		return
	}
	go watch.Every(ctx, interval, func() { r.poll(ctx) })
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.hup:
			r.mu.Lock()
			r.load(ctx, "sighup")
			r.mu.Unlock()
		}
	}
}

// poll is one look at the file. A change is loaded when a second look finds
// the file as the first did; so each change is tried once, and a policy
// with errors is logged once, not at every look.
func (r *policyReloader) poll(ctx context.Context) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.file.Changed() {
		r.load(ctx, "change")
	}
}

// load reads the file once it has settled and puts it in force if it is
// valid and differs from the policy in force.
func (r *policyReloader) load(ctx context.Context, trigger string) {
	path := r.cfg.PolicyPath()
	data, err := r.settled(ctx, path)
	var p *policy.Policy
	if err == nil {
		p, err = policy.ParsePolicy(path, data)
	}
	if err == nil {
		if probs := r.cfg.CheckPolicy(p); len(probs) > 0 {
			err = &probs
		}
	}
	switch {
	case ctx.Err() != nil:
		// serve is stopping: the reload is not refused, only not finished.
	case err != nil:
		r.refused = true
		r.last.Store(&console.Reload{At: time.Now(), Trigger: trigger, Err: err.Error()})
		r.log.Error("policy reload refused; the previous policy stays in force", "err", err.Error(), "trigger", trigger)
	case p.SameText(r.inForce) && r.refused:
		// The file was put back after a refusal: the operator who saw
		// the error learns that the fix was seen, once.
		r.refused = false
		r.last.Store(&console.Reload{At: time.Now(), Trigger: trigger})
		r.log.Info("policy file agrees with the policy in force again", "policy", path, "trigger", trigger)
	case p.SameText(r.inForce):
		// The watcher saw a touch, or SIGHUP came after the watcher had
		// loaded the change already: say so only when asked.
		if trigger == "sighup" {
			r.log.Info("policy unchanged", "policy", path, "trigger", trigger)
		}
	default:
		r.refused = false
		r.warnProfileChanges(ctx, r.inForce, p)
		r.inForce = p
		r.srv.SetPolicy(p)
		r.last.Store(&console.Reload{At: time.Now(), Trigger: trigger})
		r.log.Info("policy reloaded", "policy", path, "trigger", trigger)
	}
}

// settled reads the file until two reads policy_settle apart find the same
// bytes and the same file (size, time, inode), and returns those bytes. A
// writer that pauses for longer than that between two parts of an in-place
// write still has its first part loaded: only a rename puts a file in place
// whole, as docs/operations.md says.
func (r *policyReloader) settled(ctx context.Context, path string) ([]byte, error) {
	seen := r.file.Reading()
	data, err := r.read(path)
	if err != nil {
		return nil, err
	}
	for range policySettleRounds {
		r.log.Debug("policy file read; it is put in force if it stays unchanged", "policy", path, "settle", r.settle)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(r.settle):
		}
		st := r.file.Reading()
		again, err := r.read(path)
		if err != nil {
			return nil, err
		}
		if bytes.Equal(data, again) && st.Same(seen) {
			return data, nil
		}
		seen, data = st, again
	}
	return nil, fmt.Errorf("%s kept changing for %s: write the policy elsewhere and rename it into place", path, policySettleRounds*r.settle)
}

// read reads the file on a goroutine of its own, for at most
// readTimeout. A read that times out is left to return in its own
// time; until it does, no other is started.
func (r *policyReloader) read(path string) ([]byte, error) {
	if r.stuck != nil {
		select {
		case <-r.stuck:
			r.stuck = nil
		default:
			return nil, fmt.Errorf("an earlier read of %s has not returned yet", path)
		}
	}
	type result struct {
		data []byte
		err  error
	}
	done := make(chan result, 1)
	returned := make(chan struct{})
	go func() {
		data, err := r.readFile(path)
		done <- result{data, err}
		close(returned)
	}()
	select {
	case res := <-done:
		return res.data, res.err
	case <-time.After(r.readTimeout):
		r.stuck = returned
		return nil, fmt.Errorf("reading %s took more than %s", path, r.readTimeout)
	}
}

// warnProfileChanges logs, before next is put in force, the sandboxes with
// live tokens whose profile it changes (to another, or to none), in order
// of their ids, so an operator sees at once a reload that moves a sandbox
// where it was not meant to go.
func (r *policyReloader) warnProfileChanges(ctx context.Context, old, next *policy.Policy) {
	if r.store == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, policyListTimeout)
	defer cancel()
	moved := map[string]bool{}
	err := tokens.Walk(ctx, r.store, tokens.ListQuery{State: tokens.StateLive, Now: time.Now()}, func(rec tokens.Record) error {
		if from, to := profileName(old, rec), profileName(next, rec); from != to {
			moved[rec.Sandbox+" ("+from+" -> "+to+")"] = true
		}
		return nil
	})
	if err != nil {
		r.log.Error("listing live tokens failed: cannot say which sandboxes the policy reload moves to another profile", "err", err)
		return
	}
	if len(moved) > 0 {
		// Sandbox ids sort before the space that ends them, so this is
		// their order.
		r.log.Warn("policy reload changes the profile of sandboxes with live tokens", "sandboxes", firstOf(slices.Sorted(maps.Keys(moved)), policyMovedShown))
	}
}

// firstOf joins the first n of items with commas, and counts the rest.
func firstOf(items []string, n int) string {
	if len(items) <= n {
		return strings.Join(items, ", ")
	}
	return fmt.Sprintf("%s, and %d more", strings.Join(items[:n], ", "), len(items)-n)
}

// profileName is the profile p gives rec's requests, or "none".
func profileName(p *policy.Policy, rec tokens.Record) string {
	prof, err := p.ProfileFor(rec.Sandbox, rec.Profile)
	if errors.Is(err, policy.ErrNoProfile) || prof == nil {
		return "none"
	}
	return prof.Name
}
