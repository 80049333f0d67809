package routes

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/cproxy/cproxy/secrets"
)

// OAuth is an upstream credential that cproxy gets from an OAuth 2.0
// token endpoint and renews itself (RFC 6749): an access token, sent as
// "Authorization: Bearer", exchanged for the refresh token when there is
// one (the refresh_token grant), else for the client's own credentials
// (client_credentials). The sandbox never holds either: it sends its
// sandbox token, and cproxy the access token.
//
// An access token is kept until shortly before the expires_in the
// endpoint gave (a quarter of its life, at most a minute), or until the
// upstream refuses it (CheckResponse); the next request then gets a new
// one, one exchange at a time however many requests wait for it. A
// refresh token the endpoint rotates is used from then on and written
// back to its source where the source can be written (secrets.Live.Store).
type OAuth struct {
	// Key is the config table, for messages: "mcp.docs.oauth".
	Key string
	// TokenURL is the token endpoint.
	TokenURL *url.URL
	// ClientID identifies cproxy to the endpoint; ClientSecret, when not
	// nil, authenticates it (a confidential client), in an Authorization:
	// Basic header or, with SecretInBody, the form.
	ClientID     string
	ClientSecret *secrets.Live
	SecretInBody bool
	// RefreshToken, when not nil, is exchanged for access tokens; nil:
	// the client_credentials grant.
	RefreshToken *secrets.Live
	// Scope and Resource (RFC 8707: the upstream the token is for) are
	// sent with each exchange when not empty.
	Scope, Resource string

	log    *slog.Logger
	now    func() time.Time
	client *http.Client
	flight singleflight.Group

	mu      sync.Mutex
	access  secrets.Secret
	renewAt time.Time // zero: until refused
	failed  error     // the last exchange's failure, answered until retryAt
	retryAt time.Time
	// unsaved says a rotated refresh token could not be written back to
	// its source, logged once.
	unsaved bool
}

// oauthTimeout bounds one exchange with the token endpoint; oauthRetry is
// how long a failed exchange is answered from memory before the next
// request tries again, so that a fleet's requests do not hammer a token
// endpoint that is down or refusing.
const (
	oauthTimeout = 30 * time.Second
	oauthRetry   = 5 * time.Second
)

// Init readies o to be used, logging to log.
func (o *OAuth) Init(log *slog.Logger, now func() time.Time) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if now == nil {
		now = time.Now
	}
	o.log, o.now = log, now
	o.client = &http.Client{
		// Never through an environment proxy, and never following a
		// redirect with the client's secret or refresh token.
		Transport:     &http.Transport{Proxy: nil, ForceAttemptHTTP2: true, TLSHandshakeTimeout: 15 * time.Second},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Timeout:       oauthTimeout,
	}
}

// Sources are the credentials o reads, named under its Key, for /readyz
// and SIGHUP.
func (o *OAuth) Sources() []Source {
	var srcs []Source
	if o.ClientSecret != nil {
		srcs = append(srcs, Source{Name: o.Key + ".client_secret", Live: o.ClientSecret})
	}
	if o.RefreshToken != nil {
		srcs = append(srcs, Source{Name: o.Key + ".refresh_token", Live: o.RefreshToken})
	}
	return srcs
}

// Token is the access token to send now, exchanged first if none is held
// or it is about to expire. Its error is a refusal that names the cause
// and the config key to fix, never a value.
func (o *OAuth) Token(ctx context.Context) (secrets.Secret, error) {
	o.mu.Lock()
	now := o.now()
	switch {
	case !o.access.IsZero() && (o.renewAt.IsZero() || now.Before(o.renewAt)):
		t := o.access
		o.mu.Unlock()
		return t, nil
	case o.failed != nil && now.Before(o.retryAt):
		err := o.failed
		o.mu.Unlock()
		return secrets.Secret{}, err
	}
	o.mu.Unlock()
	ch := o.flight.DoChan("", func() (any, error) {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), oauthTimeout)
		defer cancel()
		return o.exchange(ctx)
	})
	select {
	case res := <-ch:
		if res.Err != nil {
			return secrets.Secret{}, res.Err
		}
		return res.Val.(secrets.Secret), nil
	case <-ctx.Done():
		return secrets.Secret{}, ctx.Err()
	}
}

// CheckResponse is the first check of an answer sent with o's access
// token: a 401 drops the token, so that the next request exchanges a new
// one, and is answered 503 with Retry-After (the upstream may have ended
// the token before its time; a client that retries goes through). Nil
// for any other answer.
func (o *OAuth) CheckResponse(resp *http.Response, upstream string) error {
	if resp.StatusCode != http.StatusUnauthorized {
		return nil
	}
	sent, _ := strings.CutPrefix(resp.Request.Header.Get("Authorization"), "Bearer ")
	o.mu.Lock()
	if o.access.Reveal() == sent {
		o.access = secrets.Secret{}
	}
	o.mu.Unlock()
	o.log.Warn("upstream refused cproxy's OAuth access token; the next request gets a new one", "upstream", upstream, "oauth", o.Key)
	return refuseRetry(ErrUnavailable, time.Second, "%s refused cproxy's access token before its time; cproxy gets a new one: retry", upstream)
}

// tokenAnswer is a token endpoint's answer (RFC 6749 5.1, 5.2).
type tokenAnswer struct {
	AccessToken  string          `json:"access_token"`
	TokenType    string          `json:"token_type"`
	ExpiresIn    json.RawMessage `json:"expires_in"`
	RefreshToken string          `json:"refresh_token"`
	Error        string          `json:"error"`
}

// oauthErrorRE is what an endpoint's error code may be to be quoted in a
// message: RFC 6749's codes are short words; anything else is not echoed.
var oauthErrorRE = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

// exchange asks the token endpoint for an access token and keeps it.
func (o *OAuth) exchange(ctx context.Context) (secrets.Secret, error) {
	t, renewAt, err := o.ask(ctx)
	o.mu.Lock()
	defer o.mu.Unlock()
	if err != nil {
		o.failed, o.retryAt = err, o.now().Add(oauthRetry)
		o.log.Error("OAuth token exchange failed; requests that need the token are refused until it succeeds",
			"oauth", o.Key, "err", err.Error())
		return secrets.Secret{}, err
	}
	o.access, o.renewAt, o.failed = t, renewAt, nil
	return t, nil
}

// ask is one exchange: the form, the client's authentication, the answer.
func (o *OAuth) ask(ctx context.Context) (secrets.Secret, time.Time, error) {
	form := url.Values{}
	var refresh secrets.Secret
	if o.RefreshToken != nil {
		var err error
		if refresh, err = o.RefreshToken.Current(); err != nil {
			return secrets.Secret{}, time.Time{}, Refuse(ErrUnavailable, "%s.refresh_token: %v", o.Key, err)
		}
		form.Set("grant_type", "refresh_token")
		form.Set("refresh_token", refresh.Reveal())
	} else {
		form.Set("grant_type", "client_credentials")
	}
	if o.Scope != "" {
		form.Set("scope", o.Scope)
	}
	if o.Resource != "" {
		form.Set("resource", o.Resource)
	}
	var secret secrets.Secret
	if o.ClientSecret != nil {
		var err error
		if secret, err = o.ClientSecret.Current(); err != nil {
			return secrets.Secret{}, time.Time{}, Refuse(ErrUnavailable, "%s.client_secret: %v", o.Key, err)
		}
	}
	if secret.IsZero() || o.SecretInBody {
		form.Set("client_id", o.ClientID)
		if !secret.IsZero() {
			form.Set("client_secret", secret.Reveal())
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, o.TokenURL.String(), strings.NewReader(form.Encode()))
	if err != nil {
		return secrets.Secret{}, time.Time{}, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	if !secret.IsZero() && !o.SecretInBody {
		// RFC 6749 2.3.1: each form-encoded before they are joined.
		req.SetBasicAuth(url.QueryEscape(o.ClientID), url.QueryEscape(secret.Reveal()))
	}
	sent := o.now()
	resp, err := o.client.Do(req)
	if err != nil {
		// The transport's error names the URL, which holds no secret
		// (config refuses user info in it).
		return secrets.Secret{}, time.Time{}, Refuse(ErrUnavailable, "%s: the token endpoint could not be reached: %v", o.Key, errors.Unwrap(err))
	}
	defer resp.Body.Close()
	var a tokenAnswer
	media, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	body, rerr := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	decoded := rerr == nil && media == "application/json" && json.Unmarshal(body, &a) == nil
	if resp.StatusCode != http.StatusOK {
		code := "no error code"
		if decoded && oauthErrorRE.MatchString(a.Error) {
			code = a.Error
		}
		fix := "check " + o.Key + "'s client_id and client_secret"
		if code == "invalid_grant" && o.RefreshToken != nil {
			fix = "the refresh token is no longer valid: put a new one in " + o.Key + ".refresh_token's source and send cproxy SIGHUP"
		}
		return secrets.Secret{}, time.Time{}, Refuse(ErrUnavailable, "%s: the token endpoint answered %d (%s); the operator must act: %s", o.Key, resp.StatusCode, code, fix)
	}
	var expiresIn int64
	switch {
	case !decoded:
		return secrets.Secret{}, time.Time{}, Refuse(ErrUnavailable, "%s: the token endpoint's answer is not a JSON token response", o.Key)
	case a.AccessToken == "" || strings.ContainsAny(a.AccessToken, "\r\n"):
		return secrets.Secret{}, time.Time{}, Refuse(ErrUnavailable, "%s: the token endpoint's answer has no usable access_token", o.Key)
	case !strings.EqualFold(a.TokenType, "bearer"):
		return secrets.Secret{}, time.Time{}, Refuse(ErrUnavailable, "%s: the token endpoint gave a token of type %q; cproxy sends Bearer tokens only", o.Key, shortWord(a.TokenType))
	case len(a.ExpiresIn) > 0 && string(a.ExpiresIn) != "null":
		// A number of seconds; some endpoints send it as a string.
		var err error
		if expiresIn, err = strconv.ParseInt(strings.Trim(string(a.ExpiresIn), `"`), 10, 64); err != nil || expiresIn <= 0 {
			return secrets.Secret{}, time.Time{}, Refuse(ErrUnavailable, "%s: the token endpoint's expires_in is not a positive number of seconds", o.Key)
		}
	}
	var renewAt time.Time
	if expiresIn > 0 {
		life := time.Duration(min(expiresIn, 10*365*24*3600)) * time.Second
		renewAt = sent.Add(life - min(life/4, time.Minute))
	}
	if a.RefreshToken != "" && o.RefreshToken != nil && a.RefreshToken != refresh.Reveal() {
		o.keepRefresh(secrets.New(a.RefreshToken))
	}
	return secrets.New(a.AccessToken), renewAt, nil
}

// keepRefresh holds a refresh token the endpoint rotated to, and writes
// it back to its source; a source that cannot hold it (env:) keeps the
// old value for the next start, which is logged once.
func (o *OAuth) keepRefresh(t secrets.Secret) {
	err := o.RefreshToken.Store(t)
	switch {
	case err == nil:
		o.log.Info("OAuth refresh token rotated and written back to its source", "oauth", o.Key, "source", string(o.RefreshToken.Source()))
	case errors.Is(err, secrets.ErrNotStorable):
		if !o.unsaved {
			o.unsaved = true
			o.log.Warn("the token endpoint rotated the refresh token; cproxy holds the new one in memory only, so a restart reads the old one, which the endpoint may refuse",
				"oauth", o.Key, "source", string(o.RefreshToken.Source()), "hint", "use a file: or keyring: source for "+o.Key+".refresh_token")
		}
	default:
		o.log.Error("the rotated OAuth refresh token could not be written back; cproxy holds it in memory", "oauth", o.Key, "err", err.Error())
	}
}

// shortWord is s when it is a short word, for a message; else a mark.
func shortWord(s string) string {
	if oauthErrorRE.MatchString(s) {
		return s
	}
	return "?"
}
