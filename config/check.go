package config

import (
	"errors"
	"slices"
	"strings"

	"github.com/cproxy/cproxy/policy"
)

// configKeys are the config file's top-level keys: policy, [listen],
// [store] and the other tables (TestConfigKeys holds them to Config's
// fields).
var configKeys = policy.ConfigKeys

// Check loads a config or policy file strictly and returns every problem in it; none
// means the file is valid. A file with any config key (policy, listen, store,
// upstream, log) is a config, and the policy file it names is checked too; a file
// with only profile and sandbox keys is a policy. Anything else, an empty file
// included, is a problem, since it cannot be meant as either.
func Check(file string) policy.Problems {
	probs, _ := CheckWarnings(file)
	return probs
}

// CheckWarnings is Check, and for a valid config its Warnings too, each
// placed where the file sets its key: what the config lets serve run with
// that puts the tokens or the credentials at risk.
func CheckWarnings(file string) (probs, warnings policy.Problems) {
	data, err := policy.ReadFile(file)
	if err != nil {
		return policy.Problems{{File: file, Message: policy.ReadProblem(err)}}, nil
	}
	f, probs := policy.ParseFile(file, data)
	if probs != nil {
		return probs, nil
	}
	isConfig, isPolicy := false, false
	for _, k := range f.Keys() {
		isConfig = isConfig || slices.Contains(configKeys, k)
		isPolicy = isPolicy || slices.Contains(policy.PolicyKeys, k)
	}
	switch {
	case isConfig:
		var c *Config
		if c, probs = loadConfig(file, data, policy.ReadFile); c != nil {
			warnings = c.WarningProblems()
		}
	case isPolicy:
		if _, err := policy.ParsePolicy(file, data); err != nil {
			errors.As(err, &probs)
		}
	case len(f.Keys()) == 0:
		probs = policy.Problems{{File: file, Line: 1, Col: 1,
			Message: "empty: a config has policy, [listen], [store], [upstream] or [log]; a policy has [profile.NAME] and [[sandbox]]"}}
	default:
		known := slices.Sorted(slices.Values(append(slices.Clone(configKeys), policy.PolicyKeys...)))
		hint := "neither a config key (" + strings.Join(configKeys, ", ") + ") nor a policy key (" + strings.Join(policy.PolicyKeys, ", ") + ")"
		for _, k := range f.Keys() {
			f.Unknown(policy.KeyOf(), k, known, hint)
		}
		probs = f.Problems()
		probs.Sort()
	}
	return probs, warnings
}
