package config

import (
	"net/http"
	"regexp"
	"slices"
	"time"

	"github.com/cproxy/cproxy/policy"
)

// MCP is one [mcp.NAME] of the config: a remote MCP server (Streamable
// HTTP transport) that sandboxes reach at /mcp/NAME on the proxy listener,
// with their sandbox token; cproxy sends the server its own credential.
type MCP struct {
	// Name is the table's NAME, set when the config loads.
	Name string `toml:"-"`
	// URL is the server's MCP endpoint, e.g. "https://mcp.example.com/mcp".
	// Required.
	URL string `toml:"url"`
	// Credential is a credential source ("env:NAME", "file:PATH",
	// "keyring:NAME"); empty: requests go to the server without one.
	Credential string `toml:"credential"`
	// OAuth, when set, is the credential instead: access tokens cproxy
	// gets from the server's OAuth token endpoint and renews itself.
	OAuth *MCPOAuth `toml:"oauth"`
	// Header is the header the credential is sent in. Default
	// "Authorization", as "Bearer " and the credential; any other header
	// (e.g. "X-API-Key") carries the credential as it is.
	Header string `toml:"header"`
	// HeaderTimeout bounds the wait for the server's response headers.
	// Default 2m.
	HeaderTimeout Duration `toml:"header_timeout"`
	// Concurrent and RequestsPerMinute are the per-token limits of the
	// server's route; zero: the route's default.
	Concurrent        int64 `toml:"concurrent"`
	RequestsPerMinute int64 `toml:"requests_per_minute"`
	// PinTools holds each of the server's tools to the definition first
	// listed, or the one an operator accepted since (docs/mcp.md, "Pinning
	// tools"). Default true; false lists and calls a changed tool as any
	// other.
	PinTools bool `toml:"pin_tools"`
	// AuditArguments puts each tools/call's arguments on its audit line,
	// bounded and with token-shaped parts withheld. Default false: tool
	// arguments may hold what the sandbox read, and never reach the log.
	AuditArguments bool `toml:"audit_arguments"`
}

// MCPOAuth is [mcp.NAME.oauth]: how cproxy gets the server's access
// tokens from its OAuth 2.0 token endpoint (docs/mcp.md, "OAuth").
type MCPOAuth struct {
	// TokenURL is the token endpoint. Required.
	TokenURL string `toml:"token_url"`
	// ClientID is cproxy's client id at the authorization server. Required.
	ClientID string `toml:"client_id"`
	// ClientSecret is a credential source of the client's secret; empty:
	// a public client, which sends its client_id alone.
	ClientSecret string `toml:"client_secret"`
	// ClientAuth is how the secret is sent: "basic" (an Authorization
	// header, the default) or "post" (in the form).
	ClientAuth string `toml:"client_auth"`
	// RefreshToken is a credential source of the refresh token exchanged
	// for access tokens; empty: the client_credentials grant, which needs
	// client_secret. A rotated refresh token is written back to a file:
	// or keyring: source.
	RefreshToken string `toml:"refresh_token"`
	// Scope is sent with each exchange when set.
	Scope string `toml:"scope"`
	// Resource is the resource indicator sent with each exchange (RFC
	// 8707). Default: the server's url; "none" sends none.
	Resource string `toml:"resource"`
}

// MCPPrefix is the proxy listener's path of every MCP server: /mcp/NAME.
const MCPPrefix = "/mcp/"

var mcpNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,31}$`)

// CredentialValue is what the header carries for secret: "Bearer " and it
// in Authorization, the secret as it is in any other header.
func (m *MCP) CredentialValue(secret string) string {
	if http.CanonicalHeaderKey(m.Header) == "Authorization" {
		return "Bearer " + secret
	}
	return secret
}

func (c *Config) validateMCP(f *policy.File) {
	for _, name := range sortedKeys(c.MCP) {
		m := c.MCP[name]
		m.Name = name
		mp := policy.KeyOf("mcp", name)
		if !mcpNameRE.MatchString(name) {
			f.AtKey(mp, "mcp %q: an MCP server's name has lower-case letters, digits, - and _, starts with a letter or digit, and has at most 32 characters", name)
		}
		if m.URL == "" {
			f.Missing(mp.Dot("url"), mp, `%s: missing url, the server's MCP endpoint (e.g. url = "https://mcp.example.com/mcp")`, mp)
		} else {
			checkURL(f, mp.Dot("url"), m.URL, "https://mcp.example.com/mcp")
		}
		if m.Credential != "" {
			checkCredential(f, mp.Dot("credential"), m.Credential, false, false)
		}
		if m.OAuth != nil {
			m.validateOAuth(f, mp)
		}
		switch {
		case m.OAuth != nil && m.Header != "" && http.CanonicalHeaderKey(m.Header) != "Authorization":
			f.AtValue(mp.Dot("header"), "%s.header: an OAuth access token goes in Authorization as a Bearer token; leave header out", mp)
		case m.Header == "":
			m.Header = "Authorization"
		case !headerNameRE.MatchString(m.Header):
			f.AtValue(mp.Dot("header"), "%s.header: %q is not an HTTP header name (e.g. \"X-API-Key\", or leave it out for Authorization: Bearer)", mp, m.Header)
		case slices.Contains(forbiddenRelayHeaders, http.CanonicalHeaderKey(m.Header)) || slices.Contains(mcpProtocolHeaders, http.CanonicalHeaderKey(m.Header)):
			f.AtValue(mp.Dot("header"), "%s.header: %s is set by cproxy's forwarding or the MCP transport, not by a credential (e.g. \"X-API-Key\")", mp, http.CanonicalHeaderKey(m.Header))
		}
		if m.HeaderTimeout.Duration == 0 && !f.Has(mp.Dot("header_timeout")) {
			m.HeaderTimeout = Duration{2 * time.Minute}
		}
		checkPositive(f, mp.Dot("header_timeout"), m.HeaderTimeout, "2m")
		if !f.Has(mp.Dot("pin_tools")) {
			m.PinTools = true
		}
		checkLimits(f, mp, m.Concurrent, m.RequestsPerMinute)
	}
}

// validateOAuth checks [mcp.NAME.oauth] and sets its defaults.
func (m *MCP) validateOAuth(f *policy.File, mp policy.Key) {
	o, op := m.OAuth, mp.Dot("oauth")
	if m.Credential != "" {
		f.AtKey(mp.Dot("credential"), "%s: credential and [%s] are two credentials; keep one (oauth gets the server's access tokens itself)", mp, op)
	}
	if o.TokenURL == "" {
		f.Missing(op.Dot("token_url"), op, `%s: missing token_url, the authorization server's token endpoint (e.g. token_url = "https://auth.example.com/oauth/token")`, op)
	} else {
		checkURL(f, op.Dot("token_url"), o.TokenURL, "https://auth.example.com/oauth/token")
	}
	if o.ClientID == "" {
		f.Missing(op.Dot("client_id"), op, `%s: missing client_id, cproxy's client id at the authorization server`, op)
	}
	if o.ClientSecret != "" {
		checkCredential(f, op.Dot("client_secret"), o.ClientSecret, false, false)
	}
	if o.RefreshToken != "" {
		checkCredential(f, op.Dot("refresh_token"), o.RefreshToken, false, false)
	} else if o.ClientSecret == "" {
		f.AtKey(op, "%s: set refresh_token (a credential source of the refresh token), or client_secret for the client_credentials grant", op)
	}
	switch o.ClientAuth {
	case "":
		o.ClientAuth = "basic"
	case "basic", "post":
	default:
		f.AtValue(op.Dot("client_auth"), `%s.client_auth: %q is not "basic" (Authorization header) or "post" (in the form)`, op, o.ClientAuth)
	}
	switch o.Resource {
	case "":
		o.Resource = m.URL
	case "none":
	default:
		checkURL(f, op.Dot("resource"), o.Resource, m.URL)
	}
}

// mcpProtocolHeaders are the Streamable HTTP transport's own headers,
// which the client sends and no credential may replace.
var mcpProtocolHeaders = []string{"Mcp-Session-Id", "Mcp-Protocol-Version", "Last-Event-Id", "Accept", "Content-Type"}
