package main

import (
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/cproxy/cproxy/client"
)

func approvalsCommand() *cli.Command {
	byFlag := &cli.StringFlag{Name: "by", Usage: "record `NAME` as who decided"}
	return &cli.Command{
		Name:  "approvals",
		Usage: "list the requests waiting for an operator's approval, and approve or deny them",
		Description: `A request the policy answers with ask (a push rule's ask, docs/approvals.md) is refused with the
id of an approval request; approving it lets the same request through once, within the grant
lifetime (approvals.grant_lifetime). Each subcommand calls the admin API of a running cproxy serve,
found as cproxy token finds it.

Examples:

   cproxy approvals list
   cproxy approvals approve apr_3f9c2a7d1e0b4c58`,
		Subcommands: []*cli.Command{
			{
				Name:  "list",
				Usage: "list the approval requests, pending ones by default",
				Description: `One line per request, oldest first: its id, sandbox, route, state, when it expires, and what it
asks (for a push: the repository, then each ref with its old and new object id). --state all
lists every request kept; --json prints the admin API's answer, with each request's detail.

Examples:

   cproxy approvals list
   cproxy approvals list --state all --sandbox conv-42 --json`,
				Flags: []cli.Flag{adminFlag(), configFlag(),
					&cli.StringFlag{Name: "state", Value: "pending", Usage: "only requests in `STATE`: pending, approved, denied, used, expired or all"},
					&cli.StringFlag{Name: "sandbox", Usage: "only the requests of sandbox `ID`"},
					&cli.BoolFlag{Name: "json", Usage: "print the admin API's JSON answer"}},
				Action: adminAction(false, listApprovals),
			},
			{
				Name:      "approve",
				Usage:     "approve a pending request: the same request goes through once, within the grant lifetime",
				ArgsUsage: "ID",
				Description: `Read what the request asks first (cproxy approvals list): the grant covers exactly that request,
from that sandbox (for a push: the same repository, refs and object ids), and is used by its
first retry.

Examples:

   cproxy approvals approve apr_3f9c2a7d1e0b4c58
   cproxy approvals approve --by alice apr_3f9c2a7d1e0b4c58`,
				Flags:  []cli.Flag{adminFlag(), configFlag(), byFlag},
				Action: decideApproval(true),
			},
			{
				Name:      "deny",
				Usage:     "deny a pending request: it stays refused until it would have expired",
				ArgsUsage: "ID",
				Description: `The sandbox's retries of the same request are refused as denied, without asking again, until the
request's lifetime (approvals.request_lifetime) has passed.

Examples:

   cproxy approvals deny apr_3f9c2a7d1e0b4c58`,
				Flags:  []cli.Flag{adminFlag(), configFlag(), byFlag},
				Action: decideApproval(false),
			},
		},
	}
}

func listApprovals(c *cli.Context, admin *adminClient, _ string) error {
	state := c.String("state")
	if state == "all" {
		state = ""
	}
	as, err := admin.Approvals(c.Context, state, c.String("sandbox"))
	if err != nil {
		return admin.failed(err)
	}
	if c.Bool("json") {
		return printJSON(c, client.Approvals{Approvals: as})
	}
	if len(as) == 0 {
		fmt.Fprintln(c.App.ErrWriter, "cproxy: no approval requests")
		return nil
	}
	w := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "ID\tSANDBOX\tROUTE\tSTATE\tEXPIRES\tASKS")
	for _, a := range as {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", a.ID, a.Sandbox, a.Route, a.State, a.ExpiresAt.UTC().Format(time.RFC3339), a.Subject)
	}
	return w.Flush()
}

func decideApproval(approve bool) cli.ActionFunc {
	return adminAction(false, func(c *cli.Context, admin *adminClient, _ string) error {
		path := "cproxy approvals deny"
		if approve {
			path = "cproxy approvals approve"
		}
		if c.NArg() != 1 || c.Args().First() == "" {
			return usageError(path, "", "%s takes the approval's id: %s ID (cproxy approvals list shows them)", path, path)
		}
		decide := admin.Deny
		if approve {
			decide = admin.Approve
		}
		a, err := decide(c.Context, c.Args().First(), c.String("by"))
		if err != nil {
			return admin.failed(err)
		}
		if approve {
			_, err = fmt.Fprintf(c.App.Writer, "approved %s: sandbox %s may retry %s once, until %s\n", a.ID, a.Sandbox, a.Subject, a.ExpiresAt.UTC().Format(time.RFC3339))
		} else {
			_, err = fmt.Fprintf(c.App.Writer, "denied %s: sandbox %s's %s stays refused until %s\n", a.ID, a.Sandbox, a.Subject, a.ExpiresAt.UTC().Format(time.RFC3339))
		}
		return err
	})
}
