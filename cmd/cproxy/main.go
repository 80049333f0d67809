// Command cproxy is a credential proxy for sandboxed AI agents: it holds the
// real model, GitHub and npm credentials outside the sandbox and hands each
// sandbox a revocable token worth nothing anywhere else.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"
	"github.com/xrash/smetrics"

	"github.com/cproxy/cproxy/tokens"
)

func main() {
	os.Exit(run(os.Args, os.Stdout, os.Stderr))
}

// run is main without the exit, so tests can call it.
func run(args []string, stdout, stderr io.Writer) int {
	err := newApp(stdout, stderr).Run(args)
	if err == nil {
		return 0
	}
	return report(stderr, err)
}

// newApp is cproxy's command line, every command registered, so that the
// completion scripts, the man page and the help test walk what runs.
func newApp(stdout, stderr io.Writer) *cli.App {
	app := &cli.App{
		Name:  "cproxy",
		Usage: "keep real credentials out of agent sandboxes",
		Description: "cproxy holds the Anthropic, GitHub and npm credentials outside the sandbox. Each sandbox gets a\n" +
			"random, revocable token; cproxy checks every request against the sandbox's policy and swaps the token\n" +
			"for the real credential. See https://github.com/cproxy/cproxy/tree/main/docs.",
		Version:         version(),
		Writer:          stdout,
		ErrWriter:       stderr,
		HideHelpCommand: true,
		Commands: []*cli.Command{
			serveCommand(),
			auditCommand(),
			tokenCommand(),
			envCommand(),
			execCommand(),
			npmrcCommand(),
			mcpConfigCommand(),
			mcpCommand(),
			approvalsCommand(),
			consoleCommand(),
			policyCommand(),
			secretCommand(),
			caCommand(),
			storeCommand(),
			verifyCommand(),
			versionCommand(),
			completionCommand(),
			manCommand(),
		},
		// Errors are printed once, by run, in cproxy's own words.
		ExitErrHandler: func(*cli.Context, error) {},
		// cproxy completion's scripts ask the binary itself, with
		// --generate-bash-completion, what comes next on the line.
		EnableBashCompletion: true,
	}
	quietUsage(app.Name, nil, app)
	completeFlagValues(app)
	return app
}

// quietUsage makes a usage error (an unknown flag or command, an argument
// the command does not take) one line on stderr with a hint, as every other
// error is, for every command: name is the command's path as it is typed,
// "cproxy token create", for the hints. urfave/cli would print "Incorrect
// Usage" and the whole help on stdout, which is for data, or "No help topic
// for …" for a mistyped subcommand; and Command.FullName, in v2, is the
// command's own name alone.
func quietUsage(name string, cmd *cli.Command, app *cli.App) {
	subs := app.Commands
	if cmd != nil {
		subs = cmd.Subcommands
	}
	onUsage := func(_ *cli.Context, err error, _ bool) error {
		hint := ""
		if flag, ok := strings.CutPrefix(err.Error(), "flag provided but not defined: -"); ok {
			flags := app.Flags
			if cmd != nil {
				flags = cmd.Flags
			}
			if s := closest(flag, flagNames(flags)); s != "" {
				hint = fmt.Sprintf("did you mean %s?", dashed(s))
			}
		}
		return usageError(name, hint, "%s", err)
	}
	unknown := func(c *cli.Context) error {
		if c.NArg() == 0 {
			return cli.ShowSubcommandHelp(c)
		}
		word, hint := c.Args().First(), ""
		var names []string
		for _, sub := range subs {
			if !sub.Hidden {
				names = append(names, sub.Names()...)
			}
		}
		if s := closest(word, names); s != "" {
			hint = fmt.Sprintf("did you mean %s %s?", name, s)
		}
		return usageError(name, hint, "unknown command %q", word)
	}
	if cmd == nil {
		app.OnUsageError = onUsage
		app.Action = func(c *cli.Context) error {
			if c.NArg() > 0 {
				return unknown(c)
			}
			return cli.ShowAppHelp(c)
		}
	} else {
		cmd.OnUsageError = onUsage
		switch action := cmd.Action; {
		case len(subs) == 0:
			cmd.Action = func(c *cli.Context) error {
				if err := checkArgs(c, name, cmd); err != nil {
					return err
				}
				return action(c)
			}
		case action == nil:
			cmd.Action = unknown
		}
	}
	for _, sub := range subs {
		quietUsage(name+" "+sub.Name, sub, app)
	}
}

// checkArgs refuses, before cmd runs, the arguments it cannot take: any
// argument, for a command whose help shows none, and for every command a
// boolean flag's value written as the next word ("--git false"), which the
// flag does not take, and which would otherwise be read as the first
// argument (cproxy exec would run the command "false"). Flags end at the
// first argument, so that word is the one right after the last flag.
func checkArgs(c *cli.Context, path string, cmd *cli.Command) error {
	if c.NArg() == 0 {
		return nil
	}
	first := c.Args().First()
	if _, err := strconv.ParseBool(first); err == nil {
		if flag := wordBefore(c); strings.HasPrefix(flag, "-") && slices.Contains(flagNames(boolFlags(cmd.Flags)), strings.TrimLeft(flag, "-")) {
			return usageError(path, fmt.Sprintf("write %s=%s", flag, first), "%q after %s is read as an argument, not as the flag's value", first, flag)
		}
	}
	if cmd.Args || strings.TrimSpace(cmd.ArgsUsage) != "" {
		return nil
	}
	hint := ""
	if slices.Contains(flagNames(cmd.Flags), "sandbox") && !c.IsSet("sandbox") && tokens.ValidSandboxID(first) {
		hint = fmt.Sprintf("did you mean --sandbox %s?", first)
	}
	return usageError(path, hint, "unexpected argument %q", first)
}

// wordBefore is the word of the command line right before c's first
// argument: the last flag, or its value, or "--", or the command's name.
func wordBefore(c *cli.Context) string {
	lineage := c.Lineage()
	if len(lineage) < 2 {
		return ""
	}
	// The parent's arguments are this command's name and its words.
	words := lineage[1].Args().Slice()
	if i := len(words) - c.NArg() - 1; i >= 0 {
		return words[i]
	}
	return ""
}

func boolFlags(flags []cli.Flag) []cli.Flag {
	var bools []cli.Flag
	for _, f := range flags {
		if _, ok := f.(*cli.BoolFlag); ok {
			bools = append(bools, f)
		}
	}
	return bools
}

// flagNames are the names and aliases of flags, without dashes.
func flagNames(flags []cli.Flag) []string {
	var names []string
	for _, f := range flags {
		names = append(names, f.Names()...)
	}
	return names
}

// dashed is a flag name as it is typed: -f, --format.
func dashed(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}

// closest is the one of names most like word, "" when none is close
// enough to be a typo of it. The likeness is urfave/cli's, the
// Jaro-Winkler similarity of smetrics, whose own suggestions name the
// nearest however far it is.
func closest(word string, names []string) string {
	const typo = 0.85 // "tokn" is 0.95 like "token", "mint" 0.75 like "man"
	best, likeness := "", typo
	for _, name := range names {
		if l := smetrics.JaroWinkler(word, name, 0.7, 4); l >= likeness {
			best, likeness = name, l
		}
	}
	return best
}

// usageError is a command line cproxy cannot take, exit status 2, with a
// hint naming the fix, else pointing at the help of the command typed
// (path, such as "cproxy token create").
func usageError(path, hint, format string, args ...any) error {
	if hint == "" {
		hint = "see " + path + " --help"
	}
	return &userError{msg: fmt.Sprintf(format, args...), hint: hint, code: 2}
}

// textOrJSON are the formats of the commands that print text or JSON.
var textOrJSON = []string{"text", "json"}

// checkFormat refuses a --format that is not one of formats, the list
// cproxy completion offers (flagValues).
func checkFormat(format string, formats []string) error {
	if slices.Contains(formats, format) {
		return nil
	}
	last := len(formats) - 1
	return fail(fmt.Sprintf("use --format %s or %s", strings.Join(formats[:last], ", "), formats[last]), "unknown format %q", format)
}

// userError is a failure to tell the user about: a message, an optional
// hint with the fix, and the exit code.
type userError struct {
	msg  string
	hint string
	code int
}

func (e *userError) Error() string { return e.msg }

func fail(hint, format string, args ...any) error {
	return &userError{msg: fmt.Sprintf(format, args...), hint: hint, code: 1}
}

// exitCode carries a child's exit status through cproxy exec silently.
type exitCode int

func (e exitCode) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

func report(stderr io.Writer, err error) int {
	var code exitCode
	if errors.As(err, &code) {
		return int(code)
	}
	var ue *userError
	if errors.As(err, &ue) {
		fmt.Fprintf(stderr, "cproxy: %s\n", ue.msg)
		if ue.hint != "" {
			fmt.Fprintf(stderr, "cproxy: hint: %s\n", ue.hint)
		}
		return ue.code
	}
	// Flag parsing and other errors from the CLI library.
	fmt.Fprintf(stderr, "cproxy: %s\n", err)
	return 2
}
