// Package gitcred is git-credential-cproxy, the git credential helper a
// sandbox's git runs (gitcredentials(7)): it hands git the sandbox token for
// cproxy's own address, CPROXY_URL, re-read at each call so a rotated token
// is picked up, and stays silent for every other host so git asks its next
// helper. Main is the whole program; the cproxy test binary runs it as a
// command too.
//
// It is part of cproxy's implementation, not an API for other programs: it
// changes with cproxy. Only client and helpers/sandboxenv are kept compatible
// (docs/architecture.md).
package gitcred
