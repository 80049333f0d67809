package routes

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/cproxy/cproxy/client"
	"github.com/cproxy/cproxy/tokens"
)

// Pruning keeps the token store to what is recent: tokens that expired or
// were revoked longer than store.retention ago go, with their usage, in
// batches of tokens.PruneBatch, each its own short transaction, so that
// requests writing to the store wait no longer than for any other write.
const (
	// DefaultPruneInterval is how often serve prunes when Options sets no
	// interval: a store that is pruned hourly holds at most an hour of
	// tokens past their retention, and a run finds little to do.
	DefaultPruneInterval = time.Hour
	// pruneStartDelay is when the first run comes after start (or at the
	// interval, if that is sooner): soon, so that a cproxy restarted more
	// often than the interval still prunes, but not in the middle of start.
	pruneStartDelay = time.Minute
	// pruneSample bounds the tokens a dry run lists; it counts them all.
	pruneSample = 100
)

// startPruning runs prune every interval, the first time sooner (at most
// pruneStartDelay after start), until Close; with a zero retention it does
// nothing: the store keeps every token.
func (s *Server) startPruning(retention, interval time.Duration) {
	if retention <= 0 {
		return
	}
	if interval <= 0 {
		interval = DefaultPruneInterval
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	s.pruneStop = func() { cancel(); <-done }
	go func() {
		defer close(done)
		t := time.NewTimer(min(interval, pruneStartDelay))
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			_, err := s.prune(ctx, s.now().Add(-retention), "retention", retention.String())
			switch {
			case errors.Is(err, tokens.ErrPruneBusy):
				s.log.Debug("another replica is pruning the token store; this one skips its run")
			case err != nil && ctx.Err() == nil:
				s.log.Error("pruning the token store failed; the next run tries again", "err", err)
			}
			t.Reset(interval)
		}
	}()
}

// prune deletes every token dead at or before before, a batch at a time,
// and returns how many it deleted (also when it fails part way, with the
// error). A run that deleted something logs it, with why (a log attribute
// and its value: the retention, or an admin call's older_than).
func (s *Server) prune(ctx context.Context, before time.Time, why, value string) (int, error) {
	n := 0
	var err error
	for {
		var recs []tokens.Record
		recs, err = s.store.Prune(ctx, before, tokens.PruneBatch)
		n += len(recs)
		s.budgets.Forget(recs)
		s.metrics.TokensPruned(len(recs))
		if err != nil || len(recs) < tokens.PruneBatch {
			break
		}
	}
	if n > 0 {
		s.log.Info("tokens pruned", "count", n, "before", before.UTC(), why, value)
	}
	return n, err
}

// pruneTokens is POST /tokens/prune[?dry_run=1][&older_than=DURATION]:
// prune now, or say what would go, with the retention in force or the
// given one.
func (s *Server) pruneTokens(w http.ResponseWriter, r *http.Request) {
	q, ok := adminQuery(w, r, "dry_run", "older_than")
	if !ok {
		return
	}
	dryRun := false
	if v := q.Get("dry_run"); v != "" {
		var err error
		if dryRun, err = strconv.ParseBool(v); err != nil {
			adminError(w, http.StatusBadRequest, fmt.Sprintf("invalid dry_run %q: use dry_run=1 to see what would be pruned, without pruning", Clip(v, 16)))
			return
		}
	}
	age, why := s.retention, "retention"
	if v := q.Get("older_than"); v != "" {
		d, err := ParseAge(v)
		if err != nil {
			adminError(w, http.StatusBadRequest, err.Error())
			return
		}
		age, why = d, "older_than"
	} else if age == 0 {
		adminError(w, http.StatusBadRequest, "store.retention is 0, which keeps every token: pass older_than=DURATION (e.g. 720h or 30d) to prune the tokens dead for longer")
		return
	}
	out := client.Pruned{DryRun: dryRun, Before: s.now().UTC().Add(-age)}
	if dryRun {
		n, recs, err := s.store.Prunable(r.Context(), out.Before, pruneSample)
		if err != nil {
			s.log.Error("listing the tokens to prune failed", "err", err)
			adminError(w, http.StatusServiceUnavailable, "the token store failed")
			return
		}
		out.Count = n
		now := s.now()
		for _, rec := range recs {
			out.Tokens = append(out.Tokens, tokenInfo(rec, now))
		}
		writeJSON(w, http.StatusOK, out)
		return
	}
	n, err := s.prune(r.Context(), out.Before, why, age.String())
	switch {
	case errors.Is(err, tokens.ErrPruneBusy):
		adminError(w, http.StatusConflict, fmt.Sprintf("another replica is pruning the token store now (this call pruned %d tokens before it met it): retry when it is done", n))
		return
	case err != nil:
		s.log.Error("pruning the token store failed", "pruned", n, "err", err)
		adminError(w, http.StatusServiceUnavailable, fmt.Sprintf("the token store failed after %d tokens were pruned: retry", n))
		return
	}
	out.Count = n
	writeJSON(w, http.StatusOK, out)
}

// ParseAge reads older_than, and the CLI's --older-than: a duration as
// ParseTTL reads one, zero or more: 0 prunes every token that is dead now.
func ParseAge(v string) (time.Duration, error) {
	d, err := parseDays(v)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("invalid older_than %q: use a duration such as 720h or 30d (0s: every token expired or revoked by now)", Clip(v, 32))
	}
	return d, nil
}
