package routes

import (
	"sync"

	"github.com/cproxy/cproxy/policy"
)

// decisions remembers the policy's answers to the two questions every model
// request asks it: which profile a token gets (Policy.ProfileFor) and
// whether that profile allows a model (Profile.Model). Both are pure
// functions of a loaded policy, which is never changed once loaded (a
// reload is a new *Policy with new profiles, so its answers are asked
// afresh), and each formats the rule that decided on every call: on the
// hot path that formatting cost more than the rest of the decision. Each
// map is bounded: past decisionsLimit entries it starts again empty, so
// sandbox ids and model names a client makes up cannot grow it.
type decisions struct {
	mu       sync.RWMutex
	profiles map[profileKey]*policy.Profile
	models   map[modelKey]policy.Decision
}

type profileKey struct {
	pol              *policy.Policy
	sandbox, profile string
}

type modelKey struct {
	prof  *policy.Profile
	model string
}

const decisionsLimit = 4096

// profileFor is pol.ProfileFor(sandbox, profile), remembered when it
// succeeds; a failure is asked again each time.
func (d *decisions) profileFor(pol *policy.Policy, sandbox, profile string) (*policy.Profile, error) {
	k := profileKey{pol, sandbox, profile}
	d.mu.RLock()
	prof, ok := d.profiles[k]
	d.mu.RUnlock()
	if ok {
		return prof, nil
	}
	prof, err := pol.ProfileFor(sandbox, profile)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	if d.profiles == nil || len(d.profiles) >= decisionsLimit {
		d.profiles = make(map[profileKey]*policy.Profile)
	}
	d.profiles[k] = prof
	d.mu.Unlock()
	return prof, nil
}

// model is prof.Model(model), remembered.
func (d *decisions) model(prof *policy.Profile, model string) policy.Decision {
	k := modelKey{prof, model}
	d.mu.RLock()
	dec, ok := d.models[k]
	d.mu.RUnlock()
	if ok {
		return dec
	}
	dec = prof.Model(model)
	d.mu.Lock()
	if d.models == nil || len(d.models) >= decisionsLimit {
		d.models = make(map[modelKey]policy.Decision)
	}
	d.models[k] = dec
	d.mu.Unlock()
	return dec
}
