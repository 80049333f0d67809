package routes

import (
	"context"
	"encoding/base64"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"strings"

	"github.com/cproxy/cproxy/policy"
	"github.com/cproxy/cproxy/secrets"
	"github.com/cproxy/cproxy/tokens"
)

// Session is an authenticated sandbox: what a route may know about the
// caller. It holds no token.
type Session struct {
	TokenID string
	Sandbox string
	Profile *policy.Profile
	// Values are the token's per-token values (relay headers), opened
	// with the token; nil when it has none.
	Values map[string]secrets.Secret
	// Budget is what the token may spend: its profile's budget, with what
	// the token was minted with over it.
	Budget policy.Budget
}

// credentialHeaders can carry the sandbox's token; every forwarded request
// has them all removed before the real credential is set.
var credentialHeaders = []string{"Authorization", "X-Api-Key", "Proxy-Authorization", "Cookie"}

// presentedToken takes the sandbox token from Authorization (Bearer, or the
// password of Basic, which git sends) or X-Api-Key. Two different tokens in
// one request are refused: which one counts would be a guess.
func presentedToken(r *http.Request) (string, error) {
	found := make([]string, 0, 2) // at most one of each header
	authz := r.Header.Values("Authorization")
	if len(authz) > 1 {
		return "", refuse(ErrUnauthorized, "more than one Authorization header")
	}
	if len(authz) == 1 {
		scheme, rest, _ := strings.Cut(authz[0], " ")
		rest = strings.TrimSpace(rest)
		switch {
		case strings.EqualFold(scheme, "Bearer"):
			found = append(found, rest)
		case strings.EqualFold(scheme, "Basic"):
			raw, err := base64.StdEncoding.DecodeString(rest)
			if err != nil {
				return "", refuse(ErrUnauthorized, "malformed Basic authorization")
			}
			_, pass, _ := strings.Cut(string(raw), ":")
			found = append(found, pass)
		default:
			return "", refuse(ErrUnauthorized, "unsupported authorization scheme: send the sandbox token as a Bearer token")
		}
	}
	keys := r.Header.Values("X-Api-Key")
	if len(keys) > 1 {
		return "", refuse(ErrUnauthorized, "more than one X-Api-Key header")
	}
	found = append(found, keys...)
	switch {
	case len(found) == 0 || found[0] == "":
		return "", refuse(ErrUnauthorized, "no sandbox token: send it as Authorization: Bearer or X-Api-Key")
	case len(found) == 2 && found[0] != found[1]:
		return "", refuse(ErrUnauthorized, "two different credentials in one request")
	}
	return found[0], nil
}

// admit authenticates r for a route and records the session on its audit
// line; a refusal is written in the route's format and admit reports false.
func (s *Server) admit(a *audit, r *http.Request, writeErr func(http.ResponseWriter, error) int) bool {
	sess, err := s.authenticate(r)
	a.session = sess
	if err != nil {
		a.fail(writeErr, err)
		return false
	}
	return true
}

// authenticate turns the request's token into a Session. It runs before
// anything reads the body or contacts an upstream. A malformed token is
// refused on its checksum, without a store look-up. A refusal may still come
// with a Session (a revoked token's sandbox) for the audit line; it grants
// nothing.
func (s *Server) authenticate(r *http.Request) (*Session, error) {
	raw, err := presentedToken(r)
	if err != nil {
		return nil, err
	}
	tok, err := tokens.Parse(raw)
	if err != nil {
		return nil, refuse(ErrUnauthorized, "malformed sandbox token: get a new one from the harness")
	}
	rec, err := s.store.Lookup(r.Context(), tok.Hash())
	switch {
	case errors.Is(err, tokens.ErrNotFound):
		return nil, refuse(ErrUnauthorized, "unknown sandbox token")
	case errors.Is(err, context.Canceled):
		return nil, err
	case err != nil:
		s.log.Error("token store look-up failed", "err", err)
		return nil, refuse(ErrUnavailable, "token store unavailable; try again later")
	}
	// A revoked or expired token still names its sandbox: the audit line of
	// the refused request says whose it was.
	known := &Session{TokenID: rec.ID, Sandbox: rec.Sandbox}
	switch err := rec.Check(s.now()); {
	case errors.Is(err, tokens.ErrRevoked):
		return known, refuse(ErrUnauthorized, "sandbox token %s was revoked", rec.ID)
	case errors.Is(err, tokens.ErrExpired):
		return known, refuse(ErrUnauthorized, "sandbox token %s expired at %s", rec.ID, rec.ExpiresAt.UTC().Format("2006-01-02T15:04:05Z"))
	case err != nil:
		return known, refuse(ErrUnauthorized, "sandbox token %s is not valid", rec.ID)
	}
	prof, err := s.decisions.profileFor(s.policy(), rec.Sandbox, rec.Profile)
	if err != nil {
		return &Session{TokenID: rec.ID, Sandbox: rec.Sandbox}, s.noProfile(rec, err)
	}
	sess := &Session{TokenID: rec.ID, Sandbox: rec.Sandbox, Profile: prof, Budget: prof.Budget}
	if err := checkChannel(r, rec, prof); err != nil {
		return sess, err
	}
	if len(rec.Budget) > 0 {
		own, err := policy.ParseBudget(rec.Budget)
		if err != nil {
			s.log.Error("a token's budget cannot be read", "token_id", rec.ID, "err", err)
			return sess, refuse(ErrUnavailable, "sandbox token %s's budget cannot be read; mint a new token", rec.ID)
		}
		sess.Budget = prof.Budget.Over(own)
	}
	if len(rec.Values) > 0 {
		vals, err := tokens.OpenValues(tok, rec.Values)
		if err != nil {
			s.log.Error("opening a token's per-token values failed", "token_id", rec.ID, "err", err)
			return sess, refuse(ErrUnavailable, "sandbox token %s's per-token values cannot be read; mint a new token", rec.ID)
		}
		sess.Values = make(map[string]secrets.Secret, len(vals))
		for k, v := range vals {
			sess.Values[k] = secrets.New(v)
		}
	}
	return sess, nil
}

// checkChannel refuses a token that came in on a channel it is not bound
// to: a sandbox's own socket is for that sandbox's tokens only; a token
// bound to its socket (by itself or its profile) is valid on that socket
// only; a token with a source, or of a profile with sources, only from a
// TCP peer address inside them. The refusals say which binding failed but
// never what the allowed address is.
func checkChannel(r *http.Request, rec tokens.Record, prof *policy.Profile) error {
	own := socketSandbox(r)
	if own != "" && own != rec.Sandbox {
		return refuse(ErrForbidden, "sandbox token %s belongs to another sandbox than this socket's: it is not accepted here", rec.ID)
	}
	if (rec.Bind == policy.BindSocket || prof.Bind == policy.BindSocket) && own == "" {
		return refuse(ErrForbidden, "sandbox token %s is bound to its sandbox's own socket: it is not accepted on this listener", rec.ID)
	}
	if rec.Source == "" && !prof.HasSources() {
		return nil
	}
	peer, from := peerAddr(r)
	ok := prof.SourceAllowed(peer)
	if ok && rec.Source != "" {
		src, err := policy.ParseSource(rec.Source)
		ok = err == nil && src.Contains(peer)
	}
	if !ok {
		return refuse(ErrForbidden, "sandbox token %s is bound to another address: it is not accepted from %s", rec.ID, from)
	}
	return nil
}

// peerAddr is the TCP peer address of the request's connection, never a
// header's; invalid, and worded "a Unix socket", when the connection came
// in on one. Which listener it was is read from the connection's local
// address: a Unix-socket client may bind its end to a path that reads like
// an IP address and port, so RemoteAddr alone is not to be trusted.
func peerAddr(r *http.Request) (netip.Addr, string) {
	if _, ok := r.Context().Value(http.LocalAddrContextKey).(*net.TCPAddr); !ok {
		return netip.Addr{}, "a Unix socket"
	}
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return netip.Addr{}, "an unknown address"
	}
	a := ap.Addr().Unmap().WithZone("")
	return a, a.String()
}

// noProfile refuses a token whose sandbox the policy in force gives no
// profile. The sandbox is told which profile its token names, if any, and
// to ask the operator; what the policy has instead, and where its file is
// on the host, go to the operator's log only.
func (s *Server) noProfile(rec tokens.Record, err error) error {
	s.log.Warn("no policy profile for a sandbox's token", "sandbox", rec.Sandbox, "token_id", rec.ID, "err", err)
	if rec.Profile != "" {
		return refuse(ErrForbidden, "no policy profile for sandbox %s: its token names profile %q, which the policy in force does not have; ask the operator, do not retry", rec.Sandbox, rec.Profile)
	}
	return refuse(ErrForbidden, "no policy profile for sandbox %s: no rule of the policy in force gives it one; ask the operator, do not retry", rec.Sandbox)
}
