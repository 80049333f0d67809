package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/urfave/cli/v2"
	"golang.org/x/term"

	"github.com/cproxy/cproxy/config"
	"github.com/cproxy/cproxy/secrets"
)

// secretValueLimit bounds a value read from standard input, as a file:
// credential is bounded: a credential is a line, not a document.
const secretValueLimit = 64 << 10

func secretCommand() *cli.Command {
	return &cli.Command{
		Name:  "secret",
		Usage: "store, remove and list upstream credentials in the OS keyring (credential = \"keyring:NAME\")",
		Description: `Give it the --config of cproxy serve: its [keyring] table says which keyring.

Examples:

   cproxy secret set --config cproxy.toml anthropic <anthropic.key
   cproxy secret list --config cproxy.toml`,
		Subcommands: []*cli.Command{
			{
				Name:  "set",
				Usage: "store a credential as NAME: from standard input, or asked for without echo on a terminal",
				Description: `Never from the command line, where ps and the shell's history would show it.

Examples:

   cproxy secret set --config cproxy.toml anthropic <anthropic.key
   cproxy secret set --config cproxy.toml github`,
				ArgsUsage: "NAME",
				Flags:     []cli.Flag{configFlag()},
				Action: func(c *cli.Context) error {
					return withSecretOpts(c, 1, "cproxy secret set [--config FILE] NAME <value", runSecretSet)
				},
			},
			{
				Name:  "rm",
				Usage: "remove the credential NAME",
				Description: `Examples:

   cproxy secret rm --config cproxy.toml anthropic`,
				ArgsUsage: "NAME",
				Flags:     []cli.Flag{configFlag()},
				Action: func(c *cli.Context) error {
					return withSecretOpts(c, 1, "cproxy secret rm [--config FILE] NAME", runSecretRm)
				},
			},
			{
				Name:  "list",
				Usage: "list the names of the stored credentials (never their values)",
				Description: `Examples:

   cproxy secret list --config cproxy.toml`,
				ArgsUsage: " ",
				Flags:     []cli.Flag{configFlag()},
				Action: func(c *cli.Context) error {
					return withSecretOpts(c, 0, "cproxy secret list [--config FILE]", runSecretList)
				},
			},
		},
	}
}

// secretOpts is what the secret subcommands run on.
type secretOpts struct {
	name     string
	keyring  secrets.KeyringConfig
	stdin    io.Reader
	terminal bool // stdin is a terminal: ask, without echo
	stdout   io.Writer
	stderr   io.Writer
	config   string // the --config file, for hints
}

func withSecretOpts(c *cli.Context, nargs int, usage string, run func(secretOpts) error) error {
	args := c.Args().Slice()
	switch {
	case c.Command.Name == "set" && len(args) > 1:
		// Refuse before reading anything: a value on the command line is in
		// ps output, /proc/PID/cmdline and the shell's history.
		return fail("pipe the value in (cproxy secret set NAME <file), or type it when asked",
			"secret set takes the entry name only, never the value: a command line is visible to other users and kept in shell history")
	case len(args) < nargs:
		return fail("usage: "+usage, "secret %s needs the entry name", c.Command.Name)
	case len(args) > nargs:
		return fail("usage: "+usage, "secret %s takes %s, got %q", c.Command.Name, map[int]string{0: "no arguments", 1: "one entry name"}[nargs], args[nargs])
	}
	o := secretOpts{stdin: os.Stdin, terminal: term.IsTerminal(int(os.Stdin.Fd())), stdout: c.App.Writer, stderr: c.App.ErrWriter, config: c.String("config")}
	if nargs == 1 {
		o.name = args[0]
		if err := secrets.CheckName(o.name); err != nil {
			return fail("", "%v", err)
		}
	}
	cfg, err := loadConfig(o.config)
	if err != nil {
		return err
	}
	o.keyring = keyringConfig(cfg, o.terminal, o.stderr)
	return run(o)
}

// keyringConfig is the keyring the config names. On a terminal the file
// backend's passphrase is asked for when CPROXY_KEYRING_PASSWORD is not set.
func keyringConfig(cfg *config.Config, terminal bool, stderr io.Writer) secrets.KeyringConfig {
	kc := secrets.KeyringConfig{Backend: cfg.Keyring.Backend, Service: cfg.Keyring.Service, FileDir: cfg.Keyring.FileDir}
	if terminal {
		kc.Prompt = func(prompt string, confirm bool) (string, error) {
			p, err := readHidden(stderr, prompt)
			if err != nil || !confirm {
				return p, err
			}
			again, err := readHidden(stderr, "the same passphrase again (it is new)")
			if err != nil {
				return "", err
			}
			if again != p {
				return "", errors.New("the two passphrases differ")
			}
			return p, nil
		}
	}
	return kc
}

// readHidden asks on stderr and reads a line from the terminal on stdin
// without echoing it.
func readHidden(stderr io.Writer, prompt string) (string, error) {
	fmt.Fprintf(stderr, "cproxy: %s: ", prompt)
	b, err := term.ReadPassword(int(os.Stdin.Fd()))
	fmt.Fprintln(stderr)
	return string(b), err
}

func openKeyring(o secretOpts) (*secrets.Keyring, error) {
	k, err := secrets.OpenKeyring(o.keyring)
	if err != nil {
		return nil, fail("choose another backend with keyring.backend in the config (--config FILE)", "%v", err)
	}
	return k, nil
}

func runSecretSet(o secretOpts) error {
	k, err := openKeyring(o)
	if err != nil {
		return err
	}
	var value string
	if o.terminal {
		value, err = readHidden(o.stderr, "value for "+o.name+" (not shown)")
		if err != nil {
			return fail("", "reading the value: %v", err)
		}
	} else {
		b, err := io.ReadAll(io.LimitReader(o.stdin, secretValueLimit+1))
		if err != nil {
			return fail("", "reading the value from standard input: %v", err)
		}
		if len(b) > secretValueLimit {
			return fail("", "standard input holds more than %d KiB: too large for a credential", secretValueLimit>>10)
		}
		value = string(b)
	}
	// Never include the value in an error.
	value = strings.TrimSpace(value)
	if value == "" {
		return fail("pipe the value in (cproxy secret set NAME <file), or type it when asked", "no value for %s: standard input was empty", o.name)
	}
	if strings.ContainsAny(value, "\r\n") {
		return fail("", "the value for %s holds more than one line; a credential is one line", o.name)
	}
	if err := k.Set(o.name, secrets.New(value)); err != nil {
		return keyringFail(err)
	}
	fmt.Fprintf(o.stderr, "cproxy: stored %s in %s\n", o.name, k)
	return nil
}

func runSecretRm(o secretOpts) error {
	k, err := openKeyring(o)
	if err != nil {
		return err
	}
	if err := k.Remove(o.name); err != nil {
		return keyringFail(err)
	}
	fmt.Fprintf(o.stderr, "cproxy: removed %s from %s\n", o.name, k)
	return nil
}

func runSecretList(o secretOpts) error {
	k, err := openKeyring(o)
	if err != nil {
		return err
	}
	names, err := k.Names()
	if err != nil {
		return keyringFail(err)
	}
	for _, n := range names {
		fmt.Fprintln(o.stdout, n)
	}
	return nil
}

// keyringFail is a keyring error with the hint that fixes it.
func keyringFail(err error) error {
	hint := ""
	switch {
	case errors.Is(err, secrets.ErrNoPassphrase):
		hint = "export " + secrets.PassphraseEnv + " with the file keyring's passphrase, or run on a terminal to be asked"
	case errors.Is(err, secrets.ErrWrongPassphrase):
		hint = "check " + secrets.PassphraseEnv + ": it must be the passphrase the keyring's entries were stored with"
	case errors.Is(err, secrets.ErrNotFound):
		hint = "cproxy secret list shows the stored names"
	}
	return fail(hint, "%v", err)
}
