package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/cproxy/cproxy/helpers/sandboxenv"
)

func execCommand() *cli.Command {
	return &cli.Command{
		Name:      "exec",
		Usage:     "run a command with a sandbox's environment: cproxy exec --sandbox ID -- CMD ARGS...",
		ArgsUsage: "-- CMD [ARGS...]",
		Description: `Takes the flags of cproxy env and exits with the command's status.

Examples:

   cproxy exec --sandbox conv-42 --proxy-url http://127.0.0.1:8080 -- claude -p 'fix the failing test'
   cproxy exec --sandbox conv-42 --config /etc/cproxy/cproxy.toml --ttl 2h -- cproxy verify
   IS_SANDBOX=1 cproxy exec --sandbox conv-42 --claude-config-dir /workspace/.claude-state -- claude --dangerously-skip-permissions -p 'fix the failing test'`,
		Flags: append(sandboxEnvFlags(),
			&cli.StringSliceFlag{Name: "pass", Usage: "also pass `NAME` from cproxy's environment to the command (repeatable); a pattern such as 'MY_*' passes the names it matches that do not look like credentials. Always passed: " + sandboxenv.ExecBase() + "; and, when set, Claude Code's settings " + sandboxenv.ExecClaude()},
		),
		Action: func(c *cli.Context) error {
			args := c.Args().Slice()
			if len(args) == 0 {
				return fail("cproxy exec --sandbox ID -- CMD ARGS...", "no command to run")
			}
			// Find the command before minting a token it would never use.
			path, err := exec.LookPath(args[0])
			if err != nil {
				return lookPathError(args[0], err)
			}
			pass := c.StringSlice("pass")
			if err := sandboxenv.CheckPass(pass); err != nil {
				return fail("pass a variable name, or a pattern such as 'MY_*'", "%v", err)
			}
			// The command starts from an environment built from a few
			// of cproxy's own variables (and Claude Code's settings a
			// harness sets, such as IS_SANDBOX), not from all of them
			// minus the ones known to be credentials, a list that can
			// never be complete.
			inherited := sandboxenv.Env(nil).ExecEnviron(os.Environ(), pass)
			// git's settings go after the ones the command gets
			// (--pass 'GIT_CONFIG_*'). A count git would refuse is
			// refused here, before a token is minted.
			count, set := lookupEnviron(inherited, "GIT_CONFIG_COUNT")
			base, err := sandboxenv.ParseGitConfigCount(count, set)
			if err != nil && c.Bool("git") {
				return fail("git refuses it too: fix or unset GIT_CONFIG_COUNT, or pass --git=false", "%v", err)
			}
			env, git, err := sandboxEnv(c)
			if err != nil {
				return err
			}
			cmd := exec.Command(path, args[1:]...)
			cmd.Args[0] = args[0]
			// Later entries win: exec.Cmd keeps the last of a name.
			cmd.Env = append(append(env.ExecEnviron(os.Environ(), pass), env.Environ()...), git.Env(base).Environ()...)
			cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, c.App.Writer, c.App.ErrWriter
			// The child shares the terminal and gets Ctrl-C itself; a
			// signal sent to cproxy alone is passed on.
			sigs := make(chan os.Signal, 1)
			signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
			defer signal.Stop(sigs)
			if err := cmd.Start(); err != nil {
				return fail("", "%s: %v", args[0], err)
			}
			done := make(chan struct{})
			go func() {
				for {
					select {
					case sig := <-sigs:
						cmd.Process.Signal(sig)
					case <-done:
						return
					}
				}
			}()
			err = cmd.Wait()
			close(done)
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
					return exitCode(128 + int(ws.Signal()))
				}
				return exitCode(ee.ExitCode())
			}
			if err != nil {
				return fail("", "%s: %v", args[0], err)
			}
			return nil
		},
	}
}

// lookPathError reports a command that cannot be run with the shell's exit
// codes, so a harness can tell it from the command's own failure: 127 when
// there is no such command, 126 when it is there but cannot be executed.
func lookPathError(name string, err error) error {
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
		return &userError{msg: fmt.Sprintf("%s: command not found", name), code: 127}
	}
	var ee *exec.Error
	if errors.As(err, &ee) {
		err = ee.Err
	}
	return &userError{msg: fmt.Sprintf("%s: cannot run: %v", name, err), code: 126}
}

// lookupEnviron is os.LookupEnv on a NAME=value list.
func lookupEnviron(environ []string, name string) (string, bool) {
	for _, kv := range environ {
		if n, v, _ := strings.Cut(kv, "="); n == name {
			return v, true
		}
	}
	return "", false
}
