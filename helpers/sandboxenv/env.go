package sandboxenv

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// Var is one environment variable.
type Var struct{ Name, Value string }

// Env is an ordered environment; order is kept so output is stable and
// readable.
type Env []Var

// ClaudeAuth says which variable hands Claude Code the sandbox token.
const (
	// ClaudeAuthToken: ANTHROPIC_AUTH_TOKEN, sent as Authorization: Bearer.
	// Claude Code treats the account as an API account.
	ClaudeAuthToken = "auth-token"
	// ClaudeAuthOAuth: CLAUDE_CODE_OAUTH_TOKEN, for a cproxy whose Anthropic
	// upstream uses a Claude subscription (setup-token).
	ClaudeAuthOAuth = "oauth"
)

// GitAuth says how git hands cproxy the sandbox token on the GitHub route.
const (
	// GitAuthHelper: credential.<proxy URL>.helper=cproxy, so git asks
	// git-credential-cproxy, which must be on the sandbox's PATH and reads
	// the token (or CPROXY_TOKEN_FILE) at each call.
	GitAuthHelper = "helper"
	// GitAuthHeader: http.<proxy URL>/github/.extraHeader carries the token
	// in git's configuration; no helper binary is needed, but a rotated
	// token is not picked up until the environment is made again.
	GitAuthHeader = "header"
)

// Options are the inputs of Build. The zero ClaudeAuth means
// ClaudeAuthToken; an empty ClaudeConfigDir leaves CLAUDE_CONFIG_DIR unset;
// the zero GitAuth means GitAuthHelper; NoGit false means git settings are
// included.
type Options struct {
	ProxyURL        string // cproxy as the sandbox reaches it, e.g. http://10.20.30.4:8080
	Token           string // the sandbox token
	ClaudeAuth      string
	ClaudeConfigDir string
	GitAuth         string
	NoGit           bool
	NoNPM           bool   // leave npm's settings out
	NPMUserConfig   string // set NPM_CONFIG_USERCONFIG to this file (see NPMRC)
	Pip             bool   // send pip and uv to the PyPI route (see sandboxPip)
	// GH sets gh up (see sandboxGH): ProxyURL must then be one GHHost
	// takes. GHRepo, OWNER/REPO, sets GH_REPO; SSLCertFile sets
	// SSL_CERT_FILE, the CA file gh (and every Go, curl or OpenSSL
	// program) trusts in place of the system's. Both need GH.
	GH          bool
	GHRepo      string
	SSLCertFile string
	// Go sets go up (see GoProxy): ProxyURL must then be https.
	Go bool
	// Subscription, with ClaudeAuthOAuth, tells Claude Code about the
	// subscription behind cproxy's setup-token upstream.
	Subscription ClaudeSubscription
}

// ClaudeSubscription is what Claude Code is told, in oauth mode, about the
// plan behind cproxy's setup-token (config [claude]). Empty fields set
// nothing.
type ClaudeSubscription struct {
	Type             string   // CLAUDE_CODE_SUBSCRIPTION_TYPE: "pro", "max", …
	RateLimitTier    string   // CLAUDE_CODE_RATE_LIMIT_TIER
	Scopes           []string // CLAUDE_CODE_OAUTH_SCOPES, space-separated
	AssumeFirstParty bool     // _CLAUDE_CODE_ASSUME_FIRST_PARTY_BASE_URL=1
}

// vars returns the variables, in a fixed order.
func (cs ClaudeSubscription) vars() Env {
	var e Env
	if cs.AssumeFirstParty {
		e = append(e, Var{"_CLAUDE_CODE_ASSUME_FIRST_PARTY_BASE_URL", "1"})
	}
	if cs.Type != "" {
		e = append(e, Var{"CLAUDE_CODE_SUBSCRIPTION_TYPE", cs.Type})
	}
	if cs.RateLimitTier != "" {
		e = append(e, Var{"CLAUDE_CODE_RATE_LIMIT_TIER", cs.RateLimitTier})
	}
	if len(cs.Scopes) > 0 {
		e = append(e, Var{"CLAUDE_CODE_OAUTH_SCOPES", strings.Join(cs.Scopes, " ")})
	}
	return e
}

// Build returns the environment one sandbox command needs, and the git
// settings it needs, which are numbered only once it is known how many
// GIT_CONFIG_COUNT entries the command already has (see GitConfigs).
func Build(o Options) (Env, GitConfigs, error) {
	e, err := sandboxVars(o)
	if err != nil {
		return nil, nil, err
	}
	if o.NoGit {
		return e, nil, nil
	}
	git, err := sandboxGit(strings.TrimRight(o.ProxyURL, "/"), o.Token, o.GitAuth)
	if err != nil {
		return nil, nil, err
	}
	return e, git, nil
}

func sandboxVars(o Options) (Env, error) {
	base := strings.TrimRight(o.ProxyURL, "/")
	if base == "" {
		return nil, fmt.Errorf("no proxy URL: pass --proxy-url or set listen.public_url in the config")
	}
	if o.Token == "" {
		return nil, fmt.Errorf("no sandbox token")
	}
	e := Env{{"ANTHROPIC_BASE_URL", base}}
	switch o.ClaudeAuth {
	case "", ClaudeAuthToken:
		e = append(e, Var{"ANTHROPIC_AUTH_TOKEN", o.Token})
	case ClaudeAuthOAuth:
		e = append(e, Var{"CLAUDE_CODE_OAUTH_TOKEN", o.Token})
		e = append(e, o.Subscription.vars()...)
	default:
		return nil, fmt.Errorf("unknown Claude auth %q: use %q or %q", o.ClaudeAuth, ClaudeAuthToken, ClaudeAuthOAuth)
	}
	e = append(e,
		Var{"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1"},
		Var{"DISABLE_AUTOUPDATER", "1"},
		Var{"CPROXY_URL", base},
		Var{"CPROXY_TOKEN", o.Token},
	)
	if o.ClaudeConfigDir != "" {
		e = append(e, Var{"CLAUDE_CONFIG_DIR", o.ClaudeConfigDir})
	}
	if !o.NoNPM {
		npm, err := sandboxNPM(base, o.Token, o.NPMUserConfig)
		if err != nil {
			return nil, err
		}
		e = append(e, npm...)
	} else if o.NPMUserConfig != "" {
		return nil, fmt.Errorf("an npm userconfig cannot be combined with leaving npm out")
	}
	if o.Pip {
		pip, err := sandboxPip(base, o.Token)
		if err != nil {
			return nil, err
		}
		e = append(e, pip...)
	}
	if o.GH {
		gh, err := sandboxGH(base, o.Token, o.GHRepo, o.SSLCertFile)
		if err != nil {
			return nil, err
		}
		e = append(e, gh...)
	} else if o.GHRepo != "" || o.SSLCertFile != "" {
		return nil, fmt.Errorf("gh's repository and CA file cannot be combined with leaving gh out")
	}
	if o.Go {
		g, err := sandboxGo(base, o.Token)
		if err != nil {
			return nil, err
		}
		e = append(e, g...)
	}
	return e, nil
}

// Environ returns the variables as NAME=value strings for exec.Cmd.Env.
func (e Env) Environ() []string {
	out := make([]string, len(e))
	for i, v := range e {
		out[i] = v.Name + "=" + v.Value
	}
	return out
}

// Shell renders `export NAME='value';` lines that mean the same under eval
// "$(…)" and eval $(…) in any POSIX shell, whatever a value holds (see
// shellScript). npm's per-registry token variable, which no shell can
// export, is left out: a shell gives npm the token through the file NPMRC
// prints.
func (e Env) Shell() (string, error) {
	var s shellScript
	for _, v := range e {
		if isNPMAuthName(v.Name) {
			if strings.IndexByte(v.Value, 0) >= 0 {
				return "", fmt.Errorf("%s: a value cannot hold a NUL byte", v.Name)
			}
			continue
		}
		if err := v.check(); err != nil {
			return "", err
		}
		if err := s.export(v.Name, v.Value); err != nil {
			return "", fmt.Errorf("%s: %w", v.Name, err)
		}
	}
	if s.usedValue {
		s.line("unset " + cproxyVar + ";")
	}
	return s.String(), nil
}

// EnvFile renders NAME=value lines, the format of `docker run --env-file`
// and systemd's EnvironmentFile, which have no quoting: a value with a
// newline cannot be written and is refused.
func (e Env) EnvFile() (string, error) {
	var b strings.Builder
	for _, v := range e {
		if err := v.check(); err != nil {
			return "", err
		}
		if strings.ContainsAny(v.Value, "\r\n") {
			return "", fmt.Errorf("%s: a value with a line break cannot be written as an env file: use --format sh or json", v.Name)
		}
		fmt.Fprintf(&b, "%s=%s\n", v.Name, v.Value)
	}
	return b.String(), nil
}

// JSON renders one object, names to values, in order.
func (e Env) JSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteString("{")
	for i, v := range e {
		if err := v.check(); err != nil {
			return nil, err
		}
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString("\n  ")
		k, _ := json.Marshal(v.Name)
		val, _ := json.Marshal(v.Value)
		b.Write(k)
		b.WriteString(": ")
		b.Write(val)
	}
	b.WriteString("\n}\n")
	return b.Bytes(), nil
}

func (v Var) check() error {
	if !validEnvName(v.Name) && !isNPMAuthName(v.Name) {
		return fmt.Errorf("%q is not a valid environment variable name", v.Name)
	}
	if strings.IndexByte(v.Value, 0) >= 0 {
		return fmt.Errorf("%s: a value cannot hold a NUL byte", v.Name)
	}
	return nil
}

func validEnvName(s string) bool {
	if s == "" {
		return false
	}
	for i, c := range []byte(s) {
		switch {
		case c == '_', 'A' <= c && c <= 'Z', 'a' <= c && c <= 'z':
		case '0' <= c && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}
