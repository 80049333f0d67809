package policy

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// Relay is what the policy checks of a relay the config names: its name,
// and the methods and paths it forwards.
type Relay struct {
	// Name is the relay's name in the config (relay.NAME).
	Name string `toml:"-"`
	// Methods are the HTTP methods forwarded ("GET", "POST", …). Required.
	Methods []string `toml:"methods"`
	// Paths are globs on the path under the relay's prefix, without a
	// leading slash ("events", "sessions/*/commands", "files/**"). Required.
	Paths []string `toml:"paths"`
}

var relayNameGlobRE = regexp.MustCompile(`^[a-z0-9_*?-]+$`)

// Relay decides whether the profile may use the relay named name.
func (pr *Profile) Relay(name string) Decision {
	if pr == nil {
		return Decision{Rule: "no profile"}
	}
	return pr.firstMatch("relays", "relay", pr.Relays, name)
}

// checkRelayNameGlob refuses a relays glob no relay name can match.
func checkRelayNameGlob(g string) error {
	if !relayNameGlobRE.MatchString(g) {
		return fmt.Errorf("can never match: relay names have only a-z, 0-9, - and _")
	}
	return nil
}

// CheckRelays finds what a policy file loaded on its own cannot know is
// wrong: each relays entry of a profile that names none of relays, the
// relays of the config called config, a mistake that would otherwise
// silently allow nothing. The problems are the policy file's.
func (p *Policy) CheckRelays(relays []string, config string) Problems {
	ix := p.ix
	if ix == nil { // a policy built in code
		ix = newIndex("")
	}
	d := newDecoder(p.Path, ix)
	for _, name := range sortedKeys(p.Profiles) {
		for i, r := range p.Profiles[name].Relays {
			if slices.Contains(relays, r) || strings.ContainsAny(r, "*?") {
				continue
			}
			known := "none"
			if len(relays) > 0 {
				known = strings.Join(relays, ", ")
			}
			d.atValue(keyPath("profile", name, "relays").elem(i, false), "profile.%s.relays: %q names no [relay.%s] in %s (relays there: %s)", tomlKey(name), r, r, config, known)
		}
	}
	sortProblems(d.probs)
	return d.probs
}

// AllowsPath decides a request path under the relay's prefix (decoded, no
// leading slash) against its paths globs.
func (r *Relay) AllowsPath(p string) Decision {
	for _, g := range r.Paths {
		if matchGlob(g, p) {
			return Decision{Allow: true, Rule: fmt.Sprintf("relay.%s.paths[%q]", tomlKey(r.Name), g)}
		}
	}
	return Decision{Rule: fmt.Sprintf("relay.%s: no paths entry matches", tomlKey(r.Name))}
}

// AllowsMethod reports whether the relay forwards method.
func (r *Relay) AllowsMethod(method string) bool { return slices.Contains(r.Methods, method) }
