package tokens

import (
	"errors"
	"time"
)

// PruneBatch is how many tokens one Prune call deletes at most, in one
// transaction: enough that a year of churn goes in a few hundred calls, few
// enough that the transaction is over in milliseconds, so that the requests
// writing to the store meanwhile (a token minted, a revocation, a budget
// saved) wait no longer than they do for each other.
const PruneBatch = 500

// ErrPruneBusy is Prune's answer when another process sharing the store is
// pruning it at that moment; nothing was deleted, and there is no need to
// wait for it: it deletes what this call would have.
var ErrPruneBusy = errors.New("another cproxy is pruning the token store now")

// DeadSince is when the token stopped working: its revocation or its
// expiry, whichever came first. For a live token it is its expiry, in the
// future.
func (r Record) DeadSince() time.Time {
	if !r.RevokedAt.IsZero() && r.RevokedAt.Before(r.ExpiresAt) {
		return r.RevokedAt
	}
	return r.ExpiresAt
}

// prunable reports whether Prune with cutoff deletes r: it died at or
// before cutoff.
func (r Record) prunable(cutoff time.Time) bool { return !r.DeadSince().After(cutoff) }
