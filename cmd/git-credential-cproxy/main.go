// Command git-credential-cproxy is a git credential helper for sandboxes:
// for cproxy's own address (CPROXY_URL) it hands git the sandbox token
// (CPROXY_TOKEN_FILE, read at each call, or CPROXY_TOKEN), and for any
// other host it stays silent so git asks its next helper. cproxy env and
// cproxy exec configure git to use it for cproxy's URL only; by hand:
//
//	git -c credential.helper=cproxy ...
package main

import (
	"os"

	"github.com/cproxy/cproxy/helpers/gitcred"
)

func main() {
	os.Exit(gitcred.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
