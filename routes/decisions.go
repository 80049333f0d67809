package routes

import "github.com/cproxy/cproxy/policy"

// decisions remembers the policy's answers to the two questions every model
// request asks it: which profile a token gets (Policy.ProfileFor) and
// whether that profile allows a model (Profile.AskModel). Both are pure
// functions of a loaded policy, which is never changed once loaded (a
// reload is a new *Policy with new profiles, so its answers are asked
// afresh), and each formats the rule that decided on every call: on the
// hot path that formatting cost more than the rest of the decision. Each
// map is a memo, bounded.
type decisions struct {
	profiles memo[profileKey, *policy.Profile]
	models   memo[modelKey, policy.Answer]
}

type profileKey struct {
	pol              *policy.Policy
	sandbox, profile string
}

type modelKey struct {
	prof  *policy.Profile
	model string
}

// profileFor is pol.ProfileFor(sandbox, profile), remembered when it
// succeeds; a failure is asked again each time.
func (d *decisions) profileFor(pol *policy.Policy, sandbox, profile string) (*policy.Profile, error) {
	k := profileKey{pol, sandbox, profile}
	if prof, ok := d.profiles.get(k); ok {
		return prof, nil
	}
	prof, err := pol.ProfileFor(sandbox, profile)
	if err != nil {
		return nil, err
	}
	d.profiles.put(k, prof)
	return prof, nil
}

// model is prof.AskModel(model), remembered.
func (d *decisions) model(prof *policy.Profile, model string) policy.Answer {
	k := modelKey{prof, model}
	if dec, ok := d.models.get(k); ok {
		return dec
	}
	dec := prof.AskModel(model)
	d.models.put(k, dec)
	return dec
}
