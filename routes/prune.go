package routes

import (
	"context"
	"errors"
	"time"

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
)

// pruneStartDelay is when the first run comes after start (or at the
// interval, if that is sooner): soon, so that a cproxy restarted more often
// than the interval still prunes, but not in the middle of start. A
// variable for the test that checks it.
var pruneStartDelay = time.Minute

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
			_, err := s.Prune(ctx, s.now().Add(-retention), "retention", retention.String())
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

// Prune deletes every token dead at or before before, a batch at a time,
// and returns how many it deleted (also when it fails part way, with the
// error; tokens.ErrPruneBusy when another replica is pruning). With the
// tokens go their budgets held in memory and their usage, and
// cproxy_store_pruned_total counts them. A run that deleted something logs
// it, with why (a log attribute and its value: the retention, or an admin
// call's older_than). The background pruner calls it every PruneInterval;
// the admin API's POST /tokens/prune calls it on demand.
func (s *Server) Prune(ctx context.Context, before time.Time, why, value string) (int, error) {
	n := 0
	var err error
	sandboxes := map[string]bool{}
	for {
		var recs []tokens.Record
		recs, err = s.store.Prune(ctx, before, tokens.PruneBatch)
		n += len(recs)
		s.budgets.Forget(recs)
		s.metrics.TokensPruned(len(recs))
		for _, r := range recs {
			sandboxes[r.Sandbox] = true
		}
		if err != nil || len(recs) < tokens.PruneBatch {
			break
		}
	}
	s.forgetBudgetSeries(ctx, sandboxes)
	if n > 0 {
		s.log.Info("tokens pruned", "count", n, "before", before.UTC(), why, value)
	}
	if err == nil {
		// Approval requests that ended as long ago go with the tokens.
		var ap int
		if ap, err = s.store.PruneApprovals(ctx, before); ap > 0 {
			s.log.Info("approvals pruned", "count", ap, "before", before.UTC(), why, value)
		}
	}
	return n, err
}

// Retention is Options.Retention: how long a token is kept after it died.
// POST /tokens/prune prunes with it when the call names no older_than;
// zero keeps every token.
func (s *Server) Retention() time.Duration { return s.retention }

// forgetBudgetSeries deletes the cproxy_budget_remaining series of each
// sandbox whose tokens were pruned and that has no live token left: a
// sandbox whose tokens only expired would otherwise keep its series for
// as long as cproxy runs. A sandbox with a live token keeps them, as does
// one the store cannot list just now.
func (s *Server) forgetBudgetSeries(ctx context.Context, sandboxes map[string]bool) {
	for sb := range sandboxes {
		p, err := s.store.List(ctx, tokens.ListQuery{Limit: 1, Sandbox: sb, State: tokens.StateLive, Now: s.now()})
		if err == nil && len(p.Records) == 0 {
			s.metrics.DeleteBudget(sb)
		}
	}
}
