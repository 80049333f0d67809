// Command cproxy is a credential proxy for sandboxed AI agents: it holds the
// real model, GitHub and npm credentials outside the sandbox and hands each
// sandbox a revocable token worth nothing anywhere else.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/urfave/cli/v2"
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
			policyCommand(),
			secretCommand(),
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

// quietUsage makes a usage error (an unknown flag or command) one line on
// stderr with a pointer to --help, as every other error is. urfave/cli would
// print "Incorrect Usage" and the whole help on stdout, which is for data,
// or "No help topic for …" for a mistyped subcommand.
func quietUsage(name string, cmd *cli.Command, app *cli.App) {
	onUsage := func(_ *cli.Context, err error, _ bool) error {
		return &userError{msg: err.Error(), hint: "see " + name + " --help", code: 2}
	}
	unknown := func(c *cli.Context) error {
		if c.NArg() > 0 {
			return &userError{msg: fmt.Sprintf("unknown command %q", c.Args().First()), hint: "see " + name + " --help", code: 2}
		}
		return cli.ShowSubcommandHelp(c)
	}
	subs := app.Commands
	if cmd != nil {
		subs = cmd.Subcommands
		cmd.OnUsageError = onUsage
		if len(subs) > 0 && cmd.Action == nil {
			cmd.Action = unknown
		}
	} else {
		app.OnUsageError = onUsage
		app.Action = func(c *cli.Context) error {
			if c.NArg() > 0 {
				return unknown(c)
			}
			return cli.ShowAppHelp(c)
		}
	}
	for _, sub := range subs {
		quietUsage(name+" "+sub.Name, sub, app)
	}
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
