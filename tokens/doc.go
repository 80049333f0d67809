// Package tokens issues the sandbox tokens that stand in for real credentials, and remembers them.
//
// A sandbox never sees a real credential: it gets a random token that is worth nothing outside cproxy and that the
// harness can revoke at any time. The format carries a fixed prefix and a checksum so secret scanners can recognise a
// leaked token and a mistyped one is refused before any store look-up. The store keeps only the SHA-256 of each
// token, so a copy of the store file does not let anyone authenticate.
//
// It is part of cproxy's implementation, not an API for other programs: it
// changes with cproxy. Only client and helpers/sandboxenv are kept compatible
// (docs/architecture.md).
package tokens
