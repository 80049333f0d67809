package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/cproxy/cproxy/client"
	"github.com/cproxy/cproxy/config"
	"github.com/cproxy/cproxy/policy"
	adminapi "github.com/cproxy/cproxy/routes/admin"
	"github.com/cproxy/cproxy/tokens"
)

func adminFlag() cli.Flag {
	return cmdline(&cli.StringFlag{Name: "admin", Usage: "admin API `URL`, or unix:PATH for its Unix socket (default: from --config, else http://127.0.0.1:9001)", EnvVars: []string{"CPROXY_ADMIN_URL"}})
}

// cmdline makes f a flag that knows whether the command line gave it, for
// given: urfave/cli's IsSet is true for a value from the flag's
// environment variable too.
func cmdline(f *cli.StringFlag) cli.Flag { return &cmdlineFlag{f} }

type cmdlineFlag struct{ *cli.StringFlag }

// Apply registers the flag as urfave/cli does, with a value that counts
// the command line's settings of it (the environment's is not one: it is
// the flag's default by then).
func (f *cmdlineFlag) Apply(set *flag.FlagSet) error {
	if err := f.StringFlag.Apply(set); err != nil {
		return err
	}
	for _, name := range f.Names() {
		if fl := set.Lookup(name); fl != nil {
			fl.Value = &countedValue{Value: fl.Value}
		}
	}
	return nil
}

// countedValue is a flag's value that counts how often the command line
// set it; urfave/cli's Context.Count reads the count.
type countedValue struct {
	flag.Value
	n int
}

func (v *countedValue) Set(s string) error { v.n++; return v.Value.Set(s) }
func (v *countedValue) Count() int         { return v.n }
func (v *countedValue) Get() any           { return v.Value.String() }

// given reports whether the command line gave the flag name (made with
// cmdline), rather than its environment variable.
func given(c *cli.Context, name string) bool { return c.Count(name) > 0 }

// listening returns the addresses a config's cproxy serve listens on: the
// configured ones, or for port 0 the ones it wrote to its ready file.
func listening(cfg *config.Config) (proxy, admin string, err error) {
	proxy, admin = cfg.Listen.Proxy, cfg.Listen.Admin
	if docListener != nil {
		proxy, admin = docListener(proxy), docListener(admin)
	}
	if !portZero(proxy) && !portZero(admin) {
		return proxy, admin, nil
	}
	if cfg.Listen.ReadyFile == "" {
		return "", "", fail("set listen.ready_file so cproxy can read the ports serve picked, or pass --admin and --proxy-url",
			"%s: a listener on port 0 has no fixed address", cfg.Path)
	}
	b, err := os.ReadFile(cfg.Listen.ReadyFile)
	if err != nil {
		return "", "", fail("is cproxy serve running with this config?", "%s: listener addresses: %v", cfg.Path, err)
	}
	var r readyInfo
	if err := json.Unmarshal(b, &r); err != nil || r.Proxy == "" || r.Admin == "" {
		return "", "", fail("", "%s: not a cproxy ready file", cfg.Listen.ReadyFile)
	}
	return r.Proxy, r.Admin, nil
}

// portZero reports whether a listener's address asks for a free port: a
// Unix socket's path is its address.
func portZero(addr string) bool {
	return !strings.HasPrefix(addr, config.UnixPrefix) && strings.HasSuffix(addr, ":0")
}

// adminURL is the admin API's URL for a listener's address: http://
// host:port, or a Unix socket's unix:PATH, which the client dials as it is.
func adminURL(addr string) string {
	if strings.HasPrefix(addr, config.UnixPrefix) {
		return addr
	}
	return "http://" + addr
}

// adminClient is the client package's Client for a running cproxy's admin
// listener, at base.
type adminClient struct {
	*client.Client
	base string
}

// The default admin API, of a cproxy serve on the embedded defaults.
const defaultAdminURL = "http://127.0.0.1:9001"

// docListener is nil in cproxy itself. The test binary sets it for the
// documentation's examples, whose cproxy serve listens where
// CPROXY_PROXY_ADDR and CPROXY_ADMIN_ADDR say rather than on the default
// 127.0.0.1:8080 and 127.0.0.1:9001: it gives the address the CLI reaches
// for one a config, or the default, names.
var docListener func(addr string) string

// newAdminClient finds the admin URL. The command line beats the
// environment: --admin, else --config's listen.admin, else
// CPROXY_ADMIN_URL, else CPROXY_CONFIG's listen.admin, else the default
// listener. When CPROXY_ADMIN_URL names another, a line on stderr says
// which is used and why. An admin URL found through a config is checked,
// on the first call, to be the admin API of a cproxy serve of that config
// (serveChecker).
func newAdminClient(c *cli.Context) (*adminClient, error) {
	env := os.Getenv("CPROXY_ADMIN_URL")
	base, from := "", ""
	var cfg *config.Config
	switch path := c.String("config"); {
	case given(c, "admin"):
		base, from = c.String("admin"), "--admin"
	case path != "" && (given(c, "config") || env == ""):
		var err error
		if cfg, err = loadConfig(path); err != nil {
			return nil, err
		}
		_, addr, err := listening(cfg)
		if err != nil {
			return nil, err
		}
		base, from = adminURL(addr), "--config "+path
		if !given(c, "config") {
			from = "CPROXY_CONFIG=" + path
		}
	case env != "":
		base, from = env, "CPROXY_ADMIN_URL"
	default:
		base = defaultAdminURL
		if docListener != nil {
			base = adminURL(docListener(strings.TrimPrefix(base, "http://")))
		}
	}
	if env != "" && from != "CPROXY_ADMIN_URL" && strings.TrimRight(env, "/") != strings.TrimRight(base, "/") {
		fmt.Fprintf(c.App.ErrWriter, "cproxy: using admin %s from %s (CPROXY_ADMIN_URL=%s ignored)\n", shownURL(base), from, shownURL(env))
	}
	var opts []client.Option
	if cfg != nil {
		opts = append(opts, client.WithHTTPClient(&http.Client{Timeout: adminTimeout, Transport: &serveChecker{
			next: transportTo(base), base: base, from: from, cfg: cfg, stderr: c.App.ErrWriter}}))
	}
	cl, err := client.New(base, opts...)
	if err != nil {
		return nil, fail("use a URL such as http://127.0.0.1:9001, or unix:PATH for the admin listener's Unix socket", "invalid admin URL %q", base)
	}
	return &adminClient{Client: cl, base: strings.TrimRight(base, "/")}, nil
}

// transportTo is what an admin client of base sends its requests
// through, as the client package would choose it: a Unix socket's dialer
// for unix:PATH, else http.DefaultTransport.
func transportTo(base string) http.RoundTripper {
	path, ok := strings.CutPrefix(base, client.UnixPrefix)
	if !ok {
		return http.DefaultTransport
	}
	return &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", path)
	}}
}

// adminTimeout bounds each call of the CLI to the admin API, as the client
// package's own default does.
const adminTimeout = 30 * time.Second

// serveChecker is the transport of an admin client whose URL a config gave
// (listen.admin, or its ready file): before the first request goes out, it
// asks the cproxy there what it serves (GET /healthz, one round trip per
// command) and fails every request, so that nothing is minted or revoked,
// if that is another config, or this config on another admin listener
// than the file names. Another cproxy serve may well hold the port: one
// on other settings, or on the embedded defaults, while the one on this
// config was moved with serve --admin-addr.
type serveChecker struct {
	next   http.RoundTripper
	base   string // the admin URL
	from   string // where it came from: "--config FILE", "CPROXY_CONFIG=FILE"
	cfg    *config.Config
	stderr io.Writer

	once sync.Once
	err  error
}

func (s *serveChecker) RoundTrip(r *http.Request) (*http.Response, error) {
	s.once.Do(func() { s.err = s.check(r.Context()) })
	if s.err != nil {
		return nil, s.err
	}
	return s.next.RoundTrip(r)
}

// wrongServe is serveChecker's refusal: the admin API answering is not the
// config's cproxy serve.
type wrongServe struct{ err error }

func (w *wrongServe) Error() string { return w.err.Error() }
func (w *wrongServe) Unwrap() error { return w.err }

// check asks the admin API what it serves and compares it with the config.
// An answer that is not GET /healthz's leaves the request to find out what
// answers, as it would without the check; an unreachable one fails it as
// the request itself would.
func (s *serveChecker) check(ctx context.Context) error {
	cl, err := client.New(s.base, client.WithHTTPClient(&http.Client{Transport: s.next}))
	if err != nil {
		return err
	}
	got, err := cl.Serving(ctx)
	var unreached *url.Error
	switch {
	case errors.As(err, &unreached):
		return unreached.Err
	case err != nil:
		return nil
	}
	_, listenAdmin, _ := listening(s.cfg)
	want := configIdentity(s.cfg.Path)
	serve := "cproxy serve --config " + s.cfg.Path
	hint := fmt.Sprintf("point --admin at the admin listener of %s: e.g. --admin http://127.0.0.1:19001 if it was started with --admin-addr 127.0.0.1:19001 (its \"cproxy listening\" log line says admin=)", serve)
	switch {
	case got.Config == "":
		fmt.Fprintf(s.stderr, "cproxy: the admin API at %s does not say which config it serves (an older cproxy): not checked that it is %s\n", shownURL(s.base), serve)
		return nil
	case !sameConfig(got.Config, want):
		what := "the embedded default config"
		if got.Config != client.EmbeddedConfig {
			what = got.Config
		}
		return &wrongServe{fail(hint, "the admin API at %s (from %s) is a cproxy serve of %s%s, not of %s: nothing done",
			shownURL(s.base), s.from, what, pidOf(got), want)}
	case got.Admin != "" && !sameListener(listenAdmin, got.Admin):
		return &wrongServe{fail(fmt.Sprintf("pass --admin http://%s, the admin listener it was moved to", got.Admin),
			"the admin API at %s (from %s) is a cproxy serve of %s%s, but it listens on %s, not on %s, the file's listen.admin: nothing done",
			shownURL(s.base), s.from, want, pidOf(got), got.Admin, listenAdmin)}
	}
	return nil
}

// shownURL is an admin URL as a message may show it: a password in it, for
// a proxy in front of the admin API, is left out.
func shownURL(s string) string {
	if u, err := url.Parse(s); err == nil && u.User != nil {
		return u.Redacted()
	}
	return s
}

// pidOf words the process id a cproxy serve gave: " (pid 1234)", or "".
func pidOf(s client.Serving) string {
	if s.PID == 0 {
		return ""
	}
	return fmt.Sprintf(" (pid %d)", s.PID)
}

// configIdentity is how GET /healthz names a config file: its absolute
// path, or client.EmbeddedConfig for none.
func configIdentity(path string) string {
	if path == "" {
		return client.EmbeddedConfig
	}
	if abs, err := filepath.Abs(path); err == nil {
		return abs
	}
	return path
}

// sameConfig reports whether served, the config a cproxy serve says it
// serves, is the file want: the same path, or another name of the same
// file (a symbolic link).
func sameConfig(served, want string) bool {
	if served == client.EmbeddedConfig || want == client.EmbeddedConfig {
		return served == want
	}
	return samePath(served, want)
}

// samePath reports whether a and b name one file: the same absolute path,
// or the same file by another name.
func samePath(a, b string) bool {
	if abs, err := filepath.Abs(a); err == nil {
		a = abs
	}
	if abs, err := filepath.Abs(b); err == nil {
		b = abs
	}
	if a == b {
		return true
	}
	sa, errA := os.Stat(a)
	sb, errB := os.Stat(b)
	return errA == nil && errB == nil && os.SameFile(sa, sb)
}

// sameListener reports whether a listener bound to bound is the one a
// config names as named: the same Unix socket, or the same port, on the
// same address unless either is a wildcard or a host name (which cproxy
// does not resolve for this).
func sameListener(named, bound string) bool {
	if named == bound {
		return true
	}
	if np, ok := strings.CutPrefix(named, config.UnixPrefix); ok {
		bp, ok := strings.CutPrefix(bound, config.UnixPrefix)
		return ok && samePath(np, bp)
	}
	nh, np, err1 := net.SplitHostPort(named)
	bh, bp, err2 := net.SplitHostPort(bound)
	if err1 != nil || err2 != nil || np != bp {
		return false
	}
	nip, bip := net.ParseIP(nh), net.ParseIP(bh)
	return nh == "" || nip == nil || bip == nil || nip.IsUnspecified() || bip.IsUnspecified() || nip.Equal(bip)
}

// failed words an error of one of the client's calls for the CLI: the
// admin API's refusal in its own words, or why it could not be asked, with
// a hint. Nil stays nil.
func (a *adminClient) failed(err error) error {
	var refused *client.Error
	var unreached *url.Error
	var wrong *wrongServe
	switch {
	case err == nil:
		return nil
	case errors.As(err, &wrong):
		return wrong.err
	case errors.As(err, &refused) && strings.HasPrefix(refused.Message, "cproxy: "):
		// cproxy's own refusal: every one starts so (docs/admin-api.md).
		return fail("", "%s", strings.TrimPrefix(refused.Message, "cproxy: "))
	case errors.As(err, &refused):
		return fail("is that URL cproxy's admin listener?", "admin API at %s answered %d %s", a.base, refused.StatusCode, http.StatusText(refused.StatusCode))
	case errors.As(err, &unreached):
		return fail("is cproxy serve running? point --admin or CPROXY_ADMIN_URL at its admin listener",
			"cannot reach the admin API at %s: %v", a.base, unreached.Err)
	}
	return fail("", "%s", strings.TrimPrefix(err.Error(), "cproxy client: "))
}

// budgetFlag is --budget, shared by token create, env and exec.
func budgetFlag() cli.Flag {
	return &cli.StringFlag{Name: "budget", Usage: "the token's own budget over its profile's, as `JSON`, e.g. {\"output_tokens\": 200000, \"window\": \"day\"}"}
}

// valuesFlag is --values, shared by token create, env and exec.
func valuesFlag() cli.Flag {
	return &cli.StringFlag{Name: "values", Usage: "per-token values for relays, from a JSON `FILE` such as {\"mod_token\": \"…\"} (- for standard input), sealed with the token"}
}

// readValues reads --values: a JSON object of names to string values,
// from a file or standard input, so that no value is on the command line.
func readValues(c *cli.Context) (map[string]string, error) {
	path := c.String("values")
	if path == "" {
		return nil, nil
	}
	var data []byte
	var err error
	if path == "-" {
		data, err = io.ReadAll(io.LimitReader(c.App.Reader, 64<<10))
	} else {
		data, err = os.ReadFile(path)
	}
	if err != nil {
		return nil, fail("", "--values: %v", err)
	}
	var values map[string]string
	if err := json.Unmarshal(data, &values); err != nil || values == nil {
		return nil, fail(`the file holds one JSON object of names to strings, e.g. {"mod_token": "…"}`, "--values %s is not a JSON object of strings", path)
	}
	return values, nil
}

// mintFlags reads the token flags that token create, env and exec share,
// checked here, as the admin API would, so that a mistake is refused even
// when serve is down.
func mintFlags(c *cli.Context) (client.CreateOptions, error) {
	values, err := readValues(c)
	if err != nil {
		return client.CreateOptions{}, err
	}
	o := client.CreateOptions{Profile: c.String("profile"), Source: c.String("source"), Bind: c.String("bind"), Values: values}
	if ttl := c.String("ttl"); ttl != "" {
		if o.TTL, err = adminapi.ParseTTL(ttl); err != nil {
			return client.CreateOptions{}, fail("", "%v", err)
		}
	}
	if b := c.String("budget"); b != "" {
		if dup, _ := adminapi.DuplicateKey([]byte(b)); dup != "" {
			return client.CreateOptions{}, fail("give each key once", "--budget: the key %q is given more than once (keys are matched without regard to case)", dup)
		}
		budget, err := policy.ParseBudget([]byte(b))
		if err != nil {
			return client.CreateOptions{}, fail(`e.g. --budget '{"requests": 100, "output_tokens": 200000, "window": "day"}' (see docs/policy.md#budgets)`, "--budget: %v", err)
		}
		cb := client.Budget(budget)
		o.Budget = &cb
	}
	return o, nil
}

func sandboxFlag() cli.Flag {
	return &cli.StringFlag{Name: "sandbox", Aliases: []string{"s"}, Usage: "sandbox `ID`"}
}

// sandboxIDRule is the hint for an invalid sandbox id.
const sandboxIDRule = "ids are 1-63 characters of a-z, 0-9 and '-', starting with a letter or digit"

// sandboxArg returns --sandbox, checked here rather than by the admin API
// so a typo is refused even when serve is down. The flag is not marked
// Required: urfave/cli would print the command's help on stdout, which is
// for data.
func sandboxArg(c *cli.Context, required bool) (string, error) {
	id := c.String("sandbox")
	switch {
	case id == "" && required:
		return "", fail("pass --sandbox ID", "no sandbox")
	case id != "" && !tokens.ValidSandboxID(id):
		return "", fail(sandboxIDRule, "invalid sandbox id %q", id)
	}
	return id, nil
}
