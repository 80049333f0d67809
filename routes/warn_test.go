package routes

import (
	"fmt"
	"slices"
	"testing"

	"github.com/cproxy/cproxy/policy"
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

// A profile's warn list names the policy's own refusals by their codes:
// policy.WarnCodes, which policy check holds a warn list to, are exactly
// the codes the routes give the policy's refusals, and only a refusal of
// a listed code is warned.
func TestWarnListNamesThePolicysCodes(t *testing.T) {
	want := []string{CodeModelNotAllowed, CodeRepoNotAllowed, CodeRefNotAllowed, CodeAPINotAllowed,
		CodePackageNotAllowed, CodeVersionDenied, CodeTooNew, CodeRelayNotAllowed, CodeMCPNotAllowed}
	if !slices.Equal(policy.WarnCodes, want) {
		t.Errorf("policy.WarnCodes = %q, want %q", policy.WarnCodes, want)
	}
	prof := &policy.Profile{Name: "trial", Warn: []string{CodeTooNew}}
	a := &Call{} // no metrics: PolicyWarned on a nil Metrics counts nothing
	if err := a.warned(prof, RefuseCode(ErrForbidden, CodeTooNew, "x@2 is 1 hour old")); err != nil {
		t.Errorf("a refusal the warn list names: %v", err)
	}
	if a.warnCode != CodeTooNew {
		t.Errorf("the warned code is %q", a.warnCode)
	}
	if err := a.warned(prof, RefuseCode(ErrForbidden, CodeVersionDenied, "x@1 is denied")); err == nil {
		t.Error("a refusal the warn list does not name was warned")
	}
}
