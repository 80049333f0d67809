package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/urfave/cli/v2"

	"github.com/cproxy/cproxy/config"
	"github.com/cproxy/cproxy/tokens"
)

func storeCommand() *cli.Command {
	return &cli.Command{
		Name:  "store",
		Usage: "look after the embedded token store's file",
		Description: `Examples:

   cproxy store compact --config /etc/cproxy/cproxy.toml`,
		Subcommands: []*cli.Command{
			{
				Name:  "compact",
				Usage: "shrink the embedded token store's file to what it holds, while no cproxy serves it",
				Description: `The file keeps the space of tokens deleted from it, for the next ones; compacting gives it back.
It copies the store into a new file, renames that over the old one (keeping its mode and owner) and
prints both sizes. Stop cproxy serve first: a store in use is refused. A store path that is a symbolic
link is refused too: point --store or store.path at the real file.

Examples:

   cproxy store compact --config /etc/cproxy/cproxy.toml
   cproxy store compact --store /var/lib/cproxy/cproxy.db`,
				ArgsUsage: " ",
				Flags: []cli.Flag{
					configFlag(),
					&cli.StringFlag{Name: "store", Usage: "token store `PATH` (store.path)", EnvVars: []string{"CPROXY_STORE"}},
				},
				Action: func(c *cli.Context) error {
					cfg, err := loadConfig(c.String("config"))
					if err != nil {
						return err
					}
					if c.IsSet("store") {
						cfg.Store.Path = c.String("store")
					}
					if err := cfg.Validate(); err != nil {
						return configError(err)
					}
					return runStoreCompact(cfg.Store, c.App.Writer)
				},
			},
		},
	}
}

// runStoreCompact compacts the embedded store and prints its size before and
// after.
func runStoreCompact(store config.Store, stdout io.Writer) error {
	if store.Kind == config.StorePostgres {
		return fail("PostgreSQL reclaims deleted rows' space itself (autovacuum); for an embedded store's file: cproxy store compact --store PATH", "store compact is for the embedded store; this config's store is PostgreSQL")
	}
	before, after, err := tokens.CompactBolt(store.Path)
	switch {
	case errors.Is(err, tokens.ErrLocked):
		return fail("stop cproxy serve first: compacting needs the store to itself", "%v", err)
	case errors.Is(err, tokens.ErrSymlink):
		return fail("point store.path (or --store) at the real file, the link's target, and compact that", "%v", err)
	case errors.Is(err, tokens.ErrNewerSchema):
		return fail("compact it with the cproxy that wrote it", "%v", err)
	case err != nil:
		return fail("", "%v", err)
	}
	fmt.Fprintf(stdout, "compacted %s: %d bytes before, %d bytes after\n", store.Path, before, after)
	return nil
}
