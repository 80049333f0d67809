package config

import (
	"fmt"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/cproxy/cproxy/policy"
)

// Relay is one [relay.NAME] of the config: requests under Prefix on the proxy
// listener go to URL, for the methods and paths it lists, with the headers it
// names added. Which sandboxes may use it is the policy's (Profile.Relays).
type Relay struct {
	// Relay is the relay's name, methods and paths: what a profile's use of
	// it is checked against (policy.Profile.AskRelay).
	policy.Relay
	// Prefix is the path on the proxy listener: one segment between slashes,
	// e.g. "/mod/". Required.
	Prefix string `toml:"prefix"`
	// URL is the upstream's base URL; the path under Prefix is appended to
	// its path. Required.
	URL string `toml:"url"`
	// Query forwards the request's query string (re-encoded). Default false:
	// a request with a query is refused.
	Query bool `toml:"query"`
	// Headers are added to every forwarded request, replacing any the
	// client sent of the same name: header name → where its value comes from.
	Headers map[string]RelayHeader `toml:"headers"`
	// HeaderTimeout bounds the wait for the upstream's response headers.
	// Default 2m.
	HeaderTimeout Duration `toml:"header_timeout"`
	// Concurrent is how many requests of one sandbox token to this route
	// may be in flight at once; RequestsPerMinute is its rate there. Zero:
	// the route's default (docs/config.md). Counted in each process.
	Concurrent        int64 `toml:"concurrent"`
	RequestsPerMinute int64 `toml:"requests_per_minute"`
}

// RelayHeader is where one injected header's value comes from: a credential
// source, or a value given for each token when it is minted. Exactly one of
// Credential and Value is set.
type RelayHeader struct {
	// Credential is a credential source: "env:NAME", "file:PATH" or
	// "keyring:NAME".
	Credential string `toml:"credential"`
	// Value names a per-token value: POST /tokens with {"values": {NAME: …}}.
	// A token minted without it cannot use the relay.
	Value string `toml:"value"`
	// Prefix goes before the value, e.g. "Bearer ".
	Prefix string `toml:"prefix"`
}

// The methods a relay may forward.
var relayMethods = []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions}

var (
	relayNameRE   = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,31}$`)
	relayPrefixRE = regexp.MustCompile(`^/[a-z0-9][a-z0-9._-]{0,62}/$`)
	// ValueNameRE is what a per-token value may be called.
	ValueNameRE  = regexp.MustCompile(`^[a-z0-9][a-z0-9_]{0,63}$`)
	headerNameRE = regexp.MustCompile("^[A-Za-z0-9!#$%&'*+.^_`|~-]+$")
)

// reservedPrefixes are the proxy listener's own routes (UpstreamKinds'),
// and the admin listener's probe paths, kept free so that no relay looks
// like a probe.
func reservedPrefixes() []string {
	var p []string
	for _, k := range UpstreamKinds {
		p = append(p, k.Prefix)
	}
	return append(p, MCPPrefix, "/healthz/", "/readyz/", "/-/")
}

// forbiddenRelayHeaders are headers net/http or the forwarding itself
// decides; a relay may not set them.
var forbiddenRelayHeaders = []string{"Host", "Content-Length", "Transfer-Encoding", "Connection", "Keep-Alive", "Te", "Trailer", "Upgrade", "Proxy-Connection", "Proxy-Authenticate", "Proxy-Authorization", "Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto"}

func (c *Config) validateRelays(f *policy.File) {
	prefixes := map[string]string{}
	for _, name := range sortedKeys(c.Relays) {
		r := c.Relays[name]
		r.Name = name
		rp := policy.KeyOf("relay", name)
		if !relayNameRE.MatchString(name) {
			f.AtKey(rp, "relay %q: a relay name has lower-case letters, digits, - and _, starts with a letter or digit, and has at most 32 characters", name)
		}
		switch {
		case r.Prefix == "":
			f.Missing(rp.Dot("prefix"), rp, `%s: missing prefix, the path on the proxy listener (e.g. prefix = "/%s/")`, rp, name)
		case !relayPrefixRE.MatchString(r.Prefix):
			f.AtValue(rp.Dot("prefix"), `%s.prefix: %q is not one path segment between slashes of lower-case letters, digits, '.', '_' and '-' (e.g. "/%s/")`, rp, r.Prefix, name)
		case slices.Contains(reservedPrefixes(), r.Prefix):
			f.AtValue(rp.Dot("prefix"), "%s.prefix: %q is one of cproxy's own routes (%s)", rp, r.Prefix, strings.Join(reservedPrefixes(), ", "))
		case prefixes[r.Prefix] != "":
			f.AtValue(rp.Dot("prefix"), "%s.prefix: %q is relay.%s's prefix already", rp, r.Prefix, prefixes[r.Prefix])
		default:
			prefixes[r.Prefix] = name
		}
		if r.URL == "" {
			f.Missing(rp.Dot("url"), rp, `%s: missing url, the upstream's base URL (e.g. url = "https://hub.example.com/mod/")`, rp)
		} else {
			checkURL(f, rp.Dot("url"), r.URL, "https://hub.example.com/mod/")
		}
		if len(r.Methods) == 0 {
			f.Missing(rp.Dot("methods"), rp, `%s: needs methods, the HTTP methods it forwards (e.g. methods = ["GET", "POST"])`, rp)
		}
		for i, m := range r.Methods {
			if !slices.Contains(relayMethods, m) {
				f.AtValue(rp.Dot("methods").Elem(i), "%s.methods: %q is not a method a relay forwards (%s, in capitals)", rp, m, strings.Join(relayMethods, ", "))
			}
		}
		if len(r.Paths) == 0 {
			f.Missing(rp.Dot("paths"), rp, `%s: needs paths, globs of the paths under the prefix it forwards (e.g. paths = ["events", "sessions/*"])`, rp)
		}
		f.CheckGlobs(rp.Dot("paths"), r.Paths, checkRelayPathGlob)
		for _, h := range sortedKeys(r.Headers) {
			checkRelayHeader(f, rp.Dot("headers").Dot(h), h, r.Headers[h])
		}
		if r.HeaderTimeout.Duration == 0 && !f.Has(rp.Dot("header_timeout")) {
			r.HeaderTimeout = Duration{2 * time.Minute}
		}
		checkPositive(f, rp.Dot("header_timeout"), r.HeaderTimeout, "2m")
		checkLimits(f, rp, r.Concurrent, r.RequestsPerMinute)
	}
}

// checkLimits refuses a negative per-token limit of the route at key.
func checkLimits(f *policy.File, key policy.Key, concurrent, rpm int64) {
	if concurrent < 0 {
		f.AtValue(key.Dot("concurrent"), "%s: must not be negative (e.g. 64; leave it out for the route's default)", key.Dot("concurrent"))
	}
	if rpm < 0 {
		f.AtValue(key.Dot("requests_per_minute"), "%s: must not be negative (e.g. 6000; leave it out for the route's default)", key.Dot("requests_per_minute"))
	}
}

// checkRelayPathGlob refuses what no checked request path can hold.
func checkRelayPathGlob(g string) error {
	switch {
	case strings.HasPrefix(g, "/"):
		return fmt.Errorf("starts with '/': paths are under the prefix, without a leading slash")
	case strings.Contains(g, "//") || strings.Contains(g, "\\"):
		return fmt.Errorf("holds '//' or '\\', which no forwarded path has")
	}
	for _, seg := range strings.Split(g, "/") {
		if seg == "." || seg == ".." {
			return fmt.Errorf("has a %q segment, which no forwarded path has", seg)
		}
	}
	return nil
}

func checkRelayHeader(f *policy.File, hp policy.Key, name string, h RelayHeader) {
	switch {
	case !headerNameRE.MatchString(name):
		f.AtKey(hp, "%s: %q is not an HTTP header name", hp, name)
		return
	case slices.Contains(forbiddenRelayHeaders, http.CanonicalHeaderKey(name)):
		f.AtKey(hp, "%s: %s is set by cproxy's forwarding, not by a relay", hp, http.CanonicalHeaderKey(name))
		return
	}
	switch {
	case h.Credential != "" && h.Value != "":
		f.AtValue(hp, "%s: set credential or value, not both", hp)
	case h.Credential == "" && h.Value == "":
		f.AtValue(hp, `%s: needs credential (a credential source, e.g. "env:HUB_TOKEN") or value (a per-token value's name, e.g. "mod_token")`, hp)
	case h.Credential != "":
		checkCredential(f, hp.Dot("credential"), h.Credential, false, false)
	case !ValueNameRE.MatchString(h.Value):
		f.AtValue(hp.Dot("value"), "%s.value: %q is not a value name (lower-case letters, digits and _, at most 64)", hp, h.Value)
	}
	if strings.ContainsAny(h.Prefix, "\r\n\x00") {
		f.AtValue(hp.Dot("prefix"), "%s.prefix: must not hold a line break or NUL", hp)
	}
}

// RelayValues are the per-token value names the config's relays use.
func (c *Config) RelayValues() []string {
	var names []string
	for _, r := range c.Relays {
		for _, h := range r.Headers {
			if h.Value != "" && !slices.Contains(names, h.Value) {
				names = append(names, h.Value)
			}
		}
	}
	slices.Sort(names)
	return names
}

// CheckPolicy finds what a policy file loaded on its own cannot know is
// wrong: each relays entry of a profile that names no relay of the config,
// and each MCP server table that names no [mcp.NAME] of it, a mistake that would otherwise silently allow nothing. LoadConfig runs it
// on the policy it loads; a reload runs it on the new policy before putting
// it in force. The problems are the policy file's.
func (c *Config) CheckPolicy(p *policy.Policy) policy.Problems {
	probs := p.CheckRelays(sortedKeys(c.Relays), c.configName())
	return append(probs, p.CheckMCP(sortedKeys(c.MCP), c.configName())...)
}

// configName is the config file for messages.
func (c *Config) configName() string {
	if c.Path == "" {
		return "the built-in config"
	}
	return c.Path
}

func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}
