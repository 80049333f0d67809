// Command go-harness is the smallest harness worth copying: it gives one
// sandbox command its own cproxy token and revokes it when the command
// ends, whatever way it ends.
//
//	go-harness -admin http://127.0.0.1:9001 -proxy-url http://10.20.30.4:8080 \
//	    -sandbox conv-42 -- claude -p 'fix the failing test'
//
// It mints the token with the client package (POST /tokens), builds the
// environment `cproxy env --format json` prints with the sandboxenv package,
// runs the command with it, passes SIGINT and SIGTERM on, revokes the
// sandbox (DELETE /tokens), and exits with the command's status. The
// command never inherits a real credential from the harness's own
// environment. See docs/integrations/go-harness.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"github.com/cproxy/cproxy/client"
	"github.com/cproxy/cproxy/helpers/sandboxenv"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stderr))
}

// revokeTimeout bounds the revocation at the end, which must not hang the
// harness when cproxy is gone.
const revokeTimeout = 10 * time.Second

func run(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("go-harness", flag.ContinueOnError)
	fs.SetOutput(stderr)
	admin := fs.String("admin", "http://127.0.0.1:9001", "cproxy's admin API `URL`, or unix:PATH for its Unix socket")
	proxyURL := fs.String("proxy-url", "", "cproxy's proxy `URL` as the sandbox reaches it (required)")
	sandbox := fs.String("sandbox", "", "sandbox `ID` (required)")
	profile := fs.String("profile", "", "policy `PROFILE` for the token (default: the policy's sandbox rules)")
	ttl := fs.Duration("ttl", 0, "token lifetime (default: cproxy's, 24h)")
	configDir := fs.String("claude-config-dir", "", "set CLAUDE_CONFIG_DIR to `DIR` for the command")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: go-harness -proxy-url URL -sandbox ID [flags] -- CMD [ARGS...]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *proxyURL == "" || *sandbox == "" || fs.NArg() == 0 {
		fs.Usage()
		return 2
	}
	argv := fs.Args()

	// Find the command and check the environment before minting a token
	// that would never be used.
	path, err := exec.LookPath(argv[0])
	if err != nil {
		fmt.Fprintf(stderr, "go-harness: %v\n", err)
		return 127
	}
	count, set := os.LookupEnv("GIT_CONFIG_COUNT")
	gitBase, err := sandboxenv.ParseGitConfigCount(count, set)
	if err != nil {
		fmt.Fprintf(stderr, "go-harness: %v\n", err)
		return 1
	}
	api, err := client.New(*admin)
	if err != nil {
		fmt.Fprintf(stderr, "go-harness: %v\n", err)
		return 1
	}

	ctx := context.Background()
	tok, err := api.CreateToken(ctx, *sandbox, client.CreateOptions{Profile: *profile, TTL: *ttl})
	if err != nil {
		fmt.Fprintf(stderr, "go-harness: minting a token: %v\n", err)
		return 1
	}
	// tok's ID is safe to log; the token itself prints as REDACTED.
	fmt.Fprintf(stderr, "go-harness: sandbox %s: minted token %s, expires %s\n", tok.Sandbox, tok.ID, tok.ExpiresAt.Format(time.RFC3339))
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), revokeTimeout)
		defer cancel()
		if err := api.Revoke(ctx, *sandbox); err != nil {
			fmt.Fprintf(stderr, "go-harness: sandbox %s: revoking: %v\n", *sandbox, err)
			return
		}
		fmt.Fprintf(stderr, "go-harness: sandbox %s: revoked\n", *sandbox)
	}()

	// What `cproxy env --format json` prints: Claude Code's variables,
	// CPROXY_URL and CPROXY_TOKEN, npm's and git's settings.
	env, git, err := sandboxenv.Build(sandboxenv.Options{ProxyURL: *proxyURL, Token: tok.Reveal(), ClaudeConfigDir: *configDir})
	if err != nil {
		fmt.Fprintf(stderr, "go-harness: %v\n", err)
		return 1
	}
	cmd := exec.Command(path, argv[1:]...)
	cmd.Args[0] = argv[0]
	// The command starts from an environment built as cproxy exec builds
	// it, not from the harness's minus some names: a base (PATH, HOME, the
	// locale, …) and the harness's git settings, those that carry a
	// credential made inert. Later entries win, and git's settings are
	// numbered after those the environment already has.
	inherited := env.ExecEnviron(os.Environ(), []string{"GIT_CONFIG_*"})
	cmd.Env = append(append(inherited, env.Environ()...), git.Env(gitBase).Environ()...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(stderr, "go-harness: %s: %v\n", argv[0], err)
		return 126
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
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	default:
		fmt.Fprintf(stderr, "go-harness: %s: %v\n", argv[0], err)
		return 1
	}
}
