package client_test

import (
	"net"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"

	"github.com/cproxy/cproxy/client"
	"github.com/cproxy/cproxy/internal/testutil"
	"github.com/cproxy/cproxy/policy"
	"github.com/cproxy/cproxy/routes"
	"github.com/cproxy/cproxy/routes/admin"
	"github.com/cproxy/cproxy/routes/builtin"
	"github.com/cproxy/cproxy/routes/relay"
	"github.com/cproxy/cproxy/tokens"
)

// What the admin API of startCproxy says it serves (GET /healthz), as a
// cproxy serve on that config would: the listener's own address is its
// admin.
const (
	testConfig = "/etc/cproxy/cproxy.toml"
	testProxy  = "127.0.0.1:8080"
)

// startCproxy serves cproxy's real admin handler, over a bbolt store in a
// temporary folder, with the default policy, a "web" profile, and a relay
// that takes the per-token value mod_token. It returns the admin URL and a
// function that stops it all.
func startCproxy() (string, func()) {
	adminURL, _, stop := startCproxyStore()
	return adminURL, stop
}

// startCproxyStore is startCproxy that also returns the server's store, for
// a test to break.
func startCproxyStore() (string, *tokens.BoltStore, func()) {
	return startCproxyOn(false)
}

// startCproxyUnix is startCproxy with the admin handler on a Unix socket,
// as listen.admin = "unix:PATH" serves it: it returns the unix: admin URL.
func startCproxyUnix() (string, func()) {
	adminURL, _, stop := startCproxyOn(true)
	return adminURL, stop
}

func startCproxyOn(unix bool) (string, *tokens.BoltStore, func()) {
	// A short folder, whatever $TMPDIR is, for a socket's path.
	dir, err := testutil.NewSocketDir("cpx")
	if err != nil {
		panic(err)
	}
	store, err := tokens.OpenBolt(filepath.Join(dir, "tokens.db"))
	if err != nil {
		panic(err)
	}
	pol := policy.DefaultPolicy()
	pol.Profiles["web"] = &policy.Profile{Name: "web", Models: []string{"claude-*"}}
	upstream, _ := url.Parse("http://127.0.0.1:1") // never reached: only the admin handler is served
	hub, _ := url.Parse("http://127.0.0.1:1/hub/")
	srv := routes.New(routes.Options{
		Store:  store,
		Policy: pol,
		Routes: builtin.Kinds.Routes(map[string]routes.Upstream{"anthropic": {URL: upstream}}, []relay.Relay{{
			Rules:   &policy.Relay{},
			Prefix:  "/mod/",
			URL:     hub,
			Headers: []relay.Header{{Name: "X-Mod-Token", Value: "mod_token"}},
		}}, "", nil, nil),
	})
	ts := httptest.NewUnstartedServer(nil)
	adminURL := ""
	if unix {
		sock := filepath.Join(dir, "admin.sock")
		ln, err := net.Listen("unix", sock)
		if err != nil {
			panic(err)
		}
		ts.Listener.Close()
		ts.Listener, adminURL = ln, "unix:"+sock
	}
	ts.Config.Handler = admin.Handler(srv, client.Serving{Config: testConfig, Admin: ts.Listener.Addr().String(), Proxy: testProxy, PID: os.Getpid()})
	ts.Start()
	if !unix {
		adminURL = ts.URL
	}
	return adminURL, store, func() {
		ts.Close()
		srv.Close()
		store.Close()
		os.RemoveAll(dir)
	}
}
