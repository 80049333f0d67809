// Package memo remembers answers that are the same every time they are
// asked but cost something to work out on every request: the policy's
// answers, metrics' series. It is internal to routes: the core, the routes
// and metrics share it, and no other program needs it.
package memo

import "sync"

// Limit bounds a Memo: past it, it starts again empty, so that keys a
// client makes up (sandbox ids, model names) cannot grow it.
const Limit = 4096

// Memo remembers values by key, at most Limit of them. Safe for concurrent
// use; the zero value is empty.
type Memo[K comparable, V any] struct {
	mu sync.RWMutex
	m  map[K]V
}

// Get returns the value remembered for k, if there is one.
func (c *Memo[K, V]) Get(k K) (V, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	v, ok := c.m[k]
	return v, ok
}

// Put remembers v for k, forgetting every other value first if Limit are
// remembered.
func (c *Memo[K, V]) Put(k K, v V) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= Limit {
		c.m = make(map[K]V)
	}
	c.m[k] = v
}

// Len is how many values c remembers.
func (c *Memo[K, V]) Len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.m)
}
