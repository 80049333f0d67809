package policy

import (
	"slices"
	"strings"
)

var policyKeys = []string{"profile", "sandbox"}

// Check loads a config or policy file strictly and returns every problem in it; none
// means the file is valid. A file with any config key (policy, listen, store,
// upstream, log) is a config, and the policy file it names is checked too; a file
// with only profile and sandbox keys is a policy. Anything else, an empty file
// included, is a problem, since it cannot be meant as either.
func Check(file string) Problems {
	data, err := ReadFile(file)
	if err != nil {
		return Problems{{File: file, Message: readProblem(err)}}
	}
	tree, ix, probs := parse(file, data)
	if probs != nil {
		return probs
	}
	isConfig, isPolicy := false, false
	for k := range tree {
		isConfig = isConfig || slices.Contains(configKeys, k)
		isPolicy = isPolicy || slices.Contains(policyKeys, k)
	}
	switch {
	case isConfig:
		_, probs = loadConfig(file, data, ReadFile)
	case isPolicy:
		_, probs = loadPolicy(file, data)
	case len(tree) == 0:
		probs = Problems{{File: file, Line: 1, Col: 1,
			Message: "empty: a config has policy, [listen], [store], [upstream] or [log]; a policy has [profile.NAME] and [[sandbox]]"}}
	default:
		d := newDecoder(file, ix)
		known := slices.Sorted(slices.Values(append(slices.Clone(configKeys), policyKeys...)))
		d.hint = func(path, string) string {
			return "neither a config key (" + strings.Join(configKeys, ", ") + ") nor a policy key (" + strings.Join(policyKeys, ", ") + ")"
		}
		for _, k := range sortedKeys(tree) {
			d.unknownKey(nil, k, known)
		}
		sortProblems(d.probs)
		probs = d.probs
	}
	return probs
}
