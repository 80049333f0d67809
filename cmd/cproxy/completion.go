package main

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/cproxy/cproxy/config"
)

// The bash and zsh scripts ask cproxy itself what comes next: they run it
// with the words before the cursor and urfave/cli's hidden
// --generate-bash-completion flag, and it prints the subcommands, the
// flags (for a word that starts with -) or a flag's values, one a line. No
// command runs while it completes. After a lone -- (cproxy exec's command)
// they complete file names.
const bashCompletion = `# bash completion for cproxy, from cproxy completion bash. Load it with
#     source <(cproxy completion bash)
# or, for every shell, save it as ~/.local/share/bash-completion/completions/cproxy.

_cproxy() {
	local cur=${COMP_WORDS[COMP_CWORD]} prog=${COMP_WORDS[0]} word
	local -a words=("${COMP_WORDS[@]:1:COMP_CWORD-1}")
	COMPREPLY=()
	for word in "${words[@]}"; do
		[[ $word == -- ]] && return 0
	done
	# For a flag, ask for all of them; compgen keeps those that match.
	[[ $cur == -* ]] && words+=(-)
	[[ $prog == "~/"* ]] && prog=$HOME/${prog#"~/"}
	local IFS=$'\n'
	COMPREPLY=($(compgen -W "$("$prog" "${words[@]}" --generate-bash-completion 2>/dev/null)" -- "$cur"))
}

complete -o bashdefault -o default -F _cproxy cproxy
`

const zshCompletion = `#compdef cproxy
# zsh completion for cproxy, from cproxy completion zsh. Load it with
#     source <(cproxy completion zsh)
# after compinit, or, for every shell, save it as _cproxy in a directory on $fpath.

_cproxy() {
	local cur=${words[CURRENT]}
	local -a args opts
	args=("${(@)words[2,CURRENT-1]}")
	if (( ${args[(Ie)--]} )); then
		_files
		return
	fi
	# For a flag, ask for all of them; compadd keeps those that match.
	[[ $cur == -* ]] && args+=(-)
	opts=("${(@f)$(${~words[1]} "${args[@]}" --generate-bash-completion 2>/dev/null)}")
	opts=(${opts:#})
	if (( ${#opts} )); then
		compadd -a opts
	else
		_files
	fi
}

if [[ ${zsh_eval_context[-1]} == loadautofunc ]]; then
	_cproxy "$@"
else
	compdef _cproxy cproxy
fi
`

// shells are the shells cproxy completion writes a script for.
var shells = []string{"bash", "zsh", "fish"}

func completionCommand() *cli.Command {
	return &cli.Command{
		Name:      "completion",
		Usage:     "print a shell completion script for bash, zsh or fish",
		ArgsUsage: "bash|zsh|fish",
		Description: "Completes commands, flags and the values of flags such as --format.\n" +
			"\n" +
			"Examples:\n" +
			"\n" +
			"   source <(cproxy completion bash)\n" +
			"   cproxy completion zsh > \"${fpath[1]}/_cproxy\"\n" +
			"   cproxy completion fish > ~/.config/fish/completions/cproxy.fish",
		BashComplete: func(c *cli.Context) {
			if c.NArg() == 0 {
				fmt.Fprintln(c.App.Writer, strings.Join(shells, "\n"))
			}
		},
		Action: func(c *cli.Context) error {
			switch c.NArg() {
			case 0:
				return fail("e.g. source <(cproxy completion bash)", "completion needs a shell: bash, zsh or fish")
			case 1:
			default:
				return fail("usage: cproxy completion bash|zsh|fish", "completion takes one shell, got %q", c.Args().Get(1))
			}
			return writeCompletion(c.App.Writer, c.Args().First())
		},
	}
}

// writeCompletion writes the completion script for shell.
func writeCompletion(w io.Writer, shell string) error {
	var script string
	switch shell {
	case "bash":
		script = bashCompletion
	case "zsh":
		script = zshCompletion
	case "fish":
		// fish completions are static, generated from the definitions,
		// without the help output's writers.
		var err error
		if script, err = fishCompletion(newApp(io.Discard, io.Discard)); err != nil {
			return err
		}
	default:
		return fail("cproxy completes in bash, zsh and fish", "no completion for shell %q", shell)
	}
	_, err := io.WriteString(w, script)
	return err
}

// fishCompletion is urfave/cli's fish script with the values of the flags
// in flagValues and of cproxy completion's argument added.
func fishCompletion(app *cli.App) (string, error) {
	s, err := app.ToFishCompletion()
	if err != nil {
		return "", err
	}
	// The backquotes that mark a flag's placeholder in its usage.
	s = strings.ReplaceAll(s, "`", "")
	var b strings.Builder
	b.WriteString("# Load it with\n#     cproxy completion fish | source\n# or, for every shell, save it as ~/.config/fish/completions/cproxy.fish.\n")
	b.WriteString(s)
	walkCommands(app.Commands, "", func(path string, cmd *cli.Command) {
		for _, f := range cmd.Flags {
			names := f.Names()
			values := flagValues[path][names[0]]
			if len(values) == 0 {
				continue
			}
			fmt.Fprintf(&b, "complete -c cproxy -n '__fish_seen_subcommand_from %s' -l %s", cmd.Name, names[0])
			for _, alias := range names[1:] {
				fmt.Fprintf(&b, " -s %s", alias)
			}
			fmt.Fprintf(&b, " -x -a '%s'\n", strings.Join(values, " "))
		}
	})
	fmt.Fprintf(&b, "complete -c cproxy -n '__fish_seen_subcommand_from completion' -f -a '%s'\n", strings.Join(shells, " "))
	return b.String(), nil
}

// flagValues are the values to complete for a flag, by command path and
// flag name: the flags that take one of a few words. Each is the list the
// flag's value is checked against, so that completion offers what the
// command takes. help_test.go checks that each names a flag that exists.
var flagValues = map[string]map[string][]string{
	"serve":          {"log-format": config.LogFormats, "log-level": config.LogLevels},
	"audit":          {"format": textOrJSON},
	"token create":   {"bind": binds},
	"env":            {"format": envFormats, "claude-auth": claudeAuths, "git-auth": gitAuths, "bind": binds},
	"exec":           {"claude-auth": claudeAuths, "git-auth": gitAuths, "bind": binds},
	"policy check":   {"format": checkFormats},
	"policy explain": {"format": textOrJSON},
	"verify":         {"format": textOrJSON},
}

// completeFlagValues makes each command complete, after one of its flags
// in flagValues (--format, or its alias -f), that flag's values; after -,
// its flags; otherwise its subcommands, without urfave/cli's help command,
// which cproxy's help does not list either.
func completeFlagValues(app *cli.App) {
	walkCommands(app.Commands, "", func(path string, cmd *cli.Command) {
		if cmd.BashComplete != nil {
			return
		}
		cmd.BashComplete = func(c *cli.Context) {
			// As urfave/cli's own completion: the word before the
			// --generate-bash-completion the script added.
			last := ""
			if len(os.Args) > 2 {
				last = os.Args[len(os.Args)-2]
			}
			if name := strings.TrimLeft(last, "-"); name != last {
				if v := valuesOf(cmd, path, name); v != nil {
					fmt.Fprintln(c.App.Writer, strings.Join(v, "\n"))
					return
				}
			}
			if strings.HasPrefix(last, "-") {
				cli.DefaultCompleteWithFlags(cmd)(c)
				return
			}
			for _, sub := range cmd.Subcommands {
				if !sub.Hidden && sub.Name != "help" {
					fmt.Fprintln(c.App.Writer, sub.Name)
				}
			}
		}
	})
}

// valuesOf returns the values of cmd's flag named name (or one of its
// aliases), nil if it is not one in flagValues.
func valuesOf(cmd *cli.Command, path, name string) []string {
	for _, f := range cmd.Flags {
		if names := f.Names(); slices.Contains(names, name) {
			return flagValues[path][names[0]]
		}
	}
	return nil
}

// walkCommands calls fn for each command and subcommand, with its path
// under the app ("token create").
func walkCommands(cmds []*cli.Command, parent string, fn func(path string, cmd *cli.Command)) {
	for _, cmd := range cmds {
		path := strings.TrimSpace(parent + " " + cmd.Name)
		fn(path, cmd)
		walkCommands(cmd.Subcommands, path, fn)
	}
}
