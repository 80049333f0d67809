package sandboxenv

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
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

// TestFishNamesWhatItCannotErase: sourced by the real fish after an
// environment holding credentials under names fish cannot erase (fish
// passes them on to the commands it starts), the fish output names each on
// standard error, as the sh output does, and still erases the others.
func TestFishNamesWhatItCannotErase(t *testing.T) {
	path := shellPath(t, "fish")
	e, _, err := Build(Options{ProxyURL: "http://h:1", Token: "cpx_t", NoGit: true})
	if err != nil {
		t.Fatal(err)
	}
	script, err := e.Fish(nil)
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "script.fish")
	if err := os.WriteFile(f, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(path, "-c", `source $argv[1]; and exec env -0`, f)
	cmd.Env = append(environOf(unsettable), "GITHUB_PAT=github_pat_real", "HOME="+t.TempDir(), "PATH="+os.Getenv("PATH"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("fish: %v, stderr %q", err, stderr.String())
	}
	var left []string
	for _, kv := range strings.Split(string(out), "\x00") {
		name, _, _ := strings.Cut(kv, "=")
		if name == "GITHUB_PAT" {
			t.Error("GITHUB_PAT is left")
		}
		if _, ok := unsettable[name]; ok && LooksLikeCredential(name) {
			left = append(left, strings.ReplaceAll(name, "\x1b", "?"))
		}
	}
	slices.Sort(left)
	if len(left) != 4 || stderr.String() != unsetMessageFor(left...) {
		t.Errorf("left %q, stderr %q", left, stderr.String())
	}
}
