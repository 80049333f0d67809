package bench

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/cproxy/cproxy/config"
	"github.com/cproxy/cproxy/policy"
	"github.com/cproxy/cproxy/routes"
	"github.com/cproxy/cproxy/routes/audit"
	"github.com/cproxy/cproxy/routes/builtin"
	"github.com/cproxy/cproxy/secrets"
	"github.com/cproxy/cproxy/tokens"
)

// The "routes" role is routes.Server served the way `cproxy serve` serves
// it (same HTTP server limits, a bbolt store, the policy file, the api-key
// credential, text audit lines on stderr), in a process this package starts
// and can profile: the real binary has no profiling hook. Options.Profile
// adds it as the target "routes", next to the real cproxy, so a profile can
// be trusted to show what the binary does.
const (
	storeEnv  = "CPROXY_BENCH_STORE"  // routes: the bbolt store, with a token in it
	policyEnv = "CPROXY_BENCH_POLICY" // routes: the policy file
)

// HTTP server limits, as cmd/cproxy/serve.go sets them.
const (
	serveReadHeaderTimeout = 30 * time.Second
	serveIdleTimeout       = 120 * time.Second
	serveMaxHeaderBytes    = 64 << 10
)

func newRoutesRole() (*http.Server, func(), error) {
	u, err := url.Parse(os.Getenv(upstreamEnv))
	if err != nil || u.Host == "" {
		return nil, nil, fmt.Errorf("bad %s %q", upstreamEnv, os.Getenv(upstreamEnv))
	}
	pol, err := policy.LoadPolicy(os.Getenv(policyEnv))
	if err != nil {
		return nil, nil, err
	}
	store, err := tokens.OpenBolt(os.Getenv(storeEnv))
	if err != nil {
		return nil, nil, err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	srv := routes.New(routes.Options{
		Store:  store,
		Policy: pol,
		Routes: builtin.Kinds.Routes(map[string]routes.Upstream{"anthropic": {
			URL: u, Credential: secrets.New(os.Getenv(keyEnv)), Auth: config.AuthAPIKey, HeaderTimeout: 10 * time.Minute,
		}}, nil, "", log, nil),
		Logger: log,
		Audit:  slog.New(audit.NewTextHandler(os.Stderr, nil)),
	})
	hs := &http.Server{
		Handler: srv.ProxyHandler(), ReadHeaderTimeout: serveReadHeaderTimeout, IdleTimeout: serveIdleTimeout,
		MaxHeaderBytes: serveMaxHeaderBytes, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	return hs, func() { srv.Close(); store.Close() }, nil
}

// startRoutes prepares a store with one token, then starts the routes role
// as the target name, with env added to its environment.
func (e *Env) startRoutes(name, key string, env map[string]string) (*Target, error) {
	store := filepath.Join(e.dir, name+".db")
	s, err := tokens.OpenBolt(store)
	if err != nil {
		return nil, err
	}
	tok, err := tokens.New()
	if err != nil {
		s.Close()
		return nil, err
	}
	now := time.Now()
	err = s.Create(context.Background(), tok.Hash(), tokens.Record{Sandbox: "bench-1", CreatedAt: now, ExpiresAt: now.Add(24 * time.Hour)})
	s.Close()
	if err != nil {
		return nil, err
	}
	pol := filepath.Join(e.dir, name+"-policy.toml")
	if err := os.WriteFile(pol, []byte(cproxyPolicy), 0o600); err != nil {
		return nil, err
	}
	vars := map[string]string{keyEnv: key, upstreamEnv: e.UpstreamURL, storeEnv: store, policyEnv: pol}
	maps.Copy(vars, env)
	p, addr, err := e.startRole(e.proxyBin, "routes", vars)
	if err != nil {
		return nil, err
	}
	return &Target{Name: name, URL: "http://" + addr, Header: bearer(tok.Reveal()), proc: p}, nil
}
