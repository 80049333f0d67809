package main

import (
	"fmt"
	"runtime/debug"

	"github.com/urfave/cli/v2"
)

// buildVersion is set by install.sh with -ldflags "-X main.buildVersion=…".
var buildVersion = ""

func version() string {
	if buildVersion != "" {
		return buildVersion
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}

func versionCommand() *cli.Command {
	return &cli.Command{
		Name:  "version",
		Usage: "print cproxy's version",
		Action: func(c *cli.Context) error {
			_, err := fmt.Fprintln(c.App.Writer, "cproxy", version())
			return err
		},
	}
}
