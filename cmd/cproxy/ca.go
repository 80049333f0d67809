package main

import (
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/cproxy/cproxy/internal/localca"
)

func caCommand() *cli.Command {
	return &cli.Command{
		Name:      "ca",
		Usage:     "print the local CA's certificate (PEM) that sandboxes trust for the TLS proxy listener",
		ArgsUsage: " ",
		Description: `Prints the certificate of the local certificate authority in listen.ca_dir, which signs the
TLS proxy listener's certificate (listen.proxy_tls) when the config names none. It is public:
put it in sandbox images, or mount it and point the clients at it. When the folder holds no CA
yet, cproxy ca creates it there, as serve would, so that images can be built before serve runs.
The CA's key stays in its file (mode 0600) and is never printed.

Examples:

   cproxy ca --config /etc/cproxy/cproxy.toml > cproxy-ca.crt`,
		Flags: []cli.Flag{configFlag()},
		Action: func(c *cli.Context) error {
			cfg, err := loadConfig(c.String("config"))
			if err != nil {
				return err
			}
			l := cfg.Listen
			if l.TLSCert != "" {
				return fail("give the sandboxes the CA that issued listen.tls_cert's certificate, or leave listen.tls_cert and listen.tls_key out to use cproxy's local CA",
					"listen.tls_cert is set: the TLS proxy listener serves that certificate, not one from cproxy's local CA")
			}
			if l.CADir == "" {
				return fail("set listen.ca_dir in the config (or $XDG_STATE_HOME or $HOME)", "no folder for the local CA")
			}
			ca, err := localca.Load(l.CADir)
			if errors.Is(err, fs.ErrNotExist) {
				if ca, err = localca.LoadOrCreate(l.CADir, time.Now()); err == nil {
					fmt.Fprintf(c.App.ErrWriter, "cproxy: created a local CA in %s (serve with listen.proxy_tls uses it)\n", l.CADir)
				}
			}
			if err != nil {
				return fail("point listen.ca_dir at the folder of cproxy serve's CA, or remove the broken CA there to have a new one made", "local CA: %v", err)
			}
			_, err = c.App.Writer.Write(ca.CertPEM())
			return err
		},
	}
}
