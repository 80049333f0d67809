package main

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/cproxy/cproxy/policy"
)

func policyCommand() *cli.Command {
	return &cli.Command{
		Name:  "policy",
		Usage: "work with policy files",
		Subcommands: []*cli.Command{{
			Name:      "check",
			Usage:     "check policy or config files; exit 1 with one file:line:col: message per problem",
			ArgsUsage: "FILE...",
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "format", Aliases: []string{"f"}, Value: "text", Usage: "text or json"},
			},
			Action: func(c *cli.Context) error {
				format := c.String("format")
				if format != "text" && format != "json" {
					return fail("use --format text or json", "unknown format %q", format)
				}
				if c.NArg() == 0 {
					return fail("cproxy policy check policy.toml [more.toml...]", "no files to check")
				}
				var all policy.Problems
				for _, path := range c.Args().Slice() {
					all = append(all, policy.Check(path)...)
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
						fmt.Fprintln(c.App.Writer, p.String())
					}
				}
				if len(all) > 0 {
					return exitCode(1)
				}
				return nil
			},
		}},
	}
}
