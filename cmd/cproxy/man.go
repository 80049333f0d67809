package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/cpuguy83/go-md2man/v2/md2man"
	"github.com/urfave/cli/v2"
)

func manCommand() *cli.Command {
	return &cli.Command{
		Name:      "man",
		Usage:     "print the cproxy(1) man page, in roff",
		ArgsUsage: " ",
		Description: "The page is generated from the commands and flags that --help shows.\n" +
			"docs/man/cproxy.1 is a copy, regenerated with go run ./cmd/cproxy man > docs/man/cproxy.1.\n" +
			"\n" +
			"Examples:\n" +
			"\n" +
			"   cproxy man | man -l -\n" +
			"   cproxy man > ~/.local/share/man/man1/cproxy.1",
		Action: func(c *cli.Context) error {
			page, err := manPage()
			if err != nil {
				return err
			}
			_, err = io.WriteString(c.App.Writer, page)
			return err
		},
	}
}

// manPage renders cproxy(1): urfave/cli's page (name, synopsis,
// description, every command with its flags), then the examples of each
// command's description and the exit codes. It is generated from a fresh
// app, so it does not depend on the command line that asked for it.
func manPage() (string, error) {
	app := newApp(io.Discard, io.Discard)
	app.Setup()
	md, err := app.ToMarkdown()
	if err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString("% cproxy 1\n\n")
	b.WriteString(md)
	b.WriteString("\n# EXAMPLES\n")
	walkCommands(app.Commands, "", func(path string, cmd *cli.Command) {
		// A parent's examples are its subcommands'.
		if ex := examples(cmd.Description); len(ex) > 0 && len(cmd.Subcommands) == 0 {
			fmt.Fprintf(&b, "\n### cproxy %s\n\n```\n%s\n```\n", path, strings.Join(ex, "\n"))
		}
	})
	b.WriteString(`
# EXIT STATUS

0 on success; 1 when cproxy refused or failed (a bad config, a problem found by **policy check**, a request
**policy explain** would deny, an admin API error); 2 when the command line cannot be parsed. **cproxy exec** exits
with its command's status, 126 when the command cannot be run and 127 when it is not found.

# SEE ALSO

**git-credential-cproxy**, https://github.com/cproxy/cproxy/tree/main/docs
`)
	return asciiRoff(string(md2man.Render([]byte(b.String())))), nil
}

// asciiRoff writes each non-ASCII character (the … of a flag's usage) as a
// groff glyph, \[u2026], which every roff reads whatever its input encoding.
func asciiRoff(s string) string {
	var b strings.Builder
	for _, r := range s {
		if r < 0x80 {
			b.WriteRune(r)
		} else {
			fmt.Fprintf(&b, "\\[u%04X]", r)
		}
	}
	return b.String()
}

// examples returns the example command lines of a command's description:
// the indented lines after its "Examples:" line.
func examples(description string) []string {
	_, after, ok := strings.Cut("\n"+description, "\nExamples:\n")
	if !ok {
		return nil
	}
	var lines []string
	for _, l := range strings.Split(after, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	return lines
}
