package gitcred

import (
	"errors"
	"fmt"
	"io"
	"os"
)

// Main is the whole git-credential-cproxy program, here so the
// cproxy test binary can run it as a command too.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return run(args, stdin, stdout, stderr, os.Getenv)
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string) int {
	if len(args) != 1 {
		fmt.Fprintln(stderr, "git-credential-cproxy: usage: git-credential-cproxy get|store|erase (git runs this; see gitcredentials(7))")
		return 2
	}
	err := Answer(args[0], stdin, stdout, getenv)
	switch {
	case err == nil:
		return 0
	case errors.Is(err, ErrNotOurs):
		// Silent: git moves on to its next helper.
		return 1
	}
	// git shows a helper's stderr to the person running it.
	fmt.Fprintf(stderr, "git-credential-cproxy: %v\n", err)
	return 1
}
