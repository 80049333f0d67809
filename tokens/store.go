package tokens

import (
	"context"
	"encoding/json"
	"errors"
	"time"
)

// Record is what the store knows about one token. It never holds the token itself.
type Record struct {
	// ID is Hash.ID() of the token; the store fills it in on Create.
	ID string `json:"id"`
	// Sandbox is the sandbox the token was issued to; it must satisfy ValidSandboxID.
	Sandbox string `json:"sandbox"`
	// Profile names the policy profile the token is bound to. Empty: the policy's sandbox rules choose one at
	// request time.
	Profile string `json:"profile,omitempty"`
	// Source is the address or CIDR prefix ("10.20.30.5", "10.20.0.0/16") the token is accepted from, on top of
	// its profile's sources. Empty: wherever its profile allows.
	Source string `json:"source,omitempty"`
	// Bind is "socket" for a token valid only on its sandbox's own Unix socket. Empty: on any proxy listener its
	// profile allows.
	Bind      string    `json:"bind,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	// ExpiresAt is when the token stops working. Zero: it never worked, so a forgotten TTL fails closed.
	ExpiresAt time.Time `json:"expires_at"`
	// RevokedAt is when the token was revoked. Zero: live.
	RevokedAt time.Time `json:"revoked_at,omitzero"`
	// Values are the token's per-token values (relay headers), sealed with
	// the token itself (SealValues): the store cannot read them. Nil: none.
	Values []byte `json:"values,omitempty"`
	// Budget overrides the profile's budget for this token: a JSON object of
	// the policy's budget keys, kept as given (tokens does not know the
	// policy's types). Nil: the profile's.
	Budget json.RawMessage `json:"budget,omitempty"`
}

// Usage is what a token has spent in one budget window: model requests,
// the model's input, output, cache-read and cache-write tokens, and MCP
// tool calls.
type Usage struct {
	Requests   int64 `json:"requests"`
	Input      int64 `json:"input_tokens"`
	Output     int64 `json:"output_tokens"`
	CacheRead  int64 `json:"cache_read_tokens"`
	CacheWrite int64 `json:"cache_write_tokens"`
	// MCPCalls are tools/call requests forwarded to MCP servers. A usage
	// saved before they were counted reads as zero.
	MCPCalls int64 `json:"mcp_calls,omitempty"`
}

// Add returns u plus v.
func (u Usage) Add(v Usage) Usage {
	return Usage{u.Requests + v.Requests, u.Input + v.Input, u.Output + v.Output, u.CacheRead + v.CacheRead, u.CacheWrite + v.CacheWrite,
		u.MCPCalls + v.MCPCalls}
}

// Sub returns u minus v.
func (u Usage) Sub(v Usage) Usage {
	return Usage{u.Requests - v.Requests, u.Input - v.Input, u.Output - v.Output, u.CacheRead - v.CacheRead, u.CacheWrite - v.CacheWrite,
		u.MCPCalls - v.MCPCalls}
}

// UsageKey is where the usage of token id in a budget window is kept:
// "tok_…" for the token's lifetime, "tok_…/2026-11-30" for one UTC day.
func UsageKey(id, day string) string {
	if day == "" {
		return id
	}
	return id + "/" + day
}

// Check returns nil, ErrRevoked or ErrExpired (at or after ExpiresAt) for the record at time now. Revocation wins
// over expiry so that the harness's explicit decision is what a caller reports.
func (r Record) Check(now time.Time) error {
	if !r.RevokedAt.IsZero() {
		return ErrRevoked
	}
	if !now.Before(r.ExpiresAt) {
		return ErrExpired
	}
	return nil
}

// Store keeps token hashes, their records and their usage: what every store, embedded or shared by replicas,
// holds. Implementations must be safe for concurrent use.
//
// Lookup runs on every proxied request, so implementations keep it cheap, and they do not cache what another
// process may change: a revocation must take effect on the very next request. (PostgresCache is the one opt-in
// exception; see there.)
type Store interface {
	// Create stores r under h, with r.ID set to h.ID(). It fails if h already exists or r.Sandbox is not a valid
	// sandbox id, which would break the per-sandbox index.
	Create(ctx context.Context, h Hash, r Record) error
	// Lookup returns ErrNotFound if h is absent. It does not check revocation or expiry; callers use Record.Check,
	// so they can tell the three apart.
	Lookup(ctx context.Context, h Hash) (Record, error)
	// RevokeSandbox marks every live token of sandbox revoked at at and returns how many it marked. The change is
	// durable before it returns, so the harness can rely on it once the admin call answers.
	RevokeSandbox(ctx context.Context, sandbox string, at time.Time) (int, error)
	// RevokeToken marks the token whose ID is id revoked at at, unless it already is, and returns its record as
	// it is then: an already revoked token keeps its first RevokedAt. It returns ErrNotFound when no token has
	// that ID (never minted, or pruned). Should two tokens share the ID (their hashes' first six bytes), both are
	// revoked and returned. The change is durable before it returns, as RevokeSandbox's is.
	RevokeToken(ctx context.Context, id string, at time.Time) ([]Record, error)
	// List returns one page of the records q asks for, in ID order (see ListQuery), reading no more of the
	// store than it must to fill the page. An After that is not an ID is refused with ErrBadCursor. Walk
	// calls it for every page.
	List(ctx context.Context, q ListQuery) (Page, error)
	// LoadUsage returns the usage saved under key (see UsageKey); zero when there is none.
	LoadUsage(ctx context.Context, key string) (Usage, error)
	// SaveUsage stores u under key. The change is durable before it returns.
	SaveUsage(ctx context.Context, key string, u Usage) error
	// Prune deletes at most limit tokens that died (Record.DeadSince) at or before cutoff, each with everything
	// kept under its id (its usage in every window and, in a store with SharedLimits, its rate and its slots), in
	// one transaction, and returns their records: fewer than limit when no more are left. It touches nothing of
	// any other token. When another process sharing the store is pruning it, it returns ErrPruneBusy and deletes
	// nothing.
	Prune(ctx context.Context, cutoff time.Time, limit int) ([]Record, error)
	// Prunable returns how many tokens Prune with cutoff would delete, and at most limit of them (which ones is
	// up to the store), sorted by CreatedAt then ID. It changes nothing.
	Prunable(ctx context.Context, cutoff time.Time, limit int) (int, []Record, error)
	// MCPPins keeps the MCP route's tool pins, so that every replica on the store holds a tool to the same
	// definition.
	MCPPins
	// Approvals keeps the requests that need an operator's approval and the grants approving them makes, so
	// that a grant made through one replica is used, once, through any.
	Approvals
	Close() error
}

// SharedLimits counts budgets, rates and in-flight requests in a store that several processes use at once
// (replicas on one PostgreSQL database), each in one atomic step, so that what the processes spend adds up
// exactly. A store one process holds (the embedded store, whose file is locked to its process) has none: that
// process counts them in its own memory, which is all there is to share.
type SharedLimits interface {
	// ReserveUsage adds want to the usage under key if, for every kind limit caps (a non-zero count), the sum
	// stays within the cap; in one atomic step, so that reservations made at once, by any number of processes
	// sharing the store, never pass a cap together. It returns the usage under key after it, or, with
	// ErrOverBudget, the usage as it is (unchanged). Durable before it returns.
	ReserveUsage(ctx context.Context, key string, want, limit Usage) (Usage, error)
	// AdjustUsage adds delta, whose counts may be negative (a reservation settled below what it held), to the
	// usage under key, atomically, never taking a count below zero, and returns the usage after it. Durable
	// before it returns.
	AdjustUsage(ctx context.Context, key string, delta Usage) (Usage, error)
	// TakeRate admits one event under key if its rate allows: perMinute events a minute, up to perMinute of them
	// at once (a bucket of perMinute, full at first, refilled at perMinute a minute), counted atomically across
	// every process sharing the store. It returns zero when the event is admitted, else how long until one would
	// be (nothing is taken then).
	TakeRate(ctx context.Context, key string, perMinute int64) (time.Duration, error)
	// AcquireSlot takes one of limit slots under key, atomically across every process sharing the store, or
	// returns ErrOverBudget when all are taken. A slot is held until ReleaseSlot, or until lease passes without
	// RenewSlots: a process that dies holding slots frees them within lease.
	AcquireSlot(ctx context.Context, key string, limit int64, lease time.Duration) (Slot, error)
	// RenewSlots extends the lease of each slot still held to lease from now.
	RenewSlots(ctx context.Context, slots []Slot, lease time.Duration) error
	// ReleaseSlot frees slot; releasing a slot that expired is not an error.
	ReleaseSlot(ctx context.Context, slot Slot) error
}

// Slot is one slot AcquireSlot took.
type Slot int64

// ErrOverBudget is ReserveUsage's and AcquireSlot's refusal: the
// reservation would take a count past its cap, or every slot is taken.
var ErrOverBudget = errors.New("over budget")

// Fits reports whether u stays within every cap limit sets (a zero count
// caps nothing).
func (u Usage) Fits(limit Usage) bool {
	ok := func(n, l int64) bool { return l <= 0 || n <= l }
	return ok(u.Requests, limit.Requests) && ok(u.Input, limit.Input) && ok(u.Output, limit.Output) &&
		ok(u.CacheRead, limit.CacheRead) && ok(u.CacheWrite, limit.CacheWrite) && ok(u.MCPCalls, limit.MCPCalls)
}

// floor returns u with every negative count raised to zero.
func (u Usage) floor() Usage {
	return Usage{max(u.Requests, 0), max(u.Input, 0), max(u.Output, 0), max(u.CacheRead, 0), max(u.CacheWrite, 0), max(u.MCPCalls, 0)}
}

// checkRevoke refuses a RevokeSandbox that every store would refuse: a
// done context, an invalid sandbox id, or a zero time (which reads as live,
// so it would silently revoke nothing).
func checkRevoke(ctx context.Context, sandbox string, at time.Time) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if !ValidSandboxID(sandbox) {
		return errors.New("revoke tokens: invalid sandbox id")
	}
	if at.IsZero() {
		return errors.New("revoke tokens: zero revocation time")
	}
	return nil
}

// checkRevokeToken refuses a RevokeToken that every store would refuse: a done context, an id that no token can
// have, or a zero time.
func checkRevokeToken(ctx context.Context, id string, at time.Time) (first, last Hash, err error) {
	if err := ctx.Err(); err != nil {
		return Hash{}, Hash{}, err
	}
	first, last, ok := idRange(id)
	if !ok {
		return Hash{}, Hash{}, errors.New("revoke token: invalid token id")
	}
	if at.IsZero() {
		return Hash{}, Hash{}, errors.New("revoke token: zero revocation time")
	}
	return first, last, nil
}
