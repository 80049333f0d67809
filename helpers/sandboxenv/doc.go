// Package sandboxenv builds the environment a sandbox command needs to reach
// cproxy, so that nothing is written to the sandbox's disk: Claude Code's
// variables, CPROXY_URL and CPROXY_TOKEN, npm's and yarn's registry
// settings, go's GOPROXY (over https), and git's settings as
// GIT_CONFIG_COUNT entries numbered after those the command already has
// (Build). It writes that environment in the
// formats `cproxy env` prints (sh, fish, an env file, JSON), and builds the
// environment `cproxy exec` starts a command with: a short base of
// variables, never a credential whatever its name, with git settings that
// carry one made inert (Env.ExecEnviron, Env.Scrub).
//
// It imports nothing else of cproxy. With client, it is the part of cproxy
// kept compatible for other programs: a harness written in Go builds a
// sandbox's environment with the same code as `cproxy env` (see
// docs/integrations/go-harness).
package sandboxenv
