package routes

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/cproxy/cproxy/policy"
	"github.com/cproxy/cproxy/routes/internal/memo"
)

// Remembered answers are the policy's own, follow a reload (a new policy
// is asked afresh), and stay bounded whatever names clients make up.
func TestDecisionsFollowThePolicy(t *testing.T) {
	old := mustPolicy(t, "[profile.default]\nmodels = [\"claude-*\"]\n")
	reloaded := mustPolicy(t, "[profile.default]\nmodels = [\"claude-haiku-*\"]\n")
	var d decisions
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
				prof, err := d.profileFor(p.pol, "conv-1", "")
				if err != nil {
					t.Fatal(err)
				}
				want := p.pol.Profiles["default"].AskModel(c.model)
				if got := m.ask(prof, c.model); !reflect.DeepEqual(got, want) || got.Allow != p.allow {
					t.Errorf("%s: remembered %+v, the policy says %+v", c.model, got, want)
				}
			}
		}
	}
	if _, err := d.profileFor(old, "conv-1", "nosuch"); err == nil {
		t.Error("a token naming a profile the policy does not have got one")
	}
	prof, _ := d.profileFor(old, "conv-1", "")
	for i := range 3 * memo.Limit {
		m.ask(prof, fmt.Sprintf("made-up-%d", i))
		d.profileFor(old, fmt.Sprintf("sandbox-%d", i), "")
	}
	if m.models.Len() > memo.Limit || d.profiles.Len() > memo.Limit {
		t.Errorf("%d model and %d profile answers kept, limit %d", m.models.Len(), d.profiles.Len(), memo.Limit)
	}
}
