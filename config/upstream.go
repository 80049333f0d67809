package config

import (
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cproxy/cproxy/policy"
)

// Upstream is one [upstream.NAME]: the service a route forwards to, and the
// credential cproxy sends there. Its defaults are its kind's (UpstreamKinds).
type Upstream struct {
	// URL is the service's base URL. Default: its kind's URL.
	URL string `toml:"url"`
	// Credential says where the real credential comes from: "env:NAME",
	// "file:PATH" (relative to the config file's directory; LoadConfig
	// stores it resolved), "keyring:NAME", or, for a kind whose ClaudeCode
	// is set, "claude-code". Default: its kind's Credential. Empty means
	// requests go upstream without a credential, which a kind with Required
	// refuses.
	Credential string `toml:"credential"`
	// Auth is how the credential is sent: one of its kind's Auths, the
	// first by default; empty for a kind that has none, which refuses the
	// key. With Credential "claude-code" it defaults to AuthOAuth, and any
	// other mode is refused.
	Auth string `toml:"auth"`
	// HeaderTimeout is how long to wait for the upstream's response headers
	// before answering 504. Default: its kind's HeaderTimeout.
	HeaderTimeout Duration `toml:"header_timeout"`
	// Concurrent is how many requests of one sandbox token to this route
	// may be in flight at once; RequestsPerMinute is its rate there. Zero:
	// the route's default (docs/config.md). Counted in each process.
	Concurrent        int64 `toml:"concurrent"`
	RequestsPerMinute int64 `toml:"requests_per_minute"`

	// AppID is a GitHub App's id (its settings page's "App ID"): cproxy
	// then mints an installation token per sandbox, repository and access
	// with the App's private key instead of sending Credential, which must
	// be left out. Zero: no App. Only for a kind whose AppAPI is set.
	AppID int64 `toml:"app_id"`
	// PrivateKey says where the App's private key (PEM) comes from, as
	// Credential does ("env:NAME", "file:PATH", "keyring:NAME"). Required
	// with AppID.
	PrivateKey string `toml:"private_key"`
	// InstallationID is the App's installation whose tokens are minted.
	// Zero: each repository's, looked up per owner (GET
	// /repos/OWNER/NAME/installation).
	InstallationID int64 `toml:"installation_id"`
	// APIURL is the REST API the tokens are minted at. Default: its kind's
	// AppAPI (https://api.github.com; https://HOST/api/v3 for GitHub
	// Enterprise Server).
	APIURL string `toml:"api_url"`
	// FilesURL is the host the upstream's answers point at for what they
	// list (PyPI's index names distribution files on
	// https://files.pythonhosted.org/): the route fetches them there.
	// Default: its kind's FilesURL; only for a kind that has one. The
	// credential goes there only when it is on url's scheme, host and port.
	FilesURL string `toml:"files_url"`
	// sharesApp, set by impliedCredential, says the upstream shares the
	// GitHub App of its kind's AppFrom (SharesApp).
	sharesApp bool
}

// App reports whether u is a GitHub App's (app_id is set).
func (u *Upstream) App() bool { return u.AppID != 0 }

// Auth modes, for an upstream whose kind has Auths.
const (
	AuthAPIKey = "api-key" // the credential is an API key, sent as x-api-key
	AuthOAuth  = "oauth"   // the credential is a Claude OAuth (setup-)token, sent as Authorization: Bearer
	AuthBasic  = "basic"   // the credential is USER:PASSWORD (or a token, user __token__), sent as Authorization: Basic
	AuthBearer = "bearer"  // the credential is a token, sent as Authorization: Bearer
)

// An UpstreamKind is what cproxy knows of one [upstream.NAME]: its
// defaults, what it accepts, and how messages speak of it.
type UpstreamKind struct {
	Name          string        // NAME in [upstream.NAME]
	Prefix        string        // the prefix of the route that forwards to it ("/v1/"), which no relay may take
	URL           string        // url's default, and the example in messages about it
	Credential    string        // credential's default; "" is none
	HeaderTimeout time.Duration // header_timeout's default
	// Required, if set, says why credential may not be empty, for the
	// message that refuses it; "" lets it be empty (no credential).
	Required string
	// ClaudeCode is whether credential = "claude-code", Claude Code's
	// Anthropic login, may serve it.
	ClaudeCode bool
	// Auths are the auth modes it takes, the default first; none: it has
	// no auth key.
	Auths []string
	// Missing is serve's start-up warning when the default credential is
	// not set.
	Missing string
	// AppAPI is api_url's default for a kind that takes a GitHub App
	// (app_id); "" for a kind that takes none, which refuses the App keys.
	AppAPI string
	// AppFrom names the kind whose GitHub App this one shares, when that
	// kind has one and this one's credential is not set: its requests
	// then carry that App's installation tokens. "": none.
	AppFrom string
	// FilesURL is files_url's default for a kind whose answers point at a
	// second host of the upstream (PyPI's files host); "" for a kind that
	// has none, which refuses the key.
	FilesURL string
}

// UpstreamKinds are the upstreams cproxy knows, one per route that forwards
// to a fixed service (routes/builtin registers the routes; its tests hold
// the two tables to each other), sorted by name. Default, validation, file: paths and
// serve's credential loading all loop over it: a new kind is a new entry.
var UpstreamKinds = []UpstreamKind{
	{
		Name: "anthropic", Prefix: "/v1/", URL: "https://api.anthropic.com", Credential: "env:ANTHROPIC_API_KEY", HeaderTimeout: 10 * time.Minute,
		Required: "the model route needs a credential", ClaudeCode: true, Auths: []string{AuthAPIKey, AuthOAuth},
		Missing: "no Anthropic credential: model requests will be refused until it is set",
	},
	{
		Name: "github", Prefix: "/github/", URL: "https://github.com", Credential: "env:GITHUB_TOKEN", HeaderTimeout: 2 * time.Minute,
		Missing: "no GitHub credential: git requests will be refused until it is set",
		AppAPI:  "https://api.github.com",
	},
	{
		Name: "githubapi", Prefix: "/api/", URL: "https://api.github.com", Credential: "env:GITHUB_TOKEN", HeaderTimeout: 2 * time.Minute,
		Missing: "no GitHub API credential: GitHub API requests will be refused until it is set",
		AppFrom: "github",
	},
	{
		// A private module proxy (Athens, Artifactory) takes its token as
		// a Bearer token; proxy.golang.org needs none.
		Name: "gomod", Prefix: "/gomod/", URL: "https://proxy.golang.org", HeaderTimeout: 2 * time.Minute,
		Missing: "no Go module proxy credential: Go module requests will be refused until it is set",
	},
	{
		Name: "npm", Prefix: "/npm/", URL: "https://registry.npmjs.org", HeaderTimeout: 2 * time.Minute,
		Missing: "no npm credential: npm requests will be refused until it is set",
	},
	{
		Name: "pypi", Prefix: "/pypi/", URL: "https://pypi.org/simple/", HeaderTimeout: 2 * time.Minute,
		Missing:  "no PyPI index credential: PyPI requests will be refused until it is set",
		Auths:    []string{AuthBasic, AuthBearer},
		FilesURL: "https://files.pythonhosted.org/",
	},
}

// defaultUpstreams are the [upstream.*] tables of Default: one per kind.
func defaultUpstreams() map[string]*Upstream {
	ups := make(map[string]*Upstream, len(UpstreamKinds))
	for _, k := range UpstreamKinds {
		u := &Upstream{URL: k.URL, Credential: k.Credential, HeaderTimeout: Duration{k.HeaderTimeout}, APIURL: k.AppAPI, FilesURL: k.FilesURL}
		if len(k.Auths) > 0 {
			u.Auth = k.Auths[0]
		}
		ups[k.Name] = u
	}
	return ups
}

// upstreamNames are the names, as "upstream.NAME", of the kinds that has
// picks out, for messages.
func upstreamNames(has func(UpstreamKind) bool) []string {
	var names []string
	for _, k := range UpstreamKinds {
		if has(k) {
			names = append(names, "upstream."+k.Name)
		}
	}
	return names
}

// refuseUnknownUpstreams reports each [upstream.NAME] that is not a kind,
// with the kinds and the fix, and drops it.
func (c *Config) refuseUnknownUpstreams(f *policy.File) {
	var known []string
	for _, k := range UpstreamKinds {
		known = append(known, k.Name)
	}
	for _, name := range sortedKeys(c.Upstream) {
		if slices.Contains(known, name) {
			continue
		}
		f.Unknown(policy.KeyOf("upstream"), name, known,
			"known upstreams: "+strings.Join(known, ", ")+"; for another service, add a [relay."+name+"] table")
		delete(c.Upstream, name)
	}
}

// impliedAuth applies the rule that credential = "claude-code" implies
// auth = "oauth": Claude Code's login is an OAuth token.
func (c *Config) impliedAuth(f *policy.File) {
	for _, k := range UpstreamKinds {
		if u := c.Upstream[k.Name]; k.ClaudeCode && u.Credential == "claude-code" && !f.Sets("upstream."+k.Name+".auth") {
			u.Auth = AuthOAuth
		}
	}
}

func (c *Config) validateUpstreams(f *policy.File) {
	for _, k := range UpstreamKinds {
		u, key := c.Upstream[k.Name], policy.KeyOf("upstream", k.Name)
		checkURL(f, key.Dot("url"), u.URL, k.URL)
		if u.Credential == "" && k.Required != "" {
			f.AtValue(key.Dot("credential"), "%s: must not be empty: %s (e.g. %q)", key.Dot("credential"), k.Required, k.Credential)
		}
		checkCredential(f, key.Dot("credential"), u.Credential, k.ClaudeCode, k.Required == "")
		auth := key.Dot("auth")
		switch {
		case len(k.Auths) == 0:
			if u.Auth != "" {
				f.AtKey(auth, "%s: %s has no auth modes (auth is for %s): remove it", auth, key, orList(upstreamNames(func(k UpstreamKind) bool { return len(k.Auths) > 0 }), false))
			}
		case !slices.Contains(k.Auths, u.Auth):
			f.AtValue(auth, "%s: %q is not an auth mode (use %s)", auth, u.Auth, orList(k.Auths, true))
		case u.Credential == "claude-code" && u.Auth != AuthOAuth:
			f.AtValue(auth, `%s: %q cannot send credential = "claude-code": Claude Code's login is an OAuth token (use %q, or leave auth out: claude-code implies it)`, auth, u.Auth, AuthOAuth)
		}
		checkPositive(f, key.Dot("header_timeout"), u.HeaderTimeout, shortDuration(k.HeaderTimeout))
		checkLimits(f, key, u.Concurrent, u.RequestsPerMinute)
		c.validateApp(f, k)
		switch {
		case k.FilesURL != "":
			checkURL(f, key.Dot("files_url"), u.FilesURL, k.FilesURL)
		case u.FilesURL != "":
			f.AtKey(key.Dot("files_url"), "%s: %s has no files host (files_url is for %s): remove it", key.Dot("files_url"), key,
				orList(upstreamNames(func(k UpstreamKind) bool { return k.FilesURL != "" }), false))
		}
	}
}

// appKeys are the keys of a GitHub App in an [upstream.NAME].
var appKeys = []string{"app_id", "private_key", "installation_id", "api_url"}

// impliedCredential applies the rule that a GitHub App replaces the
// credential: with app_id set, the kind's default credential (a token from
// the environment) is not loaded; nor is that of a kind that shares the
// App (AppFrom) and sets no credential of its own, which then shares it.
func (c *Config) impliedCredential(f *policy.File) {
	for _, k := range UpstreamKinds {
		if f.Sets("upstream." + k.Name + ".credential") {
			continue
		}
		u := c.Upstream[k.Name]
		switch {
		case u.App():
			u.Credential = ""
		case c.appFrom(k):
			u.Credential, u.sharesApp = "", true
		}
	}
}

// SharesApp reports whether kind k's requests carry the installation
// tokens of the GitHub App of the kind it names in AppFrom: that kind has
// one, and k's credential is not set.
func (c *Config) SharesApp(k UpstreamKind) bool {
	u := c.Upstream[k.Name]
	return u != nil && u.sharesApp && c.appFrom(k)
}

// appFrom reports whether the kind k's AppFrom names has a GitHub App.
func (c *Config) appFrom(k UpstreamKind) bool {
	from, ok := c.Upstream[k.AppFrom]
	return k.AppFrom != "" && ok && from != nil && from.App()
}

// validateApp checks an upstream's GitHub App keys: only for a kind that
// takes an App; app_id with private_key, installation_id only with them;
// never with a credential. It reads the values alone, not which keys the file
// sets: Validate checks a config changed after loading.
func (c *Config) validateApp(f *policy.File, k UpstreamKind) {
	u, key := c.Upstream[k.Name], policy.KeyOf("upstream", k.Name)
	given := map[string]bool{"app_id": u.AppID != 0, "private_key": u.PrivateKey != "", "installation_id": u.InstallationID != 0, "api_url": u.APIURL != k.AppAPI}
	if k.AppAPI == "" {
		for _, name := range appKeys {
			if given[name] {
				f.AtKey(key.Dot(name), "%s: %s takes no GitHub App (%s is for %s): remove it", key.Dot(name), key, name,
					orList(upstreamNames(func(k UpstreamKind) bool { return k.AppAPI != "" }), false))
			}
		}
		return
	}
	if !u.App() {
		for _, name := range appKeys[1:] {
			if given[name] {
				f.AtKey(key.Dot(name), "%s: needs %s, the GitHub App's id (the App ID on its settings page): set it, or remove %s to send credential", key.Dot(name), key.Dot("app_id"), name)
			}
		}
		return
	}
	if u.AppID < 0 {
		f.AtValue(key.Dot("app_id"), "%s: %d is not a GitHub App id (the App ID on the App's settings page, a positive number)", key.Dot("app_id"), u.AppID)
	}
	if u.Credential != "" {
		f.AtValue(key.Dot("credential"), "%s: cannot be combined with %s: a GitHub App mints its own tokens; remove credential to use the App, or remove app_id, private_key and installation_id to send the token", key.Dot("credential"), key.Dot("app_id"))
	}
	if u.PrivateKey == "" {
		f.AtKey(key.Dot("app_id"), "%s: needs %s, where the App's private key (PEM) comes from (e.g. %q)", key.Dot("app_id"), key.Dot("private_key"), "file:/etc/cproxy/github-app.pem")
	} else {
		checkCredential(f, key.Dot("private_key"), u.PrivateKey, false, false)
	}
	if u.InstallationID < 0 {
		f.AtValue(key.Dot("installation_id"), "%s: %d is not an installation id (a positive number: the end of the installation's settings URL; leave it out to look it up per repository owner)", key.Dot("installation_id"), u.InstallationID)
	}
	checkURL(f, key.Dot("api_url"), u.APIURL, k.AppAPI)
}

// orList words items as `a, b or c`, each quoted if quote is set.
func orList(items []string, quote bool) string {
	if quote {
		items = slices.Clone(items)
		for i, s := range items {
			items[i] = strconv.Quote(s)
		}
	}
	if len(items) < 2 {
		return strings.Join(items, "")
	}
	return strings.Join(items[:len(items)-1], ", ") + " or " + items[len(items)-1]
}

// shortDuration is d as a config would write it: "10m", not "10m0s".
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
