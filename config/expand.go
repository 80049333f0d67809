package config

import (
	"os"
	"regexp"
	"strings"

	"github.com/cproxy/cproxy/policy"
)

// pathVarRE is a variable in a config path, $NAME or ${NAME}, as a shell
// writes it.
var pathVarRE = regexp.MustCompile(`\$(?:\{[A-Za-z_][A-Za-z0-9_]*\}|[A-Za-z_][A-Za-z0-9_]*)`)

// expandPaths expands a leading ~/ and every $NAME or ${NAME} in the paths
// the file sets, as a shell would, so that a config can say where a path is
// the way the docs give the defaults ("$XDG_STATE_HOME/cproxy/cproxy.db",
// "~/.local/share/cproxy/keyring"). It runs before the paths are checked
// and resolved against the config file's directory. A variable that is
// unset or empty is a problem naming it and the key: a path that quietly
// lost its first part would land somewhere else, relative to the config.
// The defaults, flags and environment overrides are not expanded: they
// are absolute, or a shell has expanded them already.
func (c *Config) expandPaths(f *policy.File) {
	type pathKey struct {
		key    policy.Key
		value  *string
		prefix string // what comes before the path: a credential source's "file:", a socket's "unix:"
	}
	paths := []pathKey{
		{policy.KeyOf("policy"), &c.Policy, ""},
		{policy.KeyOf("listen", "proxy"), &c.Listen.Proxy, UnixPrefix},
		{policy.KeyOf("listen", "admin"), &c.Listen.Admin, UnixPrefix},
		{policy.KeyOf("listen", "ready_file"), &c.Listen.ReadyFile, ""},
		{policy.KeyOf("listen", "sandbox_sockets"), &c.Listen.SandboxSockets, ""},
		{policy.KeyOf("listen", "tls_cert"), &c.Listen.TLSCert, "file:"},
		{policy.KeyOf("listen", "tls_key"), &c.Listen.TLSKey, "file:"},
		{policy.KeyOf("listen", "ca_dir"), &c.Listen.CADir, ""},
		{policy.KeyOf("store", "path"), &c.Store.Path, ""},
		{policy.KeyOf("store", "dsn"), &c.Store.DSN, "file:"},
		{policy.KeyOf("log", "audit"), &c.Log.Audit, ""},
		{policy.KeyOf("keyring", "file_dir"), &c.Keyring.FileDir, ""},
	}
	for _, k := range UpstreamKinds {
		paths = append(paths, pathKey{policy.KeyOf("upstream", k.Name, "credential"), &c.Upstream[k.Name].Credential, "file:"},
			pathKey{policy.KeyOf("upstream", k.Name, "private_key"), &c.Upstream[k.Name].PrivateKey, "file:"})
	}
	for _, v := range paths {
		if f.Sets(v.key.String()) {
			*v.value = expandPath(f, v.key, *v.value, v.prefix)
		}
	}
	for _, name := range sortedKeys(c.Relays) {
		r := c.Relays[name]
		for _, h := range sortedKeys(r.Headers) {
			rh := r.Headers[h]
			rh.Credential = expandPath(f, policy.KeyOf("relay", name, "headers", h, "credential"), rh.Credential, "file:")
			r.Headers[h] = rh
		}
	}
	for _, name := range sortedKeys(c.MCP) {
		m := c.MCP[name]
		m.Credential = expandPath(f, policy.KeyOf("mcp", name, "credential"), m.Credential, "file:")
		if o := m.OAuth; o != nil {
			o.ClientSecret = expandPath(f, policy.KeyOf("mcp", name, "oauth", "client_secret"), o.ClientSecret, "file:")
			o.RefreshToken = expandPath(f, policy.KeyOf("mcp", name, "oauth", "refresh_token"), o.RefreshToken, "file:")
		}
	}
}

// expandPath expands the path in value after prefix, or reports why it
// cannot and returns value as it is. A message names the variable, never
// the value: a credential's value may be a pasted secret.
func expandPath(f *policy.File, p policy.Key, value, prefix string) string {
	s, ok := strings.CutPrefix(value, prefix)
	if !ok || !strings.ContainsAny(s, "~$") {
		return value
	}
	const fix = "(set it, or write the path without it)"
	home := ""
	if rest, ok := strings.CutPrefix(s, "~"); ok {
		if rest != "" && !strings.HasPrefix(rest, "/") {
			f.AtValue(p, "%s: only ~/ is expanded, not ~NAME (write the path in full)", p)
			return value
		}
		if home = os.Getenv("HOME"); home == "" {
			f.AtValue(p, "%s: $HOME is not set, for ~/ %s", p, fix)
			return value
		}
		s = rest
	}
	if strings.Count(s, "$") != len(pathVarRE.FindAllStringIndex(s, -1)) {
		f.AtValue(p, "%s: a $ that does not start $NAME or ${NAME} (a path cannot hold a $ of its own)", p)
		return value
	}
	unset := false
	s = pathVarRE.ReplaceAllStringFunc(s, func(v string) string {
		name := strings.Trim(v, "${}")
		val := os.Getenv(name)
		if val == "" {
			f.AtValue(p, "%s: $%s is not set %s", p, name, fix)
			unset = true
		}
		return val
	})
	if unset {
		return value
	}
	return prefix + home + s
}
