// Package config loads the daemon's config file: where cproxy listens, where it
// keeps tokens, which upstreams and relays it forwards to with which credentials,
// how it logs, and how much of the machine it uses. Every key has a default, so no
// file at all is a working config (Default). The rules (what each sandbox may do)
// are the policy file's, which a config names with policy = "…" and LoadConfig
// loads with the policy package.
//
// The config is loaded as strictly as the policy, by the policy package's File: an
// unknown key, a value of the wrong type or a value that cannot mean anything is
// refused, and every problem, the policy file's included, is reported as
// "file:line:col: message" in one policy.Problems. Check does the same for
// `cproxy policy check`, for either kind of file.
//
// It is part of cproxy's implementation, not an API for other programs: it
// changes with cproxy. Only client and helpers/sandboxenv are kept compatible
// (docs/architecture.md).
package config
