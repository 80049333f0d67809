package tokens

// Store.Prune and Store.Prunable, in the Store contract: every store
// passes them; a store with SharedLimits also prunes a token's rate and
// slots (TestSharedLimitsPrune).

import (
	"errors"
	"slices"
	"testing"
	"time"
)

// pruneFixture is a store holding one token in each state Prune tells
// apart, each with usage in both windows and, in a store with shared
// limits, a rate and a slot under its id.
type pruneFixture struct {
	expired, revoked, live, recent Hash
	cutoff                         time.Time
	limits                         SharedLimits // the store's; nil: it has none
}

func newPruneFixture(t *testing.T, s Store, limits SharedLimits) pruneFixture {
	t.Helper()
	f := pruneFixture{cutoff: t0.Add(2 * time.Hour), limits: limits}
	mint := func(sandbox string, expires time.Time) Hash {
		h := newHash(t)
		if err := s.Create(ctx, h, Record{Sandbox: sandbox, CreatedAt: t0, ExpiresAt: expires}); err != nil {
			t.Fatal(err)
		}
		for _, key := range []string{UsageKey(h.ID(), ""), UsageKey(h.ID(), "2026-03-01")} {
			if err := s.SaveUsage(ctx, key, Usage{Requests: 1}); err != nil {
				t.Fatal(err)
			}
		}
		if limits == nil {
			return h
		}
		if _, err := limits.AcquireSlot(ctx, h.ID(), 1, time.Hour); err != nil {
			t.Fatal(err)
		}
		if _, err := limits.TakeRate(ctx, h.ID(), 1); err != nil {
			t.Fatal(err)
		}
		return h
	}
	f.expired = mint("conv-expired", t0.Add(time.Hour))
	f.revoked = mint("conv-revoked", t0.Add(24*time.Hour))
	if _, err := s.RevokeSandbox(ctx, "conv-revoked", t0.Add(30*time.Minute)); err != nil {
		t.Fatal(err)
	}
	// Live far past the cutoff: it must keep everything.
	f.live = mint("conv-live", time.Now().Add(time.Hour))
	// Dead, but after the cutoff: not yet.
	f.recent = mint("conv-recent", f.cutoff.Add(time.Minute))
	return f
}

// kept reports whether h's token, its usage in both windows, and its slot
// and its rate where the store has them, are all still in s.
func (f pruneFixture) kept(t *testing.T, s Store, h Hash) bool {
	t.Helper()
	_, err := s.Lookup(ctx, h)
	switch {
	case errors.Is(err, ErrNotFound):
		return false
	case err != nil:
		t.Fatal(err)
	}
	for _, key := range []string{UsageKey(h.ID(), ""), UsageKey(h.ID(), "2026-03-01")} {
		if u, err := s.LoadUsage(ctx, key); err != nil || u != (Usage{Requests: 1}) {
			t.Errorf("usage %s of a kept token = %+v, %v", key, u, err)
		}
	}
	if f.limits == nil {
		return true
	}
	if _, err := f.limits.AcquireSlot(ctx, h.ID(), 1, time.Hour); !errors.Is(err, ErrOverBudget) {
		t.Errorf("the slot of a kept token was freed: %v", err)
	}
	if wait, err := f.limits.TakeRate(ctx, h.ID(), 1); err != nil || wait == 0 {
		t.Errorf("the rate of a kept token was reset: wait %v, %v", wait, err)
	}
	return true
}

// gone checks that h's token and everything under its id left s.
func (f pruneFixture) gone(t *testing.T, s Store, h Hash) {
	t.Helper()
	if _, err := s.Lookup(ctx, h); !errors.Is(err, ErrNotFound) {
		t.Errorf("a pruned token is still there: %v", err)
	}
	for _, key := range []string{UsageKey(h.ID(), ""), UsageKey(h.ID(), "2026-03-01")} {
		if u, err := s.LoadUsage(ctx, key); err != nil || u != (Usage{}) {
			t.Errorf("usage %s of a pruned token = %+v, %v; want none", key, u, err)
		}
	}
	if f.limits == nil {
		return
	}
	if _, err := f.limits.AcquireSlot(ctx, h.ID(), 1, time.Hour); err != nil {
		t.Errorf("the slot of a pruned token is still held: %v", err)
	}
	if wait, err := f.limits.TakeRate(ctx, h.ID(), 1); err != nil || wait != 0 {
		t.Errorf("the rate of a pruned token is still spent: wait %v, %v", wait, err)
	}
}

func ids(recs []Record) []string {
	var out []string
	for _, r := range recs {
		out = append(out, r.ID)
	}
	slices.Sort(out)
	return out
}

func sortedIDs(hs ...Hash) []string {
	var out []string
	for _, h := range hs {
		out = append(out, h.ID())
	}
	slices.Sort(out)
	return out
}

// A token expired or revoked at or before the cutoff goes with its usage;
// a live token, or one dead since after the cutoff, keeps it.
func TestStorePrune(t *testing.T) {
	eachStore(t, func(t *testing.T, s Store, _ func(Store) Store) { testPrune(t, s, nil) })
}

// testPrune is TestStorePrune, and TestSharedLimitsPrune with limits, the
// store's own: a pruned token's rate and slot go too, and a kept one keeps
// them.
func testPrune(t *testing.T, s Store, limits SharedLimits) {
	f := newPruneFixture(t, s, limits)
	n, recs, err := s.Prunable(ctx, f.cutoff, 10)
	if err != nil {
		t.Fatal(err)
	}
	if want := sortedIDs(f.expired, f.revoked); n != 2 || !slices.Equal(ids(recs), want) {
		t.Errorf("Prunable = %d, %v; want 2, %v", n, ids(recs), want)
	}
	pruned, err := s.Prune(ctx, f.cutoff, PruneBatch)
	if err != nil {
		t.Fatal(err)
	}
	if want := sortedIDs(f.expired, f.revoked); !slices.Equal(ids(pruned), want) {
		t.Errorf("Prune deleted %v; want %v", ids(pruned), want)
	}
	f.gone(t, s, f.expired)
	f.gone(t, s, f.revoked)
	if !f.kept(t, s, f.live) || !f.kept(t, s, f.recent) {
		t.Error("Prune deleted a live token, or one dead since after the cutoff")
	}
	if n, _, err := s.Prunable(ctx, f.cutoff, 10); err != nil || n != 0 {
		t.Errorf("Prunable after Prune = %d, %v; want 0", n, err)
	}
	if again, err := s.Prune(ctx, f.cutoff, PruneBatch); err != nil || len(again) != 0 {
		t.Errorf("a second Prune deleted %v, %v; want nothing", ids(again), err)
	}
	recs, err = listAll(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	if want := sortedIDs(f.live, f.recent); !slices.Equal(ids(recs), want) {
		t.Errorf("List after Prune = %v; want %v", ids(recs), want)
	}
	// The sandbox index went with the token.
	if n, err := s.RevokeSandbox(ctx, "conv-expired", t0.Add(3*time.Hour)); err != nil || n != 0 {
		t.Errorf("revoking a pruned sandbox = %d, %v; want 0", n, err)
	}
}

// A cutoff before every token's death prunes nothing: what a retention
// that has not passed yet keeps.
func TestStorePruneKeepsWithinRetention(t *testing.T) {
	eachStore(t, func(t *testing.T, s Store, _ func(Store) Store) {
		f := newPruneFixture(t, s, nil)
		pruned, err := s.Prune(ctx, t0, PruneBatch)
		if err != nil || len(pruned) != 0 {
			t.Errorf("Prune before every death deleted %v, %v", ids(pruned), err)
		}
		for _, h := range []Hash{f.expired, f.revoked, f.live, f.recent} {
			if !f.kept(t, s, h) {
				t.Errorf("token %s was deleted", h.ID())
			}
		}
	})
}

// Prune deletes at most limit tokens a call; Prunable samples at most
// limit but counts them all.
func TestStorePruneBatches(t *testing.T) {
	eachStore(t, func(t *testing.T, s Store, _ func(Store) Store) {
		for range 5 {
			issue(t, s, "conv-1", t0)
		}
		cutoff := t0.Add(2 * time.Hour)
		if n, recs, err := s.Prunable(ctx, cutoff, 3); err != nil || n != 5 || len(recs) != 3 {
			t.Errorf("Prunable(limit 3) = %d, %d records, %v; want 5, 3", n, len(recs), err)
		}
		var got []int
		for range 4 {
			pruned, err := s.Prune(ctx, cutoff, 2)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, len(pruned))
		}
		if !slices.Equal(got, []int{2, 2, 1, 0}) {
			t.Errorf("batches of 2 deleted %v; want [2 2 1 0]", got)
		}
	})
}
