package policy

import (
	"errors"
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

// A rule is found at its key in the file, or at the table that holds it.
func TestRuleAt(t *testing.T) {
	src := `[profile.default]
models = ["claude-sonnet-*"]
repos = [
  { repo = "acme/app", access = "read" },
  { repo = "acme/web", access = "push", refs = ["refs/heads/agent/*"] },
]

[profile.default.npm]
min_release_age = "7d"
`
	p, err := ParsePolicy("policy.toml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	for rule, want := range map[string][2]int{
		`profile.default.models["claude-sonnet-*"]`:                {2, 1},
		`profile.default.models: no pattern matches "claude-opus"`: {2, 1},
		`profile.default.repos[1].refs["refs/heads/agent/*"]`:      {5, 41},
		`profile.default: no models entry matches`:                 {2, 1},
		`profile.default.npm.min_release_age`:                      {9, 1},
		`profile.default.nothing_here`:                             {1, 10},
		`mcp: initialize is a lifecycle method`:                    {0, 0},
	} {
		line, col := p.RuleAt(rule)
		if [2]int{line, col} != want {
			t.Errorf("RuleAt(%s) = %d:%d, want %d:%d", rule, line, col, want[0], want[1])
		}
	}
}
