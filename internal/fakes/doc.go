// Package fakes holds loopback stand-ins for the upstream services cproxy forwards to, for tests in any package
// of this module. A fake stands in only for a service a test machine cannot reach; the clients in front of it
// stay real (Claude Code, the Anthropic SDK, git, npm), so a fake copies its service's wire behaviour — framing,
// status codes, error bodies and their wording — rather than just returning something plausible.
package fakes
