package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/cproxy/cproxy/client"
	"github.com/cproxy/cproxy/policy"
	adminapi "github.com/cproxy/cproxy/routes/admin"
	"github.com/cproxy/cproxy/tokens"
)

func tokenCommand() *cli.Command {
	return &cli.Command{
		Name:  "token",
		Usage: "create, revoke, list and prune sandbox tokens through the admin API",
		Description: `Each subcommand calls the admin API of a running cproxy serve: --admin URL, else listen.admin
of --config, else $CPROXY_ADMIN_URL, else listen.admin of $CPROXY_CONFIG, else http://127.0.0.1:9001.
Through a config, it first checks that the cproxy serve there serves that config.

Examples:

   TOKEN=$(cproxy token create --sandbox conv-42)
   cproxy token list --sandbox conv-42
   cproxy token revoke --sandbox conv-42`,
		Subcommands: []*cli.Command{
			{
				Name:  "create",
				Usage: "mint a token for a sandbox and print it",
				Description: `Prints the token alone, so TOKEN=$(cproxy token create ...) works.

Examples:

   TOKEN=$(cproxy token create --sandbox conv-42)
   cproxy token create --sandbox conv-42 --profile default --ttl 90m --json`,
				Flags: []cli.Flag{
					adminFlag(), configFlag(), sandboxFlag(),
					&cli.StringFlag{Name: "profile", Usage: "policy `PROFILE` (default: chosen by the policy's sandbox rules)"},
					&cli.StringFlag{Name: "ttl", Usage: "lifetime, e.g. 90m, 24h, 7d (default 24h)"},
					&cli.StringFlag{Name: "source", Usage: "accept the token only from `ADDR`, an IP address or CIDR prefix (within the profile's sources)"},
					&cli.StringFlag{Name: "bind", Usage: "bind the token to a channel: socket (valid only on the sandbox's own socket; --json gives its path)"},
					valuesFlag(),
					budgetFlag(),
					&cli.BoolFlag{Name: "json", Usage: "print the admin API's JSON answer"},
				},
				Action: adminAction(true, func(c *cli.Context, admin *adminClient, sandbox string) error {
					opts, err := mintFlags(c)
					if err != nil {
						return err
					}
					tok, err := admin.CreateToken(c.Context, sandbox, opts)
					if err != nil {
						return admin.failed(err)
					}
					if c.Bool("json") {
						return printJSON(c, adminapi.TokenCreated{Value: tok.Reveal(), Token: tok})
					}
					_, err = fmt.Fprintln(c.App.Writer, tok.Reveal())
					return err
				}),
			},
			{
				Name:  "revoke",
				Usage: "revoke every token of a sandbox, or one token by its id",
				Description: `With --sandbox, revokes every token of the sandbox; with --id, that one token (one that
leaked, say), and the sandbox's other tokens keep working. Exits 0 once the revocation is on disk:
also when the sandbox had no live token, or the token was revoked already. An id no token has is an
error.

Examples:

   cproxy token revoke --sandbox conv-42
   cproxy token revoke --id tok_0faa47dd634b
   cproxy token revoke --config /etc/cproxy/cproxy.toml --sandbox conv-42`,
				Flags: []cli.Flag{adminFlag(), configFlag(), sandboxFlag(),
					&cli.StringFlag{Name: "id", Usage: "revoke only the token with this `ID` (tok_…, as token list shows it)"}},
				Action: adminAction(false, revokeTokens, revokeArgs),
			},
			{
				Name:  "list",
				Usage: "list tokens (never their values)",
				Description: `Lists the tokens in order of their id, a page at a time as the admin API answers them, so
that a store of any size is listed without holding it all.

Examples:

   cproxy token list
   cproxy token list --sandbox conv-42 --json
   cproxy token list --state live --limit 20`,
				Flags: []cli.Flag{adminFlag(), configFlag(), sandboxFlag(),
					&cli.StringFlag{Name: "state", Usage: "only tokens in `STATE`: live, expired or revoked"},
					&cli.IntFlag{Name: "limit", Usage: "list at most `N` tokens, 0 for all", DefaultText: "all"},
					&cli.BoolFlag{Name: "json", Usage: "print JSON"}},
				Action: adminAction(false, listTokens),
			},
			pruneCommand(),
		},
	}
}

func pruneCommand() *cli.Command {
	return &cli.Command{
		Name:  "prune",
		Usage: "delete the tokens that expired or were revoked longer ago than store.retention, with their usage",
		Description: `cproxy serve does this by itself every hour (store.retention, default 30 days); prune does it now,
or with --dry-run lists what would go. Live tokens are never touched.

Examples:

   cproxy token prune --dry-run
   cproxy token prune --older-than 7d`,
		Flags: []cli.Flag{adminFlag(), configFlag(),
			&cli.BoolFlag{Name: "dry-run", Usage: "list what would be pruned, prune nothing"},
			&cli.StringFlag{Name: "older-than", Usage: "prune the tokens dead for longer than `DURATION`, e.g. 720h or 30d; 0s: every dead token (default: store.retention)"},
			&cli.BoolFlag{Name: "json", Usage: "print the admin API's JSON answer"}},
		Action: adminAction(false, func(c *cli.Context, admin *adminClient, _ string) error {
			opts := client.PruneOptions{DryRun: c.Bool("dry-run")}
			if v := c.String("older-than"); v != "" {
				d, err := adminapi.ParseAge(v)
				if err != nil {
					return fail("", "%v", err)
				}
				opts.OlderThan, opts.AllDead = d, d == 0
			}
			res, err := admin.Prune(c.Context, opts)
			if err != nil {
				return admin.failed(err)
			}
			if c.Bool("json") {
				return printJSON(c, res)
			}
			return printPruned(c, res)
		}),
	}
}

// printPruned words a prune's answer: what went, or in a dry run a table of
// what would.
func printPruned(c *cli.Context, res client.Pruned) error {
	w, before := c.App.Writer, res.Before.UTC().Format(time.RFC3339)
	switch {
	case res.Count == 0:
		_, err := fmt.Fprintf(w, "no token expired or was revoked at or before %s: nothing to prune\n", before)
		return err
	case !res.DryRun:
		_, err := fmt.Fprintf(w, "pruned %s: expired or revoked at or before %s\n", plural(res.Count, "token"), before)
		return err
	}
	fmt.Fprintf(w, "%s would be pruned: expired or revoked at or before %s\n", plural(res.Count, "token"), before)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSANDBOX\tPROFILE\tSTATE\tDEAD SINCE")
	for _, t := range res.Tokens {
		profile := t.Profile
		if profile == "" {
			profile = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", t.ID, t.Sandbox, profile, t.State, tokens.Record{ExpiresAt: t.ExpiresAt, RevokedAt: t.RevokedAt}.DeadSince().UTC().Format(time.RFC3339))
	}
	if more := res.Count - len(res.Tokens); more > 0 {
		fmt.Fprintf(tw, "… and %d more\n", more)
	}
	return tw.Flush()
}

// plural is "1 token", "2 tokens".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// revokeTokens is token revoke: every token of --sandbox, or the one of
// --id (revokeArgs checked them).
func revokeTokens(c *cli.Context, admin *adminClient, sandbox string) error {
	if id := c.String("id"); id != "" {
		return admin.failed(admin.RevokeToken(c.Context, id))
	}
	return admin.failed(admin.Revoke(c.Context, sandbox))
}

// revokeArgs checks token revoke's --sandbox and --id: one or the other,
// and an id that is one.
func revokeArgs(c *cli.Context, sandbox string) error {
	const either = "pass --sandbox ID to revoke every token of a sandbox, or --id TOKEN_ID to revoke one token"
	id := c.String("id")
	switch {
	case sandbox != "" && id != "":
		return fail(either, "--sandbox and --id cannot be combined")
	case sandbox == "" && !c.IsSet("id"):
		return fail(either, "no sandbox or token id")
	case c.IsSet("id") && !tokens.ValidID(id):
		if tok, err := tokens.Parse(id); err == nil {
			// Never echoed: it is the credential. Its id is no secret.
			return fail("cproxy token revoke --id "+tok.Hash().ID(), "--id takes a token's id, not the token")
		}
		shown, _ := tokens.Withhold(id, "[token-withheld]")
		return fail("an id is tok_ and 12 lower-case hex digits, as cproxy token list shows it", "invalid token id %q", shown)
	}
	return nil
}

// adminAction checks the arguments common to the token subcommands, and
// those checks check, then runs fn with an admin API client and the
// --sandbox id ("" when optional and not given).
func adminAction(sandboxRequired bool, fn func(c *cli.Context, admin *adminClient, sandbox string) error, checks ...func(c *cli.Context, sandbox string) error) cli.ActionFunc {
	return func(c *cli.Context) error {
		sandbox, err := sandboxArg(c, sandboxRequired)
		if err != nil {
			return err
		}
		for _, check := range checks {
			if err := check(c, sandbox); err != nil {
				return err
			}
		}
		admin, err := newAdminClient(c)
		if err != nil {
			return err
		}
		return fn(c, admin, sandbox)
	}
}

// boundTo words a token's binding for the list: "source=10.20.30.5",
// "socket", or "-".
func boundTo(t client.TokenInfo) string {
	switch {
	case t.Bind != "":
		return t.Bind
	case t.Source != "":
		return "source=" + t.Source
	}
	return "-"
}

// usageOf words a token's usage against its budget for the list, e.g.
// "requests 3/10, output 1200/50000 (today)", or "-".
func usageOf(t client.TokenInfo) string {
	if t.Usage == nil || t.Budget == nil {
		return "-"
	}
	u, b := *t.Usage, *t.Budget
	var parts []string
	for _, x := range []struct {
		name        string
		used, limit int64
	}{{"requests", u.Requests, b.Requests}, {"input", u.InputTokens, b.InputTokens}, {"output", u.OutputTokens, b.OutputTokens},
		{"cache_read", u.CacheReadTokens, b.CacheReadTokens}, {"cache_write", u.CacheWriteTokens, b.CacheWriteTokens},
		{"mcp_calls", u.MCPCalls, b.MCPCalls}} {
		if x.limit > 0 {
			parts = append(parts, fmt.Sprintf("%s %d/%d", x.name, x.used, x.limit))
		}
	}
	s := strings.Join(parts, ", ")
	if b.Window == policy.WindowDay {
		s += " (today)"
	}
	return s
}

func printJSON(c *cli.Context, v any) error {
	enc := json.NewEncoder(c.App.Writer)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// listTokens prints the tokens --sandbox, --state and --limit ask for, each
// page as it comes, following the admin API's cursors: it never holds more
// than a page.
func listTokens(c *cli.Context, admin *adminClient, sandbox string) error {
	state, limit := c.String("state"), c.Int("limit")
	if state != "" && !slices.Contains(tokens.States, tokens.State(state)) {
		return fail("--state is live, expired or revoked", "invalid state %q", state)
	}
	if limit < 0 {
		return fail("--limit 0, or none, lists every token", "invalid --limit %d", limit)
	}
	opts := client.ListOptions{Sandbox: sandbox, State: state}
	out := tokenPrinter{w: c.App.Writer, json: c.Bool("json")}
	for listed := 0; ; {
		opts.Limit = client.MaxListLimit
		if limit > 0 {
			opts.Limit = min(opts.Limit, limit-listed)
		}
		page, err := admin.ListPage(c.Context, opts)
		if err != nil {
			return admin.failed(err)
		}
		toks := page.Tokens
		if limit > 0 {
			// A page may run past its limit (tokens that share an id).
			toks = toks[:min(len(toks), limit-listed)]
		}
		listed += len(toks)
		more := page.Next != "" && (limit == 0 || listed < limit)
		if err := out.page(toks, !more); err != nil {
			return err
		}
		if !more {
			if page.Next != "" || len(toks) < len(page.Tokens) {
				fmt.Fprintf(c.App.ErrWriter, "cproxy: --limit %d reached; there are more tokens\n", limit)
			}
			return nil
		}
		opts.Cursor = page.Next
	}
}

// tokenPrinter prints a listing of tokens a page at a time: a JSON array,
// or a table whose columns are aligned within each page.
type tokenPrinter struct {
	w    io.Writer
	json bool

	pages          int
	printed        int
	bound, metered bool // the table has a BOUND, a USAGE column
}

// page prints toks, the next page of the listing; last says it ends it.
func (p *tokenPrinter) page(toks []client.TokenInfo, last bool) error {
	defer func() { p.pages++ }()
	if p.json {
		return p.pageJSON(toks, last)
	}
	tw := tabwriter.NewWriter(p.w, 0, 4, 2, ' ', 0)
	if p.pages == 0 {
		// A BOUND column only when a token is bound, so the table of a
		// cproxy that binds nothing stays as it was; likewise USAGE, for
		// tokens with a budget that meters. Past one page, both, as
		// later pages may need them.
		p.bound = !last || slices.ContainsFunc(toks, func(t client.TokenInfo) bool { return t.Source != "" || t.Bind != "" })
		p.metered = !last || slices.ContainsFunc(toks, func(t client.TokenInfo) bool { return t.Usage != nil })
		header := "ID\tSANDBOX\tPROFILE\tSTATE\tCREATED\tEXPIRES"
		if p.bound {
			header += "\tBOUND"
		}
		if p.metered {
			header += "\tUSAGE"
		}
		fmt.Fprintln(tw, header)
	}
	for _, t := range toks {
		profile := t.Profile
		if profile == "" {
			profile = "-"
		}
		line := fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s", t.ID, t.Sandbox, profile, t.State,
			t.CreatedAt.UTC().Format(time.RFC3339), t.ExpiresAt.UTC().Format(time.RFC3339))
		if p.bound {
			line += "\t" + boundTo(t)
		}
		if p.metered {
			line += "\t" + usageOf(t)
		}
		fmt.Fprintln(tw, line)
	}
	return tw.Flush()
}

// pageJSON writes toks as the next elements of one JSON array, indented
// as printJSON indents it.
func (p *tokenPrinter) pageJSON(toks []client.TokenInfo, last bool) error {
	var b bytes.Buffer
	for _, t := range toks {
		v, err := json.MarshalIndent(t, "  ", "  ")
		if err != nil {
			return err
		}
		if p.printed == 0 {
			b.WriteString("[\n  ")
		} else {
			b.WriteString(",\n  ")
		}
		b.Write(v)
		p.printed++
	}
	if last {
		if p.printed == 0 {
			b.WriteString("[]\n")
		} else {
			b.WriteString("\n]\n")
		}
	}
	_, err := p.w.Write(b.Bytes())
	return err
}
