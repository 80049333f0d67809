package main

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/cproxy/cproxy/client"
	"github.com/cproxy/cproxy/config"
	"github.com/cproxy/cproxy/policy"
)

func policyCommand() *cli.Command {
	return &cli.Command{
		Name:  "policy",
		Usage: "work with policy files",
		Description: `Examples:

   cproxy policy check cproxy.toml policy.toml
   cproxy policy explain --config cproxy.toml --sandbox conv-42 --model claude-opus-4-1`,
		Subcommands: []*cli.Command{policyCheckCommand(), policyExplainCommand(), policyReplayCommand()},
	}
}

// checkFormats are the formats of cproxy policy check.
var checkFormats = []string{"text", "json", "github"}

func policyCheckCommand() *cli.Command {
	return &cli.Command{
		Name:      "check",
		Usage:     "check policy or config files; exit 1 with one file:line:col: message per problem",
		ArgsUsage: "FILE...",
		Description: `--format github prints each problem as a GitHub Actions ::error command, which marks the line
in the pull request.

Examples:

   cproxy policy check cproxy.toml policy.toml
   cproxy policy check --format json policy.toml
   cproxy policy check --format github policy.toml`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "format", Aliases: []string{"f"}, Value: "text", Usage: "text, json, or github (GitHub Actions ::error commands)"},
		},
		Action: func(c *cli.Context) error {
			format := c.String("format")
			if err := checkFormat(format, checkFormats); err != nil {
				return err
			}
			if c.NArg() == 0 {
				return fail("cproxy policy check policy.toml [more.toml...]", "no files to check")
			}
			// Flags end at the first file name, so a flag after it would be
			// checked as a file; a file really named so can be given as ./-name.
			for _, arg := range c.Args().Tail() {
				if strings.HasPrefix(arg, "-") {
					return fail("flags go before the file names: cproxy policy check --format json policy.toml", "%q after a file name is not read as a flag", arg)
				}
			}
			var all, warnings policy.Problems
			for _, path := range c.Args().Slice() {
				probs, warns := config.CheckWarnings(path)
				all, warnings = append(all, probs...), append(warnings, warns...)
			}
			// Warnings do not fail the check: diagnostics on stderr, or
			// for GitHub Actions ::warning commands beside the errors.
			for _, w := range warnings {
				if format == "github" {
					fmt.Fprintln(c.App.Writer, githubCommand("warning", w))
				} else {
					fmt.Fprintln(c.App.ErrWriter, "cproxy: warning: "+w.String())
				}
			}
			if format == "json" {
				type problem struct {
					File    string `json:"file"`
					Line    int    `json:"line"`
					Col     int    `json:"col"`
					Message string `json:"message"`
				}
				out := []problem{}
				for _, p := range all {
					out = append(out, problem{p.File, p.Line, p.Col, p.Message})
				}
				if err := printJSON(c, out); err != nil {
					return err
				}
			} else {
				for _, p := range all {
					line := p.String()
					if format == "github" {
						line = githubCommand("error", p)
					}
					fmt.Fprintln(c.App.Writer, line)
				}
			}
			if len(all) > 0 {
				return exitCode(1)
			}
			return nil
		},
	}
}

// githubCommand is a problem as a GitHub Actions workflow command, kind
// "error" or "warning", which the run's log shows as such and the pull
// request as an annotation on the line. Escaped as actions/toolkit does:
// %, CR and LF in the message, and also , and : in the properties.
func githubCommand(kind string, p policy.Problem) string {
	data := strings.NewReplacer("%", "%25", "\r", "%0D", "\n", "%0A")
	prop := strings.NewReplacer("%", "%25", "\r", "%0D", "\n", "%0A", ":", "%3A", ",", "%2C")
	if p.File == "" {
		return "::" + kind + "::" + data.Replace(p.Message)
	}
	props := "file=" + prop.Replace(p.File)
	if p.Line > 0 {
		props += fmt.Sprintf(",line=%d,col=%d", p.Line, p.Col)
	}
	return "::" + kind + " " + props + "::" + data.Replace(p.Message)
}

const explainUsage = "cproxy policy explain --sandbox ID (--model M | --repo OWNER/NAME [--push REF [--delete] | --api PERMISSION [--head BRANCH --base BRANCH]] | --package NAME[@VERSION] | --pypi NAME[==VERSION] | --go MODULE [--version V] | --relay NAME [--method M] [--path P] | --mcp SERVER [--tool NAME [--arg NAME=VALUE]... | --resource URI | --prompt NAME | --method M]) [--profile P] [--config FILE | --policy FILE] [--format text|json]"

func policyExplainCommand() *cli.Command {
	return &cli.Command{
		Name:      "explain",
		Usage:     "say which profile a sandbox gets and whether it may make a request, by which rule; exit 0 allowed, 1 denied or needing approval",
		ArgsUsage: " ",
		Description: `One question per run: --model, --repo (with --push REF, or --api PERMISSION), --package, --pypi, --go, --relay or --mcp.

Examples:

   cproxy policy explain --config cproxy.toml --sandbox conv-42 --repo acme/app --push refs/heads/main
   cproxy policy explain --policy policy.toml --sandbox ci-1 --package react@19.1.0
   cproxy policy explain --policy policy.toml --sandbox ci-1 --pypi requests==2.32.3
   cproxy policy explain --config cproxy.toml --sandbox conv-42 --repo acme/app --api pulls:create --head agent/x --base main`,
		Flags: []cli.Flag{
			sandboxFlag(),
			&cli.StringFlag{Name: "model", Usage: "ask about model `ID`"},
			&cli.StringFlag{Name: "repo", Usage: "ask about fetching from GitHub repository `OWNER/NAME`"},
			&cli.StringFlag{Name: "push", Usage: "with --repo: ask about a push updating `REF` (a full ref name, refs/heads/…)"},
			&cli.BoolFlag{Name: "delete", Usage: "with --push: the push deletes REF"},
			&cli.StringFlag{Name: "api", Usage: "with --repo: ask about a GitHub API request needing `PERMISSION` (read, pulls:create, …)"},
			&cli.StringFlag{Name: "head", Usage: "with --api pulls:create: the pull request's head `BRANCH`"},
			&cli.StringFlag{Name: "base", Usage: "with --api pulls:create: the pull request's base `BRANCH`"},
			&cli.StringFlag{Name: "package", Usage: "ask about npm package `NAME[@VERSION]`"},
			&cli.StringFlag{Name: "pypi", Usage: "ask about PyPI project `NAME[==VERSION]`, in any spelling of the name"},
			&cli.StringFlag{Name: "go", Usage: "ask about Go module `MODULE` (its path as go names it, capitals and all)"},
			&cli.StringFlag{Name: "version", Usage: "with --go: ask about the module's version `V` (v1.2.3, a pseudo-version)"},
			&cli.StringFlag{Name: "relay", Usage: "ask about the config's relay `NAME`"},
			&cli.StringFlag{Name: "method", Usage: "with --relay: the request's HTTP `METHOD`; with --mcp: the JSON-RPC method"},
			&cli.StringFlag{Name: "path", Usage: "with --relay: the request's `PATH` under the relay's prefix"},
			&cli.StringFlag{Name: "mcp", Usage: "ask about the MCP server `SERVER` ([mcp.SERVER] of the config)"},
			&cli.StringFlag{Name: "tool", Usage: "with --mcp: ask about calling tool `NAME` (tools/call)"},
			&cli.StringSliceFlag{Name: "arg", Usage: "with --tool: the call sends argument `NAME=VALUE` (VALUE as JSON when it reads as JSON, else a string); repeat for each"},
			&cli.StringFlag{Name: "resource", Usage: "with --mcp: ask about reading resource `URI` (resources/read)"},
			&cli.StringFlag{Name: "prompt", Usage: "with --mcp: ask about getting prompt `NAME` (prompts/get)"},
			&cli.StringFlag{Name: "profile", Usage: "the profile the sandbox's token names (as POST /tokens?profile=)"},
			configFlag(),
			adminFlag(),
			&cli.StringFlag{Name: "policy", Usage: "a policy `FILE` on its own, instead of the config's"},
			&cli.StringFlag{Name: "format", Aliases: []string{"f"}, Value: "text", Usage: "text or json"},
		},
		Action: func(c *cli.Context) error {
			sandbox, err := sandboxArg(c, true)
			if err != nil {
				return err
			}
			o := explainOptions{
				sandbox: sandbox, profile: c.String("profile"), format: c.String("format"),
				model: c.String("model"), repo: c.String("repo"), push: c.String("push"), del: c.Bool("delete"),
				api: c.String("api"), head: c.String("head"), base: c.String("base"),
				pkg: c.String("package"), pypi: c.String("pypi"), gomod: c.String("go"), goVersion: c.String("version"), relay: c.String("relay"), method: c.String("method"), path: c.String("path"),
				mcp: c.String("mcp"), tool: c.String("tool"), args: c.StringSlice("arg"), resource: c.String("resource"), prompt: c.String("prompt"),
			}
			// CPROXY_CONFIG in the environment gives way to --policy; the
			// two flags together are a mistake.
			if o.policyFile = c.String("policy"); o.policyFile == "" {
				o.configFile = c.String("config")
			} else if given(c, "config") {
				return fail(explainUsage, "use --config or --policy, not both")
			}
			// The budget left comes from a running cproxy, when one is
			// named (--admin, CPROXY_ADMIN_URL) or its config is given.
			if c.IsSet("admin") || o.configFile != "" {
				if admin, err := newAdminClient(c); err == nil {
					o.tokens = func(sandbox string) ([]client.TokenInfo, error) {
						toks, err := admin.List(c.Context, sandbox)
						return toks, admin.failed(err)
					}
				}
			}
			allowed, err := runExplain(o, c.App.Writer)
			if err != nil {
				return err
			}
			if !allowed {
				return exitCode(1)
			}
			return nil
		},
	}
}

// explainOptions is one `cproxy policy explain`: a sandbox, one question
// about a request it might make, and the policy to ask.
type explainOptions struct {
	sandbox, profile       string
	configFile, policyFile string // at most one; neither: the embedded defaults
	format                 string

	model        string
	repo, push   string
	del          bool
	api          string
	head, base   string
	pkg          string
	pypi         string // NAME[==VERSION]
	gomod        string // --go: a module path
	goVersion    string // --version, with --go
	relay        string
	method, path string
	mcp          string   // --mcp: a server's name
	tool         string   // --tool, with --mcp
	args         []string // --arg NAME=VALUE, with --tool
	resource     string   // --resource, with --mcp
	prompt       string   // --prompt, with --mcp

	// tokens lists the sandbox's tokens from a running cproxy, for the
	// budget left; nil when there is none to ask.
	tokens func(sandbox string) ([]client.TokenInfo, error)
}

// budgetExplained is the budget part of an explanation.
type budgetExplained struct {
	Limits policy.Budget `json:"limits"`
	// Tokens are the sandbox's live tokens with what each has spent in
	// its current window (a budget is per token).
	Tokens []tokenSpent `json:"tokens,omitempty"`
	// Unknown says why the tokens' usage is not shown.
	Unknown string `json:"usage_unknown,omitempty"`
}

type tokenSpent struct {
	ID    string        `json:"id"`
	Usage *client.Usage `json:"usage,omitempty"`
	// Budget is the token's own budget when it differs from its profile's.
	Budget *policy.Budget `json:"budget,omitempty"`
}

// explanation is what explain prints: the profile and how it was chosen,
// each check the route would make, in its order, and the answer.
type explanation struct {
	Sandbox string `json:"sandbox"`
	// Profile is the profile's name; empty when none applies, and then
	// NoProfile says why.
	Profile string `json:"profile,omitempty"`
	// Mode is the profile's mode when it is warn: a refusal is forwarded.
	Mode string `json:"mode,omitempty"`
	// Warn is the profile's warn list: the codes of the refusals it only
	// warns about.
	Warn      []string `json:"warn,omitempty"`
	ChosenBy  string   `json:"chosen_by,omitempty"`
	ChosenAt  string   `json:"chosen_at,omitempty"`
	NoProfile string   `json:"no_profile,omitempty"`
	// Budget is the profile's budget and, when the admin API could be
	// asked, what each of the sandbox's live tokens has spent of it;
	// omitted when the profile has none.
	Budget *budgetExplained `json:"budget,omitempty"`
	Checks []checkStep      `json:"checks"`
	Notes  []string         `json:"notes,omitempty"`
	Allow  bool             `json:"allow"`
	// Ask is set when the request may go ahead only with an approval
	// (docs/approvals.md); Allow is false then.
	Ask  bool   `json:"ask,omitempty"`
	Rule string `json:"rule"`
	// Code is a refusal's code (docs/refusals.md), where the policy's
	// own rule refused.
	Code string `json:"code,omitempty"`
	// Warned is set for a refusal the profile forwards all the same (its
	// mode, or its warn list naming Code).
	Warned bool `json:"warned,omitempty"`
}

type checkStep struct {
	Check string `json:"check"`
	Allow bool   `json:"allow"`
	Ask   bool   `json:"ask,omitempty"`
	Rule  string `json:"rule"`
}

// runExplain answers the question as the routes would, with the policy
// package's own decisions, and prints the answer. It returns whether the
// request would be allowed; an error only when the question cannot be asked.
func runExplain(o explainOptions, w io.Writer) (bool, error) {
	if err := checkFormat(o.format, textOrJSON); err != nil {
		return false, err
	}
	if err := o.checkQuestion(); err != nil {
		return false, err
	}
	var cfg *config.Config // nil with --policy: no relays to check against
	var rules *policy.Policy
	if o.policyFile != "" {
		p, err := policy.LoadPolicy(o.policyFile)
		if err != nil {
			return false, configError(err)
		}
		rules = p
	} else {
		var err error
		if cfg, err = loadConfig(o.configFile); err != nil {
			return false, err
		}
		rules = cfg.Rules
	}
	var relay *policy.Relay
	if o.relay != "" {
		switch {
		case cfg == nil && (o.method != "" || o.path != ""):
			return false, fail("give the config with --config: a relay's methods and paths are there", "--method and --path need the config, not --policy")
		case cfg != nil:
			r := cfg.Relays[o.relay]
			if r == nil {
				known := "none"
				if len(cfg.Relays) > 0 {
					known = strings.Join(slices.Sorted(maps.Keys(cfg.Relays)), ", ")
				}
				return false, fail("name one of its relays: "+known, "no [relay.%s] in %s", o.relay, configName(cfg))
			}
			relay = &r.Relay
		}
	}

	e := explanation{Sandbox: o.sandbox, Checks: []checkStep{}}
	choice, err := rules.ChooseProfile(o.sandbox, o.profile)
	if err != nil {
		// As the routes answer: refused, with the reason.
		e.NoProfile, e.Rule = err.Error(), "no profile"
	} else {
		pr := choice.Profile
		e.Profile, e.ChosenBy, e.ChosenAt = pr.Name, choice.Rule, choice.At
		if pr.Warns() {
			e.Mode = policy.ModeWarn
		}
		e.Warn = pr.Warn
		e.ask(o, pr, relay)
		if !pr.Budget.IsZero() {
			e.Budget = explainBudget(o, pr.Budget)
		}
	}
	if o.format == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return e.Allow, enc.Encode(e)
	}
	e.printText(w)
	return e.Allow, nil
}

// explainBudget is the profile's budget and what the sandbox's live tokens
// have spent, when a running cproxy can be asked.
func explainBudget(o explainOptions, lim policy.Budget) *budgetExplained {
	b := &budgetExplained{Limits: lim}
	if o.tokens == nil {
		b.Unknown = "usage not shown: give --admin (or the --config of a running cproxy serve) to see what the sandbox's tokens have spent"
		return b
	}
	toks, err := o.tokens(o.sandbox)
	if err != nil {
		b.Unknown = "usage not shown: " + strings.TrimPrefix(err.Error(), "cproxy: ")
		return b
	}
	for _, t := range toks {
		if t.State != "live" {
			continue
		}
		ts := tokenSpent{ID: t.ID, Usage: t.Usage}
		if t.Budget != nil && policy.Budget(*t.Budget) != lim {
			own := policy.Budget(*t.Budget)
			ts.Budget = &own
		}
		b.Tokens = append(b.Tokens, ts)
	}
	if len(b.Tokens) == 0 {
		b.Unknown = "the sandbox has no live token"
	}
	return b
}

// describeBudget words a budget's limits: "per day: requests 500, output 1000000, 30/min, 4 at once,
// mcp_calls 200, 20 mcp calls/min".
func describeBudget(b policy.Budget) string {
	var parts []string
	for _, x := range []struct {
		name string
		v    int64
	}{{"requests", b.Requests}, {"input", b.InputTokens}, {"output", b.OutputTokens}, {"cache_read", b.CacheReadTokens}, {"cache_write", b.CacheWriteTokens},
		{"mcp_calls", b.MCPCalls}} {
		if x.v > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", x.name, x.v))
		}
	}
	if b.RequestsPerMinute > 0 {
		parts = append(parts, fmt.Sprintf("%d/min", b.RequestsPerMinute))
	}
	if b.Concurrent > 0 {
		parts = append(parts, fmt.Sprintf("%d at once", b.Concurrent))
	}
	if b.MCPCallsPerMinute > 0 {
		parts = append(parts, fmt.Sprintf("%d mcp calls/min", b.MCPCallsPerMinute))
	}
	if b.Ask {
		parts = append(parts, "a request past a limit asks for approval")
	}
	window := "per token"
	if b.Window == policy.WindowDay {
		window = "per token per UTC day"
	}
	return window + ": " + strings.Join(parts, ", ")
}

// checkQuestion refuses anything but one question with the flags that go with it.
func (o explainOptions) checkQuestion() error {
	asked := 0
	for _, q := range []string{o.model, o.repo, o.pkg, o.pypi, o.gomod, o.relay, o.mcp} {
		if q != "" {
			asked++
		}
	}
	switch {
	case asked != 1:
		return fail(explainUsage, "ask one question: --model, --repo, --package, --pypi, --go, --relay or --mcp")
	case o.push != "" && o.repo == "":
		return fail(explainUsage, "--push goes with --repo")
	case o.api != "" && (o.repo == "" || o.push != ""):
		return fail(explainUsage, "--api goes with --repo, without --push")
	case o.api != "" && !slices.Contains(policy.APIPermissions, o.api):
		return fail("use one of: "+strings.Join(policy.APIPermissions, ", "), "--api %q is not an API permission", o.api)
	case (o.head != "" || o.base != "") && o.api != policy.APIPullsCreate:
		return fail(explainUsage, "--head and --base go with --api pulls:create")
	case (o.head == "") != (o.base == ""):
		return fail(explainUsage, "give --head and --base together")
	case o.del && o.push == "":
		return fail(explainUsage, "--delete goes with --push REF")
	case o.push != "" && !strings.HasPrefix(o.push, "refs/"):
		return fail("name the full ref, e.g. refs/heads/"+o.push, "--push %q is not a full ref name", o.push)
	case o.goVersion != "" && o.gomod == "":
		return fail(explainUsage, "--version goes with --go")
	case o.path != "" && o.relay == "", o.method != "" && o.relay == "" && o.mcp == "":
		return fail(explainUsage, "--method goes with --relay or --mcp, --path with --relay")
	case (o.tool != "" || o.resource != "" || o.prompt != "") && o.mcp == "":
		return fail(explainUsage, "--tool, --resource and --prompt go with --mcp")
	case o.mcp != "" && countSet(o.tool, o.resource, o.prompt, o.method) > 1:
		return fail(explainUsage, "ask about one of --tool, --resource, --prompt or --method")
	case len(o.args) > 0 && o.tool == "":
		return fail(explainUsage, "--arg goes with --tool")
	}
	if _, err := o.mcpArgs(); err != nil {
		return err
	}
	if o.pkg != "" {
		if name, version := splitPackage(o.pkg); name == "" || strings.HasSuffix(o.pkg, "@") && version == "" {
			return fail("e.g. --package react, --package @types/node@20.1.0", "--package %q is not NAME[@VERSION]", o.pkg)
		}
	}
	if o.pypi != "" {
		if name, version, ok := strings.Cut(o.pypi, "=="); name == "" || ok && version == "" || strings.ContainsAny(o.pypi, "<>!~@ ") || strings.Count(o.pypi, "=") > 2 {
			return fail("e.g. --pypi requests, --pypi requests==2.32.3", "--pypi %q is not NAME[==VERSION]", o.pypi)
		}
	}
	return nil
}

// ask asks the policy the question as the route does and keeps its
// answer: each rule looked at, in order, a note for what a rule says in
// words or leaves to request time, and the rule that decided.
func (e *explanation) ask(o explainOptions, pr *policy.Profile, relay *policy.Relay) {
	var a policy.Answer
	switch {
	case o.model != "":
		a = pr.AskModel(o.model)
	case o.api != "":
		a = pr.AskAPI(policy.APIQuestion{Repo: o.repo, Permission: o.api, Head: o.head, Base: o.base})
	case o.repo != "" && o.push == "":
		a = pr.AskFetch(o.repo)
	case o.repo != "":
		a = pr.AskPush(o.repo, []policy.RefUpdate{{Ref: o.push, Delete: o.del}})
	case o.pkg != "":
		name, version := splitPackage(o.pkg)
		a = pr.AskNPM(policy.NPMQuestion{Name: name, Version: version})
	case o.pypi != "":
		name, version, _ := strings.Cut(o.pypi, "==")
		a = pr.AskPyPI(policy.PyPIQuestion{Name: name, Version: version})
	case o.gomod != "":
		a = pr.AskGo(policy.GoQuestion{Module: o.gomod, Version: o.goVersion})
	case o.mcp != "":
		q := policy.MCPQuestion{Server: o.mcp, Method: o.method}
		switch {
		case o.tool != "":
			q.Method, q.Name = "tools/call", o.tool
			q.Args, _ = o.mcpArgs()
		case o.resource != "":
			q.Method, q.Name = "resources/read", o.resource
		case o.prompt != "":
			q.Method, q.Name = "prompts/get", o.prompt
		}
		a = pr.AskMCP(q)
	case o.relay != "":
		if relay == nil {
			// Without the config, only the profile's relays.
			if a = pr.AskRelay(policy.RelayQuestion{Relay: &policy.Relay{Name: o.relay}}); a.Allow {
				e.Notes = append(e.Notes, "the relay's methods and paths are in the config: give --config to check them")
			}
			break
		}
		a = pr.AskRelay(policy.RelayQuestion{Relay: relay, Method: strings.ToUpper(o.method), Path: o.path})
	}
	for _, s := range a.Steps {
		if s.Outcome != policy.Deferred {
			e.Checks = append(e.Checks, checkStep{Check: s.Check, Allow: s.Outcome == policy.Allowed, Ask: s.Outcome == policy.Asked, Rule: s.Rule})
		}
		if s.Reason != "" {
			e.Notes = append(e.Notes, s.Reason)
		}
	}
	e.Allow, e.Ask, e.Rule = a.Allow, a.Ask, a.Decided().Rule
	if step, refused := a.Refusal(); refused && !a.Ask {
		e.Code = policy.StepCode(step.Key)
		e.Warned = pr.WarnsOf(e.Code)
	}
	if a.Ask {
		// The rule that asked, not the last allowed after it.
		e.Rule = a.Rule
		e.Notes = append(e.Notes, "a request that needs approval is refused with an approval request's id; once an operator approves it (cproxy approvals approve ID), the same request goes through once")
	}
}

func (e explanation) printText(w io.Writer) {
	fmt.Fprintf(w, "sandbox:  %s\n", e.Sandbox)
	if e.Profile == "" {
		fmt.Fprintf(w, "profile:  none: %s\n", e.NoProfile)
	} else {
		at := ""
		if e.ChosenAt != "" {
			at = " (" + e.ChosenAt + ")"
		}
		fmt.Fprintf(w, "profile:  %s, chosen by %s%s\n", e.Profile, e.ChosenBy, at)
	}
	if e.Mode == policy.ModeWarn {
		fmt.Fprintln(w, "mode:     warn: what this profile refuses is forwarded and logged as decision warn")
	}
	if len(e.Warn) > 0 {
		fmt.Fprintf(w, "warn:     %s: refusals of these codes are forwarded and logged as decision warn\n", strings.Join(e.Warn, ", "))
	}
	if b := e.Budget; b != nil {
		fmt.Fprintf(w, "budget:   %s\n", describeBudget(b.Limits))
		for _, t := range b.Tokens {
			// A token without its own budget spends its profile's.
			lim := t.Budget
			if lim == nil {
				lim = &b.Limits
			}
			fmt.Fprintf(w, "budget:   %s has spent %s\n", t.ID, usageOf(client.TokenInfo{ID: t.ID, Usage: t.Usage, Budget: (*client.Budget)(lim)}))
		}
		if b.Unknown != "" {
			fmt.Fprintf(w, "budget:   %s\n", b.Unknown)
		}
	}
	for _, c := range e.Checks {
		fmt.Fprintf(w, "check:    %s %s by %s\n", verdict(c.Allow, c.Ask), c.Check, c.Rule)
	}
	for _, n := range e.Notes {
		fmt.Fprintf(w, "note:     %s\n", n)
	}
	warned := ""
	switch {
	case !e.Warned:
	case e.Mode == policy.ModeWarn:
		warned = "; forwarded all the same, the profile being in warn mode"
	default:
		warned = "; forwarded all the same, the profile's warn list naming " + e.Code
	}
	fmt.Fprintf(w, "decision: %s by %s%s\n", verdict(e.Allow, e.Ask), e.Rule, warned)
}

func verdict(allow, ask bool) string {
	switch {
	case allow:
		return "allow"
	case ask:
		return "ask"
	}
	return "deny"
}

// countSet is how many of ss are not empty.
func countSet(ss ...string) int {
	n := 0
	for _, s := range ss {
		if s != "" {
			n++
		}
	}
	return n
}

// mcpArgs are the --arg flags as the call's arguments: each NAME=VALUE,
// VALUE as JSON decodes it when it is JSON (3, true, "x"), else the
// string itself.
func (o explainOptions) mcpArgs() (map[string]any, error) {
	if len(o.args) == 0 {
		return nil, nil
	}
	args := map[string]any{}
	for _, kv := range o.args {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fail("e.g. --arg repo=acme/app --arg priority=2", "--arg %q is not NAME=VALUE", kv)
		}
		var val any
		if err := json.Unmarshal([]byte(v), &val); err != nil {
			val = v
		}
		args[k] = val
	}
	return args, nil
}

// splitPackage splits NAME[@VERSION]; a scoped name's leading @ is the name's.
func splitPackage(s string) (name, version string) {
	if i := strings.LastIndexByte(s, '@'); i > 0 {
		return s[:i], s[i+1:]
	}
	return s, ""
}

func configName(cfg *config.Config) string {
	if cfg.Path == "" {
		return "the embedded default config"
	}
	return cfg.Path
}
