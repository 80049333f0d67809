package tokens

// The SharedLimits contract: one suite that every store shared by replicas
// passes, PostgreSQL when CPROXY_TEST_PG_DSN names a server (under CI=true
// it must). The embedded store has no shared limits: its one process counts
// them in memory (routes' budgets), where they are tested.

import (
	"errors"
	"sync"
	"testing"
	"time"
)

// sharedStore is a store with shared limits.
type sharedStore interface {
	Store
	SharedLimits
}

// eachSharedStore runs test once per store kind with shared limits.
func eachSharedStore(t *testing.T, test func(t *testing.T, s sharedStore, reopen func(Store) Store)) {
	if testPostgresDSN(t) == "" {
		return
	}
	t.Run("postgres", func(t *testing.T) {
		s, reopen := openTestPostgres(t)
		test(t, s, reopen)
	})
}

func TestSharedLimitsReserveAndAdjustUsage(t *testing.T) {
	eachSharedStore(t, func(t *testing.T, s sharedStore, reopen func(Store) Store) {
		limit := Usage{Requests: 3, Output: 100} // input and the cache kinds: no cap
		want := Usage{Requests: 1, Input: 1 << 40, Output: 40}
		if u, err := s.ReserveUsage(ctx, "tok_r", want, limit); err != nil || u != want {
			t.Fatalf("first reservation = %+v, %v; want %+v", u, err, want)
		}
		if u, err := s.ReserveUsage(ctx, "tok_r", want, limit); err != nil || u != want.Add(want) {
			t.Fatalf("second reservation = %+v, %v", u, err)
		}
		// A third would take output to 120 of 100: refused, nothing changed.
		if u, err := s.ReserveUsage(ctx, "tok_r", want, limit); !errors.Is(err, ErrOverBudget) || u != want.Add(want) {
			t.Fatalf("over the output cap = %+v, %v; want ErrOverBudget and the usage as it was", u, err)
		}
		// Settling one reservation lower (40 held, 15 used) makes room.
		if u, err := s.AdjustUsage(ctx, "tok_r", Usage{Output: -25}); err != nil || u.Output != 55 || u.Requests != 2 {
			t.Fatalf("adjust = %+v, %v", u, err)
		}
		if u, err := s.ReserveUsage(ctx, "tok_r", want, limit); err != nil || u.Requests != 3 || u.Output != 95 {
			t.Fatalf("after settling = %+v, %v", u, err)
		}
		if _, err := s.ReserveUsage(ctx, "tok_r", Usage{Requests: 1}, limit); !errors.Is(err, ErrOverBudget) {
			t.Fatalf("a fourth request of 3 = %v, want ErrOverBudget", err)
		}
		// A want that fits no window is refused on a fresh key too, and
		// leaves nothing behind.
		if u, err := s.ReserveUsage(ctx, "tok_new", Usage{Output: 101}, limit); !errors.Is(err, ErrOverBudget) || u != (Usage{}) {
			t.Fatalf("a want over the cap on a fresh key = %+v, %v", u, err)
		}
		if u, _ := s.LoadUsage(ctx, "tok_new"); u != (Usage{}) {
			t.Errorf("a refused reservation left %+v", u)
		}
		// No count goes below zero, and a fresh key starts from zero.
		if u, err := s.AdjustUsage(ctx, "tok_r", Usage{Requests: -10, Output: 5}); err != nil || u.Requests != 0 || u.Output != 100 {
			t.Errorf("adjust below zero = %+v, %v", u, err)
		}
		if u, err := s.AdjustUsage(ctx, "tok_fresh", Usage{Requests: -1, Output: 7}); err != nil || u != (Usage{Output: 7}) {
			t.Errorf("adjust of a fresh key = %+v, %v", u, err)
		}
		// MCP tool calls are capped as requests are.
		calls := Usage{MCPCalls: 1}
		for i := range 2 {
			if u, err := s.ReserveUsage(ctx, "tok_m", calls, Usage{MCPCalls: 2}); err != nil || u.MCPCalls != int64(i+1) {
				t.Fatalf("MCP call %d = %+v, %v", i+1, u, err)
			}
		}
		if u, err := s.ReserveUsage(ctx, "tok_m", calls, Usage{MCPCalls: 2}); !errors.Is(err, ErrOverBudget) || u != (Usage{MCPCalls: 2}) {
			t.Fatalf("a third MCP call of 2 = %+v, %v; want ErrOverBudget", u, err)
		}
		if u, err := s.AdjustUsage(ctx, "tok_m", Usage{MCPCalls: -5}); err != nil || u != (Usage{}) {
			t.Errorf("MCP calls adjusted below zero = %+v, %v", u, err)
		}
		if u, err := reopen(s).LoadUsage(ctx, "tok_r"); err != nil || u.Output != 100 || u.Input != 3<<40 {
			t.Errorf("usage after reopen = %+v, %v", u, err)
		}
	})
}

// grantedOf makes n calls of f at once and returns how many succeeded; an
// error other than ErrOverBudget fails t.
func grantedOf(t *testing.T, n int, f func() error) int {
	var wg sync.WaitGroup
	var mu sync.Mutex
	granted := 0
	for range n {
		wg.Go(func() {
			switch err := f(); {
			case err == nil:
				mu.Lock()
				granted++
				mu.Unlock()
			case !errors.Is(err, ErrOverBudget):
				t.Error(err)
			}
		})
	}
	wg.Wait()
	return granted
}

// Reservations made at once never pass a cap together: of 60 concurrent
// reservations of one request against a cap of 10, exactly 10 succeed.
func TestSharedLimitsReserveUsageConcurrent(t *testing.T) {
	eachSharedStore(t, func(t *testing.T, s sharedStore, _ func(Store) Store) {
		granted := grantedOf(t, 60, func() error {
			_, err := s.ReserveUsage(ctx, "tok_c", Usage{Requests: 1, Output: 3}, Usage{Requests: 10})
			return err
		})
		if u, err := s.LoadUsage(ctx, "tok_c"); granted != 10 || err != nil || u != (Usage{Requests: 10, Output: 30}) {
			t.Errorf("%d reservations granted, usage %+v, %v; want 10 and 10 requests", granted, u, err)
		}
	})
}

// A rate of 3 a minute admits 3 at once, then one every 20 seconds, and
// says how long to wait; keys are counted apart.
func TestSharedLimitsTakeRate(t *testing.T) {
	eachSharedStore(t, func(t *testing.T, s sharedStore, _ func(Store) Store) {
		for i := range 3 {
			if wait, err := s.TakeRate(ctx, "tok_a", 3); err != nil || wait != 0 {
				t.Fatalf("event %d of a burst of 3: wait %v, %v", i+1, wait, err)
			}
		}
		wait, err := s.TakeRate(ctx, "tok_a", 3)
		if err != nil || wait <= 15*time.Second || wait > 20*time.Second {
			t.Errorf("a fourth at once: wait %v, %v; want up to 20s (one step)", wait, err)
		}
		// A refused event takes nothing: the wait does not grow.
		if again, _ := s.TakeRate(ctx, "tok_a", 3); again > wait {
			t.Errorf("a refused event moved the bucket: wait %v after %v", again, wait)
		}
		if wait, err := s.TakeRate(ctx, "tok_b", 3); err != nil || wait != 0 {
			t.Errorf("another key: wait %v, %v", wait, err)
		}
	})
}

// Slots: limit at once, freed by ReleaseSlot or by their lease running out
// unrenewed (a process that died), kept by RenewSlots.
func TestSharedLimitsSlots(t *testing.T) {
	eachSharedStore(t, func(t *testing.T, s sharedStore, _ func(Store) Store) {
		a, err := s.AcquireSlot(ctx, "tok_s", 2, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.AcquireSlot(ctx, "tok_s", 2, time.Minute); err != nil {
			t.Fatal(err)
		}
		if _, err := s.AcquireSlot(ctx, "tok_s", 2, time.Minute); !errors.Is(err, ErrOverBudget) {
			t.Fatalf("a third of 2 slots: %v, want ErrOverBudget", err)
		}
		if _, err := s.AcquireSlot(ctx, "tok_other", 1, time.Minute); err != nil {
			t.Errorf("another key's slot: %v", err)
		}
		if err := s.ReleaseSlot(ctx, a); err != nil {
			t.Fatal(err)
		}
		if _, err := s.AcquireSlot(ctx, "tok_s", 2, time.Minute); err != nil {
			t.Errorf("after a release: %v", err)
		}

		short, err := s.AcquireSlot(ctx, "tok_lease", 1, 300*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(600 * time.Millisecond)
		kept, err := s.AcquireSlot(ctx, "tok_lease", 1, 300*time.Millisecond)
		if err != nil {
			t.Fatalf("a slot whose lease ran out was not freed: %v", err)
		}
		if err := s.ReleaseSlot(ctx, short); err != nil {
			t.Errorf("releasing an expired slot: %v", err)
		}
		if err := s.RenewSlots(ctx, []Slot{kept}, time.Minute); err != nil {
			t.Fatal(err)
		}
		time.Sleep(600 * time.Millisecond)
		if _, err := s.AcquireSlot(ctx, "tok_lease", 1, time.Minute); !errors.Is(err, ErrOverBudget) {
			t.Errorf("a renewed slot was freed: %v, want ErrOverBudget", err)
		}
	})
}

// Slots taken at once never pass the limit: of 40 concurrent acquisitions
// of 5 slots, exactly 5 succeed.
func TestSharedLimitsSlotsConcurrent(t *testing.T) {
	eachSharedStore(t, func(t *testing.T, s sharedStore, _ func(Store) Store) {
		got := grantedOf(t, 40, func() error {
			_, err := s.AcquireSlot(ctx, "tok_c", 5, time.Minute)
			return err
		})
		if got != 5 {
			t.Errorf("%d of 40 acquisitions of 5 slots succeeded", got)
		}
	})
}

// Prune deletes a pruned token's rate and slots with it, and a kept
// token keeps its own.
func TestSharedLimitsPrune(t *testing.T) {
	eachSharedStore(t, func(t *testing.T, s sharedStore, _ func(Store) Store) { testPrune(t, s, s) })
}

// The embedded store has no shared limits: its one process counts them in
// memory, so shared accounting there would be code only tests call.
func TestBoltHasNoSharedLimits(t *testing.T) {
	var s Store = (*BoltStore)(nil)
	if _, ok := s.(SharedLimits); ok {
		t.Error("BoltStore implements SharedLimits; routes' budgets count an embedded store's limits in memory")
	}
}
