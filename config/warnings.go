package config

import (
	"net"
	"net/url"
	"strings"

	"github.com/cproxy/cproxy/policy"
)

// A Warning is a setting cproxy runs with that puts the tokens or the
// credentials at risk: serve logs it at start, and cproxy policy check
// prints it, without failing.
type Warning struct {
	// Key is the setting, such as "listen.admin" or
	// "upstream.anthropic.url".
	Key string
	// Value is its value: an address or a URL, which a valid config never
	// lets carry user info, so never a secret.
	Value string
	// Message says, after the value, what is wrong, why it matters and
	// the fix.
	Message string
}

// Warnings are c's settings that work but put the tokens or the
// credentials at risk: an admin listener that is neither loopback nor a
// Unix socket, and an upstream or relay reached over plain http at a host
// that is not loopback. A loopback http upstream (a local fake or a local
// gateway) is no risk.
func (c *Config) Warnings() []Warning {
	var ws []Warning
	if a := c.Listen.Admin; c.Listen.AdminSocket() == "" && !loopbackAddr(a) {
		ws = append(ws, Warning{"listen.admin", a, `is neither loopback nor a Unix socket: anyone who reaches it can mint tokens for any sandbox ` +
			`(use 127.0.0.1:9001 or unix:/run/cproxy/admin.sock, or a firewall that admits the harness alone)`})
	}
	for _, k := range UpstreamKinds {
		u := c.Upstream[k.Name]
		ws = appendPlainHTTP(ws, "upstream."+k.Name+".url", u.URL, u.Credential != "" || u.App())
		if u.App() {
			ws = appendPlainHTTP(ws, "upstream."+k.Name+".api_url", u.APIURL, true)
		}
		if k.FilesURL != "" {
			ws = appendPlainHTTP(ws, "upstream."+k.Name+".files_url", u.FilesURL, u.Credential != "")
		}
	}
	for _, name := range sortedKeys(c.Relays) {
		r, secret := c.Relays[name], false
		for _, h := range r.Headers {
			secret = secret || h.Credential != "" || h.Value != ""
		}
		ws = appendPlainHTTP(ws, "relay."+name+".url", r.URL, secret)
	}
	return ws
}

// WarningProblems are c's Warnings as problems, each placed where the file
// sets its key, for cproxy policy check.
func (c *Config) WarningProblems() policy.Problems {
	var probs policy.Problems
	for _, w := range c.Warnings() {
		probs = append(probs, c.ProblemAt(w.Key, "%q %s", w.Value, w.Message))
	}
	return probs
}

// appendPlainHTTP adds key's warning if rawURL is plain http to a host
// that is not loopback; secret says whether cproxy sends a credential or
// a per-token value there.
func appendPlainHTTP(ws []Warning, key, rawURL string, secret bool) []Warning {
	u, err := url.Parse(rawURL)
	if err != nil || !strings.EqualFold(u.Scheme, "http") || loopbackHost(u.Hostname()) {
		return ws
	}
	what := "every request and answer"
	if secret {
		what = "the credential cproxy sends there, and every request and answer,"
	}
	return append(ws, Warning{key, rawURL, "is plain http to a host that is not loopback: " + what + " would cross the network in clear text (use https://)"})
}

// loopbackAddr reports whether a host:port listens on loopback only: an
// empty host (every interface) does not.
func loopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	return err == nil && loopbackHost(host)
}

// loopbackHost reports whether host is localhost or a loopback address.
func loopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
