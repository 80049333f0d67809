package routes

import (
	"context"
	"encoding/base64"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/cproxy/cproxy/policy"
	"github.com/cproxy/cproxy/routes/budget"
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
	// Minted is the profile the token was created with; empty: the one
	// the policy chooses for the sandbox.
	Minted string
	// hash is the token's hash, to look it up again; expires is when it
	// stops working.
	hash    tokens.Hash
	expires time.Time
}

// credentialHeaders can carry the sandbox's token; every forwarded request
// has them all removed before the real credential is set.
var credentialHeaders = []string{"Authorization", "X-Api-Key", "Proxy-Authorization", "Cookie"}

// presentedToken takes the sandbox token from Authorization (Bearer, token,
// which gh and Octokit send, or the password of Basic, which git sends) or
// X-Api-Key. Two different tokens in
// one request are refused: which one counts would be a guess.
func presentedToken(r *http.Request) (string, error) {
	found := make([]string, 0, 2) // at most one of each header
	authz := r.Header.Values("Authorization")
	if len(authz) > 1 {
		return "", Refuse(ErrUnauthorized, "more than one Authorization header")
	}
	if len(authz) == 1 {
		scheme, rest, _ := strings.Cut(authz[0], " ")
		rest = strings.TrimSpace(rest)
		switch {
		case strings.EqualFold(scheme, "Bearer"), strings.EqualFold(scheme, "token"):
			found = append(found, rest)
		case strings.EqualFold(scheme, "Basic"):
			raw, err := base64.StdEncoding.DecodeString(rest)
			if err != nil {
				return "", Refuse(ErrUnauthorized, "malformed Basic authorization")
			}
			_, pass, _ := strings.Cut(string(raw), ":")
			found = append(found, pass)
		default:
			return "", Refuse(ErrUnauthorized, "unsupported authorization scheme: send the sandbox token as a Bearer token")
		}
	}
	keys := r.Header.Values("X-Api-Key")
	if len(keys) > 1 {
		return "", Refuse(ErrUnauthorized, "more than one X-Api-Key header")
	}
	found = append(found, keys...)
	switch {
	case len(found) == 0 || found[0] == "":
		return "", Refuse(ErrUnauthorized, "no sandbox token: send it as Authorization: Bearer or X-Api-Key")
	case len(found) == 2 && found[0] != found[1]:
		return "", Refuse(ErrTwoCredentials, "two different credentials in one request: send the sandbox token alone")
	}
	return found[0], nil
}

// realCredentials are the shapes of the real credentials cproxy stands in
// for, by the prefix their issuers give them: Anthropic's API keys and
// OAuth tokens, GitHub's tokens (classic, OAuth, app, refresh and
// fine-grained), npm's.
var realCredentials = []struct{ prefix, what string }{
	{"sk-ant-", "Anthropic key"},
	{"ghp_", "GitHub token"},
	{"gho_", "GitHub token"},
	{"ghu_", "GitHub token"},
	{"ghs_", "GitHub token"},
	{"ghr_", "GitHub token"},
	{"github_pat_", "GitHub token"},
	{"npm_", "npm token"},
}

// notAToken refuses raw, sent as the sandbox token but not one. A real
// credential's shape is named, with its prefix alone: it must not be in
// the sandbox at all, and nothing more of it is repeated.
func notAToken(raw string) error {
	for _, c := range realCredentials {
		if strings.HasPrefix(raw, c.prefix) {
			return Refuse(ErrUnauthorized, "the credential sent as the sandbox token looks like a real %s (%s…), which must not be in the sandbox: remove it from the sandbox's environment and send the sandbox token from the harness", c.what, c.prefix)
		}
	}
	return Refuse(ErrUnauthorized, "malformed sandbox token: get a new one from the harness")
}

// admit authenticates r for a route and records the session on its audit
// line; a refusal is written in the route's format and admit reports false.
func (s *Server) admit(a *Call, r *http.Request, writeErr func(http.ResponseWriter, error) int) bool {
	sess, err := s.authenticate(r)
	a.session = sess
	if err != nil {
		a.fail(writeErr, err)
		return false
	}
	if err := budget.Authenticated(r.Context(), sess.TokenID); err != nil {
		// Closed with its answer: its place goes to another token.
		a.w.Header().Set("Connection", "close")
		a.fail(writeErr, refuseRetry(ErrTooManyRequests, time.Second, "%s", err.Error()))
		return false
	}
	name := a.route
	if sl, ok := a.rt.(Sublimited); ok {
		if n := sl.LimitName(r); n != "" && s.limits[n] != nil {
			name = n
		}
	}
	if rl := s.limits[name]; rl != nil {
		tc, err := rl.take(sess.TokenID, s.now())
		if err != nil {
			a.fail(writeErr, err)
			return false
		}
		a.limit = tc
	}
	s.flights.add(a, sess, sess.expires.Sub(s.now()))
	if a.body.ReadCloser != http.NoBody && a.body.ReadCloser != nil {
		a.flight.startBody(s.bodyTimeout, r.ContentLength)
		a.held.sandbox = sess.Sandbox
		a.body.f = &a.flight
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
		return nil, notAToken(raw)
	}
	rec, found, err := s.liveRecord(r.Context(), tok.Hash())
	if err != nil {
		if found {
			// A revoked or expired token still names its sandbox: the
			// audit line of the refused request says whose it was.
			return &Session{TokenID: rec.ID, Sandbox: rec.Sandbox}, err
		}
		return nil, err
	}
	prof, err := s.profileOf(rec)
	if err != nil {
		return &Session{TokenID: rec.ID, Sandbox: rec.Sandbox}, err
	}
	sess := &Session{TokenID: rec.ID, Sandbox: rec.Sandbox, Profile: prof, Budget: prof.Budget, Minted: rec.Profile, hash: tok.Hash(), expires: rec.ExpiresAt}
	if err := checkChannel(r, rec, prof); err != nil {
		return sess, err
	}
	if sess.Budget, err = s.budgetOf(rec, prof); err != nil {
		return sess, err
	}
	if len(rec.Values) > 0 {
		vals, err := tokens.OpenValues(tok, rec.Values)
		if err != nil {
			s.log.Error("opening a token's per-token values failed", "token_id", rec.ID, "err", err)
			return sess, Refuse(ErrUnavailable, "sandbox token %s's per-token values cannot be read; mint a new token", rec.ID)
		}
		sess.Values = make(map[string]secrets.Secret, len(vals))
		for k, v := range vals {
			sess.Values[k] = secrets.New(v)
		}
	}
	return sess, nil
}

// liveRecord looks up the token whose hash is h and refuses it unless it
// is live. found says whether the store knows the token, so that the
// refusal of a revoked or expired one can still name its sandbox.
func (s *Server) liveRecord(ctx context.Context, h tokens.Hash) (rec tokens.Record, found bool, err error) {
	rec, err = s.store.Lookup(ctx, h)
	switch {
	case errors.Is(err, tokens.ErrNotFound):
		return rec, false, Refuse(ErrUnauthorized, "unknown sandbox token")
	case errors.Is(err, context.Canceled):
		return rec, false, err
	case err != nil:
		s.log.Error("token store look-up failed", "err", err)
		return rec, false, Refuse(ErrUnavailable, "token store unavailable; try again later")
	}
	return rec, true, notLive(rec, s.now())
}

// notLive is the refusal of rec's token at now, or nil if it is live.
func notLive(rec tokens.Record, now time.Time) error {
	switch err := rec.Check(now); {
	case errors.Is(err, tokens.ErrRevoked):
		return revokedError(rec.ID)
	case errors.Is(err, tokens.ErrExpired):
		return expiredError(rec.ID, rec.ExpiresAt)
	case err != nil:
		return Refuse(ErrUnauthorized, "sandbox token %s is not valid", rec.ID)
	}
	return nil
}

func revokedError(id string) error {
	return Refuse(ErrUnauthorized, "sandbox token %s was revoked", id)
}

func expiredError(id string, at time.Time) error {
	return Refuse(ErrUnauthorized, "sandbox token %s expired at %s", id, at.UTC().Format("2006-01-02T15:04:05Z"))
}

// profileOf is the profile the current policy gives rec's token.
func (s *Server) profileOf(rec tokens.Record) (*policy.Profile, error) {
	prof, err := s.decisions.profileFor(s.Policy(), rec.Sandbox, rec.Profile)
	if err != nil {
		return nil, s.noProfile(rec, err)
	}
	return prof, nil
}

// budgetOf is what rec's token may spend under prof: the profile's budget,
// with what the token was minted with over it.
func (s *Server) budgetOf(rec tokens.Record, prof *policy.Profile) (policy.Budget, error) {
	if len(rec.Budget) == 0 {
		return prof.Budget, nil
	}
	own, err := policy.ParseBudget(rec.Budget)
	if err != nil {
		s.log.Error("a token's budget cannot be read", "token_id", rec.ID, "err", err)
		return policy.Budget{}, Refuse(ErrUnavailable, "sandbox token %s's budget cannot be read; mint a new token", rec.ID)
	}
	return prof.Budget.Over(own), nil
}

// recheck takes again, as things are now, the decision that lets a's
// request reach its upstream: the token is looked up again (revoked or
// expired since the request's headers came?) and, when the policy now gives
// it another profile than the one its request was decided with (a reload),
// its channel, the route's policy question (audit.decide) and, for a
// charged request, its token's budget (what the token's window holds, with
// this request's share, must fit the profile's budget as it is now) are
// asked again of that profile. Such a refusal says that the policy no
// longer allows the request. A body can take as long as its client likes,
// so the decision taken when the headers came does not hold when the
// request is sent. forward calls it immediately before it sends a request,
// and again when a body that streams to the upstream ends; a policy reload
// (SetPolicy) calls it for every request being forwarded. It is cheap
// where it runs on every request: the stores keep looked-up records in
// memory and the policy's answers are memoised, and the same profile needs
// no new answer (a loaded policy never changes).
func (s *Server) recheck(ctx context.Context, a *Call) (rule string, err error) {
	sess := a.session
	rec, _, err := s.liveRecord(ctx, sess.hash)
	if err != nil {
		return "", err
	}
	prof, err := s.profileOf(rec)
	if err != nil {
		return "", err
	}
	if prof == sess.Profile {
		return "", nil
	}
	rule, err = s.decideAgain(ctx, a, rec, prof)
	return rule, noLongerAllowed(err)
}

// decideAgain asks of prof, the profile the policy now gives the token of
// rec, what recheck asks again.
func (s *Server) decideAgain(ctx context.Context, a *Call, rec tokens.Record, prof *policy.Profile) (string, error) {
	if err := checkChannel(a.r, rec, prof); err != nil {
		return "", err
	}
	if a.decide == nil {
		// Deny by default: a route that did not say how to ask again.
		return "", RefuseCode(ErrForbidden, CodePolicyChanged, "sandbox %s's policy changed while the request was under way; send it again", rec.Sandbox)
	}
	rule, err := a.decide(prof)
	if err = a.warned(prof, err); err != nil {
		return rule, err
	}
	if m := a.meter; m != nil && m.charged {
		lim, err := s.budgetOf(rec, prof)
		if err != nil {
			return rule, err
		}
		if err := m.res.Fits(ctx, lim, m.want); err != nil && !(m.past && lim.Ask) {
			// One let past its budget stays so while the budget asks.
			return rule, budgetRefusal(err)
		}
	}
	return rule, nil
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
		return Refuse(ErrForbidden, "sandbox token %s belongs to another sandbox than this socket's: it is not accepted here", rec.ID)
	}
	if (rec.Bind == policy.BindSocket || prof.Bind == policy.BindSocket) && own == "" {
		return Refuse(ErrForbidden, "sandbox token %s is bound to its sandbox's own socket: it is not accepted on this listener", rec.ID)
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
		return Refuse(ErrForbidden, "sandbox token %s is bound to another address: it is not accepted from %s", rec.ID, from)
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
		return RefuseCode(ErrForbidden, CodeNoProfile, "no policy profile for sandbox %s: its token names profile %q, which the policy in force does not have; ask the operator, do not retry", rec.Sandbox, rec.Profile)
	}
	return RefuseCode(ErrForbidden, CodeNoProfile, "no policy profile for sandbox %s: no rule of the policy in force gives it one; ask the operator, do not retry", rec.Sandbox)
}
