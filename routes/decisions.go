package routes

import (
	"github.com/cproxy/cproxy/policy"
	"github.com/cproxy/cproxy/routes/internal/memo"
)

// decisions remembers the policy's answer to the question every request
// asks it: which profile a token gets (Policy.ProfileFor). It is a pure
// function of a loaded policy, which is never changed once loaded (a
// reload is a new *Policy with new profiles, so its answers are asked
// afresh), and it formats the rule that decided on every call: on the hot
// path that formatting cost more than the rest of the decision. The map is
// a memo, bounded.
type decisions struct {
	profiles memo.Memo[profileKey, *policy.Profile]
}

type profileKey struct {
	pol              *policy.Policy
	sandbox, profile string
}

// profileFor is pol.ProfileFor(sandbox, profile), remembered when it
// succeeds; a failure is asked again each time.
func (d *decisions) profileFor(pol *policy.Policy, sandbox, profile string) (*policy.Profile, error) {
	k := profileKey{pol, sandbox, profile}
	if prof, ok := d.profiles.Get(k); ok {
		return prof, nil
	}
	prof, err := pol.ProfileFor(sandbox, profile)
	if err != nil {
		return nil, err
	}
	d.profiles.Put(k, prof)
	return prof, nil
}
