package routes

import (
	"testing"
	"time"
)

// Counting a request against its token's limits, the model route's hot
// path, allocates nothing once the token is known, and a refusal names the
// limit and its key.
func TestRouteLimitsTake(t *testing.T) {
	rl := newRouteLimits("npm", RouteLimits{Limits: Limits{Concurrent: 2, RequestsPerMinute: 1 << 20}, Key: "upstream.npm"})
	now := time.Now()
	tc, err := rl.take("tok-1", now)
	if err != nil {
		t.Fatal(err)
	}
	tc.release()
	if n := testing.AllocsPerRun(100, func() {
		tc, _ := rl.take("tok-1", now)
		tc.release()
	}); n != 0 {
		t.Errorf("take and release allocate %v times", n)
	}
	a, _ := rl.take("tok-1", now)
	b, _ := rl.take("tok-1", now)
	if _, err := rl.take("tok-1", now); err == nil || Message(err) != "cproxy: 2 requests of this sandbox token to the npm route are in flight, its limit (upstream.npm.concurrent = 2); retry when one ends, or the operator can raise upstream.npm.concurrent" {
		t.Errorf("a third in flight: %v", err)
	}
	if _, err := rl.take("tok-2", now); err != nil {
		t.Errorf("another token: %v", err)
	}
	a.release()
	b.release()
}

func BenchmarkRouteLimitsTake(b *testing.B) {
	rl := newRouteLimits("model", RouteLimits{Limits: Limits{Concurrent: 1 << 20, RequestsPerMinute: 1 << 30}})
	now := time.Now()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			tc, err := rl.take("tok-1", now)
			if err != nil {
				b.Fatal(err)
			}
			tc.release()
		}
	})
}
