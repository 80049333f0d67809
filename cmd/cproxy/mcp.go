package main

import (
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/cproxy/cproxy/client"
)

func mcpCommand() *cli.Command {
	return &cli.Command{
		Name:  "mcp",
		Usage: "manage the MCP servers' tool pins through the admin API",
		Description: `cproxy pins the definition of each tool an MCP server ([mcp.NAME]) lists the first time it lists it;
a tool whose definition changes afterwards is withheld from the sandboxes until an operator accepts
the change (docs/mcp.md, "Pinning tools"). Each subcommand calls the admin API of a running cproxy
serve, found as cproxy token finds it.

Examples:

   cproxy mcp pins list
   cproxy mcp pins accept docs search`,
		Subcommands: []*cli.Command{{
			Name:  "pins",
			Usage: "list the tool pins, and accept or reject a tool's changed definition",
			Description: `A tool whose definition changed since it was pinned is withheld from the sandboxes: list shows
the change pending, accept makes it the pin, reject keeps the tool out.

Examples:

   cproxy mcp pins list --server docs
   cproxy mcp pins reject docs search`,
			Subcommands: []*cli.Command{
				{
					Name:  "list",
					Usage: "list the pinned tools and the changes waiting for an operator",
					Description: `One line per tool: its server, its name, the pinned digest and when it was pinned, and, when
the server lists another definition, that one's digest and state (pending: waiting for accept or
reject; rejected: withheld while the server lists it). --json prints the definitions too.

Examples:

   cproxy mcp pins list
   cproxy mcp pins list --server docs --json`,
					Flags: []cli.Flag{adminFlag(), configFlag(),
						&cli.StringFlag{Name: "server", Usage: "only the tools of the MCP server `NAME`"},
						&cli.BoolFlag{Name: "json", Usage: "print the admin API's JSON answer"}},
					Action: adminAction(false, listPins),
				},
				{
					Name:      "accept",
					Usage:     "make a tool's changed definition its pin, so the sandboxes see and call it again",
					ArgsUsage: "SERVER TOOL",
					Description: `Read the pending definition first (cproxy mcp pins list --json): accepting lets the sandboxes'
agents read and call the tool as the server now describes it. --digest accepts only that change,
so that one the server made after you read it is not accepted with it.

Examples:

   cproxy mcp pins accept docs search
   cproxy mcp pins accept --digest sha256:4f0c… docs search`,
					Flags: []cli.Flag{adminFlag(), configFlag(),
						&cli.StringFlag{Name: "digest", Usage: "accept only the pending change with this `DIGEST` (sha256:…)"}},
					Action: decidePin(true),
				},
				{
					Name:      "reject",
					Usage:     "drop a tool's changed definition, keeping the tool withheld while the server lists it",
					ArgsUsage: "SERVER TOOL",
					Description: `The pin stays: the tool comes back when the server lists the pinned definition again, and a
further change is pending again.

Examples:

   cproxy mcp pins reject docs search`,
					Flags: []cli.Flag{adminFlag(), configFlag(),
						&cli.StringFlag{Name: "digest", Usage: "reject only the pending change with this `DIGEST` (sha256:…)"}},
					Action: decidePin(false),
				},
			},
		}},
	}
}

func listPins(c *cli.Context, admin *adminClient, _ string) error {
	pins, err := admin.MCPPins(c.Context, c.String("server"))
	if err != nil {
		return admin.failed(err)
	}
	if c.Bool("json") {
		return printJSON(c, client.MCPPins{Pins: pins})
	}
	if len(pins) == 0 {
		fmt.Fprintln(c.App.ErrWriter, "cproxy: no tool is pinned yet: a server's tools are pinned the first time a sandbox lists them")
		return nil
	}
	w := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "SERVER\tTOOL\tPINNED\tPINNED AT\tCHANGED\tSTATE")
	for _, p := range pins {
		changed, state := "-", "ok"
		switch {
		case p.Pending != "":
			changed, state = short(p.Pending), "pending since "+p.ChangedAt.UTC().Format(time.RFC3339)
		case p.Withheld:
			changed, state = short(p.Changed), "rejected"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", p.Server, p.Tool, short(p.Digest), p.PinnedAt.UTC().Format(time.RFC3339), changed, state)
	}
	return w.Flush()
}

// short is a digest as a table shows it: "sha256:" and 12 hex digits,
// enough to tell changes apart; --json has them whole.
func short(digest string) string {
	if len(digest) > len("sha256:")+12 {
		return digest[:len("sha256:")+12]
	}
	return digest
}

func decidePin(acceptIt bool) cli.ActionFunc {
	return adminAction(false, func(c *cli.Context, admin *adminClient, _ string) error {
		path := "cproxy mcp pins reject"
		if acceptIt {
			path = "cproxy mcp pins accept"
		}
		if c.NArg() != 2 {
			return usageError(path, "", "%s takes the server and the tool: %s SERVER TOOL", path, path)
		}
		server, tool := c.Args().Get(0), c.Args().Get(1)
		decide, verb := admin.RejectMCPPin, "rejected the change of"
		if acceptIt {
			decide, verb = admin.AcceptMCPPin, "accepted the change of"
		}
		p, err := decide(c.Context, server, tool, c.String("digest"))
		if err != nil {
			return admin.failed(err)
		}
		if acceptIt {
			_, err = fmt.Fprintf(c.App.Writer, "%s tool %s of MCP server %s: pinned %s\n", verb, tool, server, p.Digest)
		} else {
			_, err = fmt.Fprintf(c.App.Writer, "%s tool %s of MCP server %s: it stays withheld while the server lists %s\n", verb, tool, server, p.Changed)
		}
		return err
	})
}
