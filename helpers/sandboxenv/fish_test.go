package sandboxenv

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestFishCredentialMatchesGo: fish's scrub takes for a credential exactly
// the names LooksLikeCredential does.
func TestFishCredentialMatchesGo(t *testing.T) {
	path := shellPath(t, "fish")
	names := []string{"PATH", "HOME", "GIT_AUTHOR_NAME", "GIT_CONFIG_COUNT", "GIT_CONFIG_KEY_0", "MONKEY", "KEYBOARD", "PATTERN",
		"AUTHOR", "npm_config_cache", "KEEP_ME", "COMPASS", "NODE_AUTH_TOKEN", "YARN_NPM_AUTH_IDENT", "SSH_KEY", "GITHUB_PAT_2",
		"private_key_file", "git_config_parameters", "X_OAUTH_SCOPES", "TOKENS", "A_PAT"}
	for name := range issueCredentials {
		names = append(names, name)
	}
	code := "for n in $argv[2..]; string match -qri -- $argv[1] $n; and echo $n; end; true"
	out, err := exec.Command(path, append([]string{"-c", code, fishCredential()}, names...)...).Output()
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Fields(string(out))
	var want []string
	for _, n := range names {
		if LooksLikeCredential(n) {
			want = append(want, n)
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("fish took %q, Go %q", got, want)
	}
}
