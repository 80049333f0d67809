package main

import (
	"errors"
	"os"
	"os/exec"
	"os/signal"
	"syscall"

	"github.com/urfave/cli/v2"
)

func execCommand() *cli.Command {
	return &cli.Command{
		Name:      "exec",
		Usage:     "run a command with a sandbox's environment: cproxy exec --sandbox ID -- CMD ARGS...",
		ArgsUsage: "-- CMD [ARGS...]",
		Flags:     sandboxEnvFlags(),
		Action: func(c *cli.Context) error {
			args := c.Args().Slice()
			if len(args) == 0 {
				return fail("cproxy exec --sandbox ID -- CMD ARGS...", "no command to run")
			}
			env, err := sandboxEnv(c)
			if err != nil {
				return err
			}
			path, err := exec.LookPath(args[0])
			if err != nil {
				return fail("", "%s: command not found", args[0])
			}
			cmd := exec.Command(path, args[1:]...)
			cmd.Args[0] = args[0]
			cmd.Env = append(os.Environ(), env.Environ()...)
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
