package routes

import (
	"encoding/base64"
	"os"
	"sync"
	"time"
)

func base64Std(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

func writeFile(path, src string) error { return os.WriteFile(path, []byte(src), 0o600) }

// testClock is a clock a test moves by hand.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}
