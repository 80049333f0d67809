package tokens

import (
	"context"
	"slices"
	"sync"
	"time"
)

// memLimits keeps rates and slots (TakeRate, AcquireSlot) in memory, for a
// store that one process holds: the embedded store's file is locked to its
// process, so that process's memory is all there is to share. They do not
// outlive the process, and need not: a rate refills and a slot is freed by
// the process ending anyway.
type memLimits struct {
	now func() time.Time

	mu    sync.Mutex
	tat   map[string]time.Time // per key: when its bucket is full again (GCRA's theoretical arrival time)
	slots map[Slot]memSlot
	next  Slot
}

type memSlot struct {
	key     string
	expires time.Time
}

func newMemLimits(now func() time.Time) *memLimits {
	return &memLimits{now: now, tat: map[string]time.Time{}, slots: map[Slot]memSlot{}}
}

// rateStep is how long one event of perMinute a minute fills a bucket for.
func rateStep(perMinute int64) time.Duration { return time.Minute / time.Duration(max(perMinute, 1)) }

// TakeRate is the generic cell rate algorithm: each event moves the key's
// theoretical arrival time one step ahead of max(itself, now), and is
// admitted if that stays within perMinute steps of now.
func (m *memLimits) TakeRate(ctx context.Context, key string, perMinute int64) (time.Duration, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	now, step := m.now(), rateStep(perMinute)
	m.mu.Lock()
	defer m.mu.Unlock()
	next := m.tat[key]
	if next.Before(now) {
		next = now
	}
	next = next.Add(step)
	if over := next.Sub(now) - time.Duration(perMinute)*step; over > 0 {
		return over, nil
	}
	m.tat[key] = next
	if len(m.tat) > cacheLimit {
		m.forgetFull(now)
	}
	return 0, nil
}

// forgetFull drops the keys whose buckets are full again: they mean nothing
// an empty map does not. The caller holds m.mu.
func (m *memLimits) forgetFull(now time.Time) {
	for k, t := range m.tat {
		if !t.After(now) {
			delete(m.tat, k)
		}
	}
}

func (m *memLimits) AcquireSlot(ctx context.Context, key string, limit int64, lease time.Duration) (Slot, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	held := int64(0)
	for id, s := range m.slots {
		switch {
		case !s.expires.After(now):
			delete(m.slots, id)
		case s.key == key:
			held++
		}
	}
	if held >= limit {
		return 0, ErrOverBudget
	}
	m.next++
	m.slots[m.next] = memSlot{key, now.Add(lease)}
	return m.next, nil
}

func (m *memLimits) RenewSlots(ctx context.Context, slots []Slot, lease time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, id := range slots {
		if s, ok := m.slots[id]; ok && s.expires.After(now) {
			s.expires = now.Add(lease)
			m.slots[id] = s
		}
	}
	return nil
}

func (m *memLimits) ReleaseSlot(ctx context.Context, slot Slot) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.slots, slot)
	return nil
}

// forget drops the rates and slots of recs' tokens, which Prune deleted.
func (m *memLimits) forget(recs []Record) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range recs {
		delete(m.tat, r.ID)
	}
	for id, s := range m.slots {
		if slices.ContainsFunc(recs, func(r Record) bool { return r.ID == s.key }) {
			delete(m.slots, id)
		}
	}
}
