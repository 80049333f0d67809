package admin

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/cproxy/cproxy/client"
	"github.com/cproxy/cproxy/routes"
	"github.com/cproxy/cproxy/tokens"
)

// approvalStates are the states GET /approvals?state= filters by.
var approvalStates = []string{tokens.ApprovalPending, tokens.ApprovalApproved, tokens.ApprovalDenied, tokens.ApprovalUsed, tokens.ApprovalExpired}

// maxDecidedBy bounds the name an operator gives a decision (?by=).
const maxDecidedBy = 128

// listApprovals is GET /approvals[?state=STATE][&sandbox=ID]: the
// approval requests kept, oldest first, each in its state as of now.
func (s *server) listApprovals(w http.ResponseWriter, r *http.Request) {
	q, ok := adminQuery(w, r, "state", "sandbox")
	if !ok {
		return
	}
	state, sandbox := q.Get("state"), q.Get("sandbox")
	if state != "" && !slices.Contains(approvalStates, state) {
		adminError(w, http.StatusBadRequest, fmt.Sprintf("state %q is not one of %s", routes.Clip(state, 32), strings.Join(approvalStates, ", ")))
		return
	}
	if sandbox != "" && !tokens.ValidSandboxID(sandbox) {
		adminError(w, http.StatusBadRequest, "invalid sandbox id: it must match ^[a-z0-9][a-z0-9-]{0,62}$")
		return
	}
	all, err := s.Store().Approvals(r.Context())
	if err != nil {
		s.Log().Error("admin: listing the approvals failed", "err", err)
		adminError(w, http.StatusServiceUnavailable, "the token store did not answer; try again")
		return
	}
	now := s.Now()
	out := client.Approvals{Approvals: []client.Approval{}}
	for _, a := range all {
		if (state == "" || a.StateAt(now) == state) && (sandbox == "" || a.Sandbox == sandbox) {
			out.Approvals = append(out.Approvals, approvalInfo(a, now))
		}
	}
	writeJSON(w, http.StatusOK, out)
}

func approvalInfo(a tokens.Approval, now time.Time) client.Approval {
	return client.Approval{ID: a.ID, Sandbox: a.Sandbox, Route: a.Route, Subject: a.Subject, Detail: a.Detail, TokenID: a.TokenID,
		State: a.StateAt(now), CreatedAt: a.CreatedAt, ExpiresAt: a.ExpiresAt, DecidedAt: a.DecidedAt, DecidedBy: a.DecidedBy, UsedAt: a.UsedAt}
}

// getApproval is GET /approvals/{id}.
func (s *server) getApproval(w http.ResponseWriter, r *http.Request) {
	if _, ok := adminQuery(w, r); !ok {
		return
	}
	id, ok := approvalID(w, r)
	if !ok {
		return
	}
	a, err := s.Store().Approval(r.Context(), id)
	switch {
	case errors.Is(err, tokens.ErrNotFound):
		adminError(w, http.StatusNotFound, fmt.Sprintf("no approval %s", id))
		return
	case err != nil:
		s.Log().Error("admin: reading an approval failed", "err", err)
		adminError(w, http.StatusServiceUnavailable, "the token store did not answer; try again")
		return
	}
	writeJSON(w, http.StatusOK, approvalInfo(a, s.Now()))
}

func approvalID(w http.ResponseWriter, r *http.Request) (string, bool) {
	id := r.PathValue("id")
	if !tokens.ValidApprovalID(id) {
		adminError(w, http.StatusBadRequest, fmt.Sprintf("%q is not an approval id (apr_ and 16 hex digits; GET /approvals lists them)", routes.Clip(id, 64)))
		return "", false
	}
	return id, true
}

// decideApproval is POST /approvals/{id}/approve and /deny [?by=NAME]: an
// operator's decision on a pending request. Approving makes a grant that
// the request's retry uses once, within the grant lifetime.
func (s *server) decideApproval(approve bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		q, ok := adminQuery(w, r, "by")
		if !ok {
			return
		}
		id, ok := approvalID(w, r)
		if !ok {
			return
		}
		by := q.Get("by")
		if len(by) > maxDecidedBy || strings.ContainsFunc(by, func(c rune) bool { return c < 0x20 || c == 0x7f }) {
			adminError(w, http.StatusBadRequest, fmt.Sprintf("by: at most %d characters of one line", maxDecidedBy))
			return
		}
		now := s.Now()
		a, err := s.Store().DecideApproval(r.Context(), id, approve, by, now, s.GrantLifetime())
		switch {
		case errors.Is(err, tokens.ErrNotFound):
			adminError(w, http.StatusNotFound, fmt.Sprintf("no approval %s", id))
			return
		case errors.Is(err, tokens.ErrNotPending):
			adminError(w, http.StatusConflict, fmt.Sprintf("approval %s is %s, not pending", id, a.StateAt(now)))
			return
		case err != nil:
			s.Log().Error("admin: deciding an approval failed", "err", err)
			adminError(w, http.StatusServiceUnavailable, "the token store did not answer; try again")
			return
		}
		event := "denied"
		if approve {
			event = "approved"
		}
		s.Metrics().Approval(a.Route, event)
		s.Log().Info("approval "+event, "approval", a.ID, "route", a.Route, "sandbox", a.Sandbox, "subject", a.Subject, "by", a.DecidedBy, "expires_at", a.ExpiresAt)
		writeJSON(w, http.StatusOK, approvalInfo(a, now))
	}
}
