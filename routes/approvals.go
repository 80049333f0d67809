package routes

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/cproxy/cproxy/policy"
	"github.com/cproxy/cproxy/routes/budget"
	"github.com/cproxy/cproxy/tokens"
)

// Defaults of ApprovalOptions.
const (
	// DefaultGrantLifetime is how long an approved request's retry may
	// come: long enough for an agent that waits between retries.
	DefaultGrantLifetime = time.Hour
	// DefaultRequestLifetime is how long a request waits for a decision,
	// and a denial stands.
	DefaultRequestLifetime = 24 * time.Hour
	// maxApprovalSubject bounds what a request asks, as its route words
	// it: a push of a few dozen refs. It is stored, listed, logged and sent
	// to the webhook; a larger request is refused rather than filed.
	maxApprovalSubject = 16 << 10
	// maxPendingPerSandbox bounds the requests one sandbox may have
	// waiting at once, so that an agent pushing commit after commit cannot
	// flood the operator (and the webhook) with requests.
	maxPendingPerSandbox = 20
)

// ApprovalOptions say how the Server files the requests a policy answers
// with ask (docs/approvals.md).
type ApprovalOptions struct {
	// GrantLifetime is how long an approval's grant may be used once it is
	// approved; zero means DefaultGrantLifetime.
	GrantLifetime time.Duration
	// RequestLifetime is how long a request waits for a decision, and how
	// long a denial stands; zero means DefaultRequestLifetime.
	RequestLifetime time.Duration
	// Notify is told of each approval request filed (not of one found
	// again), after it is stored; it must not block (the webhook sends
	// from a goroutine of its own). Nil: nobody is told.
	Notify func(tokens.Approval)
}

// ApprovalRequest is what a route asks an operator to approve: a request
// the policy answered with ask.
type ApprovalRequest struct {
	// Subject is exactly what is asked, in the route's words: a grant is
	// used only by a request of the same sandbox and route whose subject
	// is the same, byte for byte. It must hold everything the request
	// does that the policy asked about (a push: the repository, and every
	// ref with its old and new object id).
	Subject string
	// Detail is the request's account for the operator and the webhook,
	// marshalled as a JSON object. It must hold no token or credential.
	Detail any
	// What is the request in the refusal's words: "push to
	// refs/heads/main".
	What string
}

// GrantLifetime is how long an approved request's grant may be used
// (ApprovalOptions.GrantLifetime): the admin API approves with it.
func (s *Server) GrantLifetime() time.Duration { return s.approvals.GrantLifetime }

// NeedApproval answers a request the policy answered with ask. When an
// operator has approved exactly this request (its sandbox, route and
// Subject) and the grant is neither used nor expired, it returns nil: the
// request may go on, and the grant is used when the request is sent
// (Forward), once across every replica on the store. Otherwise it files
// the request, or finds the one filed before, and returns the refusal
// that names it; the route writes it in its client's words.
func (a *Call) NeedApproval(req ApprovalRequest) error {
	s := a.srv
	if len(req.Subject) > maxApprovalSubject {
		return refuseFirm(CodeNeedsApproval, "%s needs approval, and is too large a request to ask about (over %d KiB of refs or names): make it smaller, one ref or package at a time", req.What, maxApprovalSubject>>10)
	}
	detail, err := json.Marshal(req.Detail)
	if err != nil {
		return err
	}
	now := s.now()
	if err := a.checkPending(req, now); err != nil {
		return err
	}
	ap, created, err := s.store.RequestApproval(a.r.Context(), tokens.Approval{
		ID: tokens.NewApprovalID(), Sandbox: a.session.Sandbox, Route: a.route, Subject: req.Subject,
		Detail: detail, TokenID: a.session.TokenID, CreatedAt: now, ExpiresAt: now.Add(s.approvals.RequestLifetime),
	})
	if err != nil {
		s.log.Error("an approval request could not be filed", "route", a.route, "sandbox", a.session.Sandbox, "err", err)
		return Refuse(ErrUnavailable, "%s needs approval, and the token store did not answer; retry later", req.What)
	}
	a.approval = ap.ID
	if created {
		s.metrics.Approval(a.route, "requested")
		s.log.Info("approval requested", "approval", ap.ID, "route", a.route, "sandbox", ap.Sandbox, "subject", Clip(ap.Subject, 256))
		if s.approvals.Notify != nil {
			s.approvals.Notify(ap)
		}
	}
	switch ap.StateAt(now) {
	case tokens.ApprovalApproved:
		a.grant = &ap
		return nil
	case tokens.ApprovalDenied:
		s.metrics.Approval(a.route, "refused")
		return refuseFirm(CodeApprovalDenied, "%s was denied by an operator (request %s); do not retry", req.What, ap.ID)
	}
	s.metrics.Approval(a.route, "refused")
	return refuseFirm(CodeNeedsApproval, "%s needs approval (request %s); retry after it is approved", req.What, ap.ID)
}

// checkPending refuses a new request of a sandbox that already has
// maxPendingPerSandbox waiting; one already filed is found as before. The
// count is read apart from the filing, so replicas asked at once may pass
// it by a few: it bounds a flood, not an exact number.
func (a *Call) checkPending(req ApprovalRequest, now time.Time) error {
	all, err := a.srv.store.Approvals(a.r.Context())
	if err != nil {
		a.srv.log.Error("the approval requests could not be listed", "err", err)
		return Refuse(ErrUnavailable, "%s needs approval, and the token store did not answer; retry later", req.What)
	}
	pending := 0
	for _, ap := range all {
		if ap.Sandbox != a.session.Sandbox {
			continue
		}
		if ap.Route == a.route && ap.Subject == req.Subject && ap.StateAt(now) != tokens.ApprovalUsed && now.Before(ap.ExpiresAt) {
			return nil // filed already
		}
		if ap.StateAt(now) == tokens.ApprovalPending {
			pending++
		}
	}
	if pending >= maxPendingPerSandbox {
		a.srv.metrics.Approval(a.route, "refused")
		return Refuse(ErrTooManyRequests, "%s needs approval, and sandbox %s has %d requests waiting for an operator already; retry after they are decided", req.What, a.session.Sandbox, pending)
	}
	return nil
}

// AskApproval answers a request prof's policy answered with ask, for a
// route whose policy question (Call.Decide) asks it: of the session's
// profile, it is NeedApproval; asked again of another profile (a reload,
// Server.recheck), the request goes on only with the grant it holds, and
// nothing is filed. A request holds one grant: one that would need a
// second (a GraphQL request of two mutations that ask) is refused.
func (a *Call) AskApproval(prof *policy.Profile, req ApprovalRequest) error {
	switch {
	case a.Approved(req.Subject):
		return nil
	case a.grant != nil:
		return refuseFirm(CodeNeedsApproval, "%s needs approval, and the request holds the approval of another (%s): send what needs approval one request at a time", req.What, a.grant.ID)
	}
	if prof != a.session.Profile {
		return refuseFirm(CodePolicyChanged, "%s needs approval; send the request again to ask for it", req.What)
	}
	return a.NeedApproval(req)
}

// pastBudget is a request over its budget's account in its approval
// request.
type pastBudget struct {
	Target string `json:"target"`
	Budget string `json:"budget"`
}

// askPastBudget answers err, the budget's refusal to hold want: a model
// request over one of the window's limits, under a budget that asks
// (budget.ask), goes on once an operator approves one request of its
// target past it, held whatever the limits say; any other refusal, as
// it is. The approval's subject is the target (the model): a grant lets
// one request of it past the budget.
func (a *Call) askPastBudget(want tokens.Usage, err error) error {
	var over *budget.Refusal
	if !errors.As(err, &over) || !over.Over || !a.session.Budget.Ask || want.MCPCalls > 0 {
		return budgetRefusal(err)
	}
	req := ApprovalRequest{
		Subject: "past the budget: " + a.target,
		Detail:  pastBudget{Target: a.target, Budget: over.Error()},
		What:    over.Error() + "; a request past it",
	}
	if err := a.AskApproval(a.session.Profile, req); err != nil {
		return err
	}
	m := a.meter
	if err := m.res.HoldPast(a.r.Context(), want); err != nil {
		return budgetRefusal(err)
	}
	m.past = true
	return nil
}

// Approved reports whether the request holds the grant of an approval of
// subject (NeedApproval found it approved): for a route's question asked
// again (Call.AskAgain), whose ask is answered by the grant the request
// holds and by nothing else.
func (a *Call) Approved(subject string) bool { return a.grant != nil && a.grant.Subject == subject }

// useGrant uses the grant NeedApproval found, if it did, as the request
// is sent: the store marks it used once, whichever replica asks first. A
// grant another request used meanwhile, or that expired, refuses this one.
func (a *Call) useGrant(ctx context.Context) error {
	if a.grant == nil {
		return nil
	}
	s := a.srv
	g, err := s.store.UseGrant(ctx, a.grant.Sandbox, a.grant.Route, a.grant.Subject, s.now())
	switch {
	case errors.Is(err, tokens.ErrNoGrant):
		s.metrics.Approval(a.route, "spent")
		return refuseFirm(CodeApprovalSpent, "the approval of this request (%s) was used by another request or has expired; retry to ask for another", a.grant.ID)
	case err != nil:
		s.log.Error("an approval's grant could not be used", "approval", a.grant.ID, "err", err)
		return Refuse(ErrUnavailable, "the approval of this request (%s) could not be checked: the token store did not answer; retry later", a.grant.ID)
	}
	a.approval = g.ID
	s.metrics.Approval(a.route, "used")
	s.log.Info("approval used", "approval", g.ID, "route", g.Route, "sandbox", g.Sandbox)
	return nil
}
