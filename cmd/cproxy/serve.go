package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"
	"golang.org/x/term"

	"github.com/cproxy/cproxy/client"
	"github.com/cproxy/cproxy/config"
	"github.com/cproxy/cproxy/policy"
	"github.com/cproxy/cproxy/routes"
	"github.com/cproxy/cproxy/routes/admin"
	"github.com/cproxy/cproxy/routes/audit"
	"github.com/cproxy/cproxy/routes/builtin"
	"github.com/cproxy/cproxy/routes/console"
	"github.com/cproxy/cproxy/routes/mcp"
	"github.com/cproxy/cproxy/routes/relay"
	"github.com/cproxy/cproxy/routes/webhook"
	"github.com/cproxy/cproxy/secrets"
	"github.com/cproxy/cproxy/tokens"
)

// HTTP server limits for both listeners. Headers are small (a token, a few
// anthropic-* flags); a client that takes longer than this to send them is
// holding a connection open, not making a request.
const (
	readHeaderTimeout = 30 * time.Second
	idleTimeout       = 120 * time.Second
	maxHeaderBytes    = 64 << 10
)

func configFlag() cli.Flag {
	return cmdline(&cli.StringFlag{Name: "config", Aliases: []string{"c"}, Usage: "config `FILE` (TOML)", EnvVars: []string{"CPROXY_CONFIG"}})
}

func serveCommand() *cli.Command {
	return &cli.Command{
		Name:      "serve",
		Usage:     "run the proxy: a proxy listener for the sandboxes and an admin listener for the harness",
		ArgsUsage: " ",
		Description: `Runs until SIGINT or SIGTERM, then drains and exits 0; SIGHUP reloads the policy file.
Without --config it runs on the embedded defaults.

Examples:

   cproxy serve --config /etc/cproxy/cproxy.toml
   cproxy serve --proxy-addr 127.0.0.1:0 --admin-addr 127.0.0.1:0 --ready-file ready.json`,
		Flags: []cli.Flag{
			configFlag(),
			&cli.StringFlag{Name: "proxy-addr", Usage: "proxy listener `HOST:PORT`, or unix:PATH (listen.proxy)", EnvVars: []string{"CPROXY_PROXY_ADDR"}},
			&cli.StringFlag{Name: "proxy-tls-addr", Usage: "TLS proxy listener `HOST:PORT`, beside the plain one (listen.proxy_tls)", EnvVars: []string{"CPROXY_PROXY_TLS_ADDR"}},
			&cli.StringFlag{Name: "admin-addr", Usage: "admin listener `HOST:PORT`, or unix:PATH (listen.admin)", EnvVars: []string{"CPROXY_ADMIN_ADDR"}},
			&cli.StringFlag{Name: "public-url", Usage: "cproxy's `URL` as the sandboxes see it (listen.public_url)", EnvVars: []string{"CPROXY_PUBLIC_URL"}},
			&cli.StringFlag{Name: "ready-file", Usage: "write the listening addresses to `FILE` once both listen (listen.ready_file)", EnvVars: []string{"CPROXY_READY_FILE"}},
			&cli.StringFlag{Name: "store", Usage: "token store `PATH` (store.path)", EnvVars: []string{"CPROXY_STORE"}},
			&cli.StringFlag{Name: "log-format", Usage: "text or json (log.format)", EnvVars: []string{"CPROXY_LOG_FORMAT"}},
			&cli.StringFlag{Name: "log-level", Usage: "debug, info, warn or error (log.level)", EnvVars: []string{"CPROXY_LOG_LEVEL"}},
			&cli.Int64Flag{Name: "cpus", Usage: "how many CPUs may run cproxy at once, 0 for all (runtime.cpus)", DefaultText: "1, or $GOMAXPROCS", EnvVars: []string{"CPROXY_CPUS"}},
		},
		Action: func(c *cli.Context) error {
			cfg, err := loadConfig(c.String("config"))
			if err != nil {
				return err
			}
			if err := applyServeFlags(c, cfg); err != nil {
				return err
			}
			if adjustServeConfig != nil {
				if err := adjustServeConfig(cfg); err != nil {
					return err
				}
			}
			return serve(c.Context, cfg, c.App.Writer, c.App.ErrWriter)
		},
	}
}

// adjustServeConfig is nil in cproxy itself. The test binary sets it so
// that the documentation's examples, which start `cproxy serve` on the
// embedded defaults or on configs naming the real APIs, reach loopback fakes
// and never a real upstream.
var adjustServeConfig func(*config.Config) error

// loadConfig loads the config file, or the embedded defaults for "".
func loadConfig(path string) (*config.Config, error) {
	if path == "" {
		return config.Default(), nil
	}
	cfg, err := config.LoadConfig(path)
	if err != nil {
		return nil, configError(err)
	}
	return cfg, nil
}

// configError prints every problem of a config or policy file, one
// file:line:col line each.
func configError(err error) error {
	var probs policy.Problems
	if errors.As(err, &probs) {
		lines := make([]string, len(probs))
		for i, p := range probs {
			lines[i] = p.String()
		}
		return fail("", "%s", strings.Join(lines, "\ncproxy: "))
	}
	return fail("", "%v", err)
}

func applyServeFlags(c *cli.Context, cfg *config.Config) error {
	set := func(flag string, dst *string) {
		if c.IsSet(flag) {
			*dst = c.String(flag)
		}
	}
	set("proxy-addr", &cfg.Listen.Proxy)
	set("proxy-tls-addr", &cfg.Listen.ProxyTLS)
	set("admin-addr", &cfg.Listen.Admin)
	set("public-url", &cfg.Listen.PublicURL)
	set("ready-file", &cfg.Listen.ReadyFile)
	set("store", &cfg.Store.Path)
	set("log-format", &cfg.Log.Format)
	set("log-level", &cfg.Log.Level)
	if c.IsSet("cpus") {
		cfg.Runtime.CPUs = c.Int64("cpus")
	}
	if err := cfg.Validate(); err != nil {
		return configError(err)
	}
	return nil
}

// newLoggers returns the diagnostic log, at the configured level, and the
// audit log, which writes every request whatever that level is.
func newLoggers(cfg config.Log, w io.Writer) (log, auditLog *slog.Logger) {
	level := slog.LevelInfo
	_ = level.UnmarshalText([]byte(cfg.Level))
	if cfg.Format == "json" {
		w = jsonLogWriter{w}
		return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level})), slog.New(slog.NewJSONHandler(w, nil))
	}
	// The audit log's lines are slog's text lines; audit's handler writes a
	// request's line (one per request) with less work.
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level})), slog.New(audit.NewTextHandler(w, nil))
}

// loadCredentials reads every upstream credential before a socket opens,
// one for each of config.UpstreamKinds, by name. A credential the config
// names explicitly must load; an embedded default (env:ANTHROPIC_API_KEY,
// env:GITHUB_TOKEN) may be missing, and then that route's requests are
// answered with what to set. The keyring is opened once, for the first
// keyring:NAME; on a terminal its passphrase may be asked for on stderr.
func loadCredentials(cfg *config.Config, loader *secrets.Loader, log *slog.Logger) (map[string]routes.Upstream, error) {
	ups := make(map[string]routes.Upstream, len(config.UpstreamKinds))
	for _, k := range config.UpstreamKinds {
		up, err := loadUpstream(cfg, loader, log, k)
		if err != nil {
			return nil, err
		}
		ups[k.Name] = up
	}
	// After every kind: the App's one routes.App, so that its routes
	// share its tokens.
	for _, k := range config.UpstreamKinds {
		if cfg.SharesApp(k) {
			up := ups[k.Name]
			up.App = ups[k.AppFrom].App
			ups[k.Name] = up
		}
	}
	return ups, nil
}

// loadRelays builds the config's relay routes, loading the credential
// source of each header that has one; a source that cannot be read stops
// serve at its config line. It returns those credentials too, for SIGHUP.
func loadRelays(cfg *config.Config, loader *secrets.Loader, log *slog.Logger) ([]relay.Relay, []*secrets.Live, error) {
	var relays []relay.Relay
	var creds []*secrets.Live
	for _, name := range slices.Sorted(maps.Keys(cfg.Relays)) {
		r := cfg.Relays[name]
		u, err := url.Parse(r.URL)
		if err != nil {
			return nil, nil, fail("", "relay.%s.url: %v", name, err)
		}
		rl := relay.Relay{Rules: &r.Relay, Prefix: r.Prefix, Query: r.Query, HeaderTimeout: r.HeaderTimeout.Duration, URL: u,
			Limits: routes.Limits{Concurrent: r.Concurrent, RequestsPerMinute: r.RequestsPerMinute}}
		for _, h := range slices.Sorted(maps.Keys(r.Headers)) {
			hd := r.Headers[h]
			rh := relay.Header{Name: http.CanonicalHeaderKey(h), Prefix: hd.Prefix, Value: hd.Value}
			if hd.Credential != "" {
				live, err := loader.Live("relay."+name, secrets.Source(hd.Credential), log)
				if err != nil {
					return nil, nil, credentialError(cfg, "relay."+name+".headers."+h+".credential", hd.Credential, err)
				}
				rh.Live = live
				creds = append(creds, live)
			}
			rl.Headers = append(rl.Headers, rh)
		}
		relays = append(relays, rl)
	}
	return relays, creds, nil
}

// loadMCP builds the config's MCP servers, loading each credential; a
// source that cannot be read stops serve at its config line.
func loadMCP(cfg *config.Config, loader *secrets.Loader, log *slog.Logger) ([]mcp.Server, error) {
	var servers []mcp.Server
	for _, name := range slices.Sorted(maps.Keys(cfg.MCP)) {
		m := cfg.MCP[name]
		u, err := url.Parse(m.URL)
		if err != nil {
			return nil, fail("", "mcp.%s.url: %v", name, err)
		}
		s := mcp.Server{Name: name, URL: u, Header: http.CanonicalHeaderKey(m.Header), Value: m.CredentialValue, HeaderTimeout: m.HeaderTimeout.Duration,
			Unpinned: !m.PinTools, AuditArgs: m.AuditArguments, Limits: routes.Limits{Concurrent: m.Concurrent, RequestsPerMinute: m.RequestsPerMinute}}
		if m.Credential != "" {
			live, err := loader.Live("mcp."+name, secrets.Source(m.Credential), log)
			if err != nil {
				return nil, credentialError(cfg, "mcp."+name+".credential", m.Credential, err)
			}
			s.Live = live
		}
		if m.OAuth != nil {
			if s.OAuth, err = loadOAuth(cfg, loader, log, "mcp."+name+".oauth", m.OAuth); err != nil {
				return nil, err
			}
		}
		servers = append(servers, s)
	}
	return servers, nil
}

// loadOAuth builds an [….oauth] table's credential, loading its sources.
func loadOAuth(cfg *config.Config, loader *secrets.Loader, log *slog.Logger, key string, c *config.MCPOAuth) (*routes.OAuth, error) {
	u, err := url.Parse(c.TokenURL)
	if err != nil {
		return nil, fail("", "%s.token_url: %v", key, err)
	}
	o := &routes.OAuth{Key: key, TokenURL: u, ClientID: c.ClientID, SecretInBody: c.ClientAuth == "post", Scope: c.Scope, Resource: c.Resource}
	if o.Resource == "none" {
		o.Resource = ""
	}
	for _, src := range []struct {
		name, source string
		live         **secrets.Live
	}{{"client_secret", c.ClientSecret, &o.ClientSecret}, {"refresh_token", c.RefreshToken, &o.RefreshToken}} {
		if src.source == "" {
			continue
		}
		if *src.live, err = loader.Live(key+"."+src.name, secrets.Source(src.source), log); err != nil {
			return nil, credentialError(cfg, key+"."+src.name, src.source, err)
		}
	}
	o.Init(log, nil)
	return o, nil
}

// loadUpstream parses one [upstream.NAME] and loads its credential. An
// empty credential source means none: requests go upstream without one.
func loadUpstream(cfg *config.Config, loader *secrets.Loader, log *slog.Logger, k config.UpstreamKind) (routes.Upstream, error) {
	name, c := k.Name, cfg.Upstream[k.Name]
	u, err := url.Parse(c.URL)
	if err != nil {
		return routes.Upstream{}, fail("", "upstream.%s.url: %v", name, err)
	}
	up := routes.Upstream{URL: u, Auth: c.Auth, HeaderTimeout: c.HeaderTimeout.Duration,
		Limits: routes.Limits{Concurrent: c.Concurrent, RequestsPerMinute: c.RequestsPerMinute}}
	if c.FilesURL != "" {
		if up.Files, err = url.Parse(c.FilesURL); err != nil {
			return routes.Upstream{}, fail("", "upstream.%s.files_url: %v", name, err)
		}
	}
	if c.App() {
		return loadApp(cfg, loader, log, name, up)
	}
	source := c.Credential
	if source == "" {
		return up, nil
	}
	key := "upstream." + name + ".credential"
	// A Live credential, so that SIGHUP (and Claude Code refreshing its
	// login) can change it while requests run.
	live, err := loader.Live(name, secrets.Source(source), log)
	switch {
	case err == nil:
		up.Live = live
	case cfg.Explicit(key):
		return routes.Upstream{}, credentialError(cfg, key, source, err)
	default:
		up.Missing = fmt.Sprintf("the operator must set %s (or %s in the config) and restart cproxy", strings.TrimPrefix(source, "env:"), key)
		log.Warn(k.Missing, "source", source, "err", err)
	}
	return up, nil
}

// loadApp loads a GitHub App's private key (upstream.NAME.private_key)
// for up, which then mints its credentials (routes.App): the key must load
// and be one cproxy can sign with.
func loadApp(cfg *config.Config, loader *secrets.Loader, log *slog.Logger, name string, up routes.Upstream) (routes.Upstream, error) {
	c, key := cfg.Upstream[name], "upstream."+name+".private_key"
	api, err := url.Parse(c.APIURL)
	if err != nil {
		return routes.Upstream{}, fail("", "upstream.%s.api_url: %v", name, err)
	}
	live, err := loader.LiveKey(name+".app", secrets.Source(c.PrivateKey), log)
	if err != nil {
		return routes.Upstream{}, credentialError(cfg, key, c.PrivateKey, err)
	}
	pem, err := live.Current()
	if err == nil {
		err = routes.CheckPrivateKey(pem)
	}
	if err != nil {
		return routes.Upstream{}, credentialError(cfg, key, c.PrivateKey, err)
	}
	up.App = &routes.App{ID: c.AppID, Installation: c.InstallationID, API: api, Key: live}
	return up, nil
}

// credentialError reports a credential that cannot be loaded at the config
// line that names it, with the fix.
func credentialError(cfg *config.Config, key, source string, err error) error {
	p := cfg.ProblemAt(key, "%v", err)
	hint := "fix the credential, or point " + key + " at another source"
	if source == "claude-code" {
		hint = "log in with claude on this machine as the user cproxy runs as (set CLAUDE_CONFIG_DIR if its config folder is elsewhere), or point " + key + " at a token from claude setup-token"
	}
	if name, ok := strings.CutPrefix(source, "keyring:"); ok {
		set := "cproxy secret set "
		if cfg.Path != "" {
			set += "--config " + cfg.Path + " "
		}
		switch {
		case errors.Is(err, secrets.ErrNotFound):
			hint = set + name + " stores it (the value is read from standard input), or point " + key + " at another source"
		case errors.Is(err, secrets.ErrNoPassphrase), errors.Is(err, secrets.ErrWrongPassphrase):
			hint = "export " + secrets.PassphraseEnv + " with the passphrase the file keyring's entries were stored with"
		}
	}
	return &userError{msg: p.String(), hint: hint, code: 1}
}

func serve(ctx context.Context, cfg *config.Config, stdout, stderr io.Writer) error {
	setCPUs(cfg.Runtime.CPUs)
	log, auditLog := newLoggers(cfg.Log, stderr)
	for _, w := range cfg.Warnings() {
		log.Warn(w.Key+" "+w.Message, w.Key, w.Value)
	}
	loader := &secrets.Loader{Keyring: keyringConfig(cfg, term.IsTerminal(int(os.Stdin.Fd())), stderr)}
	upstreams, err := loadCredentials(cfg, loader, log)
	if err != nil {
		return err
	}
	mcpServers, err := loadMCP(cfg, loader, log)
	if err != nil {
		return err
	}
	relays, relayCreds, err := loadRelays(cfg, loader, log)
	if err != nil {
		return err
	}
	var creds []*secrets.Live // every credential that SIGHUP rereads
	for _, k := range config.UpstreamKinds {
		if up := upstreams[k.Name]; up.Live != nil {
			creds = append(creds, up.Live)
		} else if up.App != nil {
			creds = append(creds, up.App.Key)
		}
	}
	creds = append(creds, relayCreds...)
	for _, m := range mcpServers {
		if m.Live != nil {
			creds = append(creds, m.Live)
		}
		if m.OAuth != nil {
			for _, src := range m.OAuth.Sources() {
				creds = append(creds, src.Live)
			}
		}
	}
	watching, stopWatching := context.WithCancel(context.Background())
	defer stopWatching()
	for _, c := range creds {
		go c.Watch(watching) // claude-code: rereads Claude Code's login when it changes
	}
	store, limits, storeName, err := openStore(ctx, cfg, loader, log)
	if err != nil {
		return err
	}
	defer store.Close()
	// The audit file after the store: the store's lock is what tells a
	// second cproxy on this config to stop, and it must stop before it
	// takes the first one's run marker for a crash's.
	auditFile, err := serveAuditLog(cfg, stdout, log)
	if err != nil {
		return err
	}
	defer auditFile.Close(auditFlushTimeout)

	errLog := slog.NewLogLogger(log.Handler(), slog.LevelWarn)
	newServer := func() *http.Server {
		return &http.Server{ReadHeaderTimeout: readHeaderTimeout, IdleTimeout: idleTimeout, MaxHeaderBytes: maxHeaderBytes, ErrorLog: errLog,
			ConnContext: routes.ConnContext}
	}
	var sockets *routes.SandboxSockets
	if dir := cfg.Listen.SandboxSockets; dir != "" {
		if sockets, err = routes.OpenSandboxSockets(dir, newServer, log); err != nil {
			return fail("", "%s", cfg.ProblemAt("listen.sandbox_sockets", "%v", err))
		}
		defer sockets.Close()
	}

	proxyLn, proxyAddr, err := listenProxy(cfg)
	if err != nil {
		return err
	}
	defer proxyLn.Close()
	proxyTLS, err := listenProxyTLS(cfg, loader, log)
	if err != nil {
		return err
	}
	tlsAddr := ""
	if proxyTLS != nil {
		defer proxyTLS.ln.Close()
		tlsAddr = proxyTLS.addr
	}
	adminLn, adminAddr, err := listenAdmin(cfg)
	if err != nil {
		return err
	}
	defer adminLn.Close()

	public := tarballBase(cfg, proxyLn.Addr(), proxyTLS != nil)
	approvals := routes.ApprovalOptions{GrantLifetime: cfg.Approvals.GrantLifetime.Duration, RequestLifetime: cfg.Approvals.RequestLifetime.Duration}
	if cfg.Approvals.Webhook != "" {
		hook, err := webhook.New(cfg.Approvals.Webhook, cfg.Approvals.WebhookFormat, log)
		if err != nil {
			return fail("", "%s", cfg.ProblemAt("approvals.webhook", "%v", err))
		}
		approvals.Notify = hook.Notify
		defer func() {
			// Notices under way get a moment to arrive, not the drain's.
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			hook.Wait(ctx)
		}()
	}
	// The console's live requests, only when it is served: nil, and no
	// request pays for a feed, when it is off or has no login off loopback.
	var feed *console.Feed
	var watch func(*audit.Record)
	switch {
	case !cfg.Console.Enabled:
	case !console.Served(adminAddr, cfg.Console.Password != "" || cfg.Console.UserHeader != ""):
		// The harness's admin API is served as before; only the pages,
		// which a browser anywhere could reach, are not.
		log.Info("console not served: "+console.ErrNoLogin.Error()+" (docs/console.md)", "admin", adminAddr)
	default:
		feed = console.NewFeed()
		watch = feed.Watch
	}
	srv := routes.New(routes.Options{Store: store, SharedLimits: limits, Policy: cfg.Rules, Watch: watch,
		Routes: append(builtin.Kinds.Routes(upstreams, relays, public, log, nil), mcp.New(mcpServers, routes.Env{PublicURL: public, Log: log})), Limits: builtin.Kinds.Limits(upstreams, relays),
		Logger: log, Audit: auditLog, AuditLog: auditSink(auditFile), SandboxSockets: sockets, Version: version(),
		BodyMemory: cfg.Runtime.BodyMemoryMiB << 20, BodyMemorySandbox: cfg.Runtime.BodyMemorySandboxMiB << 20,
		MaxConnections: maxConnections(cfg), BodyTimeout: cfg.Listen.BodyTimeout.Duration,
		Retention: cfg.Store.Retention.Duration, Approvals: approvals})
	defer srv.Close()
	if cache, ok := store.(*tokens.PostgresCache); ok {
		// Another replica's revocation ends this one's requests in flight
		// as soon as its notification arrives.
		cache.OnRevoke(srv.EndSandbox)
		cache.OnRevokeToken(srv.EndToken)
	}
	policies := newPolicyReloader(cfg, srv, store, log)
	polling, stopPolling := context.WithCancel(context.Background())
	defer stopPolling()
	go policies.run(polling, policyPollInterval)
	if err := srv.RestoreSockets(ctx); err != nil {
		return fail("", "%s", cfg.ProblemAt("listen.sandbox_sockets", "%v", err))
	}
	servers := []*http.Server{newServer(), newServer()}
	serving := client.Serving{Config: configIdentity(cfg.Path), Admin: adminAddr, Proxy: proxyAddr, PID: os.Getpid()}
	adminH, closeConsole, err := adminHandler(cfg, admin.Handler(srv, serving), srv, feed, adminAddr, policies.Last, loader, log)
	if err != nil {
		return err
	}
	servers[0].Handler, servers[1].Handler = srv.ProxyHandler(), adminH
	servers[1].RegisterOnShutdown(closeConsole)
	listeners := []net.Listener{srv.LimitConnections(proxyLn), adminLn}
	stoppers := []shutdowner{servers[0], servers[1]}
	if proxyTLS != nil {
		// The same routes over TLS, its connections counted with the
		// plain listener's.
		hs := newServer()
		hs.Handler, hs.ErrorLog = servers[0].Handler, tlsErrorLog(log)
		servers = append(servers, hs)
		listeners = append(listeners, tls.NewListener(srv.LimitConnections(proxyTLS.ln), proxyTLS.config))
		stoppers = append(stoppers, hs)
	}
	if sockets != nil {
		stoppers = append(stoppers, sockets)
	}

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)

	served := make(chan error, len(servers))
	for i, hs := range servers {
		go func() { served <- hs.Serve(listeners[i]) }()
	}
	addrs := []any{"proxy", proxyAddr}
	if tlsAddr != "" {
		addrs = append(addrs, "proxy_tls", tlsAddr)
	}
	log.Info("cproxy listening", append(addrs, "admin", adminAddr,
		"public_url", publicURL(cfg, proxyLn.Addr()), "store", storeName, "policy", policySource(cfg), "cpus", runtime.GOMAXPROCS(0))...)
	if cfg.Listen.ReadyFile != "" {
		if err := writeReadyFile(cfg.Listen.ReadyFile, readyInfo{Proxy: proxyAddr, ProxyTLS: tlsAddr, Admin: adminAddr, SandboxSockets: sockets.Dir()}); err != nil {
			return fail("", "ready file: %v", err)
		}
		defer os.Remove(cfg.Listen.ReadyFile)
	}

	for {
		select {
		case err := <-served:
			return fail("", "listener failed: %v", err)
		case <-ctx.Done():
			return drain(stoppers, srv.WaitRequests, cfg.Listen.Drain.Duration, sigs, log)
		case sig := <-sigs:
			if sig == syscall.SIGHUP {
				policies.sighup()
				reloadCredentials(creds)
				if proxyTLS != nil && proxyTLS.Reload != nil {
					proxyTLS.Reload()
				}
				auditFile.Reopen()
				continue
			}
			log.Info("shutting down: no new connections; open requests may finish (signal again to stop at once)", "signal", sig.String(), "drain", cfg.Listen.Drain.Duration)
			return drain(stoppers, srv.WaitRequests, cfg.Listen.Drain.Duration, sigs, log)
		}
	}
}

// maxConnections is runtime.max_connections, or when that is zero the
// bound derived from the open-file limit (Go has raised the soft limit to
// the hard one by now, as far as it may).
func maxConnections(cfg *config.Config) int64 {
	if n := cfg.Runtime.MaxConnections; n > 0 {
		return n
	}
	return config.DefaultMaxConnections(openFileLimit())
}

// setCPUs sets how many CPUs run Go code at once (runtime.cpus); 0 gives
// Go's own choice back, whatever GOMAXPROCS says.
func setCPUs(n int64) {
	if n > 0 {
		runtime.GOMAXPROCS(int(n))
	} else {
		runtime.SetDefaultGOMAXPROCS()
	}
}

// storeLockedHint is the fix for a second cproxy on one machine: the
// embedded store takes one process, so each cproxy needs its own.
const storeLockedHint = "give each cproxy its own store: cproxy serve --store PATH (store.path), or stop the other one"

// storeNewerHint is the fix for a store a newer cproxy has upgraded, which
// this cproxy would misread.
const storeNewerHint = "upgrade cproxy to the release that wrote this store, or point --store (store.path) at another file"

// storeNewerPostgresHint is the fix for a database a newer replica has
// migrated: the replicas share it, so only an upgrade helps.
const storeNewerPostgresHint = "upgrade cproxy to the release that migrated this database, as the other replicas were"

// storeOpenTimeout bounds connecting to PostgreSQL and migrating its schema
// at start, which may wait for another replica's migration.
const storeOpenTimeout = time.Minute

// openStore opens the token store store.kind names, with a look-up cache in
// front of PostgreSQL when store.lookup_cache asks for one, with its shared
// limits when replicas share it (PostgreSQL; nil for the embedded store,
// whose one process counts them in memory), and says where it is for the
// log: the embedded store's path, or PostgreSQL's host, port, database and
// user (never its password).
func openStore(ctx context.Context, cfg *config.Config, loader *secrets.Loader, log *slog.Logger) (tokens.Store, tokens.SharedLimits, string, error) {
	if cfg.Store.Kind != config.StorePostgres {
		store, err := tokens.OpenBolt(cfg.Store.Path)
		if errors.Is(err, tokens.ErrLocked) {
			return nil, nil, "", fail(storeLockedHint, "%v", err)
		}
		if errors.Is(err, tokens.ErrNewerSchema) {
			return nil, nil, "", fail(storeNewerHint, "%v", err)
		}
		if err != nil {
			return nil, nil, "", fail("", "%v", err)
		}
		return store, nil, cfg.Store.Path, nil
	}
	dsn, err := loader.Load(secrets.Source(cfg.Store.DSN))
	if err != nil {
		return nil, nil, "", credentialError(cfg, "store.dsn", cfg.Store.DSN, err)
	}
	ctx, cancel := context.WithTimeout(ctx, storeOpenTimeout)
	defer cancel()
	store, err := tokens.OpenPostgres(ctx, dsn.Reveal())
	if errors.Is(err, tokens.ErrNewerSchema) {
		return nil, nil, "", fail(storeNewerPostgresHint, "%v", err)
	}
	if err != nil {
		return nil, nil, "", fail("check store.dsn's connection string (host, port, database, user, password) and that PostgreSQL runs there; the user must be allowed to create tables in that database", "%v", err)
	}
	if ttl := cfg.Store.LookupCache.Duration; ttl > 0 {
		cache := tokens.NewPostgresCache(ctx, store, ttl, log)
		return cache, store, cache.String(), nil
	}
	return store, store, store.String(), nil
}

// requestsEndTimeout bounds how long a drain that ran out waits for the
// requests it closed to end: their upstream requests are cancelled, so
// they end at once unless the machine is starved.
const requestsEndTimeout = 5 * time.Second

// shutdowner is a server drain stops: an http.Server, or the per-sandbox
// sockets.
type shutdowner interface {
	Shutdown(context.Context) error
	Close() error
}

// listenProxy opens the proxy listener: TCP, or a Unix socket for
// listen.proxy = "unix:PATH" with routes.SocketMode, which is removed when
// cproxy stops. It returns the address as the ready file and the log give
// it.
func listenProxy(cfg *config.Config) (net.Listener, string, error) {
	ln, addr, err := listen(cfg.Listen.Proxy, routes.SocketMode, nil)
	switch {
	case err != nil && cfg.Listen.ProxySocket() != "":
		return nil, "", fail("point listen.proxy at a path in a directory cproxy may write to, where nothing else listens", "proxy listener: %v", err)
	case err != nil:
		return nil, "", fail("choose a free address with --proxy-addr or listen.proxy (port 0 picks one)", "proxy listener: %v", err)
	}
	return ln, addr, nil
}

// adminSocketMode is the mode of the admin listener's Unix socket: only
// cproxy's own user may connect, since whoever reaches the admin API can
// mint tokens.
const adminSocketMode = 0o600

// listenAdmin opens the admin listener: TCP, or a Unix socket for
// listen.admin = "unix:PATH" with adminSocketMode, in a directory neither
// its group nor others may write to, which is removed when cproxy stops.
// It returns the address as the ready file and the log give it.
func listenAdmin(cfg *config.Config) (net.Listener, string, error) {
	ln, addr, err := listen(cfg.Listen.Admin, adminSocketMode, func(dir string) error {
		return routes.CheckSocketDir(dir,
			"another user could put a socket of their own in place of the admin API's, and be sent the harness's calls",
			"a member of its group could put a socket of their own in place of the admin API's, and be sent the harness's calls")
	})
	switch {
	case err != nil && cfg.Listen.AdminSocket() != "":
		return nil, "", fail("point --admin-addr or listen.admin at a path in a directory of cproxy's own, where nothing else listens (e.g. unix:/run/cproxy/admin.sock)", "admin listener: %v", err)
	case err != nil:
		return nil, "", fail("choose a free address with --admin-addr or listen.admin (port 0 picks one)", "admin listener: %v", err)
	}
	return ln, addr, nil
}

// listen listens on addr: host:port over TCP, or "unix:PATH" on a Unix
// socket with mode, in a directory that checkDir (if not nil) accepts,
// removed when the listener closes. It returns the address as the ready
// file and the log give it: a socket's path made absolute, since the
// harness mounts or dials it.
func listen(addr string, mode fs.FileMode, checkDir func(string) error) (net.Listener, string, error) {
	path := config.SocketPath(addr)
	if path == "" {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, "", err
		}
		return ln, ln.Addr().String(), nil
	}
	path, err := filepath.Abs(path)
	if err != nil {
		return nil, "", err
	}
	if checkDir != nil {
		if err := checkDir(filepath.Dir(path)); err != nil {
			return nil, "", err
		}
	}
	ln, err := routes.ListenUnix(path, mode)
	if err != nil {
		return nil, "", err
	}
	return &removeOnClose{Listener: ln, path: path}, config.UnixPrefix + path, nil
}

// removeOnClose removes a Unix socket's file when its listener closes.
type removeOnClose struct {
	net.Listener
	path string
	once sync.Once
}

func (l *removeOnClose) Close() error {
	err := l.Listener.Close()
	l.once.Do(func() { os.Remove(l.path) })
	return err
}

// drain stops accepting and gives open requests (SSE streams included) up
// to d to finish, then closes what is left and waits, up to
// requestsEndTimeout, for the requests it closed to write their audit
// lines (waitRequests).
func drain(servers []shutdowner, waitRequests func(context.Context) error, d time.Duration, sigs <-chan os.Signal, log *slog.Logger) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	// A second SIGINT or SIGTERM ends the drain at once, as an operator
	// pressing Ctrl-C twice expects; SIGHUP is not a reason to stop.
	go func() {
		for sig := range sigs {
			if sig != syscall.SIGHUP {
				log.Warn("second signal: closing the requests still open", "signal", sig.String())
				cancel()
				return
			}
		}
	}()
	var wg sync.WaitGroup
	timedOut := false
	var mu sync.Mutex
	for _, hs := range servers {
		wg.Go(func() {
			if err := hs.Shutdown(ctx); err != nil {
				mu.Lock()
				timedOut = true
				mu.Unlock()
				hs.Close()
			}
		})
	}
	wg.Wait()
	if timedOut {
		ended, cancel := context.WithTimeout(context.Background(), requestsEndTimeout)
		defer cancel()
		if err := waitRequests(ended); err != nil {
			log.Error("requests closed by the drain did not end in time: their audit lines may be missing", "wait", requestsEndTimeout)
		}
		log.Warn("drain over: closed the requests still open", "drain", d)
	}
	log.Info("cproxy stopped")
	return nil
}

// reloadCredentials rereads every upstream credential from its source on
// SIGHUP (env: sources excepted: a process's environment is fixed). One
// that cannot be read keeps the credential in force; Live logs which, why
// and the fix, never the value.
func reloadCredentials(creds []*secrets.Live) {
	for _, c := range creds {
		c.Reload()
	}
}

func policySource(cfg *config.Config) string {
	if cfg.Policy == "" {
		return "embedded default"
	}
	return cfg.PolicyPath()
}

func publicURL(cfg *config.Config, proxy net.Addr) string {
	if cfg.Listen.PublicURL != "" {
		return cfg.Listen.PublicURL
	}
	if _, ok := proxy.(*net.TCPAddr); !ok {
		return "" // a Unix socket: the sandbox's bridge decides the URL
	}
	return "http://" + proxy.String()
}

// tarballBase is the URL rewritten packuments point their tarballs at:
// listen.public_url, or the proxy address when it is one a sandbox can
// dial. For a wildcard address (0.0.0.0, [::]), or with a TLS listener
// beside the plain one, it is "", and the npm route uses the scheme and
// Host each request came with: the listener that sandbox reached.
func tarballBase(cfg *config.Config, proxy net.Addr, withTLS bool) string {
	if cfg.Listen.PublicURL != "" {
		return cfg.Listen.PublicURL
	}
	if a, ok := proxy.(*net.TCPAddr); !ok || a.IP.IsUnspecified() || withTLS {
		return ""
	}
	return "http://" + proxy.String()
}

// readyInfo is the ready file's content.
type readyInfo struct {
	Proxy string `json:"proxy"` // host:port, or unix:PATH
	// ProxyTLS is the TLS proxy listener's host:port, when there is one.
	ProxyTLS string `json:"proxy_tls,omitempty"`
	Admin    string `json:"admin"`
	// SandboxSockets is listen.sandbox_sockets, where DIR/SANDBOX.sock are.
	SandboxSockets string `json:"sandbox_sockets,omitempty"`
	PID            int    `json:"pid"`
}

// writeReadyFile writes the file atomically, so a reader never sees half.
func writeReadyFile(path string, info readyInfo) error {
	info.PID = os.Getpid()
	b, _ := json.Marshal(info)
	tmp, err := os.CreateTemp(filepath.Dir(path), ".cproxy-ready-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
