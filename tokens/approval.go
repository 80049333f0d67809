package tokens

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"regexp"
	"slices"
	"strings"
	"time"
)

// The states of an Approval. A pending request is approved or denied by an
// operator; an approved one is a grant its request's retry uses once. A
// pending request or an approved grant past its ExpiresAt is expired
// (Approval.StateAt), whether or not the store has written so yet.
const (
	ApprovalPending  = "pending"
	ApprovalApproved = "approved"
	ApprovalDenied   = "denied"
	ApprovalUsed     = "used"
	ApprovalExpired  = "expired"
)

// Approval is a request that the policy lets through only with an
// operator's approval (a rule's ask), and, once approved, the single-use
// grant for exactly that request. It never holds a token or credential.
type Approval struct {
	// ID is "apr_" and 16 hex digits (NewApprovalID).
	ID      string `json:"id"`
	Sandbox string `json:"sandbox"`
	// Route is the route that asked ("github").
	Route string `json:"route"`
	// Subject is exactly what was asked, as the route words it: a grant is
	// used only by a request of the same sandbox and route whose subject
	// is the same, byte for byte.
	Subject string `json:"subject"`
	// Detail is the route's account of the request, a JSON object
	// (repository, refs with their old and new object ids), for the
	// operator and the webhook. Nil: none.
	Detail json.RawMessage `json:"detail,omitempty"`
	// TokenID is the id of the token whose request asked.
	TokenID string `json:"token_id,omitempty"`
	// State is the state the store last wrote (StateAt tells the state
	// at a time).
	State     string    `json:"state"`
	CreatedAt time.Time `json:"created_at"`
	// ExpiresAt is when a pending request lapses, and, once approved, when
	// the grant does; a denial stands until it.
	ExpiresAt time.Time `json:"expires_at"`
	// DecidedAt is when it was approved or denied, DecidedBy by whom as
	// the operator said (empty: not said). Zero and empty: undecided.
	DecidedAt time.Time `json:"decided_at,omitzero"`
	DecidedBy string    `json:"decided_by,omitempty"`
	// UsedAt is when the grant was used. Zero: not used.
	UsedAt time.Time `json:"used_at,omitzero"`
}

// StateAt is the approval's state at now: State, except that a pending
// request or an approved grant at or past ExpiresAt is expired.
func (a Approval) StateAt(now time.Time) string {
	if (a.State == ApprovalPending || a.State == ApprovalApproved) && !now.Before(a.ExpiresAt) {
		return ApprovalExpired
	}
	return a.State
}

// live reports whether a is the approval a request of its subject is
// answered with at now: pending, approved and not yet used, or denied,
// before its ExpiresAt (a denial stands for as long as the request would
// have waited, so that retrying does not ask again at once).
func (a Approval) live(now time.Time) bool {
	return (a.State == ApprovalPending || a.State == ApprovalApproved || a.State == ApprovalDenied) && now.Before(a.ExpiresAt)
}

var approvalIDRE = regexp.MustCompile(`^apr_[0-9a-f]{16}$`)

// ValidApprovalID reports whether id has an approval id's form.
func ValidApprovalID(id string) bool { return approvalIDRE.MatchString(id) }

// NewApprovalID returns a random approval id.
func NewApprovalID() string {
	var b [8]byte
	rand.Read(b[:])
	return "apr_" + hex.EncodeToString(b[:])
}

// ErrNotPending is DecideApproval's refusal of an approval that is no
// longer waiting for a decision: approved, denied, used or expired.
var ErrNotPending = errors.New("approval is not pending")

// ErrNoGrant is UseGrant's answer when no approved, unused, unexpired
// grant matches the request.
var ErrNoGrant = errors.New("no grant")

// Approvals is the part of a Store that keeps approval requests and their
// grants, shared by every replica on the store: a grant made through one
// is used through any, once.
type Approvals interface {
	// RequestApproval returns the live approval (pending, approved and
	// unused, or denied, before its ExpiresAt at a.CreatedAt) of
	// a.Sandbox, a.Route and a.Subject, or stores a, pending, as a new one (created true), in
	// one atomic step: the same request asked twice, through any replica,
	// has one approval.
	RequestApproval(ctx context.Context, a Approval) (ap Approval, created bool, err error)
	// Approval returns the approval with id; ErrNotFound when there is
	// none.
	Approval(ctx context.Context, id string) (Approval, error)
	// Approvals returns every approval kept, oldest first (by CreatedAt,
	// then ID).
	Approvals(ctx context.Context) ([]Approval, error)
	// DecideApproval approves (a grant valid until at plus grant) or
	// denies the pending approval id, at at, by by. ErrNotFound when there
	// is none; ErrNotPending, with the approval as it is, when it is not
	// pending at at.
	DecideApproval(ctx context.Context, id string, approve bool, by string, at time.Time, grant time.Duration) (Approval, error)
	// UseGrant marks used, at at, the approved grant of sandbox, route and
	// subject that has not expired at at, and returns it: atomically, so
	// that of any number of requests, through any replica, one uses it.
	// ErrNoGrant when there is none.
	UseGrant(ctx context.Context, sandbox, route, subject string, at time.Time) (Approval, error)
	// WithdrawApprovals ends, at at, the sandbox's approvals still waiting
	// or approved and unused (they expire at at), and returns how many:
	// a sandbox's revocation leaves no grant for a later sandbox of the
	// same id. Denials stand.
	WithdrawApprovals(ctx context.Context, sandbox string, at time.Time) (int, error)
	// PruneApprovals deletes the approvals that ended (DeadSince) at or
	// before cutoff and returns how many it deleted.
	PruneApprovals(ctx context.Context, cutoff time.Time) (int, error)
}

// DeadSince is when the approval stopped mattering: when its grant was
// used, else when it expires (a pending request lapses, a grant lapses, a
// denial stops standing).
func (a Approval) DeadSince() time.Time {
	if a.State == ApprovalUsed {
		return a.UsedAt
	}
	return a.ExpiresAt
}

// decideApproval is DecideApproval's step on an approval read in a
// transaction.
func decideApproval(a *Approval, approve bool, by string, at time.Time, grant time.Duration) error {
	if a.StateAt(at) != ApprovalPending {
		return ErrNotPending
	}
	a.State, a.DecidedAt, a.DecidedBy = ApprovalDenied, at.UTC(), by
	if approve {
		a.State, a.ExpiresAt = ApprovalApproved, at.Add(grant).UTC()
	}
	return nil
}

// checkApproval refuses an approval request every store would refuse.
func checkApproval(a Approval) error {
	switch {
	case !ValidApprovalID(a.ID):
		return errors.New("request approval: invalid approval id")
	case !ValidSandboxID(a.Sandbox):
		return errors.New("request approval: invalid sandbox id")
	case a.Route == "" || a.Subject == "":
		return errors.New("request approval: no route or subject")
	case a.CreatedAt.IsZero() || !a.ExpiresAt.After(a.CreatedAt):
		return errors.New("request approval: it expires before it is made")
	}
	return nil
}

// sortApprovals sorts approvals oldest first, then by ID.
func sortApprovals(as []Approval) {
	slices.SortFunc(as, func(a, b Approval) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
}
