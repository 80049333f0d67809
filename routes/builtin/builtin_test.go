package builtin

import (
	"testing"

	"github.com/cproxy/cproxy/config"
)

// Every registered route's upstream has its defaults in the config's table
// of kinds, under the route's prefix, and every kind there has its route:
// a route registered without its defaults would have no [upstream.NAME] to
// load, and a relay could take its prefix.
func TestKindsMatchTheConfig(t *testing.T) {
	used := map[string]bool{}
	for _, k := range Kinds {
		found := false
		for _, u := range config.UpstreamKinds {
			if u.Name == k.Upstream {
				found = true
				if u.Prefix != k.Prefix {
					t.Errorf("route %s is under %s, and config.UpstreamKinds says %s", k.Name, k.Prefix, u.Prefix)
				}
			}
		}
		if !found {
			t.Errorf("route %s forwards to [upstream.%s], which config.UpstreamKinds does not have", k.Name, k.Upstream)
		}
		if used[k.Upstream] {
			t.Errorf("two routes forward to [upstream.%s]", k.Upstream)
		}
		used[k.Upstream] = true
	}
	for _, u := range config.UpstreamKinds {
		if !used[u.Name] {
			t.Errorf("config.UpstreamKinds has %s, which no registered route forwards to", u.Name)
		}
	}
}
