package routes

import (
	"fmt"
	"testing"

	"github.com/cproxy/cproxy/policy"
	"github.com/cproxy/cproxy/routes/internal/memo"
)

// Remembered profiles are the policy's own, follow a reload (a new policy
// is asked afresh), and stay bounded whatever sandbox names clients make
// up. (routes/model holds the same for its remembered model answers.)
func TestDecisionsFollowThePolicy(t *testing.T) {
	old := mustPolicy(t, "[profile.default]\nmodels = [\"claude-*\"]\n")
	reloaded := mustPolicy(t, "[profile.default]\nmodels = [\"claude-haiku-*\"]\n")
	var d decisions
	for range 2 { // asked, then remembered
		for _, pol := range []*policy.Policy{old, reloaded} {
			prof, err := d.profileFor(pol, "conv-1", "")
			if err != nil {
				t.Fatal(err)
			}
			if prof != pol.Profiles["default"] {
				t.Errorf("remembered profile %p, the policy's is %p", prof, pol.Profiles["default"])
			}
		}
	}
	if _, err := d.profileFor(old, "conv-1", "nosuch"); err == nil {
		t.Error("a token naming a profile the policy does not have got one")
	}
	for i := range 3 * memo.Limit {
		d.profileFor(old, fmt.Sprintf("sandbox-%d", i), "")
	}
	if d.profiles.Len() > memo.Limit {
		t.Errorf("%d profile answers kept, limit %d", d.profiles.Len(), memo.Limit)
	}
}
