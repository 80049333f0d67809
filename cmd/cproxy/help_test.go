package main

import (
	"io"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/cproxy/cproxy/policy"
)

// Every command's --help ends with examples that run it, and every flag
// an example passes is one the command it runs has.
func TestHelpExamples(t *testing.T) {
	app := newApp(io.Discard, io.Discard)
	seen := 0
	walkCommands(app.Commands, "", func(path string, cmd *cli.Command) {
		seen++
		ex := examples(cmd.Description)
		if !slices.ContainsFunc(ex, func(l string) bool { return strings.Contains(l, "cproxy "+path) }) {
			t.Errorf("cproxy %s --help has no example: end its Description with an Examples: block of indented lines, one running cproxy %s", path, path)
		}
		for _, l := range ex {
			checkExampleFlags(t, app, l)
		}
	})
	if seen < 15 {
		t.Errorf("walked %d commands; the app has more", seen)
	}
}

// checkExampleFlags fails the test for each flag on an example line that
// the cproxy command it follows does not have. A flag's arguments end at
// --, or at the end of a command substitution or a redirection.
func checkExampleFlags(t *testing.T, app *cli.App, line string) {
	t.Helper()
	words := strings.Fields(line)
	for i, w := range words {
		if w != "cproxy" && !strings.HasSuffix(w, "(cproxy") {
			continue
		}
		cmds, path := app.Commands, ""
		var cmd *cli.Command
		j := i + 1
		for ; j < len(words); j++ {
			sub := findCommand(cmds, strings.TrimRight(words[j], `)";`))
			if sub == nil {
				break
			}
			cmd, cmds, path = sub, sub.Subcommands, strings.TrimSpace(path+" "+sub.Name)
		}
		if cmd == nil {
			t.Errorf("example %q: no cproxy command after cproxy", line)
			continue
		}
		for ; j < len(words); j++ {
			w := words[j]
			if w == "--" || strings.ContainsAny(w[:1], "<>|;&") {
				break
			}
			if name, ok := strings.CutPrefix(w, "-"); ok {
				name, _, _ = strings.Cut(strings.TrimPrefix(name, "-"), "=")
				name = strings.TrimRight(name, `)";`)
				if !hasFlag(cmd, name) {
					t.Errorf("example %q: cproxy %s has no flag -%s", line, path, name)
				}
			}
			if strings.ContainsAny(w, ");") {
				break
			}
		}
	}
}

func findCommand(cmds []*cli.Command, name string) *cli.Command {
	for _, c := range cmds {
		if c.HasName(name) {
			return c
		}
	}
	return nil
}

func hasFlag(cmd *cli.Command, name string) bool {
	if name == "help" || name == "h" {
		return true
	}
	for _, f := range cmd.Flags {
		if slices.Contains(f.Names(), name) {
			return true
		}
	}
	return false
}

// flagValues names only commands and flags that exist, so that completion
// does not go stale when a flag is renamed.
func TestFlagValuesExist(t *testing.T) {
	app := newApp(io.Discard, io.Discard)
	found := map[string]bool{}
	walkCommands(app.Commands, "", func(path string, cmd *cli.Command) {
		for name := range flagValues[path] {
			if valuesOf(cmd, path, name) == nil {
				t.Errorf("flagValues: cproxy %s has no flag --%s", path, name)
			}
		}
		found[path] = true
	})
	for path := range flagValues {
		if !found[path] {
			t.Errorf("flagValues: no command cproxy %s", path)
		}
	}
}

// docs/man/cproxy.1 is what cproxy man prints.
func TestManPageCurrent(t *testing.T) {
	want, err := manPage()
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("../../docs/man/cproxy.1")
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Errorf("docs/man/cproxy.1 is stale: regenerate it with go run ./cmd/cproxy man > docs/man/cproxy.1")
	}
}

// policy check --format github escapes a problem as GitHub's runner reads
// a workflow command (actions/toolkit's escapeData and escapeProperty).
func TestGitHubError(t *testing.T) {
	for _, tt := range []struct {
		p    policy.Problem
		want string
	}{
		{policy.Problem{File: "policy.toml", Line: 2, Col: 1, Message: `unknown key "model"`},
			`::error file=policy.toml,line=2,col=1::unknown key "model"`},
		{policy.Problem{File: "conf/a,b:c.toml", Line: 10, Col: 3, Message: "100% off, now: a\r\nb"},
			`::error file=conf/a%2Cb%3Ac.toml,line=10,col=3::100%25 off, now: a%0D%0Ab`},
		{policy.Problem{File: "nosuch.toml", Message: "cannot read: no such file or directory"},
			`::error file=nosuch.toml::cannot read: no such file or directory`},
		{policy.Problem{Message: "listen.proxy is empty"},
			`::error::listen.proxy is empty`},
	} {
		if got := githubCommand("error", tt.p); got != tt.want {
			t.Errorf("githubCommand(error, %+v)\n got %s\nwant %s", tt.p, got, tt.want)
		}
	}
}

// The workflow docs/integrations/github-actions.md shows is the one next to
// it, and it runs the check with --format github.
func TestGitHubActionsExample(t *testing.T) {
	doc, err := os.ReadFile("../../docs/integrations/github-actions.md")
	if err != nil {
		t.Fatal(err)
	}
	yml, err := os.ReadFile("../../docs/integrations/github-actions/policy-check.yml")
	if err != nil {
		t.Fatal(err)
	}
	_, block, _ := strings.Cut(string(doc), "```yaml\n")
	block, _, _ = strings.Cut(block, "```\n")
	if block != string(yml) {
		t.Errorf("the workflow in github-actions.md differs from github-actions/policy-check.yml: copy one to the other")
	}
	if !strings.Contains(block, "run: cproxy policy check --format github ") {
		t.Errorf("the workflow does not run cproxy policy check --format github")
	}
}

// Every flag's help line names one default: urfave/cli appends
// "(default: X)" from the flag's Value, so a Usage that says its own
// default must set DefaultText to it, or the line says two. Variable
// names such as ANTHROPIC_DEFAULT_OPUS_MODEL are not counted.
func TestHelpOneDefault(t *testing.T) {
	app := newApp(io.Discard, io.Discard)
	varName := regexp.MustCompile(`\b[A-Z][A-Z0-9]*(_[A-Z0-9]+)+\b`)
	check := func(path string, flags []cli.Flag) {
		for _, f := range flags {
			if line := f.String(); strings.Count(strings.ToLower(varName.ReplaceAllString(line, "")), "default") > 1 {
				t.Errorf("cproxy %s --help names two defaults: %s", path, line)
			}
		}
	}
	check("", app.Flags)
	walkCommands(app.Commands, "", func(path string, cmd *cli.Command) { check(path, cmd.Flags) })
}

// docs/cli.md documents every command: a heading for each command (such as
// ## `cproxy token`), and each subcommand under one, by its whole name.
func TestCLIDocCoversCommands(t *testing.T) {
	doc, err := os.ReadFile("../../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	var headings []string
	for _, l := range strings.Split(string(doc), "\n") {
		if strings.HasPrefix(l, "#") {
			headings = append(headings, l)
		}
	}
	app := newApp(io.Discard, io.Discard)
	walkCommands(app.Commands, "", func(path string, cmd *cli.Command) {
		if cmd.Hidden || cmd.Name == "help" {
			return
		}
		name := "`cproxy " + path
		if !strings.Contains(path, " ") {
			if !slices.ContainsFunc(headings, func(h string) bool { return strings.Contains(h, name+"`") || strings.Contains(h, name+" ") }) {
				t.Errorf("docs/cli.md has no heading for cproxy %s: give it a section", path)
			}
		} else if !strings.Contains(string(doc), "cproxy "+path+" ") && !strings.Contains(string(doc), name+"`") {
			t.Errorf("docs/cli.md does not name cproxy %s: document it in its command's section", path)
		}
	})
}
