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
		switch {
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

// mcpProtocolHeaders are the Streamable HTTP transport's own headers,
// which the client sends and no credential may replace.
var mcpProtocolHeaders = []string{"Mcp-Session-Id", "Mcp-Protocol-Version", "Last-Event-Id", "Accept", "Content-Type"}
