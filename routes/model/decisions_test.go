package model

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/cproxy/cproxy/policy"
	"github.com/cproxy/cproxy/routes/internal/memo"
	"github.com/cproxy/cproxy/routes/routetest"
)

// Remembered model answers are the profile's own, follow a reload (a
// reloaded policy's profiles are new, so asked afresh), and stay bounded
// whatever model names clients make up.
func TestModelAnswersFollowThePolicy(t *testing.T) {
	old := routetest.MustPolicy(t, "[profile.default]\nmodels = [\"claude-*\"]\n")
	reloaded := routetest.MustPolicy(t, "[profile.default]\nmodels = [\"claude-haiku-*\"]\n")
	var m modelRoute
	for range 2 { // asked, then remembered
		for _, c := range []struct {
			model     string
			old, new_ bool
		}{{"claude-sonnet-4-5", true, false}, {"claude-haiku-4-5", true, true}, {"gpt-5", false, false}} {
			for _, p := range []struct {
				pol   *policy.Policy
				allow bool
			}{{old, c.old}, {reloaded, c.new_}} {
				prof := p.pol.Profiles["default"]
				want := prof.AskModel(c.model)
				if got := m.ask(prof, c.model); !reflect.DeepEqual(got, want) || got.Allow != p.allow {
					t.Errorf("%s: remembered %+v, the policy says %+v", c.model, got, want)
				}
			}
		}
	}
	prof := old.Profiles["default"]
	for i := range 3 * memo.Limit {
		m.ask(prof, fmt.Sprintf("made-up-%d", i))
	}
	if m.models.Len() > memo.Limit {
		t.Errorf("%d model answers kept, limit %d", m.models.Len(), memo.Limit)
	}
}
