package main

import (
	"encoding/json"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"
)

func tokenCommand() *cli.Command {
	return &cli.Command{
		Name:  "token",
		Usage: "create, revoke and list sandbox tokens through the admin API",
		Subcommands: []*cli.Command{
			{
				Name:  "create",
				Usage: "mint a token for a sandbox and print it",
				Flags: []cli.Flag{
					adminFlag(), configFlag(), sandboxFlag(),
					&cli.StringFlag{Name: "profile", Usage: "policy `PROFILE` (default: chosen by the policy's sandbox rules)"},
					&cli.StringFlag{Name: "ttl", Usage: "lifetime, e.g. 90m, 24h, 7d (default 24h)"},
					&cli.BoolFlag{Name: "json", Usage: "print the admin API's JSON answer"},
				},
				Action: adminAction(true, func(c *cli.Context, admin *adminClient, sandbox string) error {
					tok, err := admin.createToken(sandbox, c.String("profile"), c.String("ttl"))
					if err != nil {
						return err
					}
					if c.Bool("json") {
						return printJSON(c, tok)
					}
					_, err = fmt.Fprintln(c.App.Writer, tok.Token)
					return err
				}),
			},
			{
				Name:  "revoke",
				Usage: "revoke every token of a sandbox",
				Flags: []cli.Flag{adminFlag(), configFlag(), sandboxFlag()},
				Action: adminAction(true, func(c *cli.Context, admin *adminClient, sandbox string) error {
					return admin.revoke(sandbox)
				}),
			},
			{
				Name:  "list",
				Usage: "list tokens (never their values)",
				Flags: []cli.Flag{adminFlag(), configFlag(), sandboxFlag(),
					&cli.BoolFlag{Name: "json", Usage: "print JSON"}},
				Action: adminAction(false, func(c *cli.Context, admin *adminClient, sandbox string) error {
					toks, err := admin.list(sandbox)
					if err != nil {
						return err
					}
					if c.Bool("json") {
						return printJSON(c, toks)
					}
					tw := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
					fmt.Fprintln(tw, "ID\tSANDBOX\tPROFILE\tSTATE\tCREATED\tEXPIRES")
					for _, t := range toks {
						profile := t.Profile
						if profile == "" {
							profile = "-"
						}
						fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", t.ID, t.Sandbox, profile, t.State,
							t.CreatedAt.UTC().Format(time.RFC3339), t.ExpiresAt.UTC().Format(time.RFC3339))
					}
					return tw.Flush()
				}),
			},
		},
	}
}

// adminAction checks the arguments common to the token subcommands, then
// runs fn with an admin API client and the --sandbox id ("" when optional
// and not given).
func adminAction(sandboxRequired bool, fn func(c *cli.Context, admin *adminClient, sandbox string) error) cli.ActionFunc {
	return func(c *cli.Context) error {
		if err := noArgs(c); err != nil {
			return err
		}
		sandbox, err := sandboxArg(c, sandboxRequired)
		if err != nil {
			return err
		}
		admin, err := newAdminClient(c)
		if err != nil {
			return err
		}
		return fn(c, admin, sandbox)
	}
}

func printJSON(c *cli.Context, v any) error {
	enc := json.NewEncoder(c.App.Writer)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
