package main

import (
	"errors"
	"log/slog"
	"net/http"

	"github.com/cproxy/cproxy/config"
	"github.com/cproxy/cproxy/routes"
	"github.com/cproxy/cproxy/routes/console"
	"github.com/cproxy/cproxy/secrets"
)

// adminHandler is what the admin listener serves: the admin API, and the
// console in front of it unless [console] turns it off (docs/console.md).
// The console stops its event streams when the listener shuts down.
func adminHandler(cfg *config.Config, api http.Handler, srv *routes.Server, feed *console.Feed, addr string,
	reload func() console.Reload, loader *secrets.Loader, log *slog.Logger) (http.Handler, func(), error) {
	if feed == nil {
		return console.RefuseBrowsers(api), func() {}, nil
	}
	var hash secrets.Secret
	if cfg.Console.Password != "" {
		var err error
		if hash, err = loader.Load(secrets.Source(cfg.Console.Password)); err != nil {
			return nil, nil, fail("", "%s", cfg.ProblemAt("console.password", "%v", err))
		}
	}
	c, err := console.New(console.Options{Admin: api, Feed: feed, Addr: addr, Hosts: cfg.Console.Hosts,
		PasswordHash: hash, UserHeader: cfg.Console.UserHeader, Log: log, Reload: reload,
		Policy: func() (string, string) { p := srv.Policy(); return p.Path, p.Text() }})
	if errors.Is(err, console.ErrNoLogin) {
		return nil, nil, fail("set console.password or console.user_header (docs/console.md), or console.enabled = false", "%s", cfg.ProblemAt("console.enabled", "%v", err))
	}
	if err != nil {
		return nil, nil, fail("", "%s", cfg.ProblemAt("console.password", "%v", err))
	}
	return c.Handler(), c.Close, nil
}
