package routes

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cproxy/cproxy/routes/budget"
)

// TestCode: a refusal's own code wins, wrapped or not; any other refusal
// has its kind's, and an error that is not a refusal is internal.
func TestCode(t *testing.T) {
	check := func(name string, err error, want string) {
		t.Helper()
		if got := Code(err); got != want {
			t.Errorf("%s: Code = %q, want %q", name, got, want)
		}
		if want != "" && !slices.Contains(Codes, want) {
			t.Errorf("%s: %q is not in Codes", name, want)
		}
	}
	check("its own", RefuseCode(ErrForbidden, CodeRefNotAllowed, "push to refs/heads/main is not allowed"), CodeRefNotAllowed)
	check("wrapped", fmt.Errorf("rpc: %w", RefuseCode(ErrForbidden, CodeMCPNotAllowed, "tool x")), CodeMCPNotAllowed)
	check("forbidden", Refuse(ErrForbidden, "not a path cproxy forwards"), CodeForbidden)
	check("bad request", Refuse(ErrBadRequest, "malformed"), CodeBadRequest)
	check("two credentials", Refuse(ErrTwoCredentials, "two"), CodeUnauthorized)
	check("a limit", refuseRetry(ErrTooManyRequests, time.Second, "over the rate"), CodeTooManyRequests)
	check("body timeout", Refuse(ErrBodyTimeout, "slow"), CodeBodyTimeout)
	check("deferred", Deferred("send it again"), CodePolicyChanged)
	check("an approval's", refuseFirm(CodeNeedsApproval, "needs approval"), CodeNeedsApproval)
	check("no longer allowed keeps its code", noLongerAllowed(RefuseCode(ErrForbidden, CodeModelNotAllowed, "model x")), CodeModelNotAllowed)
	check("not a refusal", errors.New("disk full"), CodeInternal)
	check("a bare kind", ErrForbidden, CodeInternal)
	check("nil", nil, "")
}

// TestKindsHaveCodes: every kind Status knows has a code of its own, so no
// refusal goes without one.
func TestKindsHaveCodes(t *testing.T) {
	seen := map[string]bool{}
	for _, k := range kindCodes {
		if seen[k.code] || !slices.Contains(Codes, k.code) {
			t.Errorf("kind %v: code %q twice or not in Codes", k.kind, k.code)
		}
		seen[k.code] = true
		if code := Code(Refuse(k.kind, "x")); code != k.code {
			t.Errorf("kind %v: Code = %q, want %q", k.kind, code, k.code)
		}
	}
}

// TestBudgetRefusalCode: a budget's limit has the budget's code, a store
// that failed the unavailable one.
func TestBudgetRefusalCode(t *testing.T) {
	if got := Code(budgetRefusal(&budget.Refusal{RetryAfter: time.Second})); got != CodeBudget {
		t.Errorf("a limit: %q", got)
	}
	if got := Code(budgetRefusal(&budget.Refusal{Unavailable: true})); got != CodeUnavailable {
		t.Errorf("a store that failed: %q", got)
	}
}

func TestListed(t *testing.T) {
	for _, c := range []struct {
		items []string
		want  string
	}{
		{nil, "none"},
		{[]string{"react"}, "react"},
		{[]string{"react", "react-dom", "@types/*"}, "react, react-dom, @types/*"},
		{[]string{"a", "b", "c", "d", "e"}, "a, b, c, d, e"},
		{[]string{"a", "b", "c", "d", "e", "f", "g", "h"}, "a, b, c, d, e and 3 more"},
		{[]string{strings.Repeat("x", 200)}, strings.Repeat("x", 128) + "…"},
	} {
		if got := Listed(c.items); got != c.want {
			t.Errorf("Listed(%q) = %q, want %q", c.items, got, c.want)
		}
	}
}

func TestSpan(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want string
	}{
		{0, "less than a minute"},
		{59 * time.Second, "less than a minute"},
		{time.Minute, "1 minute"},
		{59 * time.Minute, "59 minutes"},
		{time.Hour + time.Second, "1 hour"},
		{23 * time.Hour, "23 hours"},
		{24 * time.Hour, "1 day"},
		{30 * time.Hour, "30 hours"},
		{2*24*time.Hour + time.Hour, "2 days"},
		{7 * 24 * time.Hour, "7 days"},
	} {
		if got := Span(c.d); got != c.want {
			t.Errorf("Span(%v) = %q, want %q", c.d, got, c.want)
		}
	}
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	err := RefuseTooNew("react@19.2.0", "conv-1", now.Add(-50*time.Hour), now, 7*24*time.Hour, "")
	want := "cproxy: react@19.2.0 is 2 days old; the minimum release age for sandbox conv-1 is 7 days (it is allowed from 2026-12-08T10:00:00Z; use an older version until then)"
	if Message(err) != want || Code(err) != CodeTooNew || !errors.Is(err, ErrForbidden) {
		t.Errorf("RefuseTooNew = %q (%s), want %q", Message(err), Code(err), want)
	}
	err = RefuseTooNew("react@19.2.0", "conv-1", now.Add(-50*time.Hour), now, 7*24*time.Hour, "19.1.1")
	want = "cproxy: react@19.2.0 is 2 days old; the minimum release age for sandbox conv-1 is 7 days (newest allowed: 19.1.1; this one is allowed from 2026-12-08T10:00:00Z)"
	if Message(err) != want {
		t.Errorf("RefuseTooNew with the newest allowed = %q, want %q", Message(err), want)
	}
}

// TestCodesDocumented: docs/refusals.md's table has a row for every code,
// and names no code cproxy does not have.
func TestCodesDocumented(t *testing.T) {
	doc, err := os.ReadFile("../docs/refusals.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `(cproxy-[a-z-]+)` \\|").FindAllStringSubmatch(string(doc), -1) {
		if rows[m[1]] {
			t.Errorf("docs/refusals.md: %s has two rows", m[1])
		}
		rows[m[1]] = true
	}
	for _, code := range Codes {
		if !rows[code] {
			t.Errorf("docs/refusals.md has no row for %s", code)
		}
	}
	for _, m := range regexp.MustCompile("`(cproxy-[a-z]+(?:-[a-z]+)+)`").FindAllStringSubmatch(string(doc), -1) {
		if !slices.Contains(Codes, m[1]) {
			t.Errorf("docs/refusals.md names %s, which is not a code", m[1])
		}
	}
}
