package main

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"

	"github.com/urfave/cli/v2"
	"golang.org/x/crypto/bcrypt"
	"golang.org/x/term"

	"github.com/cproxy/cproxy/config"
	"github.com/cproxy/cproxy/routes"
	"github.com/cproxy/cproxy/routes/console"
	"github.com/cproxy/cproxy/secrets"
)

// adminHandler is what the admin listener serves: the admin API, and the
// console in front of it when serve made it a feed (feed nil: [console] is
// off, or has no login off loopback; docs/console.md).
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
	if err != nil {
		return nil, nil, fail("", "%s", cfg.ProblemAt("console.password", "%v", err))
	}
	return c.Handler(), c.Close, nil
}

// consoleHashCost is the bcrypt cost of a console password's hash: about
// a quarter of a second a guess on a laptop.
const consoleHashCost = 12

func consoleCommand() *cli.Command {
	return &cli.Command{
		Name:  "console",
		Usage: "the operator console in the browser, on the admin listener (docs/console.md)",
		Description: `cproxy serve serves the console at / on its admin listener (console.enabled, on by default).
On loopback it needs no login; elsewhere it needs console.password, a bcrypt hash that
cproxy console hash makes, or console.user_header behind an authenticating proxy.

Examples:

   cproxy console hash >/etc/cproxy/console.hash`,
		Subcommands: []*cli.Command{{
			Name: "hash",
			// Its own check of the arguments, which does not print one
			// back: it would be a password.
			Args:  true,
			Usage: "print the bcrypt hash of a console password: from standard input, or asked for without echo on a terminal",
			Description: `Store the hash where console.password points (a file, an environment variable or the keyring),
never the password: the console compares what is typed at its login with the hash.

Examples:

   cproxy console hash >/etc/cproxy/console.hash
   printf '%s' "$PASSWORD" | cproxy console hash`,
			Action: func(c *cli.Context) error {
				if c.Args().Len() > 0 {
					return usageError("cproxy console hash", "give the password on standard input, never as an argument", "cproxy console hash takes no arguments")
				}
				return runConsoleHash(os.Stdin, term.IsTerminal(int(os.Stdin.Fd())), c.App.Writer, c.App.ErrWriter)
			},
		}},
	}
}

// runConsoleHash reads a password, one line, and prints its bcrypt hash.
func runConsoleHash(stdin io.Reader, terminal bool, stdout, stderr io.Writer) error {
	var password string
	if terminal {
		var err error
		if password, err = readHidden(stderr, "console password (not shown)"); err != nil {
			return fail("", "reading the password: %v", err)
		}
	} else {
		line, err := bufio.NewReader(io.LimitReader(stdin, 1<<10)).ReadString('\n')
		if err != nil && err != io.EOF {
			return fail("", "reading the password from standard input: %v", err)
		}
		password = strings.TrimRight(line, "\r\n")
	}
	switch {
	case len(password) < 12:
		return fail("choose a longer one: a passphrase of a few words", "the password is shorter than 12 characters")
	case len(password) > 72:
		return fail("", "the password is longer than 72 bytes, all bcrypt reads")
	}
	hash, err := bcrypt.GenerateFromPassword([]byte(password), consoleHashCost)
	if err != nil {
		return fail("", "hashing the password: %v", err)
	}
	fmt.Fprintln(stdout, string(hash))
	return nil
}
