package routes

import "sync"

// memoLimit bounds a memo: past it, it starts again empty, so that keys a
// client makes up (sandbox ids, model names) cannot grow it.
const memoLimit = 4096

// memo remembers values by key, for answers that are the same every time
// they are asked but cost something to work out on every request. Safe for
// concurrent use; the zero value is empty.
type memo[K comparable, V any] struct {
	mu sync.RWMutex
	m  map[K]V
}

func (c *memo[K, V]) get(k K) (V, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	v, ok := c.m[k]
	return v, ok
}

func (c *memo[K, V]) put(k K, v V) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= memoLimit {
		c.m = make(map[K]V)
	}
	c.m[k] = v
}
