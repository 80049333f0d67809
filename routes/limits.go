package routes

import (
	"hash/maphash"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// Limits bound what one sandbox token may ask of one route: how many of
// its requests may be in flight at once, and how many it may start a
// minute. The core counts them for every route when a request is
// authenticated (admit), before the route sees it; a refusal is a 429 in
// the route's error shape, with Retry-After.
type Limits struct {
	// Concurrent is how many of a token's requests to the route may be in
	// flight at once (a body still arriving, or a response still being
	// sent, counts). Zero: DefaultLimits'.
	Concurrent int64
	// RequestsPerMinute is the token's rate on the route: as many requests
	// may come at once, then one each 60/RequestsPerMinute seconds. Zero:
	// DefaultLimits'.
	RequestsPerMinute int64
}

// DefaultLimits are the limits of a route that declares none (Kind.Limits)
// and whose config sets none: above what one client tool asks of a route
// (npm keeps about 16 sockets open, git a handful), well below what one
// sandbox could tie cproxy up with.
var DefaultLimits = Limits{Concurrent: 32, RequestsPerMinute: 1200}

// Over is l with what o sets (non-zero) in place of its own.
func (l Limits) Over(o Limits) Limits {
	if o.Concurrent > 0 {
		l.Concurrent = o.Concurrent
	}
	if o.RequestsPerMinute > 0 {
		l.RequestsPerMinute = o.RequestsPerMinute
	}
	return l
}

// limitShards is how many locks a route's per-token limits are spread
// over: a token's requests take one, by the token's id, never a lock
// every request shares.
const limitShards = 64

// routeLimits counts one route's Limits per token.
type routeLimits struct {
	route, key string // the route's name, and its config section ("upstream.npm")
	lim        Limits
	seed       maphash.Seed
	shards     [limitShards]limitShard
}

type limitShard struct {
	mu      sync.Mutex
	m       map[string]*tokenCount
	sweepAt int // sweep when a new token finds this many kept
}

// RouteLimits are a route's Limits as the server is given them, with Key,
// the config section that sets them ("upstream.npm", "relay.mod"), which a
// refusal names.
type RouteLimits struct {
	Limits
	Key string
}

// tokenCount is one token's requests in flight on a route, and its rate.
type tokenCount struct {
	inflight atomic.Int64
	rate     *rate.Limiter
}

func newRouteLimits(route string, l RouteLimits) *routeLimits {
	key, lim := l.Key, l.Limits
	if key == "" {
		key = "upstream." + route
	}
	lim = DefaultLimits.Over(lim)
	rl := &routeLimits{route: route, key: key, lim: lim, seed: maphash.MakeSeed()}
	for i := range rl.shards {
		rl.shards[i].m = map[string]*tokenCount{}
	}
	return rl
}

// take counts a request of token id at now: it returns the token's count,
// its in-flight place taken (release gives it back), or the refusal of a
// request over a limit.
func (rl *routeLimits) take(id string, now time.Time) (*tokenCount, error) {
	sh := &rl.shards[maphash.String(rl.seed, id)%limitShards]
	sh.mu.Lock()
	tc := sh.m[id]
	if tc == nil {
		if len(sh.m) >= sh.sweepAt {
			rl.sweepShard(sh, now)
			sh.sweepAt = max(2*len(sh.m), 64)
		}
		rpm := rl.lim.RequestsPerMinute
		tc = &tokenCount{rate: rate.NewLimiter(rate.Limit(float64(rpm)/60), int(min(rpm, math.MaxInt32)))}
		sh.m[id] = tc
	}
	sh.mu.Unlock()
	if n := tc.inflight.Add(1); n > rl.lim.Concurrent {
		tc.inflight.Add(-1)
		return nil, refuseRetry(ErrTooManyRequests, time.Second, "%d requests of this sandbox token to the %s route are in flight, its limit (%s.concurrent = %d); retry when one ends, or the operator can raise %s.concurrent", n-1, rl.route, rl.key, rl.lim.Concurrent, rl.key)
	}
	if !tc.rate.AllowN(now, 1) {
		tc.inflight.Add(-1)
		wait := time.Duration((1 - tc.rate.TokensAt(now)) / float64(tc.rate.Limit()) * float64(time.Second))
		return nil, refuseRetry(ErrTooManyRequests, max(wait, time.Second), "this sandbox token is over its rate on the %s route (%s.requests_per_minute = %d); retry later, or the operator can raise %s.requests_per_minute", rl.route, rl.key, rl.lim.RequestsPerMinute, rl.key)
	}
	return tc, nil
}

// release gives back the in-flight place take took.
func (tc *tokenCount) release() { tc.inflight.Add(-1) }

// sweepShard forgets the tokens of sh with nothing in flight and their
// rate full again: they are as tokens never seen. The caller holds sh.mu.
func (rl *routeLimits) sweepShard(sh *limitShard, now time.Time) {
	for id, tc := range sh.m {
		if tc.inflight.Load() == 0 && tc.rate.TokensAt(now) >= float64(tc.rate.Burst()) {
			delete(sh.m, id)
		}
	}
}
