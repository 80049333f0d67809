// Package budget counts what each token spends against its budget: the
// requests, tokens, rate and concurrency its profile's budget allows. The
// proxy core asks it before a model request is sent (Acquire, then Hold)
// and tells it what the request used when its response ends (Settle).
// It also holds the bound on the connections the sandboxes hold open at
// once (ConnLimit, runtime.max_connections).
//
// It is part of cproxy's implementation, not an API for other programs: it
// changes with cproxy. Only client and helpers/sandboxenv are kept compatible
// (docs/architecture.md).
package budget

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/cproxy/cproxy/policy"
	"github.com/cproxy/cproxy/tokens"
)

// Budgets are kept per token and window in memory, and made durable ahead
// of use. Each model request reserves what it may spend before it is
// forwarded — one request, its max_tokens of output, and its body's size in
// bytes of each input kind (a token covers at least one byte of the text
// it encodes; what the upstream reads by URL or through tools it does not
// bound, see docs/policy.md) — and settles, when its response ends, to the
// usage the upstream reported (the core's meter charges what was reserved
// for a count it did not report). Reserving under one lock is what keeps
// concurrent requests from overspending.
//
// Durability is by lease: before a reservation takes an account past what
// the store already holds for it, the store is raised, ahead of need, to a
// new high-water mark (lease). A crash loses nothing it should charge: on
// restart the store's value, the lease, is what was spent — pessimistically.
// A clean stop saves the exact usage. Writes happen once per lease step
// (half a leaseParts-th of a limit), not per request. When a request
// settles, or a stream reports its input, for less than it held, a lease
// more than a leaseParts-th past what is spent and held is lowered (relet)
// in the same way, so a finished request's unspent max_tokens is not left
// for a crash to charge: a leaseParts-th is all a crash can charge beyond
// what was spent or held by requests in flight (which the upstream may
// well bill), kept small because crashes add up.
//
// Replicas sharing one store (shared, the store's tokens.SharedLimits)
// cannot count in memory: each would see only its own spending. They
// reserve and settle in the store itself, each in one atomic statement
// (ReserveUsage, AdjustUsage), so their spending adds up exactly, at one
// round trip to the store at each end of a request. What the store holds is then what was spent plus what
// requests in flight hold; a replica that dies with requests in flight
// leaves their reservations charged, an over-charge, never an under-charge.
// The default rate and concurrency limits (policy.DefaultConcurrent,
// DefaultRequestsPerMinute), for a budget that sets none, are counted in
// each process's memory: they bound what one process spends.
type Budgets struct {
	store tokens.Store
	// shared is the store's shared limits when other processes count in
	// the store too (PostgreSQL replicas): every reservation and settlement
	// is then made there, atomically, and nothing is counted in accts. Nil:
	// this process is the store's only user and counts in memory.
	shared tokens.SharedLimits
	log    *slog.Logger
	now    func() time.Time

	mu    sync.Mutex
	accts map[string]*account      // by usage key: token id, or id/day
	limit map[string]*tokenLimit   // by token id: rate and concurrency
	slots map[tokens.Slot]struct{} // shared: the in-flight slots this process holds, renewed by the flusher
	stop  chan struct{}
	done  chan struct{}
}

// account is one token's usage in one window.
type account struct {
	used     tokens.Usage // settled
	reserved tokens.Usage // held by requests in flight
	leased   tokens.Usage // what the store holds: what a crash charges
	saved    tokens.Usage // what was last written (to skip idle writes)
	lastUse  time.Time
	key      string // its usage key
	// gen counts the values decided for the store (a raise, a trim, a
	// flush): a flush that wrote while another was decided writes again.
	gen uint64
}

// tokenLimit is a token's rates and in-flight count.
type tokenLimit struct {
	rate     bucket // its requests
	calls    bucket // its MCP tool calls (budget mcp_calls_per_minute)
	inflight int64
}

// bucket is one rate of a token, counted in this process.
type bucket struct {
	limiter *rate.Limiter
	rpm     int64
}

// take takes one event at now from a rate of rpm a minute (made anew, full,
// when the bucket counted another rate), or returns how long until one
// would be there.
func (k *bucket) take(rpm int64, now time.Time) time.Duration {
	if k.limiter == nil || k.rpm != rpm {
		k.limiter = rate.NewLimiter(rate.Limit(float64(rpm)/60), int(min(rpm, math.MaxInt32)))
		k.rpm = rpm
	}
	r := k.limiter.ReserveN(now, 1)
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		return d
	}
	return 0
}

// full reports whether the bucket is as one never taken from.
func (k *bucket) full(now time.Time) bool {
	return k.limiter == nil || k.limiter.TokensAt(now) >= float64(k.limiter.Burst())
}

// New starts the budgets of store's tokens, and the flusher that saves
// their usage; shared is the store's shared limits when replicas share it
// (nil: this process is its only user and counts in memory). Close stops
// it.
func New(store tokens.Store, shared tokens.SharedLimits, log *slog.Logger, now func() time.Time) *Budgets {
	b := &Budgets{store: store, shared: shared, log: log, now: now, accts: map[string]*account{}, limit: map[string]*tokenLimit{},
		slots: map[tokens.Slot]struct{}{},
		stop:  make(chan struct{}), done: make(chan struct{})}
	go b.flushLoop()
	return b
}

// Token is whose budget a request spends.
type Token struct {
	// ID is the token's id: its accounts, rate and in-flight count are
	// kept under it.
	ID string
	// Sandbox is the token's sandbox, which refusals name.
	Sandbox string
	// Limits is what the token may spend: its profile's budget, with what
	// the token was minted with over it. Zero limits nothing but cproxy's
	// default rate and concurrency.
	Limits policy.Budget
}

// Reservation is one request's hold on its token's budget; Settle ends it.
// A nil Reservation holds nothing (a budget that limits nothing).
type Reservation struct {
	b    *Budgets
	acct *account    // nil: nothing metered here (rate or concurrency only, or shared)
	key  string      // shared: the usage key the store holds want under; "": not shared
	slot tokens.Slot // shared: the in-flight slot held in the store; 0: none
	tl   *tokenLimit
	want tokens.Usage
	once sync.Once
	tok  Token
	// past says Hold holds want whatever the window's limits are (HoldPast).
	past bool
	// settled is set when Settle ends the reservation.
	settled atomic.Bool
}

// Refusal is a request the budget does not pass: a limit it is over, or
// (Unavailable) a token store that failed, so that the budget cannot be
// counted. Its text is meant for the client, who is told it as is: it
// names the sandbox and the limit, never a token or credential.
type Refusal struct {
	// Unavailable says the token store failed; false: a limit is reached.
	Unavailable bool
	// Over says the limit reached is one of the window's (requests, the
	// token counts, mcp_calls), which HoldPast can hold past; false: the
	// rate, the concurrency, or the store.
	Over bool
	// RetryAfter is how long until retrying can succeed (the rate, the
	// window's end, a request in flight ending); zero: retrying will not
	// help.
	RetryAfter time.Duration
	msg        string
}

func (e *Refusal) Error() string { return e.msg }

// overLimit is the refusal of a request over a limit, with what was
// exhausted and, where waiting helps, when to retry.
func overLimit(retry time.Duration, format string, args ...any) error {
	return &Refusal{RetryAfter: retry, msg: fmt.Sprintf(format, args...)}
}

// reserve is Acquire and then Hold, for a request whose body is read.
func (b *Budgets) reserve(ctx context.Context, tok Token, want tokens.Usage, charged bool) (*Reservation, error) {
	res, err := b.Acquire(ctx, tok)
	if err != nil {
		return nil, err
	}
	if err := res.Hold(ctx, want, charged); err != nil {
		res.Settle(tokens.Usage{})
		return nil, err
	}
	return res, nil
}

// Acquire takes one of the token's in-flight slots and its place in the
// token's rate, or refuses (a *Refusal) before anything is sent. It runs
// when the request is authenticated, before its body is read: a request
// whose body is still arriving is in flight, so a sandbox cannot hold more
// than concurrent requests open by trickling their bodies.
func (b *Budgets) Acquire(ctx context.Context, tok Token) (*Reservation, error) {
	now := b.now()
	b.mu.Lock()
	res, err := b.admit(tok, now)
	b.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if b.shared != nil {
		if err := b.acquireShared(ctx, res); err != nil {
			res.Settle(tokens.Usage{})
			return nil, err
		}
	}
	return res, nil
}

// Hold reserves want (charged: a POST /v1/messages, or an MCP tool call)
// of the token's budget in res, once the request's body has been read, or
// refuses (a *Refusal). A want of MCP calls is first counted against the
// token's mcp_calls_per_minute.
func (res *Reservation) Hold(ctx context.Context, want tokens.Usage, charged bool) error {
	b, tok, lim := res.b, res.tok, res.tok.Limits
	if !charged {
		return nil
	}
	now := b.now()
	if want.MCPCalls > 0 && lim.MCPCallsPerMinute > 0 {
		if err := b.takeCall(res, now); err != nil {
			return err
		}
	}
	if !metered(lim) {
		return nil
	}
	if b.shared != nil {
		key, reset := usageWindow(tok.ID, lim.Window, now)
		limit := caps(limitsOf(lim, want))
		if res.past {
			limit = tokens.Usage{}
		}
		held, err := b.shared.ReserveUsage(ctx, key, want, limit)
		if err != nil {
			return b.refusal(err, tok, held, want, now, reset)
		}
		res.key, res.want = key, want
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.holdLocal(ctx, res, want, now)
}

// HoldPast is Hold for a request an operator let past its token's budget
// (docs/approvals.md): want is held, and charged as Hold's, even where it
// passes the window's limits.
func (res *Reservation) HoldPast(ctx context.Context, want tokens.Usage) error {
	res.past = true
	return res.Hold(ctx, want, true)
}

// Fits asks again, of lim, whether the request that holds res and wants
// want may spend it: lim is another budget than the one res was held
// under (a policy reload gave the token's profile another). What the
// token's window of lim holds, less what res holds itself, plus want, must
// fit it; a *Refusal, worded as Hold's, says which limit it passes. A
// request not charged asks nothing (want is zero), nor does one settled
// already. Rate and concurrency are not asked again: they admitted the
// request once, and bound new ones.
func (res *Reservation) Fits(ctx context.Context, lim policy.Budget, want tokens.Usage) error {
	if res == nil || res.settled.Load() || want == (tokens.Usage{}) || !metered(lim) {
		return nil
	}
	b, tok, now := res.b, res.tok, res.b.now()
	tok.Limits = lim
	key, reset := usageWindow(tok.ID, lim.Window, now)
	var held tokens.Usage
	if b.shared != nil {
		// The store holds what was spent and what requests in flight hold.
		u, err := b.store.LoadUsage(ctx, key)
		if err != nil {
			return b.storeFailed(err, tok)
		}
		held = u
		if res.key == key {
			held = held.Sub(res.want)
		}
	} else {
		b.mu.Lock()
		defer b.mu.Unlock()
		acct, err := b.load(ctx, key)
		if err != nil {
			return b.storeFailed(err, tok)
		}
		held = acct.used.Add(acct.reserved)
		if res.acct == acct {
			held = held.Sub(res.want)
		}
	}
	if !held.Add(want).Fits(caps(limitsOf(lim, want))) {
		return b.refusal(tokens.ErrOverBudget, tok, held, want, now, reset)
	}
	return nil
}

// acquireShared is acquire for replicas sharing the store: the token's
// in-flight slots and its rate, where lim sets them, are counted in the
// store, outside b.mu (which would otherwise hold every request behind a
// database round trip). On an error the caller settles res, which frees
// what it holds.
func (b *Budgets) acquireShared(ctx context.Context, res *Reservation) error {
	tok, lim := res.tok, res.tok.Limits
	if lim.Concurrent > 0 {
		slot, err := b.shared.AcquireSlot(ctx, tok.ID, lim.Concurrent, slotLease)
		if errors.Is(err, tokens.ErrOverBudget) {
			return inFlightError(tok, lim.Concurrent, lim.Concurrent, lim.Concurrent)
		}
		if err != nil {
			return b.storeFailed(err, tok)
		}
		res.slot = slot
		b.mu.Lock()
		b.slots[slot] = struct{}{}
		b.mu.Unlock()
	}
	if lim.RequestsPerMinute > 0 {
		wait, err := b.shared.TakeRate(ctx, tok.ID, lim.RequestsPerMinute)
		if err != nil {
			return b.storeFailed(err, tok)
		}
		if wait > 0 {
			return rateError(tok, wait, lim.RequestsPerMinute, lim.RequestsPerMinute)
		}
	}
	return nil
}

// takeCall counts an MCP tool call against the token's
// mcp_calls_per_minute, in this process's memory also when replicas share
// the store, as each MCP server's requests_per_minute is: it bounds what
// one process forwards.
func (b *Budgets) takeCall(res *Reservation, now time.Time) error {
	tok, rpm := res.tok, res.tok.Limits.MCPCallsPerMinute
	b.mu.Lock()
	wait := res.tl.calls.take(rpm, now)
	b.mu.Unlock()
	if wait > 0 {
		return overLimit(wait, "sandbox %s's token is over its rate of MCP tool calls (budget mcp_calls_per_minute = %d); retry after %ds", tok.Sandbox, rpm, RetrySeconds(wait))
	}
	return nil
}

// slotLease is how long a replica's in-flight slot outlives the replica:
// the flusher renews every slot it holds each flushEvery, well inside it.
const slotLease = 30 * time.Second

// inFlightError refuses a request over the token's concurrency limit;
// set is what the budget sets (0: limit is cproxy's default).
func inFlightError(tok Token, n, limit, set int64) error {
	return overLimit(time.Second, "%d requests of sandbox %s's token are in flight, its limit (budget concurrent = %d%s); retry when one ends", n, tok.Sandbox, limit, defaultNote(set))
}

// rateError refuses a request over the token's rate, rpm requests a
// minute; set is what the budget sets (0: rpm is cproxy's default).
func rateError(tok Token, wait time.Duration, rpm, set int64) error {
	return overLimit(wait, "sandbox %s's token is over its rate (budget requests_per_minute = %d%s); retry after %ds", tok.Sandbox, rpm, defaultNote(set), RetrySeconds(wait))
}

// defaultNote says, in a refusal, that the limit is cproxy's default (the
// budget left it out, set is 0) and how to change it.
func defaultNote(set int64) string {
	if set != 0 {
		return ""
	}
	return ", cproxy's default when the profile's budget sets none; the operator can set another"
}

// admit applies the token's rate and concurrency limits and takes one of
// its in-flight slots; the caller holds b.mu. A limit tok.Limits leaves
// out is cproxy's default (policy.DefaultConcurrent,
// DefaultRequestsPerMinute), counted here, in this process, even when the
// store is shared; one it sets is counted here unless the store is shared
// (acquireShared counts it there).
func (b *Budgets) admit(tok Token, now time.Time) (*Reservation, error) {
	lim := tok.Limits
	concurrent, rpm := lim.Concurrent, lim.RequestsPerMinute
	if b.shared != nil {
		concurrent, rpm = 0, 0
	}
	if lim.Concurrent == 0 {
		concurrent = policy.DefaultConcurrent
	}
	if lim.RequestsPerMinute == 0 {
		rpm = policy.DefaultRequestsPerMinute
	}
	tl := b.limit[tok.ID]
	if tl == nil {
		tl = &tokenLimit{}
		b.limit[tok.ID] = tl
	}
	if concurrent > 0 && tl.inflight >= concurrent {
		return nil, inFlightError(tok, tl.inflight, concurrent, lim.Concurrent)
	}
	if rpm > 0 {
		if d := tl.rate.take(rpm, now); d > 0 {
			return nil, rateError(tok, d, rpm, lim.RequestsPerMinute)
		}
	}
	tl.inflight++
	return &Reservation{b: b, tl: tl, tok: tok}, nil
}

// holdLocal reserves want in this process's account of the window, raising
// the stored lease ahead of it; the caller holds b.mu.
func (b *Budgets) holdLocal(ctx context.Context, res *Reservation, want tokens.Usage, now time.Time) error {
	tok, lim := res.tok, res.tok.Limits
	key, reset := usageWindow(tok.ID, lim.Window, now)
	acct, err := b.load(ctx, key)
	if err != nil {
		return b.refusal(err, tok, tokens.Usage{}, want, now, reset)
	}
	held := acct.used.Add(acct.reserved)
	if !res.past && !held.Add(want).Fits(caps(limitsOf(lim, want))) {
		return b.refusal(tokens.ErrOverBudget, tok, held, want, now, reset)
	}
	if lease, raise := leaseFor(acct.leased, held.Add(want), lim); raise {
		if err := b.store.SaveUsage(ctx, key, lease); err != nil {
			return b.refusal(err, tok, held, want, now, reset)
		}
		acct.leased, acct.saved = lease, lease
		acct.gen++
	}
	acct.reserved = acct.reserved.Add(want)
	acct.lastUse = now
	res.acct, res.want = acct, want
	return nil
}

// refusal is the answer to a reservation the budget or the store refused:
// over a limit, naming what is exhausted (held is what the window holds),
// or the store failed.
func (b *Budgets) refusal(err error, tok Token, held, want tokens.Usage, now, reset time.Time) error {
	if !errors.Is(err, tokens.ErrOverBudget) {
		return b.storeFailed(err, tok)
	}
	retry := time.Duration(0)
	if !reset.IsZero() {
		retry = reset.Sub(now)
	}
	msg := fmt.Sprintf("sandbox %s's token is over its budget: %s", tok.Sandbox, overBudget(held, want, limitsOf(tok.Limits, want)))
	switch {
	case want.MCPCalls == 0:
		// A model client reads Retry-After; an MCP client shows the
		// message alone, which says what to do.
	case retry > 0:
		msg += fmt.Sprintf("; the day's calls start again at midnight UTC, in %ds", RetrySeconds(retry))
	default:
		msg += "; they are spent for the token's lifetime: the sandbox needs a new token, or the operator a higher budget mcp_calls"
	}
	return &Refusal{Over: true, RetryAfter: retry, msg: msg}
}

// limitsOf is lim with only the limits a request wanting want is held to:
// an MCP tool call's mcp_calls, a model request's the others, so that
// neither is refused for what the other spent.
func limitsOf(lim policy.Budget, want tokens.Usage) policy.Budget {
	if want.MCPCalls > 0 {
		return policy.Budget{Window: lim.Window, MCPCalls: lim.MCPCalls}
	}
	lim.MCPCalls = 0
	return lim
}

// storeFailed logs a token store failure on the budget's path and is the
// refusal (Unavailable) of the request: a budget that cannot be counted is
// not passed.
func (b *Budgets) storeFailed(err error, tok Token) error {
	b.log.Error("budget: the token store failed", "token_id", tok.ID, "err", err)
	return &Refusal{Unavailable: true, msg: fmt.Sprintf("the budget of sandbox %s's token cannot be read or recorded (token store unavailable); try again later", tok.Sandbox)}
}

// caps is what lim caps per window, as a usage (zero: no cap).
func caps(lim policy.Budget) tokens.Usage {
	return tokens.Usage{Requests: lim.Requests, Input: lim.InputTokens, Output: lim.OutputTokens,
		CacheRead: lim.CacheReadTokens, CacheWrite: lim.CacheWriteTokens, MCPCalls: lim.MCPCalls}
}

// Settle ends the reservation with what the request is charged (the
// meter's: nothing for a request that never reached the upstream). It returns the
// window's usage after it, and false when nothing is metered (or, shared,
// when the store could not be told: the window then keeps what the
// reservation held, an over-charge, never an under-charge).
func (r *Reservation) Settle(used tokens.Usage) (total tokens.Usage, metered bool) {
	if r == nil {
		return tokens.Usage{}, false
	}
	r.once.Do(func() {
		r.settled.Store(true)
		if r.tl != nil { // counted in this process (admit, holdLocal)
			r.b.mu.Lock()
			r.tl.inflight--
			if r.acct != nil {
				r.acct.reserved = r.acct.reserved.Sub(r.want)
				r.acct.used = r.acct.used.Add(used)
				total, metered = r.acct.used, true
				r.b.relet(r.acct, r.tok.Limits)
			}
			r.b.mu.Unlock()
		}
		if r.key != "" {
			var err error
			total, err = r.b.shared.AdjustUsage(context.Background(), r.key, used.Sub(r.want))
			if err != nil {
				r.b.log.Error("budget: settling a request in the token store failed; its reservation stays charged", "key", r.key, "err", err)
			}
			metered = err == nil
		}
		r.release()
	})
	return total, metered
}

// InputKnown replaces what the reservation holds of the input kinds (input,
// cache read, cache write) with what the upstream reported of them, before
// the request settles: a stream reports its input with its first event,
// long before it ends. From then on a crash charges that, not the body's
// size. Replicas sharing the store keep the body's size held until the
// request settles (one round trip to the store less per stream).
func (r *Reservation) InputKnown(u tokens.Usage) {
	if r == nil || r.acct == nil {
		return
	}
	r.b.mu.Lock()
	defer r.b.mu.Unlock()
	if r.settled.Load() {
		return
	}
	want := r.want
	want.Input, want.CacheRead, want.CacheWrite = u.Input, u.CacheRead, u.CacheWrite
	r.acct.reserved = r.acct.reserved.Sub(r.want).Add(want)
	r.want = want
	r.b.relet(r.acct, r.tok.Limits)
}

// relet brings what the store holds for a, after what it needs (spent and
// held) changed, back within a lease of it: raised to cover more than it
// holds, or lowered when it holds more than a leaseParts-th of a limit
// past need (a request that settled for less than it held), so that a
// crash charges at most that much past what was spent or held. It writes
// only then: requests that each hold a small part of their limits settle
// with no write. The caller holds b.mu, as holdLocal does for its raise,
// so the store's writes follow the order they are decided in. A write that
// fails is logged and leaves what the store had: lowered, an over-charge
// on a crash; raised, the flusher writes it next.
func (b *Budgets) relet(a *account, lim policy.Budget) {
	need := a.used.Add(a.reserved)
	lease, raise := leaseFor(a.leased, need, lim)
	lease, trim := trimLease(lease, need, lim)
	if !raise && !trim {
		return
	}
	if err := b.store.SaveUsage(context.Background(), a.key, lease); err != nil {
		b.log.Error("budget: saving usage to the token store failed", "key", a.key, "err", err)
		return
	}
	a.leased, a.saved = lease, lease
	a.gen++
}

// release frees the reservation's shared in-flight slot, if it holds one.
// A slot the store could not free is freed by its lease running out.
func (r *Reservation) release() {
	if r.slot == 0 {
		return
	}
	r.b.mu.Lock()
	delete(r.b.slots, r.slot)
	r.b.mu.Unlock()
	if err := r.b.shared.ReleaseSlot(context.Background(), r.slot); err != nil {
		r.b.log.Error("budget: freeing an in-flight slot in the token store failed; its lease frees it", "err", err)
	}
	r.slot = 0
}

// Remaining is what lim leaves of each kind after used, for the budget
// gauge (metrics' SetBudgetRemaining, whose order of kinds it follows):
// -1 for a kind lim does not limit.
func Remaining(lim policy.Budget, used tokens.Usage) [6]int64 {
	left := [6]int64{}
	for i, x := range [6]struct{ limit, used int64 }{{lim.Requests, used.Requests}, {lim.InputTokens, used.Input},
		{lim.OutputTokens, used.Output}, {lim.CacheReadTokens, used.CacheRead}, {lim.CacheWriteTokens, used.CacheWrite},
		{lim.MCPCalls, used.MCPCalls}} {
		left[i] = -1
		if x.limit > 0 {
			left[i] = max(0, x.limit-x.used)
		}
	}
	return left
}

// load returns the account under key, reading it from the store the first
// time: what the store holds is what was spent (a lease, after a crash).
func (b *Budgets) load(ctx context.Context, key string) (*account, error) {
	if a := b.accts[key]; a != nil {
		return a, nil
	}
	u, err := b.store.LoadUsage(ctx, key)
	if err != nil {
		return nil, err
	}
	a := &account{used: u, leased: u, saved: u, key: key}
	b.accts[key] = a
	return a, nil
}

// Usage is what token id has spent in its current window of lim, for
// listings; false when lim meters nothing (or the store cannot say).
func (b *Budgets) Usage(ctx context.Context, id string, lim policy.Budget) (tokens.Usage, bool) {
	if !metered(lim) {
		return tokens.Usage{}, false
	}
	key, _ := usageWindow(id, lim.Window, b.now())
	b.mu.Lock()
	defer b.mu.Unlock()
	if a := b.accts[key]; a != nil {
		return a.used, true
	}
	u, err := b.store.LoadUsage(ctx, key)
	return u, err == nil
}

// metered reports whether lim caps anything that is counted per window.
func metered(lim policy.Budget) bool {
	return lim.Requests > 0 || lim.InputTokens > 0 || lim.OutputTokens > 0 || lim.CacheReadTokens > 0 || lim.CacheWriteTokens > 0 ||
		lim.MCPCalls > 0
}

// usageWindow is the usage key of token id's current window, and when the
// window resets (zero for the token's lifetime).
func usageWindow(id, window string, now time.Time) (string, time.Time) {
	if window != policy.WindowDay {
		return tokens.UsageKey(id, ""), time.Time{}
	}
	day := now.UTC()
	next := time.Date(day.Year(), day.Month(), day.Day()+1, 0, 0, 0, 0, time.UTC)
	return tokens.UsageKey(id, day.Format("2006-01-02")), next
}

// overBudget says which limit used plus want would pass, or "".
func overBudget(used, want tokens.Usage, lim policy.Budget) string {
	var over []string
	check := func(name string, limit, u, w int64, why string) {
		if limit > 0 && u+w > limit {
			over = append(over, fmt.Sprintf("%s: %d of %d used or held by requests in flight, and this request may use %d%s", name, u, limit, w, why))
		}
	}
	check("requests", lim.Requests, used.Requests, want.Requests, "")
	check("output_tokens", lim.OutputTokens, used.Output, want.Output, " (its max_tokens; a lower max_tokens may fit)")
	check("input_tokens", lim.InputTokens, used.Input, want.Input, " (its body's size in bytes, an upper bound)")
	check("cache_read_tokens", lim.CacheReadTokens, used.CacheRead, want.CacheRead, " (its body's size in bytes, an upper bound)")
	check("cache_write_tokens", lim.CacheWriteTokens, used.CacheWrite, want.CacheWrite, " (its body's size in bytes, an upper bound)")
	check("mcp_calls", lim.MCPCalls, used.MCPCalls, want.MCPCalls, " (MCP tool calls, every server together)")
	return strings.Join(over, "; ")
}

// leaseParts bounds what a crash can charge: a leaseParts-th of each limit
// (at least 1) more than was spent or held by requests in flight. Each
// raise of the lease leases half that ahead of need (leaseStep), and a
// lease more than that past need is lowered to a step past it (trimLease).
// So a window's account is written about two thousand times per limited
// kind as it is spent, plus twice for a request that holds more than half
// a thousandth of a limit it does not spend (a raise at its hold, a trim
// at its end); twenty crashes cost a 1,000,000-request budget at most
// 20,000 requests.
const leaseParts = 1000

// leaseStep is how far ahead of need a lease is raised: half a
// leaseParts-th of limit, at least 1.
func leaseStep(limit int64) int64 { return max(limit/(2*leaseParts), 1) }

// leaseFor is the lease that covers need, a leaseStep of each limit
// ahead, and whether it is higher than the one the store holds.
func leaseFor(leased, need tokens.Usage, lim policy.Budget) (tokens.Usage, bool) {
	raise := false
	step := func(l *int64, n, limit int64) {
		if limit <= 0 || n <= *l {
			return
		}
		*l = min(limit, n+leaseStep(limit))
		if *l < n {
			*l = n
		}
		raise = true
	}
	out := leased
	eachKind(&out, need, lim, step)
	return out, raise
}

// eachKind calls f with each kind's count in u, need's count of it and
// lim's limit of it.
func eachKind(u *tokens.Usage, need tokens.Usage, lim policy.Budget, f func(l *int64, n, limit int64)) {
	f(&u.Requests, need.Requests, lim.Requests)
	f(&u.Input, need.Input, lim.InputTokens)
	f(&u.Output, need.Output, lim.OutputTokens)
	f(&u.CacheRead, need.CacheRead, lim.CacheReadTokens)
	f(&u.CacheWrite, need.CacheWrite, lim.CacheWriteTokens)
	f(&u.MCPCalls, need.MCPCalls, lim.MCPCalls)
}

// trimLease is leased lowered to a leaseStep past need for each limit it
// passes need by more than a leaseParts-th of (at least 1), and to need
// itself for a kind no limit leases; and whether it lowered any.
func trimLease(leased, need tokens.Usage, lim policy.Budget) (tokens.Usage, bool) {
	lower := false
	trim := func(l *int64, n, limit int64) {
		switch {
		case limit <= 0 && *l > n:
			*l = n
		case limit > 0 && *l-n > max(limit/leaseParts, 1):
			*l = max(n, min(limit, n+leaseStep(limit)))
		default:
			return
		}
		lower = true
	}
	out := leased
	eachKind(&out, need, lim, trim)
	return out, lower
}

// flushLoop saves each account's usage now and then: what the store holds
// never drops below the lease (a crash must still charge it), but it
// follows the settled usage up where no limit leases it, so a restart shows
// what was spent.
func (b *Budgets) flushLoop() {
	defer close(b.done)
	t := time.NewTicker(flushEvery)
	defer t.Stop()
	for {
		select {
		case <-b.stop:
			return
		case <-t.C:
			b.flush(false)
			if b.shared != nil {
				b.renewSlots()
			}
		}
	}
}

// flushEvery is how often the flusher saves usage and renews slots.
const flushEvery = 5 * time.Second

// renewSlots extends the lease of every shared in-flight slot this process
// holds, so that only a process that stops renewing (one that died) has
// its slots freed under requests still in flight.
func (b *Budgets) renewSlots() {
	b.mu.Lock()
	held := make([]tokens.Slot, 0, len(b.slots))
	for s := range b.slots {
		held = append(held, s)
	}
	b.mu.Unlock()
	if err := b.shared.RenewSlots(context.Background(), held, slotLease); err != nil {
		b.log.Error("budget: renewing in-flight slots in the token store failed", "slots", len(held), "err", err)
	}
}

// flush writes the accounts whose usage moved; exact (clean stop) writes
// the settled usage itself, with nothing in flight.
func (b *Budgets) flush(exact bool) {
	b.mu.Lock()
	type write struct {
		a   *account
		u   tokens.Usage
		gen uint64
	}
	var writes []write
	now := b.now()
	for key, a := range b.accts {
		u := maxUsage(a.used.Add(a.reserved), a.leased)
		if exact && a.reserved == (tokens.Usage{}) {
			u = a.used
		}
		if u != a.saved {
			a.saved = u
			if !exact {
				a.leased = maxUsage(a.leased, u)
			}
			a.gen++
			writes = append(writes, write{a, u, a.gen})
		}
		if a.reserved == (tokens.Usage{}) && now.Sub(a.lastUse) > 48*time.Hour {
			delete(b.accts, key)
		}
	}
	// Every token that made a model request has a rate and a count: one
	// with nothing in flight and a full rate bucket is as good as none.
	for id, tl := range b.limit {
		if tl.inflight == 0 && tl.rate.full(now) && tl.calls.full(now) {
			delete(b.limit, id)
		}
	}
	b.mu.Unlock()
	for len(writes) > 0 {
		for _, w := range writes {
			if err := b.store.SaveUsage(context.Background(), w.a.key, w.u); err != nil {
				b.log.Error("budget: saving usage to the token store failed", "key", w.a.key, "err", err)
			}
		}
		// A raise or trim decided (and written, under b.mu) while these
		// were written may have landed first: the store must end on the
		// last value decided, so write that again.
		b.mu.Lock()
		again := writes[:0]
		for _, w := range writes {
			if w.a.gen != w.gen && b.accts[w.a.key] == w.a {
				again = append(again, write{w.a, w.a.saved, w.a.gen})
			}
		}
		b.mu.Unlock()
		writes = again
	}
}

// Forget drops what is in memory of recs' tokens, which the store pruned,
// so that the flusher does not write their usage back.
func (b *Budgets) Forget(recs []tokens.Record) {
	if len(recs) == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	gone := make(map[string]bool, len(recs))
	for _, r := range recs {
		gone[r.ID] = true
		delete(b.limit, r.ID)
	}
	for key := range b.accts {
		// A usage key is the token id, or the id and "/DAY".
		if id, _, _ := strings.Cut(key, "/"); gone[id] {
			delete(b.accts, key)
		}
	}
}

// Close stops the flusher and saves the exact usage; after the first, a
// Close does nothing.
func (b *Budgets) Close() {
	select {
	case <-b.stop:
		return
	default:
	}
	close(b.stop)
	<-b.done
	b.flush(true)
}

func maxUsage(a, c tokens.Usage) tokens.Usage {
	return tokens.Usage{Requests: max(a.Requests, c.Requests), Input: max(a.Input, c.Input), Output: max(a.Output, c.Output),
		CacheRead: max(a.CacheRead, c.CacheRead), CacheWrite: max(a.CacheWrite, c.CacheWrite), MCPCalls: max(a.MCPCalls, c.MCPCalls)}
}

// RetrySeconds rounds a wait up to whole seconds, at least 1, as
// Retry-After and the refusals say it.
func RetrySeconds(d time.Duration) int64 {
	return max(1, int64(math.Ceil(d.Seconds())))
}
