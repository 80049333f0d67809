package routes

import (
	"context"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/cproxy/cproxy/tokens"
)

// memShared is tokens.SharedLimits for the budget tests' replicas: servers
// in one test process that share it as replicas share a PostgreSQL store.
// Usage is reserved and settled in store (LoadUsage, SaveUsage under one
// lock), so a test reads it there as from the real thing; rates and slots
// are in memory. PostgreSQL's own is held to the contract in tokens.
type memShared struct {
	store tokens.Store

	mu    sync.Mutex
	rates map[string]*rate.Limiter
	slots map[tokens.Slot]memSlot
	next  tokens.Slot
}

type memSlot struct {
	key     string
	expires time.Time
}

var _ tokens.SharedLimits = (*memShared)(nil)

func newMemShared(store tokens.Store) *memShared {
	return &memShared{store: store, rates: map[string]*rate.Limiter{}, slots: map[tokens.Slot]memSlot{}}
}

func (m *memShared) ReserveUsage(ctx context.Context, key string, want, limit tokens.Usage) (tokens.Usage, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	u, err := m.store.LoadUsage(ctx, key)
	if err != nil {
		return tokens.Usage{}, err
	}
	if !u.Add(want).Fits(limit) {
		return u, tokens.ErrOverBudget
	}
	return u.Add(want), m.store.SaveUsage(ctx, key, u.Add(want))
}

func (m *memShared) AdjustUsage(ctx context.Context, key string, delta tokens.Usage) (tokens.Usage, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	u, err := m.store.LoadUsage(ctx, key)
	if err != nil {
		return tokens.Usage{}, err
	}
	u = u.Add(delta)
	u = tokens.Usage{Requests: max(u.Requests, 0), Input: max(u.Input, 0), Output: max(u.Output, 0),
		CacheRead: max(u.CacheRead, 0), CacheWrite: max(u.CacheWrite, 0)}
	return u, m.store.SaveUsage(ctx, key, u)
}

func (m *memShared) TakeRate(ctx context.Context, key string, perMinute int64) (time.Duration, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	l := m.rates[key]
	if l == nil {
		l = rate.NewLimiter(rate.Limit(float64(perMinute)/60), int(perMinute))
		m.rates[key] = l
	}
	now := time.Now()
	r := l.ReserveN(now, 1)
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		return d, nil
	}
	return 0, nil
}

func (m *memShared) AcquireSlot(ctx context.Context, key string, limit int64, lease time.Duration) (tokens.Slot, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now, held := time.Now(), int64(0)
	for _, s := range m.slots {
		if s.key == key && s.expires.After(now) {
			held++
		}
	}
	if held >= limit {
		return 0, tokens.ErrOverBudget
	}
	m.next++
	m.slots[m.next] = memSlot{key, now.Add(lease)}
	return m.next, nil
}

func (m *memShared) RenewSlots(ctx context.Context, slots []tokens.Slot, lease time.Duration) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, id := range slots {
		if s, ok := m.slots[id]; ok {
			s.expires = time.Now().Add(lease)
			m.slots[id] = s
		}
	}
	return nil
}

func (m *memShared) ReleaseSlot(ctx context.Context, slot tokens.Slot) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.slots, slot)
	return nil
}
