package routes

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"golang.org/x/sync/singleflight"

	"github.com/cproxy/cproxy/secrets"
)

// How App tokens are minted and kept. GitHub takes a JWT whose iat is at
// most a minute off and whose exp is at most 10 minutes after it; iat is
// set a minute in the past for clock skew. An installation token lives an
// hour; it is used until tokenMargin before it expires, so that a clone
// that starts with it does not outlive it.
const (
	jwtSkew      = 60 * time.Second
	jwtLifetime  = 9 * time.Minute
	tokenMargin  = 5 * time.Minute
	mintTimeout  = 30 * time.Second
	maxMintReply = 1 << 20
	apiVersion   = "2022-11-28"
)

// CheckPrivateKey reports whether key is a GitHub App private key cproxy can
// sign with (a PEM RSA key), for serve to refuse a wrong one at start-up.
// The error never holds the key.
func CheckPrivateKey(key secrets.Secret) error {
	if _, err := jwt.ParseRSAPrivateKeyFromPEM([]byte(key.Reveal())); err != nil {
		return errors.New("not a PEM-encoded RSA private key (the .pem file GitHub gives when you generate the App's private key)")
	}
	return nil
}

// AppScope is what a route asks an App token for: one repository and the
// App permissions its request needs ({"contents": "read"} for a clone,
// {"pull_requests": "write"} to open a pull request). GitHub adds
// metadata: read to every token.
type AppScope struct {
	Owner, Name string
	// Names, when set, are several repositories of Owner the token
	// reaches instead of Name alone (a GraphQL request's): one
	// installation token is for one owner's installation.
	Names       []string
	Permissions map[string]string
}

// names is the scope's repositories under Owner, sorted, each once.
func (sc AppScope) names() []string {
	var out []string
	for _, n := range append([]string{sc.Name}, sc.Names...) {
		if n != "" && !slices.ContainsFunc(out, func(s string) bool { return strings.EqualFold(s, n) }) {
			out = append(out, n)
		}
	}
	slices.SortFunc(out, func(a, b string) int { return strings.Compare(strings.ToLower(a), strings.ToLower(b)) })
	return out
}

// perms is the scope's permissions in one stable string.
func (sc AppScope) perms() string {
	var p []string
	for k, v := range sc.Permissions {
		p = append(p, k+":"+v)
	}
	sort.Strings(p)
	return strings.Join(p, ",")
}

// scope is what one installation token is minted for: one sandbox, the
// repositories of one owner, one set of permissions. A sandbox's tokens
// are never shared with another, and a token reaches only the
// repositories it was minted for.
type scope struct {
	sandbox string
	gen     uint64 // the sandbox's generation (AppTokens.ended)
	repo    string // owner/name, or owner/name,name2… sorted, lower case
	perms   string // AppScope.perms
}

func (s scope) key() string {
	return s.sandbox + "\x00" + strconv.FormatUint(s.gen, 10) + "\x00" + s.repo + "\x00" + s.perms
}

// minted is an installation token and when it stops being used.
type minted struct {
	token secrets.Secret
	until time.Time // expires_at less tokenMargin
}

// AppTokens mints GitHub App installation tokens narrowed to one
// repository and the permissions a request needs, and keeps each for its
// sandbox and scope until shortly before it expires. Tokens are held in
// memory only. The core gives one to every route whose upstream has an App
// (Env.AppTokens), shared by the routes of one App, so that no route mints
// its own.
type AppTokens struct {
	app    *App
	now    func() time.Time
	log    *slog.Logger
	client *http.Client
	flight singleflight.Group

	mu     sync.Mutex
	tokens map[scope]minted
	// ended counts each sandbox's revocations: a mint that started before
	// one is not kept, and never shared with a mint after it.
	ended map[string]uint64
	// installs are the installation ids looked up, by owner (lower case),
	// without upstream.github.installation_id.
	installs map[string]int64
}

func NewAppTokens(app *App, now func() time.Time, log *slog.Logger) *AppTokens {
	return &AppTokens{
		app: app, now: now, log: log,
		client: &http.Client{
			// Never through an environment proxy, and never following a
			// redirect with the App's JWT.
			Transport:     &http.Transport{Proxy: nil, ForceAttemptHTTP2: true, TLSHandshakeTimeout: 15 * time.Second},
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
			Timeout:       mintTimeout,
		},
		tokens:   map[scope]minted{},
		ended:    map[string]uint64{},
		installs: map[string]int64{},
	}
}

// EndSandbox drops every token minted for sandbox.
func (a *AppTokens) EndSandbox(sandbox string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for s := range a.tokens {
		if s.sandbox == sandbox {
			delete(a.tokens, s)
		}
	}
	a.ended[sandbox]++
}

// Key is the App's private key's source, for a route's Sources.
func (a *AppTokens) Key() *secrets.Live { return a.app.Key }

// Forget drops token, which GitHub refused, wherever it is kept.
func (a *AppTokens) Forget(token string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for s, m := range a.tokens {
		if m.token.Reveal() == token {
			delete(a.tokens, s)
		}
	}
}

// Token returns an installation token for sandbox with sc: the one kept
// for that scope, or a new one. Concurrent requests for one scope share
// one mint. An error is a refusal naming what failed and the fix, never
// the key, the JWT or a token.
func (a *AppTokens) Token(ctx context.Context, sandbox string, sc AppScope) (secrets.Secret, error) {
	owner, names := sc.Owner, sc.names()
	a.mu.Lock()
	s := scope{sandbox: sandbox, gen: a.ended[sandbox], repo: strings.ToLower(owner + "/" + strings.Join(names, ",")), perms: sc.perms()}
	m, ok := a.tokens[s]
	a.mu.Unlock()
	if ok && a.now().Before(m.until) {
		return m.token, nil
	}
	ch := a.flight.DoChan(s.key(), func() (any, error) {
		// One client going away does not fail the others waiting.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), mintTimeout)
		defer cancel()
		m, err := a.mint(ctx, owner, names, sc.Permissions, s.perms)
		if err != nil {
			return minted{}, err
		}
		a.keep(s, m)
		a.log.Info("github app token minted", "sandbox", sandbox, "repo", s.repo, "permissions", s.perms, "until", m.until.UTC().Format(time.RFC3339))
		return m, nil
	})
	select {
	case res := <-ch:
		if res.Err != nil {
			return secrets.Secret{}, res.Err
		}
		return res.Val.(minted).token, nil
	case <-ctx.Done():
		return secrets.Secret{}, Refuse(ErrUpstream, "the request ended while cproxy waited for a GitHub App token")
	}
}

// keep stores m for s, unless s's sandbox ended since, and drops the
// tokens past their use.
func (a *AppTokens) keep(s scope, m minted) {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.now()
	for k, v := range a.tokens {
		if !now.Before(v.until) {
			delete(a.tokens, k)
		}
	}
	if a.ended[s.sandbox] == s.gen && now.Before(m.until) {
		a.tokens[s] = m
	}
}

// held is how many tokens are kept, for tests.
func (a *AppTokens) held() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.tokens)
}

// mintRequest is the body of POST /app/installations/ID/access_tokens.
type mintRequest struct {
	Repositories []string          `json:"repositories"`
	Permissions  map[string]string `json:"permissions"`
}

// mintReply is what GitHub answers a mint with (201).
type mintReply struct {
	Token        string    `json:"token"`
	ExpiresAt    time.Time `json:"expires_at"`
	Repositories []struct {
		FullName string `json:"full_name"`
	} `json:"repositories"`
}

// apiReply is one answer of GitHub's REST API: its status, its body
// decoded into the caller's value (decodeErr says whether that worked), and
// its message (GitHub's error text), quoted for a refusal.
type apiReply struct {
	status    int
	decodeErr error
	said      string
}

// call sends method path (under api_url) to GitHub's API with the App's
// JWT and body as JSON (nil: none), and decodes the answer into out. An
// error is a refusal, worded by fail.
func (a *AppTokens) call(ctx context.Context, method, path string, body, out any, fail func(string, ...any) error) (apiReply, error) {
	key, err := a.app.Key.Current()
	if err != nil {
		return apiReply{}, Refuse(ErrUnavailable, "the GitHub App's private key cannot be read: %v; the operator must fix upstream.github.private_key", err)
	}
	jwtText, err := a.appJWT(key)
	if err != nil {
		return apiReply{}, fail("%v; the operator must fix upstream.github.private_key", err)
	}
	var sent io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		sent = bytes.NewReader(b)
	}
	u := *a.app.API
	u.Path = strings.TrimSuffix(u.Path, "/") + path
	req, err := http.NewRequestWithContext(ctx, method, u.String(), sent)
	if err != nil {
		return apiReply{}, fail("%v", err)
	}
	req.Header.Set("Accept", "application/vnd.github+json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("X-GitHub-Api-Version", apiVersion)
	req.Header.Set("User-Agent", "cproxy")
	req.Header.Set("Authorization", "Bearer "+jwtText)
	resp, err := a.client.Do(req)
	if err != nil {
		a.log.Warn("github app request failed", "api", a.app.API.Host, "err", errors.Unwrap(err))
		return apiReply{}, fail("the GitHub API at %s could not be reached; try again later", a.app.API.Host)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, maxMintReply))
	var msg struct {
		Message string `json:"message"`
	}
	json.Unmarshal(data, &msg)
	r := apiReply{status: resp.StatusCode, decodeErr: json.Unmarshal(data, out)}
	if msg.Message != "" {
		r.said = fmt.Sprintf(" (%q)", Clip(OneLine(msg.Message), 200))
	}
	if r.status == http.StatusUnauthorized {
		return r, fail("GitHub refused the App's JWT with 401%s; the operator must check upstream.github.app_id and private_key, and this machine's clock", r.said)
	}
	return r, nil
}

// installation is the id of the App's installation whose tokens reach
// owner/name: upstream.github.installation_id, or, without it, the one
// GitHub names for the repository (GET /repos/OWNER/NAME/installation),
// kept per owner.
func (a *AppTokens) installation(ctx context.Context, owner, name string, fail func(string, ...any) error) (int64, error) {
	if a.app.Installation != 0 {
		return a.app.Installation, nil
	}
	a.mu.Lock()
	id, ok := a.installs[strings.ToLower(owner)]
	a.mu.Unlock()
	if ok {
		return id, nil
	}
	var reply struct {
		ID int64 `json:"id"`
	}
	r, err := a.call(ctx, http.MethodGet, "/repos/"+owner+"/"+name+"/installation", nil, &reply, fail)
	switch {
	case err != nil:
		return 0, err
	case r.status == http.StatusNotFound:
		return 0, fail("the GitHub App is not installed on %s with access to it (GitHub answered 404%s): the operator must install the App on %s", owner, r.said, owner)
	case r.status != http.StatusOK:
		return 0, fail("GitHub answered %d%s to the App's installation look-up; try again later", r.status, r.said)
	case r.decodeErr != nil || reply.ID <= 0:
		return 0, fail("GitHub's answer to the App's installation look-up has no id")
	}
	a.mu.Lock()
	a.installs[strings.ToLower(owner)] = reply.ID
	a.mu.Unlock()
	return reply.ID, nil
}

// mint asks GitHub for a token of the App's installation that reaches
// owner's repositories names alone, with perms and nothing else (GitHub
// adds metadata: read to every token); shown is perms as a message words
// them.
func (a *AppTokens) mint(ctx context.Context, owner string, names []string, perms map[string]string, shown string) (minted, error) {
	repo := owner + "/" + strings.Join(names, ",")
	fail := func(format string, args ...any) error {
		return Refuse(ErrUpstream, "could not get a GitHub App token for %s: "+format, append([]any{repo}, args...)...)
	}
	if len(names) == 0 {
		return minted{}, fail("no repository was named; cproxy never asks for a token of every repository of an installation")
	}
	id, err := a.installation(ctx, owner, names[0], fail)
	if err != nil {
		return minted{}, err
	}
	var reply mintReply
	r, err := a.call(ctx, http.MethodPost, "/app/installations/"+strconv.FormatInt(id, 10)+"/access_tokens",
		mintRequest{Repositories: names, Permissions: perms}, &reply, fail)
	if err != nil {
		return minted{}, err
	}
	switch {
	case r.status == http.StatusNotFound:
		if a.app.Installation == 0 {
			// Uninstalled since it was looked up: look it up again next time.
			a.mu.Lock()
			delete(a.installs, strings.ToLower(owner))
			a.mu.Unlock()
		}
		return minted{}, fail("GitHub answered 404%s for installation %d: the operator must check upstream.github.installation_id and api_url", r.said, id)
	case r.status == http.StatusUnprocessableEntity || r.status == http.StatusForbidden:
		return minted{}, fail("GitHub answered %d%s: the App's installation %d may lack the repository or the permissions %s; the operator must install the App on %s and grant it those permissions (docs/github-api.md)", r.status, r.said, id, shown, repo)
	case r.status != http.StatusCreated:
		return minted{}, fail("GitHub answered %d%s; try again later", r.status, r.said)
	case r.decodeErr != nil || reply.Token == "" || reply.ExpiresAt.IsZero():
		return minted{}, fail("GitHub's answer has no token and expires_at")
	}
	// An installation belongs to one account: a token for another
	// account's repository of the same name is never used.
	exact := len(reply.Repositories) == len(names)
	for _, r := range reply.Repositories {
		exact = exact && slices.ContainsFunc(names, func(n string) bool { return strings.EqualFold(r.FullName, owner+"/"+n) })
	}
	if !exact {
		var full []string
		for _, r := range reply.Repositories {
			full = append(full, r.FullName)
		}
		got := Clip(strings.Join(full, ","), 140)
		return minted{}, fail("the App's installation %d gave a token for %q, not for %s: it is installed on another account; the operator must point upstream.github.installation_id at the installation on %s, or leave it out to look the installation up per owner", id, got, repo, owner)
	}
	return minted{token: secrets.New(reply.Token), until: reply.ExpiresAt.Add(-tokenMargin)}, nil
}

// appJWT is the App's JWT, signed with key: RS256, iss the App's id, iat a
// minute ago, exp nine minutes from now.
func (a *AppTokens) appJWT(key secrets.Secret) (string, error) {
	rsaKey, err := jwt.ParseRSAPrivateKeyFromPEM([]byte(key.Reveal()))
	if err != nil {
		return "", errors.New("the GitHub App's private key is not a PEM-encoded RSA private key")
	}
	now := a.now()
	claims := jwt.RegisteredClaims{
		Issuer:    strconv.FormatInt(a.app.ID, 10),
		IssuedAt:  jwt.NewNumericDate(now.Add(-jwtSkew)),
		ExpiresAt: jwt.NewNumericDate(now.Add(jwtLifetime)),
	}
	s, err := jwt.NewWithClaims(jwt.SigningMethodRS256, claims).SignedString(rsaKey)
	if err != nil {
		return "", errors.New("signing the App's JWT failed")
	}
	return s, nil
}

// OneLine is s with its control characters as spaces: GitHub's words in
// a refusal, a reason on one line of git's protocol.
func OneLine(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, s)
}

// CheckResponse is a Forwarder's response check for the requests of the
// requests sent with these tokens: GitHub refusing one (a 401: the App
// uninstalled, the token revoked) drops it, so the next request mints
// another instead of sending it again until it expires, and is a 502 for
// the operator, not the sandbox token's fault, saying what to check.
// token reads the token a request carried, as the route set it.
func (a *AppTokens) CheckResponse(check string, token func(*http.Request) string) func(*http.Response) error {
	return func(resp *http.Response) error {
		if resp.StatusCode != http.StatusUnauthorized {
			return nil
		}
		if t := token(resp.Request); t != "" {
			a.Forget(t)
		}
		return Refuse(ErrUpstream, "the upstream %s refused the GitHub App's installation token; the operator must check that %s", resp.Request.URL.Host, check)
	}
}
