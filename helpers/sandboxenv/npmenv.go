package sandboxenv

import (
	"fmt"
	"net/url"
	"strings"
)

// npmAuthPrefix starts the name of the environment variable that gives npm
// the token for one registry URL: npm_config_//HOST:PORT/PATH/:_authToken.
// npm reads it from the environment as it is (it does not fold the case of,
// or change _ to - in, names that start with //), but a POSIX shell cannot
// export it, so it is carried by exec, json and env output only.
const npmAuthPrefix = "npm_config_//"

// NPMRegistry is cproxy's npm route under base, as npm takes it.
func NPMRegistry(base string) string {
	return strings.TrimRight(base, "/") + "/npm/"
}

// NPMNerfDart is the key npm scopes credentials for registry by: "//",
// the host (with its port unless it is the scheme's default, as URL.host
// in Node) and the path up to its last slash.
func NPMNerfDart(registry string) (string, error) {
	u, err := url.Parse(registry)
	if err != nil || u.Host == "" {
		return "", fmt.Errorf("invalid registry URL %q", registry)
	}
	host := strings.ToLower(u.Host)
	if p := u.Port(); (u.Scheme == "http" && p == "80") || (u.Scheme == "https" && p == "443") {
		host = strings.TrimSuffix(host, ":"+p)
	}
	path := u.EscapedPath()
	path = path[:strings.LastIndexByte(path, '/')+1]
	if path == "" {
		path = "/"
	}
	return "//" + host + path, nil
}

// sandboxNPM returns the variables that send npm to cproxy's npm route with
// the sandbox token: the registry, the update notifier off (its check asks
// the registry for the npm package, which a policy seldom allows, so each
// npm command would log a denial), the token for that registry's URL, and,
// when userconfig is set, NPM_CONFIG_USERCONFIG naming the file `cproxy
// npmrc` printed (for a shell, which cannot export the token's name); then
// yarn's (see sandboxYarn). pnpm reads the registry and the userconfig
// file, not the per-registry token variable (docs/npm.md).
func sandboxNPM(base, token, userconfig string) (Env, error) {
	reg := NPMRegistry(base)
	nerf, err := NPMNerfDart(reg)
	if err != nil {
		return nil, err
	}
	e := Env{{"npm_config_registry", reg}, {"npm_config_update_notifier", "false"}}
	if userconfig != "" {
		e = append(e, Var{"NPM_CONFIG_USERCONFIG", userconfig})
	}
	e = append(e, Var{"npm_config_" + nerf + ":_authToken", token})
	return append(e, sandboxYarn(reg, token)...), nil
}

// sandboxYarn returns the variables that send yarn berry (2 and later) to
// the npm route reg with the sandbox token. Yarn sends its token only to
// its registry, and by default only for scoped packages: npmAlwaysAuth
// makes it send the token for every package, which cproxy needs. An
// http:// registry must be on unsafeHttpWhitelist, or yarn refuses it.
// The names are plain ones, so a shell exports them too.
func sandboxYarn(reg, token string) Env {
	e := Env{
		{"YARN_NPM_REGISTRY_SERVER", strings.TrimSuffix(reg, "/")},
		{"YARN_NPM_AUTH_TOKEN", token},
		{"YARN_NPM_ALWAYS_AUTH", "true"},
	}
	if u, err := url.Parse(reg); err == nil && u.Scheme == "http" {
		e = append(e, Var{"YARN_UNSAFE_HTTP_WHITELIST", u.Hostname()})
	}
	return e
}

// NPMRC is the content of an npm userconfig file for cproxy at base that
// holds no secret: npm replaces ${CPROXY_TOKEN} with the variable's value
// each time it reads the file (unset, npm has no valid token and cproxy
// answers 401). The update notifier is off, as in sandboxNPM.
func NPMRC(base string) (string, error) {
	reg := NPMRegistry(base)
	nerf, err := NPMNerfDart(reg)
	if err != nil {
		return "", err
	}
	if strings.ContainsAny(reg, "\r\n${}") {
		return "", fmt.Errorf("the proxy URL cannot go in an npmrc file")
	}
	return "; npm settings for cproxy (cproxy npmrc). No secret here: npm reads the\n" +
		"; sandbox token from CPROXY_TOKEN in the environment.\n" +
		"registry=" + reg + "\n" +
		"update-notifier=false\n" +
		nerf + ":_authToken=${CPROXY_TOKEN}\n", nil
}

// Exportable returns e without the variables a POSIX shell cannot export
// (npm's per-registry token), for --format sh.
func (e Env) Exportable() Env {
	var out Env
	for _, v := range e {
		if validEnvName(v.Name) {
			out = append(out, v)
		}
	}
	return out
}

// isNPMAuthName says whether name is npm's per-registry token variable,
// which json and env output may carry though it is no shell name.
func isNPMAuthName(name string) bool {
	rest, ok := strings.CutPrefix(name, npmAuthPrefix)
	return ok && strings.HasSuffix(rest, ":_authToken") &&
		!strings.ContainsAny(rest, "=\x00\r\n \t")
}

// npmOwned says whether an inherited variable is an npm setting cproxy
// sets or that would send npm elsewhere or with another credential: npm
// reads npm_config_* in any case, so NPM_CONFIG_REGISTRY beside cproxy's
// npm_config_registry could win. Yarn's own such settings count too.
func npmOwned(name string) bool {
	l := strings.ToLower(name)
	if !strings.HasPrefix(l, "npm_config_") {
		return yarnOwned(name)
	}
	k := strings.TrimPrefix(l, "npm_config_")
	return k == "registry" || k == "userconfig" || strings.HasPrefix(k, "//") ||
		strings.HasPrefix(k, "_auth") || strings.HasPrefix(k, "@") // @scope:registry
}

// yarnOwned says whether an inherited variable is a yarn berry npm setting
// that would send yarn elsewhere or with another credential: its registry
// (npmRegistryServer, npmScopes, npmPublishRegistry) and its token
// (npmAuthToken, npmAuthIdent, npmAlwaysAuth), and the http whitelist.
func yarnOwned(name string) bool {
	u := strings.ToUpper(name)
	return strings.HasPrefix(u, "YARN_NPM_") || u == "YARN_UNSAFE_HTTP_WHITELIST"
}
