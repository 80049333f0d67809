package main

import (
	"context"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/cproxy/cproxy/policy"
	"github.com/cproxy/cproxy/routes"
)

// policyPollInterval is how often serve looks at the policy file for a
// change. A change is loaded once the file has looked the same for two looks
// in a row, so a file an editor is still writing is not read half-written.
const policyPollInterval = time.Second

// policyReloader puts a new policy file in force when serve gets SIGHUP or
// the file changes. A new policy must load as it would at start (the config's
// relay names included); one that does not is refused, its problems logged,
// and the policy in force stays. Requests already past their decision keep
// the profile they were decided with (routes.Server.SetPolicy).
type policyReloader struct {
	cfg *policy.Config
	srv *routes.Server
	log *slog.Logger

	mu      sync.Mutex
	inForce *policy.Policy
	seen    fileState  // the file when it was last read
	pending *fileState // a change seen once, loaded if the next look sees it unchanged
}

// newPolicyReloader starts from the policy cfg was loaded with. It has not
// looked at the file yet, so the watcher's first looks read it once more:
// silently when it is what cfg was loaded from, as a reload when it changed
// while serve was starting.
func newPolicyReloader(cfg *policy.Config, srv *routes.Server, log *slog.Logger) *policyReloader {
	return &policyReloader{cfg: cfg, srv: srv, log: log, inForce: cfg.Rules}
}

// fileState is what a look at the file sees: its size, modification time
// and identity (an editor that saves by writing a new file and renaming it
// over the old one changes the inode, even when size and time look alike).
type fileState struct {
	info os.FileInfo // nil: the file cannot be looked at (removed, say)
}

func statFile(name string) fileState {
	info, err := os.Stat(name)
	if err != nil {
		return fileState{}
	}
	return fileState{info}
}

func (a fileState) same(b fileState) bool {
	if a.info == nil || b.info == nil {
		return a.info == nil && b.info == nil
	}
	return a.info.Size() == b.info.Size() && a.info.ModTime().Equal(b.info.ModTime()) && os.SameFile(a.info, b.info)
}

// sighup reloads the policy file at once, changed or not.
func (r *policyReloader) sighup() {
	if r.cfg.Policy == "" {
		r.log.Info("SIGHUP: no policy file to reload (embedded default policy)")
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pending = nil
	r.load("sighup")
}

// watch looks at the policy file every interval until ctx is done.
func (r *policyReloader) watch(ctx context.Context, interval time.Duration) {
	if r.cfg.Policy == "" {
		return
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.poll()
		}
	}
}

// poll is one look at the file. A change is loaded when a second look finds
// the file as the first did; so each change is tried once, and a policy
// with errors is logged once, not at every look.
func (r *policyReloader) poll() {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := statFile(r.cfg.PolicyPath())
	switch {
	case st.same(r.seen):
		r.pending = nil
	case r.pending == nil || !st.same(*r.pending):
		r.pending = &st
	default:
		r.pending = nil
		r.load("change")
	}
}

// load reads the file and puts it in force if it is valid and differs from
// the policy in force. The caller holds mu.
func (r *policyReloader) load(trigger string) {
	path := r.cfg.PolicyPath()
	// Looked at before reading: a change made while reading is seen by
	// the next look and loaded then.
	r.seen = statFile(path)
	p, err := policy.LoadPolicy(path)
	if err == nil {
		if probs := r.cfg.CheckPolicy(p); len(probs) > 0 {
			err = &probs
		}
	}
	switch {
	case err != nil:
		r.log.Error("policy reload refused; the previous policy stays in force", "err", err.Error(), "trigger", trigger)
	case p.SameText(r.inForce):
		// The watcher saw a touch, or SIGHUP came after the watcher had
		// loaded the change already: say so only when asked.
		if trigger == "sighup" {
			r.log.Info("policy unchanged", "policy", path, "trigger", trigger)
		}
	default:
		r.inForce = p
		r.srv.SetPolicy(p)
		r.log.Info("policy reloaded", "policy", path, "trigger", trigger)
	}
}
