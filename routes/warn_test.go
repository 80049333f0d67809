package routes

import (
	"fmt"
	"testing"
)

// Warn mode lets only the policy's own refusal pass: not a question that
// waits for more (Deferred), an approval's, a limit, a bad request or a
// token's; a refusal a route wraps in its own error shape still counts.
func TestOnlyThePolicysRefusalIsWarned(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"the policy's", Refuse(ErrForbidden, "model x is not allowed"), true},
		{"wrapped by a route", fmt.Errorf("rpc: %w", Refuse(ErrForbidden, "tool x is not allowed")), true},
		{"deferred", Deferred("needs the publish time"), false},
		{"an approval's", refuseFirm(CodeNeedsApproval, "push to refs/heads/main needs approval (request apr_1)"), false},
		{"a limit", refuseRetry(ErrTooManyRequests, 1, "over the rate"), false},
		{"a bad request", Refuse(ErrBadRequest, "malformed"), false},
		{"no token", Refuse(ErrUnauthorized, "no sandbox token"), false},
		{"not a refusal", ErrForbidden, false},
	} {
		if got := policyRefusal(c.err); got != c.want {
			t.Errorf("%s: policyRefusal = %v, want %v", c.name, got, c.want)
		}
	}
}
