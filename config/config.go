package config

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cproxy/cproxy/policy"
	"github.com/cproxy/cproxy/secrets"
)

// Config is the serve config file. Every field has a default (see Default); a file
// sets only what it changes. A path the file sets (the policy, the ready file, the
// sockets, the store, the audit file, the keyring's folder, a file: credential) may
// start with ~/ and hold $NAME or ${NAME}: LoadConfig expands them from the
// environment, then resolves the path against the config file's directory.
type Config struct {
	// Policy is the policy file. In the file it is relative to the config file's
	// directory; LoadConfig stores it resolved (joined with that directory), as
	// PolicyPath returns it. Empty means the built-in DefaultPolicy.
	Policy string `toml:"policy"`
	// PolicySettle is how long the policy file must stay unchanged, read
	// before and after, before a reload puts it in force, so that a file
	// still being written is not loaded half-written. Default 2s; must be
	// more than 0.
	PolicySettle Duration `toml:"policy_settle"`
	Listen       Listen   `toml:"listen"` // [listen]; every key has a default
	Store        Store    `toml:"store"`  // [store]; every key has a default
	// Upstream are the [upstream.NAME] tables, one for each of
	// UpstreamKinds, with its defaults where the file sets nothing; a
	// NAME that is not a kind is refused.
	Upstream map[string]*Upstream `toml:"upstream"`
	Log      Log                  `toml:"log"`     // [log]; every key has a default
	Keyring  Keyring              `toml:"keyring"` // [keyring]; every key has a default
	Claude   Claude               `toml:"claude"`  // [claude]; what cproxy env tells Claude Code in oauth mode
	Runtime  Runtime              `toml:"runtime"` // [runtime]; every key has a default
	// Relays are the [relay.NAME] tables: extra services the proxy listener
	// forwards to, by name.
	Relays map[string]*Relay `toml:"relay"`
	// MCP are the [mcp.NAME] tables: remote MCP servers, reached at
	// /mcp/NAME on the proxy listener (docs/mcp.md).
	MCP map[string]*MCP `toml:"mcp"`
	// Approvals is [approvals]: how requests the policy answers with ask
	// wait for an operator (docs/approvals.md); every key has a default.
	Approvals Approvals `toml:"approvals"`
	// Console is [console]: the operator console in the browser, on the
	// admin listener (docs/console.md); every key has a default.
	Console Console `toml:"console"`

	// Path is the file the config was loaded from; empty for Default().
	Path string `toml:"-"`
	// Rules is the loaded policy: Policy's file, or policy.DefaultPolicy() when Policy is empty. Never nil.
	Rules *policy.Policy `toml:"-"`

	file *policy.File // the keys the file sets, and where, for Explicit and ProblemAt
}

// Listen is where cproxy listens and how it is reached.
type Listen struct {
	// Proxy is what sandboxes reach: host:port, or "unix:PATH" for one Unix
	// socket shared by every sandbox (relative to the config file's directory;
	// LoadConfig stores it resolved). Default "127.0.0.1:8080"; port 0 picks a
	// free port.
	Proxy string `toml:"proxy"`
	// Admin is what the harness reaches, never the sandboxes: host:port, or
	// "unix:PATH" for a Unix socket that only cproxy's user may connect to
	// (relative to the config file's directory; LoadConfig stores it
	// resolved), in a directory others cannot write to. Default
	// "127.0.0.1:9001"; port 0 picks a free port.
	Admin string `toml:"admin"`
	// PublicURL is cproxy as the sandboxes see it (used by `cproxy env`): an absolute
	// http(s) URL without query or fragment. Empty means "http://" + the proxy listener's address.
	PublicURL string `toml:"public_url"`
	// ReadyFile, if set, is written (JSON: the proxy and admin addresses) once both
	// listeners listen. Relative to the config file's directory; LoadConfig stores it
	// resolved. Empty: none is written.
	ReadyFile string `toml:"ready_file"`
	// Drain is how long open requests may finish after SIGINT or SIGTERM. Default 30s.
	Drain Duration `toml:"drain"`
	// BodyTimeout is how long a request body may take to arrive after the
	// request is authenticated, beyond a second for every 16 KiB received:
	// past it, a body must keep up 16 KiB a second on average. It is also
	// the longest a read of the body waits for its next bytes, so bytes
	// sent early buy no silence later. Default 60s.
	BodyTimeout Duration `toml:"body_timeout"`
	// SandboxSockets is a directory where cproxy serves one Unix socket per
	// sandbox, DIR/SANDBOX.sock, for tokens bound to it (bind=socket). It must
	// exist and not be writable by others. Relative to the config file's
	// directory; LoadConfig stores it resolved. Empty: no per-sandbox sockets.
	SandboxSockets string `toml:"sandbox_sockets"`
	// ProxyTLS, if set, is a second proxy listener, host:port, that serves
	// the same routes as Proxy over TLS (1.2 or later), for clients that
	// speak only HTTPS to a host that is not their usual one; Proxy keeps
	// serving plain HTTP. Port 0 picks a free port. Empty: no TLS listener.
	ProxyTLS string `toml:"proxy_tls"`
	// TLSCert and TLSKey are credential sources ("file:PATH",
	// "keyring:NAME", "env:NAME") of ProxyTLS's certificate chain and its
	// private key, PEM; set both or neither. Neither: cproxy's local CA in
	// CADir signs a certificate for the names in listen.public_url, the
	// listener's address and localhost.
	TLSCert string `toml:"tls_cert"`
	TLSKey  string `toml:"tls_key"`
	// CADir is the folder of cproxy's local certificate authority (created
	// with mode 0700 when ProxyTLS is set and TLSCert is not). Default
	// $XDG_STATE_HOME/cproxy/ca, or $HOME/.local/state/cproxy/ca. Relative
	// to the config file's directory; LoadConfig stores it resolved.
	CADir string `toml:"ca_dir"`
}

// LocalCA reports whether the TLS proxy listener's certificate comes from
// cproxy's local CA in CADir: TLS asked for and no certificate given.
func (l Listen) LocalCA() bool { return l.ProxyTLS != "" && l.TLSCert == "" }

// UnixPrefix marks a listen.proxy or listen.admin that is a Unix socket
// path.
const UnixPrefix = "unix:"

// maxSocketPath is the longest Unix socket path every platform binds
// (sun_path is 104 bytes on macOS and the BSDs, 108 on Linux, with a NUL):
// routes.MaxSocketPath, which serve checks again once a path is resolved.
const maxSocketPath = 103

// maxSandboxSocketName is the longest name in listen.sandbox_sockets: a
// 63-character sandbox id and ".sock".
const maxSandboxSocketName = 63 + len(".sock")

// ProxySocket is the path of listen.proxy when it is a Unix socket, else "".
func (l Listen) ProxySocket() string { return SocketPath(l.Proxy) }

// AdminSocket is the path of listen.admin when it is a Unix socket, else "".
func (l Listen) AdminSocket() string { return SocketPath(l.Admin) }

// SocketPath is the path of a listener address "unix:PATH", else "".
func SocketPath(addr string) string {
	path, _ := strings.CutPrefix(addr, UnixPrefix)
	if len(path) == len(addr) {
		return ""
	}
	return path
}

// Store is where tokens are kept.
type Store struct {
	// Kind is StoreBolt, the embedded store (one cproxy, one file), or
	// StorePostgres, a PostgreSQL database that several cproxy replicas share.
	// Default "bolt".
	Kind string `toml:"kind"`
	// Path is the embedded store's file. Default $XDG_STATE_HOME/cproxy/cproxy.db, or
	// $HOME/.local/state/cproxy/cproxy.db. Relative to the config file's directory;
	// LoadConfig stores it resolved. Unused with kind = "postgres".
	Path string `toml:"path"`
	// DSN says where PostgreSQL's connection string (which holds its password)
	// comes from: a credential source, "env:NAME", "file:PATH" or
	// "keyring:NAME", never the string itself. Required with kind = "postgres";
	// empty otherwise.
	DSN string `toml:"dsn"`
	// LookupCache is how long a replica may answer a token look-up from
	// memory instead of the database, with kind = "postgres" only. Another
	// replica's revocation drops the sandbox's entries when its notification
	// arrives (LISTEN/NOTIFY), so the entries are in force until then, not
	// for the whole duration; the duration bounds them should a notification
	// never come. Zero (the default): no cache, every look-up reads the
	// database.
	LookupCache Duration `toml:"lookup_cache"`
	// Retention is how long a token is kept after it expired or was
	// revoked: past it, serve deletes the token and its usage in the
	// background (tokens.Store.Prune), so that the store holds what is
	// recent, not everything ever minted. Default DefaultRetention. Zero:
	// every token is kept for good.
	Retention Duration `toml:"retention"`
}

// DefaultRetention is store.retention's default: long enough to look into
// what a sandbox did last month, short enough that the store of a fleet
// minting thousands of tokens a day stays small.
const DefaultRetention = 30 * 24 * time.Hour

// Store kinds.
const (
	StoreBolt     = "bolt"
	StorePostgres = "postgres"
)

// LogFormats and LogLevels are the values log.format and log.level may
// take, which serve's --log-format and --log-level complete.
var (
	LogFormats = []string{"text", "json"}
	LogLevels  = []string{"debug", "info", "warn", "error"}
)

// Log says how cproxy logs.
type Log struct {
	// Format is "text" (the default) or "json".
	Format string `toml:"format"`
	// Level is "debug", "info" (the default), "warn" or "error".
	Level string `toml:"level"`
	// Audit is where the audit records, one per proxied request, go. Empty
	// (the default): to standard error with the diagnostic log, in its
	// format. AuditStdout: to standard output, as JSON lines. Anything else
	// is a file, relative to the config file's directory (LoadConfig stores
	// it resolved), that serve appends JSON lines to, creating it with mode
	// 0600; its directory must exist.
	Audit string `toml:"audit"`
}

// Approvals is how requests the policy answers with ask (a push rule's ask)
// are filed for an operator's approval.
type Approvals struct {
	// GrantLifetime is how long an approved request's grant may be used by
	// the request's retry, once. Default 1h; must be more than 0.
	GrantLifetime Duration `toml:"grant_lifetime"`
	// RequestLifetime is how long a request waits for a decision before it
	// expires, and how long a denial stands (the same request is refused
	// without asking again). Default 24h; must be more than 0.
	RequestLifetime Duration `toml:"request_lifetime"`
	// Webhook is an http or https URL that gets a POST of each new approval
	// request, a JSON body (WebhookFormat). It is never logged or echoed:
	// a Slack incoming webhook's URL is its secret. Empty: none is sent.
	Webhook string `toml:"webhook"`
	// WebhookFormat is the webhook's body: "json" (the approval and a line
	// of text, the default) or "slack" (a Slack incoming webhook's
	// {"text": …}).
	WebhookFormat string `toml:"webhook_format"`
}

// Console is the operator console that the admin listener serves at /
// (docs/console.md).
type Console struct {
	// Enabled serves the console. Default true; false answers / as the
	// admin API answers a path it does not have.
	Enabled bool `toml:"enabled"`
	// Hosts are the Host headers, besides the admin listener's own address
	// (and localhost with its port, on a loopback listener), that the
	// console's pages answer: the names an operator's browser reaches it
	// by, such as "cproxy.internal:9001". Any other Host is refused, so a
	// site whose name rebinds to the listener's address cannot read the
	// pages. Empty: the listener's own address only.
	Hosts []string `toml:"hosts"`
	// Password says where the console's login password hash comes from:
	// a credential source ("env:NAME", "file:PATH", "keyring:NAME") holding
	// a bcrypt hash (cproxy console hash makes one). Empty: no password.
	Password string `toml:"password"`
	// UserHeader is the request header in which a reverse proxy in front
	// of the admin listener names the user it has authenticated (such as
	// "X-Forwarded-User"); a console request without it is refused. The
	// proxy must set it itself, never pass the client's on. Empty: none.
	UserHeader string `toml:"user_header"`
}

func (c Console) validate(f *policy.File) {
	checkCredential(f, policy.KeyOf("console", "password"), c.Password, false, true)
	if h := c.UserHeader; h != "" && !headerNameRE.MatchString(h) {
		f.AtValue(policy.KeyOf("console", "user_header"), "console.user_header: %q is not a header name (e.g. \"X-Forwarded-User\")", h)
	}
	if c.Password != "" && c.UserHeader != "" {
		f.AtKey(policy.KeyOf("console", "user_header"), "console.user_header: give password or user_header, not both")
	}
	for i, h := range c.Hosts {
		if h == "" || strings.ContainsAny(h, "/ @?#") {
			f.AtValue(policy.KeyOf("console", "hosts").Elem(i), "console.hosts: %q is not a host or host:port (e.g. \"cproxy.internal:9001\")", h)
		}
	}
}

// The webhook formats of approvals.webhook_format.
const (
	WebhookJSON  = "json"
	WebhookSlack = "slack"
)

func (a Approvals) validate(f *policy.File) {
	checkPositive(f, policy.KeyOf("approvals", "grant_lifetime"), a.GrantLifetime, "1h")
	checkPositive(f, policy.KeyOf("approvals", "request_lifetime"), a.RequestLifetime, "24h")
	if a.Webhook != "" {
		// The URL is never echoed: its path may be its secret.
		p := policy.KeyOf("approvals", "webhook")
		u, err := url.Parse(a.Webhook)
		switch {
		case err != nil || !u.IsAbs() || u.Opaque != "" || (u.Scheme != "http" && u.Scheme != "https"):
			f.AtValue(p, "%s: not an absolute http or https URL (e.g. \"https://hooks.example.com/cproxy\")", p)
		case u.User != nil:
			f.AtValue(p, "%s: the URL must not carry user info", p)
		case u.Hostname() == "":
			f.AtValue(p, "%s: the URL has no host", p)
		case u.Fragment != "" || strings.Contains(a.Webhook, "#"):
			f.AtValue(p, "%s: the URL must not have a fragment", p)
		}
	}
	if a.WebhookFormat != WebhookJSON && a.WebhookFormat != WebhookSlack {
		f.AtValue(policy.KeyOf("approvals", "webhook_format"), "approvals.webhook_format: %q is not a format (use %q or %q)", a.WebhookFormat, WebhookJSON, WebhookSlack)
	}
}

// Runtime is how much of the machine cproxy serve uses.
type Runtime struct {
	// CPUs is how many CPUs may run cproxy's code at once: Go's GOMAXPROCS.
	// Default 1, or GOMAXPROCS from the environment when that is set. 0
	// means as many as Go would choose: the machine's CPUs, or fewer under
	// a container's CPU limit. One is cproxy's default because it shares its
	// machine with the sandboxes it serves and spends most of each request
	// waiting: with more, Go's scheduler wakes and parks threads on the
	// other CPUs for every request, CPU that the sandboxes lose and that
	// makes each request slower (docs/benchmarks.md, "One CPU").
	CPUs int64 `toml:"cpus"`
	// MaxConnections bounds the connections the sandboxes hold open at
	// once, on the proxy listener and the per-sandbox sockets together;
	// past it a new connection is closed as soon as it is accepted. It
	// keeps file descriptors for the admin listener (so the harness can
	// always revoke), the token store and the upstream connections. Zero
	// (the default): derived from the open-file limit at start
	// (DefaultMaxConnections).
	MaxConnections int64 `toml:"max_connections"`
	// BodyMemoryMiB bounds the memory, in MiB, that request bodies read
	// whole to be checked (model requests, npm audits, a push's ref
	// updates) may hold at once, across every request. A request that
	// would pass it waits briefly, then gets a 503 with Retry-After.
	// Default 256; at least MinBodyMemoryMiB, the largest body cproxy
	// reads whole. A body takes it as its bytes arrive, not on the length
	// it declares.
	BodyMemoryMiB int64 `toml:"body_memory_mib"`
	// BodyMemorySandboxMiB bounds what one sandbox's request bodies may
	// hold of BodyMemoryMiB at once, so that one sandbox cannot fill it for
	// the others: past it the sandbox's request waits briefly, then gets a
	// 429 with Retry-After. Zero (the default): a quarter of
	// BodyMemoryMiB, at least MinBodyMemoryMiB (64 MiB of the default
	// 256). Else from MinBodyMemoryMiB to BodyMemoryMiB.
	BodyMemorySandboxMiB int64 `toml:"body_memory_sandbox_mib"`
}

// Runtime defaults and bounds.
const (
	// DefaultBodyMemoryMiB is runtime.body_memory_mib's default: eight of
	// the largest model requests at once, hundreds of ordinary ones.
	DefaultBodyMemoryMiB = 256
	// MinBodyMemoryMiB is the largest request body cproxy reads whole (a
	// model request, as large as the Anthropic API takes): a smaller
	// budget could never hold one.
	MinBodyMemoryMiB = 32
	// reservedFiles are the open files DefaultMaxConnections keeps back
	// at least, for the admin listener, the token store, log files and
	// idle upstream connections.
	reservedFiles = 128
	// maxBodyMemoryMiB is 1 TiB: more is a typo.
	maxBodyMemoryMiB = 1 << 20
)

// DefaultMaxConnections is runtime.max_connections when it is zero, for a
// process allowed nofile open files. A quarter of them (at least
// reservedFiles) is kept back for the admin listener, the token store, log
// files and idle upstream connections; each sandbox connection may need a
// second descriptor for its upstream, so the bound is half of the rest.
// At least 1.
func DefaultMaxConnections(nofile uint64) int64 {
	reserve := max(nofile/4, reservedFiles)
	if nofile <= reserve+2 {
		return 1
	}
	return int64(min((nofile-reserve)/2, 1<<30))
}

// maxCPUs is the most runtime.cpus may be. Go sets no limit; more than any
// machine cproxy would run on is more likely a typo than a choice.
const maxCPUs = 1024

// defaultCPUs is runtime.cpus when nothing sets it: GOMAXPROCS from the
// environment, as Go reads it (a positive integer; anything else is
// ignored; above maxCPUs, maxCPUs), else 1.
func defaultCPUs() int64 {
	if n, err := strconv.Atoi(os.Getenv("GOMAXPROCS")); err == nil && n > 0 {
		return int64(min(n, maxCPUs))
	}
	return 1
}

// AuditStdout is the log.audit that sends the audit records to standard
// output.
const AuditStdout = "stdout"

// Keyring backends, as keyring.backend names them.
var keyringBackends = []string{"auto", "keychain", "secret-service", "kwallet", "pass", "file"}

// Keyring is the OS keyring that keyring:NAME credentials are read from and
// `cproxy secret` writes to.
type Keyring struct {
	// Backend is "auto" (the default: the macOS Keychain, the Secret Service,
	// KWallet, pass, then the file backend, the first that works), "keychain",
	// "secret-service", "kwallet", "pass" or "file".
	Backend string `toml:"backend"`
	// Service names cproxy's entries in the keyring (the Keychain service, the
	// Secret Service collection, the KWallet folder, the pass directory).
	// Default "cproxy".
	Service string `toml:"service"`
	// FileDir is the file backend's directory of encrypted entries. Default
	// $XDG_DATA_HOME/cproxy/keyring, or $HOME/.local/share/cproxy/keyring.
	// Relative to the config file's directory; LoadConfig stores it resolved.
	FileDir string `toml:"file_dir"`
}

// Claude is what `cproxy env --claude-auth oauth` tells Claude Code about the
// subscription behind a setup-token upstream. A setup-token carries no plan,
// and with a custom base URL Claude Code treats the account as an API
// account; these restore the subscription's features. Every key is optional:
// unset, its variable is left out.
type Claude struct {
	// SubscriptionType is the plan, for CLAUDE_CODE_SUBSCRIPTION_TYPE:
	// "pro", "max", "team" or "enterprise".
	SubscriptionType string `toml:"subscription_type"`
	// RateLimitTier is the plan's tier, for CLAUDE_CODE_RATE_LIMIT_TIER,
	// e.g. "default_claude_max_20x".
	RateLimitTier string `toml:"rate_limit_tier"`
	// OAuthScopes are the token's scopes, for CLAUDE_CODE_OAUTH_SCOPES
	// (space-separated), e.g. ["user:inference"].
	OAuthScopes []string `toml:"oauth_scopes"`
	// AssumeFirstParty sets _CLAUDE_CODE_ASSUME_FIRST_PARTY_BASE_URL=1, an
	// undocumented Claude Code variable that makes it treat cproxy's base
	// URL as api.anthropic.com. Default false.
	AssumeFirstParty bool `toml:"assume_first_party"`
}

var (
	claudeSubscriptions = []string{"pro", "max", "team", "enterprise"}
	claudeTierRE        = regexp.MustCompile(`^[a-z0-9_]{1,64}$`)
	claudeScopeRE       = regexp.MustCompile(`^[a-z0-9_]+(:[a-z0-9_]+)*$`)
)

func (c Claude) validate(f *policy.File) {
	if c.SubscriptionType != "" && !slices.Contains(claudeSubscriptions, c.SubscriptionType) {
		f.AtValue(policy.KeyOf("claude", "subscription_type"), `claude.subscription_type: %q is not a Claude plan (use "pro", "max", "team" or "enterprise")`, c.SubscriptionType)
	}
	if c.RateLimitTier != "" && !claudeTierRE.MatchString(c.RateLimitTier) {
		f.AtValue(policy.KeyOf("claude", "rate_limit_tier"), `claude.rate_limit_tier: %q is not a tier name (lower-case letters, digits and '_', e.g. "default_claude_max_20x")`, c.RateLimitTier)
	}
	for i, sc := range c.OAuthScopes {
		if len(sc) > 64 || !claudeScopeRE.MatchString(sc) {
			f.AtValue(policy.KeyOf("claude", "oauth_scopes").Elem(i), `claude.oauth_scopes[%d]: %q is not an OAuth scope (e.g. "user:inference")`, i, sc)
		}
	}
}

// Duration is a time.Duration written in TOML as a string such as "30s" or "10m".
type Duration struct{ time.Duration }

// UnmarshalText parses a Go duration string.
func (d *Duration) UnmarshalText(text []byte) error {
	v, err := policy.ParseDuration(string(text))
	if errors.Is(err, policy.ErrDurationTooLong) {
		return fmt.Errorf(`%q is too long: the longest duration is "2562047h" (about 292 years)`, text)
	}
	if err != nil {
		return fmt.Errorf(`%q is not a duration (e.g. "30s", "10m", "1h30m")`, text)
	}
	d.Duration = v
	return nil
}

// MarshalText writes the duration as time.Duration.String does.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// TOMLWant says what the TOML text looks like, for the "must be …, not …"
// message of a value of the wrong type (policy.File).
func (Duration) TOMLWant() string { return `a duration string like "30s"` }

// Default returns the embedded defaults: what `cproxy serve` runs on with no config.
func Default() *Config {
	return &Config{
		PolicySettle: Duration{2 * time.Second},
		Listen:       Listen{Proxy: "127.0.0.1:8080", Admin: "127.0.0.1:9001", Drain: Duration{30 * time.Second}, BodyTimeout: Duration{time.Minute}, CADir: defaultStatePath("ca")},
		Store:        Store{Kind: StoreBolt, Path: defaultStatePath("cproxy.db"), Retention: Duration{DefaultRetention}},
		Upstream:     defaultUpstreams(),
		Log:          Log{Format: "text", Level: "info"},
		Keyring:      Keyring{Backend: secrets.BackendAuto, Service: secrets.DefaultService, FileDir: secrets.DefaultKeyringDir()},
		Runtime:      Runtime{CPUs: defaultCPUs(), BodyMemoryMiB: DefaultBodyMemoryMiB},
		Approvals:    Approvals{GrantLifetime: Duration{time.Hour}, RequestLifetime: Duration{24 * time.Hour}, WebhookFormat: WebhookJSON},
		Console:      Console{Enabled: true},
		Rules:        policy.DefaultPolicy(),
	}
}

// defaultStatePath is name in cproxy's state folder, following the XDG base
// directory spec; "" when neither variable helps.
func defaultStatePath(name string) string {
	if dir := os.Getenv("XDG_STATE_HOME"); filepath.IsAbs(dir) {
		return filepath.Join(dir, "cproxy", name)
	}
	if home := os.Getenv("HOME"); filepath.IsAbs(home) {
		return filepath.Join(home, ".local", "state", "cproxy", name)
	}
	return ""
}

// PolicyPath is the policy file to load (again, on reload): Policy, which LoadConfig
// has resolved against the config file's directory. Empty means DefaultPolicy.
func (c *Config) PolicyPath() string { return c.Policy }

// Validate checks the config's values as LoadConfig does, for values changed after
// loading (flags, environment). It returns nil or a *policy.Problems whose problems have no
// position, since the values need not come from the file.
func (c *Config) Validate() error {
	f, _ := policy.ParseFile("", nil)
	c.validate(f)
	probs := f.Problems()
	if len(probs) == 0 {
		return nil
	}
	for i := range probs {
		probs[i].Line, probs[i].Col = 0, 0
	}
	return &probs
}

// ProblemAt makes a policy.Problem about key's value (a dotted name such as
// "upstream.anthropic.credential"), placed where the file sets it; without a
// position when the value is a default or came from a flag. For problems found
// after loading, such as a credential that cannot be read.
func (c *Config) ProblemAt(key, format string, args ...any) policy.Problem {
	p := policy.Problem{Message: key + ": " + fmt.Sprintf(format, args...)}
	if c.Explicit(key) {
		p.File = c.Path
		p.Line, p.Col = c.file.Position(policy.KeyOf(strings.Split(key, ".")...))
	}
	return p
}

// Explicit reports whether the config file set key, a dotted name such as
// "upstream.anthropic.credential"; false for every key of Default().
func (c *Config) Explicit(key string) bool { return c.file != nil && c.file.Sets(key) }

// LoadConfig reads the config file at path over the defaults, then the policy file it
// names. A file that cannot be read gives its os error; a file with problems gives a
// *policy.Problems listing all of them, the policy file's included.
func LoadConfig(path string) (*Config, error) {
	data, err := policy.ReadFile(path)
	if err != nil {
		return nil, err
	}
	c, probs := loadConfig(path, data, policy.ReadFile)
	if len(probs) > 0 {
		return nil, &probs
	}
	return c, nil
}

// loadConfig loads a config from data, and its policy file through readPolicy.
func loadConfig(file string, data []byte, readPolicy func(string) ([]byte, error)) (*Config, policy.Problems) {
	f, probs := policy.ParseFile(file, data)
	if probs != nil {
		return nil, probs
	}
	c := Default()
	f.Decode(c, configHint)
	c.refuseUnknownUpstreams(f)
	c.impliedAuth(f)
	c.impliedCredential(f)
	c.Path = file
	c.file = f
	c.expandPaths(f)
	c.validate(f)

	dir := filepath.Dir(file)
	c.Listen.ReadyFile = resolve(dir, c.Listen.ReadyFile)
	c.Listen.SandboxSockets = resolve(dir, c.Listen.SandboxSockets)
	if sock := c.Listen.ProxySocket(); sock != "" {
		c.Listen.Proxy = UnixPrefix + resolve(dir, sock)
	}
	if sock := c.Listen.AdminSocket(); sock != "" {
		c.Listen.Admin = UnixPrefix + resolve(dir, sock)
	}
	c.Store.Path = resolve(dir, c.Store.Path)
	c.Listen.CADir = resolve(dir, c.Listen.CADir)
	c.Keyring.FileDir = resolve(dir, c.Keyring.FileDir)
	if a := c.Log.Audit; a != "" && a != AuditStdout {
		c.Log.Audit = resolve(dir, a)
		if auditPathOK(a) {
			checkAuditFile(f, c.Log.Audit)
		}
	}
	creds := []*string{&c.Store.DSN, &c.Listen.TLSCert, &c.Listen.TLSKey, &c.Console.Password}
	for _, k := range UpstreamKinds {
		creds = append(creds, &c.Upstream[k.Name].Credential, &c.Upstream[k.Name].PrivateKey)
	}
	for _, cred := range creds {
		if name, ok := strings.CutPrefix(*cred, "file:"); ok && name != "" {
			*cred = "file:" + resolve(dir, name)
		}
	}
	// A relay header's file: credential is relative to the config too.
	for _, r := range c.Relays {
		for h, rh := range r.Headers {
			if name, ok := strings.CutPrefix(rh.Credential, "file:"); ok && name != "" {
				rh.Credential = "file:" + resolve(dir, name)
				r.Headers[h] = rh
			}
		}
	}

	for _, m := range c.MCP {
		creds := []*string{&m.Credential}
		if m.OAuth != nil {
			creds = append(creds, &m.OAuth.ClientSecret, &m.OAuth.RefreshToken)
		}
		for _, cred := range creds {
			if name, ok := strings.CutPrefix(*cred, "file:"); ok && name != "" {
				*cred = "file:" + resolve(dir, name)
			}
		}
	}

	var policyProbs policy.Problems
	if c.Policy != "" {
		c.Policy = resolve(dir, c.Policy)
		pdata, err := readPolicy(c.Policy)
		if err != nil {
			f.AtValue(policy.KeyOf("policy"), "policy: %q: %s", c.Policy, policy.ReadProblem(err))
		} else if c.Rules, err = policy.ParsePolicy(c.Policy, pdata); err != nil {
			errors.As(err, &policyProbs)
		} else {
			policyProbs = c.CheckPolicy(c.Rules)
		}
	}
	probs = f.Problems()
	probs.Sort()
	if probs = append(probs, policyProbs...); len(probs) > 0 {
		return nil, probs
	}
	return c, nil
}

func resolve(dir, name string) string {
	if name == "" || filepath.IsAbs(name) {
		return name
	}
	return filepath.Join(dir, name)
}

func configHint(key string) string {
	if slices.Contains(policy.PolicyKeys, key) {
		return `profiles and [[sandbox]] rules go in the policy file that policy = "…" names`
	}
	return ""
}

func (c *Config) validate(f *policy.File) {
	checkListener(f, policy.KeyOf("listen", "proxy"), c.Listen.Proxy, "unix:/run/cproxy/proxy.sock")
	checkListener(f, policy.KeyOf("listen", "admin"), c.Listen.Admin, "unix:/run/cproxy/admin.sock")
	if c.Listen.SandboxSockets != "" {
		checkSocketPath(f, policy.KeyOf("listen", "sandbox_sockets"), c.Listen.SandboxSockets, 1+maxSandboxSocketName, "/run/cproxy/sandboxes")
	}
	switch p, a := c.Listen.ProxySocket(), c.Listen.AdminSocket(); {
	case p != "" && p == a:
		f.AtValue(policy.KeyOf("listen", "admin"), "listen.admin: same socket as listen.proxy (sandboxes must never reach the admin API; pick another path, e.g. \"unix:/run/cproxy/admin.sock\")")
	case p == "" && c.Listen.Proxy == c.Listen.Admin && !strings.HasSuffix(c.Listen.Admin, ":0"):
		f.AtValue(policy.KeyOf("listen", "admin"), "listen.admin: same address as listen.proxy (sandboxes must never reach the admin API; pick another port)")
	}
	if c.Listen.PublicURL != "" {
		checkURL(f, policy.KeyOf("listen", "public_url"), c.Listen.PublicURL, "http://10.20.30.4:8080")
	}
	c.Listen.validateTLS(f)
	checkPositive(f, policy.KeyOf("listen", "drain"), c.Listen.Drain, "30s")
	checkPositive(f, policy.KeyOf("listen", "body_timeout"), c.Listen.BodyTimeout, "60s")
	checkPositive(f, policy.KeyOf("policy_settle"), c.PolicySettle, "2s")
	c.Store.validate(f)

	c.validateUpstreams(f)

	c.Keyring.validate(f)
	c.Claude.validate(f)
	c.validateRelays(f)
	c.validateMCP(f)
	c.Approvals.validate(f)
	c.Console.validate(f)

	if n := c.Runtime.CPUs; n < 0 || n > maxCPUs {
		f.AtValue(policy.KeyOf("runtime", "cpus"), "runtime.cpus: %d is not a number of CPUs (use 1 to %d, or 0 for as many as Go would use)", n, maxCPUs)
	}
	if n := c.Runtime.MaxConnections; n < 0 {
		f.AtValue(policy.KeyOf("runtime", "max_connections"), "runtime.max_connections: %d is not a number of connections (use 1 or more, or 0 to derive it from the open-file limit)", n)
	}
	if n := c.Runtime.BodyMemoryMiB; n < MinBodyMemoryMiB || n > maxBodyMemoryMiB {
		f.AtValue(policy.KeyOf("runtime", "body_memory_mib"), "runtime.body_memory_mib: %d is out of range (use %d MiB, the largest request body, to %d; the default is %d)", n, MinBodyMemoryMiB, maxBodyMemoryMiB, DefaultBodyMemoryMiB)
	} else if n := c.Runtime.BodyMemorySandboxMiB; n != 0 && (n < MinBodyMemoryMiB || n > c.Runtime.BodyMemoryMiB) {
		f.AtValue(policy.KeyOf("runtime", "body_memory_sandbox_mib"), "runtime.body_memory_sandbox_mib: %d is out of range (use %d MiB, the largest request body, to runtime.body_memory_mib's %d, or 0 for a quarter of it)", n, MinBodyMemoryMiB, c.Runtime.BodyMemoryMiB)
	}
	if lf := c.Log.Format; !slices.Contains(LogFormats, lf) {
		f.AtValue(policy.KeyOf("log", "format"), `log.format: %q is not a log format (use "text" or "json")`, lf)
	}
	if l := c.Log.Level; !slices.Contains(LogLevels, l) {
		f.AtValue(policy.KeyOf("log", "level"), `log.level: %q is not a log level (use "debug", "info", "warn" or "error")`, l)
	}
	switch a := c.Log.Audit; {
	case a == "stderr":
		f.AtValue(policy.KeyOf("log", "audit"), `log.audit: "stderr" is not a destination: leave log.audit out to keep the audit lines with the diagnostic log on standard error, or use "stdout" or a file path (e.g. "audit.jsonl")`)
	case !auditPathOK(a):
		f.AtValue(policy.KeyOf("log", "audit"), `log.audit: %q is not a file path (e.g. "/var/log/cproxy/audit.jsonl")`, a)
	}
}

// validateTLS checks the TLS proxy listener's keys.
func (l Listen) validateTLS(f *policy.File) {
	key := func(name string) policy.Key { return policy.KeyOf("listen", name) }
	if l.ProxyTLS == "" {
		for _, k := range []struct{ name, value string }{{"tls_cert", l.TLSCert}, {"tls_key", l.TLSKey}} {
			if k.value != "" {
				f.AtValue(key(k.name), `listen.%s: only with listen.proxy_tls, the TLS listener it is for (e.g. proxy_tls = "127.0.0.1:8443")`, k.name)
			}
		}
		return
	}
	switch {
	case strings.HasPrefix(l.ProxyTLS, UnixPrefix):
		f.AtValue(key("proxy_tls"), `listen.proxy_tls: a TLS listener is host:port, not a Unix socket (a socket needs no TLS: use listen.proxy = %q)`, l.ProxyTLS)
	case !strings.HasSuffix(l.ProxyTLS, ":0") && (l.ProxyTLS == l.Proxy || l.ProxyTLS == l.Admin):
		f.AtValue(key("proxy_tls"), "listen.proxy_tls: same address as listen.proxy or listen.admin (pick another port, e.g. \"127.0.0.1:8443\")")
	default:
		checkHostPort(f, key("proxy_tls"), l.ProxyTLS)
	}
	for _, k := range []struct{ name, value string }{{"tls_cert", l.TLSCert}, {"tls_key", l.TLSKey}} {
		checkCredential(f, key(k.name), k.value, false, false)
	}
	switch {
	case l.TLSCert != "" && l.TLSKey == "":
		f.AtValue(key("tls_cert"), `listen.tls_key: listen.tls_cert needs its private key's source too (e.g. "file:/etc/cproxy/tls/key.pem"), or leave both out for cproxy's local CA`)
	case l.TLSCert == "" && l.TLSKey != "":
		f.AtValue(key("tls_key"), `listen.tls_cert: listen.tls_key needs the certificate's source too (e.g. "file:/etc/cproxy/tls/cert.pem"), or leave both out for cproxy's local CA`)
	case l.LocalCA() && l.CADir == "":
		f.AtValue(key("ca_dir"), "listen.ca_dir: no default without $XDG_STATE_HOME or $HOME (set listen.ca_dir, or listen.tls_cert and listen.tls_key)")
	}
}

// auditPathOK reports whether a log.audit value can name a file.
func auditPathOK(a string) bool {
	return a != "stderr" && strings.IndexByte(a, 0) < 0 && !strings.HasSuffix(a, "/")
}

// checkAuditFile checks, at load, that serve will be able to create or
// append to the audit file: its directory exists, and it is not a directory.
// Whether cproxy may write there is for serve to find out.
func checkAuditFile(f *policy.File, file string) {
	p := policy.KeyOf("log", "audit")
	if fi, err := os.Stat(file); err == nil && fi.IsDir() {
		f.AtValue(p, "log.audit: %q is a directory (name a file in it, e.g. %q)", file, filepath.Join(file, "audit.jsonl"))
		return
	}
	dir := filepath.Dir(file)
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		f.AtValue(p, "log.audit: the directory of %q does not exist (create %s, or point log.audit elsewhere)", file, dir)
	}
}

// keyringNameRule words secrets.CheckName's rule for messages that name the
// key and give an example.
const keyringNameRule = "1 to 128 letters, digits, '.', '_' and '-', starting with a letter or digit"

func (k Keyring) validate(f *policy.File) {
	if !slices.Contains(keyringBackends, k.Backend) {
		f.AtValue(policy.KeyOf("keyring", "backend"), `keyring.backend: %q is not a keyring backend (use "auto", "keychain", "secret-service", "kwallet", "pass" or "file")`, k.Backend)
	}
	if len(k.Service) > 64 || secrets.CheckName(k.Service) != nil {
		f.AtValue(policy.KeyOf("keyring", "service"), `keyring.service: must be 1 to 64 letters, digits, '.', '_' and '-', starting with a letter or digit (e.g. "cproxy")`)
	}
	if k.FileDir == "" && k.Backend == "file" {
		f.AtValue(policy.KeyOf("keyring", "file_dir"), "keyring.file_dir: no default without $XDG_DATA_HOME or $HOME (set keyring.file_dir)")
	}
}

func checkHostPort(f *policy.File, p policy.Key, s string) {
	_, port, err := net.SplitHostPort(s)
	if err != nil {
		f.AtValue(p, `%s: %q is not host:port (e.g. "127.0.0.1:8080")`, p, s)
		return
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		f.AtValue(p, `%s: port %q is not a number from 0 to 65535 (e.g. "127.0.0.1:8080")`, p, port)
	}
}

// checkListener checks a listener's address: host:port, or unix:PATH
// (example) for a Unix socket.
func checkListener(f *policy.File, p policy.Key, addr, example string) {
	if strings.HasPrefix(addr, UnixPrefix) {
		checkSocketPath(f, p, SocketPath(addr), 0, example)
	} else {
		checkHostPort(f, p, addr)
	}
}

// checkSocketPath checks a Unix socket path, or with extra > 0 a directory
// of sockets whose names add extra bytes. A relative path counts as it will
// be once resolved against the config file's directory, which loadConfig
// does after validating; the length check is then a little lenient, and
// serve checks the resolved path again before it listens.
func checkSocketPath(f *policy.File, p policy.Key, s string, extra int, example string) {
	what, limit := "a Unix socket path", ""
	if extra > 0 {
		what, limit = "a folder of Unix sockets", fmt.Sprintf(", so that DIR/SANDBOX.sock fits in %d", maxSocketPath)
	}
	switch {
	case s == "" || strings.IndexByte(s, 0) >= 0:
		f.AtValue(p, "%s: needs a path (e.g. %q)", p, example)
	case len(s)+extra > maxSocketPath:
		f.AtValue(p, "%s: %q is %d bytes, too long for %s: at most %d bytes%s (as much as sun_path holds on every platform); use a shorter path, e.g. %q", p, s, len(s), what, maxSocketPath-extra, limit, example)
	}
}

// checkURL accepts an absolute http or https URL with a host and nothing that would
// change where requests go or carry a secret: no user info, query or fragment.
func checkURL(f *policy.File, p policy.Key, s, example string) {
	shown := strconv.Quote(s)
	if strings.Contains(s, "@") { // it may hold a password: never echo it
		shown = "the URL"
	}
	u, err := url.Parse(s)
	switch {
	case err != nil || !u.IsAbs() || u.Opaque != "" || (u.Scheme != "http" && u.Scheme != "https"):
		f.AtValue(p, "%s: %s is not an absolute http or https URL (e.g. %q)", p, shown, example)
	case u.User != nil:
		f.AtValue(p, "%s: the URL must not carry user info (put the secret behind credential = …)", p)
	case u.Host == "" || u.Hostname() == "":
		f.AtValue(p, "%s: %s has no host (e.g. %q)", p, shown, example)
	case u.RawQuery != "" || u.ForceQuery:
		f.AtValue(p, "%s: %s must not have a query", p, shown)
	case u.Fragment != "" || strings.Contains(s, "#"):
		f.AtValue(p, "%s: %s must not have a fragment", p, shown)
	}
}

func checkPositive(f *policy.File, p policy.Key, v Duration, example string) {
	if v.Duration <= 0 {
		f.AtValue(p, "%s: must be more than 0 (e.g. %q)", p, example)
	}
}

func (s Store) validate(f *policy.File) {
	if s.Retention.Duration < 0 {
		f.AtValue(policy.KeyOf("store", "retention"), `store.retention: must not be negative (e.g. "720h", 30 days; "0s" keeps every token)`)
	}
	if s.LookupCache.Duration < 0 {
		f.AtValue(policy.KeyOf("store", "lookup_cache"), `store.lookup_cache: must not be negative (e.g. "30s"; "0s" is no cache)`)
	}
	switch s.Kind {
	case StoreBolt:
		if s.Path == "" {
			f.AtValue(policy.KeyOf("store", "path"), "store.path: no default without $XDG_STATE_HOME or $HOME (set store.path)")
		}
		if s.DSN != "" {
			f.AtValue(policy.KeyOf("store", "dsn"), `store.dsn: only for kind = "postgres" (the embedded store is a file: store.path)`)
		}
		if s.LookupCache.Duration > 0 {
			f.AtValue(policy.KeyOf("store", "lookup_cache"), `store.lookup_cache: only for kind = "postgres" (the embedded store keeps its records in memory already): remove it, or set kind = "postgres"`)
		}
	case StorePostgres:
		p := policy.KeyOf("store", "dsn")
		switch kind, _, _ := strings.Cut(s.DSN, ":"); {
		case s.DSN == "":
			// Placed at the kind, which is what asks for it.
			f.AtValue(policy.KeyOf("store", "kind"), `store.dsn: kind = "postgres" needs the connection string's credential source (e.g. "env:CPROXY_PG_DSN")`)
		case kind == "env" || kind == "file" || kind == "keyring":
			checkCredential(f, p, s.DSN, false, false)
		default:
			f.AtValue(p, `store.dsn: not a credential source (use "env:NAME", "file:PATH" or "keyring:NAME"; never the connection string itself, which holds the password)`)
		}
		if f.Sets("store.path") {
			f.AtValue(policy.KeyOf("store", "path"), `store.path: only for kind = "bolt" (kind = "postgres" keeps tokens in the database store.dsn names)`)
		}
	default:
		// A kind is not a secret, but a value pasted into the wrong key might be.
		f.AtValue(policy.KeyOf("store", "kind"), `store.kind: not a store kind (use "bolt" or "postgres")`)
	}
}

var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// checkCredential checks the syntax of a credential source; whether it can be read
// is for serve to find out. claudeCode allows "claude-code"; emptyOK lists "" among the
// sources in the message for one that is none (the caller checks an empty one). No
// message echoes the value: a user may have pasted the secret itself.
func checkCredential(f *policy.File, p policy.Key, s string, claudeCode, emptyOK bool) {
	sources := []string{"env:NAME", "file:PATH", "keyring:NAME"}
	kind, rest, _ := strings.Cut(s, ":")
	switch {
	case s == "":
	case s == "claude-code":
		if !claudeCode {
			f.AtValue(p, "%s: claude-code is Claude Code's Anthropic login and serves %s only (use %s)", p,
				orList(upstreamNames(func(k UpstreamKind) bool { return k.ClaudeCode }), false), orList(sources, true))
		}
	case kind == "env":
		if !envNameRE.MatchString(rest) {
			f.AtValue(p, "%s: env: needs an environment variable name: letters, digits and _, not starting with a digit (e.g. \"env:GITHUB_TOKEN\")", p)
		}
	case kind == "file":
		if rest == "" {
			f.AtValue(p, `%s: file: needs a path (e.g. "file:/etc/cproxy/anthropic.key")`, p)
		}
	case kind == "keyring":
		if secrets.CheckName(rest) != nil {
			f.AtValue(p, `%s: keyring: needs an entry name of %s (e.g. "keyring:anthropic")`, p, keyringNameRule)
		}
	default:
		if claudeCode {
			sources = append(sources, "claude-code")
		}
		if emptyOK {
			sources = append(sources, "")
		}
		f.AtValue(p, "%s: not a credential source (use %s; never the secret itself)", p, orList(sources, true))
	}
}
