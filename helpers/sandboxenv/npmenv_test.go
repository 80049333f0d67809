package sandboxenv

import (
	"os/exec"
	"strings"
	"testing"
)

func TestNPMNerfDart(t *testing.T) {
	for reg, want := range map[string]string{
		"http://10.0.0.1:8080/npm/":          "//10.0.0.1:8080/npm/",
		"http://H.Example:80/npm/":           "//h.example/npm/",
		"https://gw.example:443/cproxy/npm/": "//gw.example/cproxy/npm/",
		"https://gw.example:8443/npm/":       "//gw.example:8443/npm/",
		"http://[::1]:9/npm/":                "//[::1]:9/npm/",
	} {
		got, err := NPMNerfDart(reg)
		if err != nil || got != want {
			t.Errorf("%s: got %q, %v; want %q", reg, got, err, want)
		}
	}
}

func TestSandboxNPMEnv(t *testing.T) {
	e, _, err := Build(Options{ProxyURL: "https://gw.example/cproxy/", Token: "cpx_x", NPMUserConfig: "/etc/cproxy/npmrc"})
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(e.Environ()[6:], "\n")
	want := "npm_config_registry=https://gw.example/cproxy/npm/\n" +
		"npm_config_update_notifier=false\n" +
		"NPM_CONFIG_USERCONFIG=/etc/cproxy/npmrc\n" +
		"npm_config_//gw.example/cproxy/npm/:_authToken=cpx_x\n" +
		// https: no http whitelist for yarn.
		"YARN_NPM_REGISTRY_SERVER=https://gw.example/cproxy/npm\n" +
		"YARN_NPM_AUTH_TOKEN=cpx_x\n" +
		"YARN_NPM_ALWAYS_AUTH=true"
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	// env and json carry the token's variable; sh leaves it out.
	f, err := e.EnvFile()
	if err != nil || !strings.Contains(f, "\nnpm_config_//gw.example/cproxy/npm/:_authToken=cpx_x\n") {
		t.Errorf("env file: %v\n%s", err, f)
	}
	j, err := e.JSON()
	if err != nil || !strings.Contains(string(j), `"npm_config_//gw.example/cproxy/npm/:_authToken": "cpx_x"`) {
		t.Errorf("json: %v\n%s", err, j)
	}
	s, err := e.Shell()
	if err != nil || strings.Contains(s, "_authToken") || !strings.Contains(s, "export npm_config_registry='https://gw.example/cproxy/npm/';\n") ||
		!strings.Contains(s, "export NPM_CONFIG_USERCONFIG='/etc/cproxy/npmrc';\n") {
		t.Errorf("sh: %v\n%s", err, s)
	}
	// --npm=false: nothing of npm's.
	e, _, err = Build(Options{ProxyURL: "http://h:1", Token: "cpx_x", NoNPM: true})
	if err != nil || strings.Contains(strings.Join(e.Environ(), "\n"), "npm") || strings.Contains(e.UnsetShell(), "NPM_CONFIG") {
		t.Errorf("NoNPM: %v %q", err, e.Environ())
	}
	if _, _, err := Build(Options{ProxyURL: "http://h:1", Token: "cpx_x", NoNPM: true, NPMUserConfig: "/x"}); err == nil {
		t.Error("NoNPM with a userconfig accepted")
	}
}

func TestNPMShellSafe(t *testing.T) {
	// Whatever the userconfig path or token hold, eval sets them literally.
	for _, v := range []string{`/tmp/it's $(touch pwned) ; x`, "a\nb`id`", `\'"`} {
		e, _, err := Build(Options{ProxyURL: "http://h:1", Token: "cpx_t", NPMUserConfig: v, NoGit: true})
		if err != nil {
			t.Fatal(err)
		}
		s, err := e.Shell()
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("sh", "-c", e.UnsetShell()+s+`printf %s "$NPM_CONFIG_USERCONFIG"`)
		cmd.Dir = t.TempDir()
		out, err := cmd.Output()
		if err != nil || string(out) != v {
			t.Errorf("%q: got %q, %v", v, out, err)
		}
	}
	if _, err := (Env{{"npm_config_//h:1/npm/:_authToken", "a\x00b"}}).Shell(); err == nil {
		t.Error("NUL accepted")
	}
}

func TestNPMScrub(t *testing.T) {
	e, _, _ := Build(Options{ProxyURL: "http://h:1", Token: "cpx_t"})
	got := e.Scrub([]string{"PATH=/bin", "NPM_CONFIG_REGISTRY=https://registry.npmjs.org/", "npm_config_//registry.npmjs.org/:_authToken=npm_real",
		"npm_config__auth=x", "npm_config_@acme:registry=https://x/", "NPM_TOKEN=npm_real", "npm_config_cache=/c", "NPM_CONFIG_USERCONFIG=/home/u/.npmrc",
		"YARN_NPM_AUTH_TOKEN=npm_real", "YARN_NPM_SCOPES={}", "yarn_npm_registry_server=https://x/", "YARN_UNSAFE_HTTP_WHITELIST=*", "YARN_CACHE_FOLDER=/y"})
	if strings.Join(got, " ") != "PATH=/bin npm_config_cache=/c YARN_CACHE_FOLDER=/y" {
		t.Errorf("got %q", got)
	}
	u := e.UnsetShell()
	if !strings.Contains(u, " NPM_CONFIG_REGISTRY NPM_CONFIG_USERCONFIG NPM_CONFIG__AUTH NPM_CONFIG__AUTHTOKEN YARN_NPM_SCOPES YARN_NPM_PUBLISH_REGISTRY YARN_NPM_AUTH_IDENT;\n") {
		t.Errorf("unset: %q", u)
	}
}

func TestNPMRC(t *testing.T) {
	got, err := NPMRC("http://10.20.30.4:8080/")
	want := "; npm settings for cproxy (cproxy npmrc). No secret here: npm reads the\n" +
		"; sandbox token from CPROXY_TOKEN in the environment.\n" +
		"registry=http://10.20.30.4:8080/npm/\n" +
		"update-notifier=false\n" +
		"//10.20.30.4:8080/npm/:_authToken=${CPROXY_TOKEN}\n"
	if err != nil || got != want {
		t.Errorf("got %q, %v", got, err)
	}
	if _, err := NPMRC("http://h:1/a${X}"); err == nil {
		t.Error("a ${ in the URL accepted")
	}
}
