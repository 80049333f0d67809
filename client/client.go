// Package client is a Go client for cproxy's admin API: minting, listing
// and revoking sandbox tokens, and checking that cproxy answers and can
// serve. A harness
// written in Go uses it to give each sandbox command its own token and to
// revoke it when the command, the task or the sandbox ends.
//
// The package depends on the standard library alone, so it can be vendored
// or copied on its own. It relies on this much of the admin API, the
// contract docs/admin-api.md documents:
//
//   - POST /tokens?sandbox=ID[&profile=P][&ttl=T][&source=S][&bind=socket],
//     with an optional JSON body {"values": {…}, "budget": {…}}, answers 201
//     and {"token", "id", "sandbox", "profile", "expires_at", "source",
//     "bind", "socket", "values"}.
//   - DELETE /tokens?sandbox=ID answers 204, also when there is nothing to
//     revoke.
//   - DELETE /tokens/ID answers 204, also for a token revoked already, and
//     404 for an id no token has.
//   - GET /tokens[?sandbox=ID][&state=S][&limit=N][&cursor=C] answers 200
//     and {"tokens": [{"id", "sandbox", "profile", "created_at",
//     "expires_at", "revoked_at", "source", "bind", "state", "budget",
//     "usage"}], "next"}: one page, in order of their id, with the cursor
//     of the next page in "next" (absent on the last).
//   - POST /tokens/prune[?dry_run=1][&older_than=D] answers 200 and
//     {"dry_run", "before", "count", "tokens"}.
//   - GET /healthz answers 200 and {"status", "config", "admin", "proxy",
//     "pid"}.
//   - GET /readyz answers 200 when cproxy can serve, else 503 with
//     {"error": "cproxy: not ready: …"}.
//   - Every refusal is a 4xx or 5xx with {"error": "cproxy: …"}.
//
// Fields the client does not know are ignored, so a newer cproxy works with
// an older copy of this package.
//
// The admin API has no authentication: only the harness may reach it, never
// a sandbox. On cproxy's own host, the surest is a Unix socket that only
// cproxy's user may connect to (listen.admin = "unix:PATH"), which [New]
// dials for a "unix:PATH" URL. A token is the sandbox's only secret;
// [Secret] keeps it out of logs and error messages until the harness calls
// Reveal to hand it over.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// responseLimit bounds what the client reads back from the admin API.
const responseLimit = 16 << 20

// defaultTimeout bounds each call when the caller's context has no
// deadline and no *http.Client is given.
const defaultTimeout = 30 * time.Second

// Client talks to one cproxy's admin API. It is safe for concurrent use.
type Client struct {
	base  string // what request URLs start with
	shown string // the admin URL as given, for messages
	http  *http.Client
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient makes the Client send its requests through h, for a
// custom transport or timeout. Without it, the Client uses its own
// *http.Client with a 30-second timeout. With a unix: admin URL, a client
// whose Transport is nil gets one that dials the socket (h itself is not
// changed); a Transport of the caller's own must dial the socket itself.
func WithHTTPClient(h *http.Client) Option {
	return func(c *Client) { c.http = h }
}

// UnixPrefix starts an admin URL that is a Unix socket's path, as
// listen.admin names one: unix:/run/cproxy/admin.sock.
const UnixPrefix = "unix:"

// New returns a Client for the admin API at baseURL: an http or https URL
// with a host, such as http://127.0.0.1:9001 (cproxy's default admin
// listener), or "unix:" and the path of the Unix socket cproxy serve
// listens on, such as unix:/run/cproxy/admin.sock. It refuses anything
// else; it does not contact cproxy.
func New(baseURL string, opts ...Option) (*Client, error) {
	c := &Client{shown: strings.TrimRight(baseURL, "/"), http: &http.Client{Timeout: defaultTimeout}}
	path, unix := strings.CutPrefix(baseURL, UnixPrefix)
	if unix {
		if path == "" || strings.IndexByte(path, 0) >= 0 {
			return nil, fmt.Errorf("cproxy client: invalid admin URL %q: give the socket's path, such as unix:/run/cproxy/admin.sock", baseURL)
		}
		// The socket is the whole address; the host only fills the
		// requests' Host header.
		c.base, c.shown = "http://localhost", baseURL
	} else {
		u, err := url.Parse(baseURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
			return nil, fmt.Errorf("cproxy client: invalid admin URL %q: use a URL such as http://127.0.0.1:9001 or unix:/run/cproxy/admin.sock", baseURL)
		}
		c.base = c.shown
	}
	for _, o := range opts {
		o(c)
	}
	if unix && c.http.Transport == nil {
		h := *c.http
		h.Transport = unixTransport(path)
		c.http = &h
	}
	return c, nil
}

// unixTransport sends every request to the Unix socket at path, never
// through a proxy.
func unixTransport(path string) *http.Transport {
	return &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		},
		MaxIdleConns:    10,
		IdleConnTimeout: 90 * time.Second,
	}
}

// BindSocket is the only value of CreateOptions.Bind: the token is valid
// only on its sandbox's own Unix socket.
const BindSocket = "socket"

// CreateOptions are the optional parameters of CreateToken. Every zero
// value leaves the parameter out, so cproxy's default applies.
type CreateOptions struct {
	// Profile binds the token to a policy profile. Empty: the policy's
	// [[sandbox]] rules choose one on every request.
	Profile string
	// TTL is the token's lifetime, between 1s and 366 days. Zero: cproxy's
	// default, 24h.
	TTL time.Duration
	// Source is the IP address or CIDR prefix the token is accepted from.
	// Empty: wherever its profile allows.
	Source string
	// Bind is BindSocket for a token valid only on the sandbox's own Unix
	// socket. Empty: no such binding (unless the profile has one).
	Bind string
	// Values are per-token values for relay headers, sealed with the token;
	// they are sent in the request body, never in the URL. Nil: none.
	Values map[string]string
	// Budget is the token's own budget over its profile's. Nil: the
	// profile's.
	Budget *Budget
}

// Budget is a token's own budget (docs/policy.md#budgets). Each zero field
// keeps its profile's limit.
type Budget struct {
	// Window is what the counts are over: "token" (the token's whole life)
	// or "day" (UTC). Empty: the profile's.
	Window            string `json:"window,omitempty"`
	Requests          int64  `json:"requests,omitempty"`
	InputTokens       int64  `json:"input_tokens,omitempty"`
	OutputTokens      int64  `json:"output_tokens,omitempty"`
	CacheReadTokens   int64  `json:"cache_read_tokens,omitempty"`
	CacheWriteTokens  int64  `json:"cache_write_tokens,omitempty"`
	RequestsPerMinute int64  `json:"requests_per_minute,omitempty"`
	Concurrent        int64  `json:"concurrent,omitempty"`
	MCPCalls          int64  `json:"mcp_calls,omitempty"`
	MCPCallsPerMinute int64  `json:"mcp_calls_per_minute,omitempty"`
	// Ask: a model request over a limit of the window waits for an
	// operator's approval instead of being refused. False: the
	// profile's.
	Ask bool `json:"ask,omitempty"`
}

// Usage is what a token has spent in its budget's current window.
type Usage struct {
	Requests         int64 `json:"requests"`
	InputTokens      int64 `json:"input_tokens"`
	OutputTokens     int64 `json:"output_tokens"`
	CacheReadTokens  int64 `json:"cache_read_tokens"`
	CacheWriteTokens int64 `json:"cache_write_tokens"`
	// MCPCalls are MCP tool calls (tools/call); zero from a cproxy that
	// does not count them.
	MCPCalls int64 `json:"mcp_calls"`
}

// Token is a freshly minted sandbox token. Everything but Secret is safe to
// log; Secret prints as REDACTED.
type Token struct {
	// Secret is the token itself. cproxy keeps only its hash: this is the
	// one place it ever appears.
	Secret Secret `json:"token"`
	// ID names the token in logs, audit lines and List, without revealing
	// it.
	ID      string `json:"id"`
	Sandbox string `json:"sandbox"`
	// Profile is CreateOptions.Profile; empty when none was named.
	Profile   string    `json:"profile,omitempty"`
	ExpiresAt time.Time `json:"expires_at"`
	// Source is the address or prefix the token is bound to, in canonical
	// form; empty when none.
	Source string `json:"source,omitempty"`
	// Bind is BindSocket for a socket-bound token; empty otherwise.
	Bind string `json:"bind,omitempty"`
	// Values names the per-token values the token was minted with; never
	// the values.
	Values []string `json:"values,omitempty"`
	// Socket is the path of the sandbox's Unix socket, for the harness to
	// mount into the sandbox; set with Bind.
	Socket string `json:"socket,omitempty"`
}

// Reveal returns the token itself, for the environment handed to the
// sandbox. It is t.Secret.Reveal().
func (t Token) Reveal() string { return t.Secret.Reveal() }

// Token states in TokenInfo.State.
const (
	StateLive    = "live"
	StateRevoked = "revoked"
	StateExpired = "expired"
)

// TokenInfo is one token as List shows it: never its value.
type TokenInfo struct {
	ID      string `json:"id"`
	Sandbox string `json:"sandbox"`
	// Profile is the profile named when it was minted; empty when none.
	Profile string `json:"profile,omitempty"`
	// Source and Bind are the token's binding; empty when none.
	Source    string    `json:"source,omitempty"`
	Bind      string    `json:"bind,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	ExpiresAt time.Time `json:"expires_at"`
	// RevokedAt is when it was revoked. Zero: never.
	RevokedAt time.Time `json:"revoked_at,omitzero"`
	// State is StateLive, StateRevoked or StateExpired. Revoked wins over
	// expired.
	State string `json:"state"`
	// Budget is the token's budget as it applies now, its profile's with
	// its own over it. Nil: it has none.
	Budget *Budget `json:"budget,omitempty"`
	// Usage is what the token has spent in its budget's current window.
	// Nil: its budget meters nothing.
	Usage *Usage `json:"usage,omitempty"`
}

// Error is a refusal from the admin API.
type Error struct {
	// StatusCode is the HTTP status: 400 for a bad parameter, 404, 405,
	// 415, 503 when cproxy's store fails, and so on.
	StatusCode int
	// Message is cproxy's reason, as in its {"error": "cproxy: …"} answer,
	// or a description of an answer that was not cproxy's.
	Message string
}

func (e *Error) Error() string {
	return fmt.Sprintf("%s (HTTP %d)", e.Message, e.StatusCode)
}

// CreateToken mints a new token for sandbox (POST /tokens). Each call mints
// another; a sandbox may hold several at once.
func (c *Client) CreateToken(ctx context.Context, sandbox string, opts CreateOptions) (Token, error) {
	q := url.Values{"sandbox": {sandbox}}
	for k, v := range map[string]string{"profile": opts.Profile, "source": opts.Source, "bind": opts.Bind} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if opts.TTL != 0 {
		q.Set("ttl", ttlParam(opts.TTL))
	}
	var body []byte
	if opts.Values != nil || opts.Budget != nil {
		var err error
		body, err = json.Marshal(struct {
			Values map[string]string `json:"values,omitempty"`
			Budget *Budget           `json:"budget,omitempty"`
		}{opts.Values, opts.Budget})
		if err != nil {
			return Token{}, fmt.Errorf("cproxy client: %w", err)
		}
	}
	var out Token
	if err := c.do(ctx, http.MethodPost, "/tokens", q, body, http.StatusCreated, &out); err != nil {
		return Token{}, err
	}
	if out.Reveal() == "" {
		return Token{}, fmt.Errorf("cproxy client: the answer to POST /tokens holds no token")
	}
	return out, nil
}

// Revoke revokes every live token of sandbox (DELETE /tokens). The
// revocation is on disk before it returns, and the next request with any of
// those tokens is refused. Revoking a sandbox with no live token is not an
// error. The sandbox can be given a new token afterwards.
func (c *Client) Revoke(ctx context.Context, sandbox string) error {
	return c.do(ctx, http.MethodDelete, "/tokens", url.Values{"sandbox": {sandbox}}, nil, http.StatusNoContent, nil)
}

// RevokeToken revokes the one token whose id is id (DELETE /tokens/ID),
// such as a token that leaked; the sandbox's other tokens keep working. The
// revocation is on disk before it returns, and the token's next request is
// refused. Revoking a token revoked already is not an error. An id no token
// has (never minted, or pruned) is an *Error with StatusCode 404.
func (c *Client) RevokeToken(ctx context.Context, id string) error {
	if id == "" {
		return fmt.Errorf("cproxy client: no token id: pass the id POST /tokens or GET /tokens gave, such as tok_0faa47dd634b")
	}
	return c.do(ctx, http.MethodDelete, "/tokens/"+url.PathEscape(id), nil, nil, http.StatusNoContent, nil)
}

// MaxListLimit is the most tokens a page of ListPage may ask for.
const MaxListLimit = 1000

// ListOptions choose a page of ListPage. Every zero value leaves its
// parameter out.
type ListOptions struct {
	// Sandbox lists only that sandbox's tokens. Empty: every sandbox's.
	Sandbox string
	// State lists only the tokens in that state now: StateLive,
	// StateExpired or StateRevoked. Empty: every state.
	State string
	// Limit is the most tokens the page holds, 1 to MaxListLimit. Zero:
	// cproxy's default, 100.
	Limit int
	// Cursor is the Next of the page before. Empty: the first page.
	Cursor string
}

// TokenPage is one page of tokens.
type TokenPage struct {
	Tokens []TokenInfo `json:"tokens"`
	// Next is the Cursor of the next page. Empty: this page is the last.
	Next string `json:"next,omitempty"`
}

// ListPage returns one page of tokens (GET /tokens), in order of their ID,
// revoked and expired ones included unless opts.State says otherwise. Pass
// its Next as the next call's Cursor, with the same filters, until Next is
// empty: a token there from the first page to the last is listed exactly
// once, and one minted meanwhile at most once.
func (c *Client) ListPage(ctx context.Context, opts ListOptions) (TokenPage, error) {
	q := url.Values{}
	for k, v := range map[string]string{"sandbox": opts.Sandbox, "state": opts.State, "cursor": opts.Cursor} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if opts.Limit != 0 {
		q.Set("limit", strconv.Itoa(opts.Limit))
	}
	var out TokenPage
	if err := c.do(ctx, http.MethodGet, "/tokens", q, nil, http.StatusOK, &out); err != nil {
		return TokenPage{}, err
	}
	return out, nil
}

// List returns every token of sandbox, or of every sandbox when sandbox is
// empty, in order of their ID, revoked and expired ones included: the pages
// of ListPage, all held at once. For a store of many tokens, or to keep
// only some, call ListPage instead.
func (c *Client) List(ctx context.Context, sandbox string) ([]TokenInfo, error) {
	var all []TokenInfo
	opts := ListOptions{Sandbox: sandbox, Limit: MaxListLimit}
	for {
		page, err := c.ListPage(ctx, opts)
		if err != nil {
			return nil, err
		}
		all = append(all, page.Tokens...)
		if page.Next == "" {
			return all, nil
		}
		opts.Cursor = page.Next
	}
}

// PruneOptions are the optional parameters of Prune. Every zero value
// leaves the parameter out, so cproxy's default applies.
type PruneOptions struct {
	// DryRun asks what would be pruned, and prunes nothing.
	DryRun bool
	// AllDead prunes every token expired or revoked by now (older_than=0s),
	// and OlderThan is not sent.
	AllDead bool
	// OlderThan prunes the tokens that expired or were revoked longer ago
	// than it. Zero: cproxy's store.retention (refused when that keeps
	// every token).
	OlderThan time.Duration
}

// Pruned is what Prune deleted, or in a dry run would delete.
type Pruned struct {
	DryRun bool `json:"dry_run"`
	// Before is the cutoff: the tokens that died at or before it go.
	Before time.Time `json:"before"`
	// Count is how many tokens were deleted, or would be.
	Count int `json:"count"`
	// Tokens are, in a dry run, up to 100 of those that would be deleted,
	// oldest first; nil otherwise.
	Tokens []TokenInfo `json:"tokens,omitempty"`
}

// Prune deletes the tokens that expired or were revoked longer ago than
// cproxy's store.retention (or opts.OlderThan), with their usage (POST
// /tokens/prune); cproxy serve does so by itself every hour. Live tokens
// are never touched. On PostgreSQL, while another replica prunes, it
// returns an *Error with StatusCode 409.
func (c *Client) Prune(ctx context.Context, opts PruneOptions) (Pruned, error) {
	q := url.Values{}
	if opts.DryRun {
		q.Set("dry_run", "1")
	}
	switch {
	case opts.AllDead:
		q.Set("older_than", "0s")
	case opts.OlderThan != 0:
		q.Set("older_than", ttlParam(opts.OlderThan))
	}
	var out Pruned
	err := c.do(ctx, http.MethodPost, "/tokens/prune", q, nil, http.StatusOK, &out)
	return out, err
}

// Health checks that the admin API answers (GET /healthz). It does not
// check cproxy's store or its upstreams.
func (c *Client) Health(ctx context.Context) error {
	return c.do(ctx, http.MethodGet, "/healthz", nil, nil, http.StatusOK, nil)
}

// EmbeddedConfig is Serving.Config for a cproxy serve started without a
// config file, on its embedded defaults.
const EmbeddedConfig = "embedded default"

// Serving is what a cproxy serve says of itself (GET /healthz): which
// config it serves and where it listens, so that a caller can tell one
// cproxy serve from another on the same machine. Every field is empty (or
// zero) from a cproxy that does not say.
type Serving struct {
	// Config is the absolute path of the config file cproxy serve was
	// started with, or EmbeddedConfig.
	Config string `json:"config,omitempty"`
	// Admin and Proxy are the addresses its admin and proxy listeners
	// listen on, as bound (the port picked for port 0): HOST:PORT, or
	// unix:PATH for a Unix socket. A flag of cproxy serve may have moved
	// them from the config's.
	Admin string `json:"admin,omitempty"`
	Proxy string `json:"proxy,omitempty"`
	// PID is its process id.
	PID int `json:"pid,omitempty"`
}

// Serving asks the cproxy at the admin URL what it serves (GET /healthz):
// like Health, it checks that the admin API answers, and no more.
func (c *Client) Serving(ctx context.Context) (Serving, error) {
	var out Serving
	err := c.do(ctx, http.MethodGet, "/healthz", nil, nil, http.StatusOK, &out)
	return out, err
}

// Ready checks that cproxy can serve requests (GET /readyz): its token
// store answers, a policy is in force and its credential sources can be
// read. When it cannot, the error is an *Error with StatusCode 503 and a
// Message naming what failed and the fix.
func (c *Client) Ready(ctx context.Context) error {
	return c.do(ctx, http.MethodGet, "/readyz", nil, nil, http.StatusOK, nil)
}

// ttlParam writes d as the admin API's ttl parameter: whole days as "7d",
// anything else as a Go duration.
func ttlParam(d time.Duration) string {
	if d > 0 && d%(24*time.Hour) == 0 {
		return strconv.FormatInt(int64(d/(24*time.Hour)), 10) + "d"
	}
	return d.String()
}

func (c *Client) do(ctx context.Context, method, path string, q url.Values, body []byte, want int, out any) error {
	u := c.base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return fmt.Errorf("cproxy client: %w", err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		var ue *url.Error
		if c.base != c.shown && errors.As(err, &ue) {
			ue.URL = c.shown + path // the socket, not the placeholder host
		}
		return fmt.Errorf("cproxy client: %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, responseLimit))
	if err != nil {
		return fmt.Errorf("cproxy client: reading the answer to %s %s: %w", method, path, err)
	}
	if resp.StatusCode != want {
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(answer, &e) == nil && e.Error != "" {
			return &Error{StatusCode: resp.StatusCode, Message: e.Error}
		}
		return &Error{StatusCode: resp.StatusCode, Message: fmt.Sprintf("%s %s at %s answered %s, not as cproxy's admin API does", method, path, c.shown, resp.Status)}
	}
	if out != nil {
		if err := json.Unmarshal(answer, out); err != nil {
			return fmt.Errorf("cproxy client: the answer to %s %s is not the admin API's: %w", method, path, err)
		}
	}
	return nil
}

// Secret holds a sandbox token. It prints as REDACTED with every fmt verb,
// in slog, and in JSON and text encodings, so a stray log line or error
// cannot leak it; only Reveal gives the value. It decodes from the JSON
// string of the admin API's answer, the one way in besides CreateToken.
type Secret struct {
	// s is a pointer because fmt's error paths (a %p verb, for one) bypass
	// Format and print fields by reflection, which shows a pointer field as
	// an address but a string field in full.
	s *string
}

const redacted = "REDACTED"

// Reveal returns the token. Call it only where the token must leave the
// harness: the environment handed to the sandbox.
func (s Secret) Reveal() string {
	if s.s == nil {
		return ""
	}
	return *s.s
}

// IsZero reports whether s holds no token.
func (s Secret) IsZero() bool { return s.s == nil }

func (Secret) String() string { return redacted }

// Format covers every verb, including %#v and %q, which would otherwise
// bypass String.
func (Secret) Format(f fmt.State, _ rune) { io.WriteString(f, redacted) }

func (Secret) LogValue() slog.Value { return slog.StringValue(redacted) }

func (Secret) MarshalJSON() ([]byte, error) { return []byte(`"` + redacted + `"`), nil }

func (Secret) MarshalText() ([]byte, error) { return []byte(redacted), nil }

// UnmarshalJSON reads the token from a JSON string, as POST /tokens
// answers it.
func (s *Secret) UnmarshalJSON(b []byte) error {
	var v string
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	s.s = &v
	return nil
}

// MCPPins is the answer to GET /mcp/pins.
type MCPPins struct {
	Pins []MCPPin `json:"pins"`
}

// MCPPin is one tool of an MCP server ([mcp.NAME]) as cproxy holds it:
// pinned to the definition it first listed, or the one an operator
// accepted since (docs/mcp.md, "Pinning tools").
type MCPPin struct {
	Server string `json:"server"`
	Tool   string `json:"tool"`
	// Digest is the pinned definition's digest ("sha256:" and hex),
	// Definition the definition (the canonical JSON of the tool's name,
	// title, description, schemas and annotations; absent past 64 KiB).
	Digest     string          `json:"digest"`
	PinnedAt   time.Time       `json:"pinned_at"`
	Definition json.RawMessage `json:"definition,omitempty"`
	// Withheld is set while the server lists a definition other than the
	// pin: the tool is kept out of lists and its calls refused. Changed is
	// that definition's digest, ChangedAt when it was first listed.
	Withheld  bool      `json:"withheld"`
	Changed   string    `json:"changed,omitempty"`
	ChangedAt time.Time `json:"changed_at,omitzero"`
	// Pending is the digest of the change waiting for an operator (empty:
	// none), PendingDefinition its definition (absent past 64 KiB).
	Pending           string          `json:"pending,omitempty"`
	PendingDefinition json.RawMessage `json:"pending_definition,omitempty"`
	// Rejected is set when an operator rejected the change the server
	// still lists.
	Rejected bool `json:"rejected,omitempty"`
}

// MCPPins lists the MCP tool pins of server, or of every server when it is
// empty (GET /mcp/pins).
func (c *Client) MCPPins(ctx context.Context, server string) ([]MCPPin, error) {
	q := url.Values{}
	if server != "" {
		q.Set("server", server)
	}
	var out MCPPins
	err := c.do(ctx, http.MethodGet, "/mcp/pins", q, nil, http.StatusOK, &out)
	return out.Pins, err
}

// AcceptMCPPin makes the pending change of server's tool its pin (POST
// /mcp/pins/accept): the tool is listed and called again. digest, when
// not empty, must be the pending change's, so that a change made after the
// operator read it is not accepted with it; otherwise an *Error with
// StatusCode 409, as when no change is pending (404: no such tool).
func (c *Client) AcceptMCPPin(ctx context.Context, server, tool, digest string) (MCPPin, error) {
	return c.decidePin(ctx, "/mcp/pins/accept", server, tool, digest)
}

// RejectMCPPin drops the pending change of server's tool, keeping its pin
// (POST /mcp/pins/reject): the tool stays withheld while the server lists
// the changed definition. digest as for AcceptMCPPin.
func (c *Client) RejectMCPPin(ctx context.Context, server, tool, digest string) (MCPPin, error) {
	return c.decidePin(ctx, "/mcp/pins/reject", server, tool, digest)
}

func (c *Client) decidePin(ctx context.Context, path, server, tool, digest string) (MCPPin, error) {
	q := url.Values{"server": {server}, "tool": {tool}}
	if digest != "" {
		q.Set("digest", digest)
	}
	var out MCPPin
	err := c.do(ctx, http.MethodPost, path, q, nil, http.StatusOK, &out)
	return out, err
}

// Approvals is the answer to GET /approvals.
type Approvals struct {
	Approvals []Approval `json:"approvals"`
}

// Approval is a request that the policy lets through only with an
// operator's approval, and, once approved, the single-use grant for
// exactly that request (docs/approvals.md).
type Approval struct {
	// ID is "apr_" and 16 hex digits.
	ID      string `json:"id"`
	Sandbox string `json:"sandbox"`
	// Route is the route that asked ("github").
	Route string `json:"route"`
	// Subject is exactly what was asked: a grant is used only by a
	// request of the same sandbox and route with the same subject. For a
	// push: the repository, then each ref with its old and new object id.
	Subject string `json:"subject"`
	// Detail is the route's account of the request, a JSON object (a
	// push: repository, and refs with ref, old, new, and ask for those
	// the policy asks about).
	Detail json.RawMessage `json:"detail,omitempty"`
	// TokenID is the id of the token whose request asked.
	TokenID string `json:"token_id,omitempty"`
	// State is pending, approved, denied, used or expired, as of the
	// answer.
	State     string    `json:"state"`
	CreatedAt time.Time `json:"created_at"`
	// ExpiresAt is when a pending request lapses, and, once approved,
	// when its grant does; a denial stands until it.
	ExpiresAt time.Time `json:"expires_at"`
	DecidedAt time.Time `json:"decided_at,omitzero"`
	// DecidedBy is who decided, as they said (?by=); empty: not said.
	DecidedBy string    `json:"decided_by,omitempty"`
	UsedAt    time.Time `json:"used_at,omitzero"`
}

// Approvals lists the approval requests, oldest first: those in state
// (pending, approved, denied, used, expired; empty: any) of sandbox
// (empty: any) (GET /approvals).
func (c *Client) Approvals(ctx context.Context, state, sandbox string) ([]Approval, error) {
	q := url.Values{}
	if state != "" {
		q.Set("state", state)
	}
	if sandbox != "" {
		q.Set("sandbox", sandbox)
	}
	var out Approvals
	err := c.do(ctx, http.MethodGet, "/approvals", q, nil, http.StatusOK, &out)
	return out.Approvals, err
}

// Approval returns the approval with id (GET /approvals/ID); an *Error
// with StatusCode 404 when there is none.
func (c *Client) Approval(ctx context.Context, id string) (Approval, error) {
	var out Approval
	err := c.do(ctx, http.MethodGet, "/approvals/"+url.PathEscape(id), nil, nil, http.StatusOK, &out)
	return out, err
}

// Approve approves the pending approval id (POST /approvals/ID/approve):
// the request's retry goes through once, within the grant lifetime. by,
// when not empty, names who approved, for the record. An *Error with
// StatusCode 409 when it is not pending (decided, used or expired), 404
// when there is none.
func (c *Client) Approve(ctx context.Context, id, by string) (Approval, error) {
	return c.decideApproval(ctx, id, "approve", by)
}

// Deny denies the pending approval id (POST /approvals/ID/deny): the
// request stays refused until the approval would have expired. by and
// errors as for Approve.
func (c *Client) Deny(ctx context.Context, id, by string) (Approval, error) {
	return c.decideApproval(ctx, id, "deny", by)
}

func (c *Client) decideApproval(ctx context.Context, id, verb, by string) (Approval, error) {
	q := url.Values{}
	if by != "" {
		q.Set("by", by)
	}
	var out Approval
	err := c.do(ctx, http.MethodPost, "/approvals/"+url.PathEscape(id)+"/"+verb, q, nil, http.StatusOK, &out)
	return out, err
}
