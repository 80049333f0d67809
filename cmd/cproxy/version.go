package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/urfave/cli/v2"
)

// buildVersion is set by a build that names its version itself, with
// -ldflags "-X main.buildVersion=…": deploy/Containerfile, whose build has
// no git, and install.sh in a linked worktree, where Go records no commit.
var buildVersion = ""

// version is what cproxy --version, cproxy version and the
// cproxy_build_info metric call this build.
func version() string {
	return readBuildInfo().Version
}

// buildInfo is what cproxy version prints. Commit, CommitTime and Modified
// are empty when the build did not stamp them: go build in a git checkout
// does, go install …@version and go test do not.
type buildInfo struct {
	// Version is buildVersion when the build set it, else the module
	// version Go recorded (v1.2.3 for go install …@v1.2.3; a pseudo-version
	// for go install …@COMMIT or a go build in a git checkout, +dirty with
	// uncommitted changes), else the commit (its first 12 digits, -dirty
	// with uncommitted changes), else "devel".
	Version    string `json:"version"`
	Commit     string `json:"commit,omitempty"`      // vcs.revision
	CommitTime string `json:"commit_time,omitempty"` // vcs.time, RFC 3339
	Modified   bool   `json:"modified,omitempty"`    // vcs.modified: uncommitted changes were built
	Go         string `json:"go"`
	OS         string `json:"os"`
	Arch       string `json:"arch"`
}

func readBuildInfo() buildInfo {
	b := buildInfo{Version: buildVersion, Go: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH}
	bi, ok := debug.ReadBuildInfo()
	if ok {
		if b.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			b.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				b.Commit = s.Value
			case "vcs.time":
				b.CommitTime = s.Value
			case "vcs.modified":
				b.Modified = s.Value == "true"
			}
		}
	}
	if b.Version == "" && b.Commit != "" {
		b.Version = b.Commit[:min(len(b.Commit), 12)]
		if b.Modified {
			b.Version += "-dirty"
		}
	}
	if b.Version == "" {
		b.Version = "devel"
	}
	return b
}

func versionCommand() *cli.Command {
	return &cli.Command{
		Name:      "version",
		Usage:     "print cproxy's version and how it was built",
		ArgsUsage: " ",
		Description: "The first line is cproxy VERSION, as cproxy --version gives it; then the commit, when the\n" +
			"build recorded one, the Go version and the platform.\n" +
			"\n" +
			"Examples:\n" +
			"\n" +
			"   cproxy version\n" +
			"   cproxy version --json",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "json", Usage: "print JSON"},
		},
		Action: func(c *cli.Context) error {
			b := readBuildInfo()
			if c.Bool("json") {
				return printJSON(c, b)
			}
			w := c.App.Writer
			fmt.Fprintln(w, "cproxy", b.Version)
			if b.Commit != "" {
				modified := ""
				if b.Modified {
					modified = " (modified)"
				}
				fmt.Fprintf(w, "commit:   %s%s\n", b.Commit, modified)
			}
			if b.CommitTime != "" {
				fmt.Fprintf(w, "time:     %s\n", b.CommitTime)
			}
			_, err := fmt.Fprintf(w, "go:       %s\nplatform: %s/%s\n", b.Go, b.OS, b.Arch)
			return err
		},
	}
}
