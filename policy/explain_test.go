package policy

import (
	"errors"
	"path/filepath"
	"testing"
)

const choicePolicy = `[profile.default]
models = ["claude-*"]

[profile.web]
models = ["claude-sonnet-*"]

[[sandbox]]
match = "conv-*"
profile = "web"
`

// TestChooseProfile pins which rule ChooseProfile names, and that
// ProfileFor, which the routes ask, picks the same profile.
func TestChooseProfile(t *testing.T) {
	p, probs := loadPolicy("policy.toml", []byte(choicePolicy))
	if probs != nil {
		t.Fatal(probs)
	}
	for _, tc := range []struct {
		sandbox, explicit, profile, rule, at string
	}{
		{"conv-42", "", "web", `[[sandbox]] match = "conv-*"`, "policy.toml:8:1"},
		{"ci-1", "", "default", "[profile.default]: no [[sandbox]] rule matches", "policy.toml:1:10"},
		{"conv-42", "default", "default", `the token's profile "default"`, "policy.toml:1:10"},
	} {
		c, err := p.ChooseProfile(tc.sandbox, tc.explicit)
		if err != nil || c.Profile.Name != tc.profile || c.Rule != tc.rule || c.At != tc.at {
			t.Errorf("ChooseProfile(%q, %q) = %q %q %q, %v; want %q %q %q", tc.sandbox, tc.explicit, c.Profile.Name, c.Rule, c.At, err, tc.profile, tc.rule, tc.at)
		}
		if pr, err := p.ProfileFor(tc.sandbox, tc.explicit); err != nil || pr != c.Profile {
			t.Errorf("ProfileFor(%q, %q) = %v, %v; ChooseProfile chose %s", tc.sandbox, tc.explicit, pr, err, c.Profile.Name)
		}
	}
	if c, err := p.ChooseProfile("conv-1", "gone"); !errors.Is(err, ErrNoProfile) || c.Profile != nil {
		t.Errorf("unknown explicit profile: %v, %v", c, err)
	}
	if c, err := DefaultPolicy().ChooseProfile("x", ""); err != nil || c.At != "" || c.Rule != "[profile.default]: the policy has no [[sandbox]] rules" {
		t.Errorf("built-in policy: %+v, %v", c, err)
	}
	if got := p.Profiles["web"].Key(); got != "profile.web" {
		t.Errorf("Key() = %q", got)
	}
}

// TestCheckPolicy: a policy loaded on its own (a reload) is checked against
// the config's relays as LoadConfig checks the one it loads.
func TestCheckPolicy(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "policy.toml"), "[profile.default]\nrelays = [\"mod\"]\n")
	cfg, err := LoadConfig(writeFile(t, filepath.Join(dir, "cproxy.toml"), relayConfig))
	if err != nil {
		t.Fatal(err)
	}
	if probs := cfg.CheckPolicy(cfg.Rules); len(probs) != 0 {
		t.Errorf("the policy loaded with the config: %v", probs)
	}
	bad := writeFile(t, filepath.Join(dir, "new.toml"), "[profile.default]\nrelays = [\"mod\", \"mdo\", \"m*\"]\n")
	p, err := LoadPolicy(bad)
	if err != nil {
		t.Fatal(err)
	}
	want := bad + `:2:18: profile.default.relays: "mdo" names no [relay.mdo] in ` + filepath.Join(dir, "cproxy.toml") + " (relays there: gateway, mod)"
	if probs := cfg.CheckPolicy(p); probs.Error() != want {
		t.Errorf("got %v\nwant %s", probs, want)
	}
	// A policy built in code has no positions; the check does not need them.
	if probs := Default().CheckPolicy(&Policy{Profiles: map[string]*Profile{"x": {Name: "x", Relays: []string{"mod"}}}}); len(probs) != 1 || probs[0].Line != 1 {
		t.Errorf("built policy: %v", probs)
	}
}

func TestSameText(t *testing.T) {
	a, _ := loadPolicy("policy.toml", []byte("[profile.default]\nmodels = [\"*\"]\n"))
	b, _ := loadPolicy("policy.toml", []byte("[profile.default]\nmodels = [\"*\"]\n"))
	c, _ := loadPolicy("policy.toml", []byte("[profile.default]\nmodels = [\"claude-*\"]\n"))
	d, _ := loadPolicy("other.toml", []byte("[profile.default]\nmodels = [\"*\"]\n"))
	switch {
	case !a.SameText(b):
		t.Error("same file, same text: not the same")
	case a.SameText(c), a.SameText(d), a.SameText(nil), DefaultPolicy().SameText(DefaultPolicy()):
		t.Error("different policies are the same")
	}
}
