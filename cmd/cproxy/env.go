package main

import (
	"fmt"
	"io"
	"net/url"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/cproxy/cproxy/config"
	"github.com/cproxy/cproxy/helpers/sandboxenv"
	"github.com/cproxy/cproxy/policy"
	"github.com/cproxy/cproxy/tokens"
)

// The values of env's flags that take one of a few words, checked against
// these lists, which cproxy completion offers (flagValues).
var (
	envFormats  = []string{"sh", "fish", "json", "env"}
	claudeAuths = []string{sandboxenv.ClaudeAuthToken, sandboxenv.ClaudeAuthOAuth}
	gitAuths    = []string{sandboxenv.GitAuthHelper, sandboxenv.GitAuthHeader}
	// binds are the channels of --bind, which the admin API checks.
	binds = []string{policy.BindSocket}
)

// sandboxEnvFlags are shared by env and exec: where the token comes from
// and how the sandbox reaches cproxy.
func sandboxEnvFlags() []cli.Flag {
	return []cli.Flag{
		sandboxFlag(),
		&cli.StringFlag{Name: "token", Usage: "use this sandbox `TOKEN` instead of minting one"},
		&cli.StringFlag{Name: "profile", Usage: "policy `PROFILE` for a minted token"},
		&cli.StringFlag{Name: "ttl", Usage: "lifetime of a minted token, e.g. 90m, 24h, 7d (default 24h)"},
		&cli.StringFlag{Name: "source", Usage: "accept a minted token only from `ADDR`, an IP address or CIDR prefix (the sandbox's address as cproxy sees it)"},
		&cli.StringFlag{Name: "bind", Usage: "bind a minted token to a channel: socket (valid only on the sandbox's own socket in listen.sandbox_sockets)"},
		valuesFlag(),
		budgetFlag(),
		cmdline(&cli.StringFlag{Name: "proxy-url", Usage: "cproxy's `URL` as the sandbox reaches it (default: listen.public_url from --config)", EnvVars: []string{"CPROXY_URL"}}),
		&cli.StringFlag{Name: "claude-auth", Value: sandboxenv.ClaudeAuthToken, Usage: "how Claude Code gets the token: auth-token (ANTHROPIC_AUTH_TOKEN) or oauth (CLAUDE_CODE_OAUTH_TOKEN, for a subscription upstream)"},
		&cli.StringFlag{Name: "claude-config-dir", Usage: "set CLAUDE_CONFIG_DIR to `DIR` (inside the sandbox)"},
		&cli.BoolFlag{Name: "git", Value: true, Usage: "send GitHub remotes through cproxy with GIT_CONFIG_* settings (--git=false leaves git alone)"},
		&cli.StringFlag{Name: "git-auth", Value: sandboxenv.GitAuthHelper, Usage: "how git gets the token: helper (git-credential-cproxy, which must be on the sandbox's PATH) or header (an Authorization header in git's settings)"},
		&cli.BoolFlag{Name: "npm", Value: true, Usage: "send npm to cproxy's npm route with npm_config_* variables (--npm=false leaves npm alone)"},
		&cli.StringFlag{Name: "npmrc", Usage: "set NPM_CONFIG_USERCONFIG to `PATH` (inside the sandbox), a file `cproxy npmrc` printed: how npm gets the token with --format sh, as a shell cannot export npm's token variable"},
		&cli.BoolFlag{Name: "pip", Usage: "send pip and uv to cproxy's PyPI route: PIP_INDEX_URL and UV_DEFAULT_INDEX with the token as the index URL's password, PIP_TRUSTED_HOST for a plain-http proxy URL"},
		&cli.BoolFlag{Name: "gh", Value: true, Usage: "send gh to cproxy's GitHub API route with GH_HOST and GH_ENTERPRISE_TOKEN when the proxy URL is cproxy's TLS listener (https://HOST[:PORT], no path); --gh=false leaves gh alone"},
		&cli.StringFlag{Name: "gh-repo", Usage: "set GH_REPO to `OWNER/REPO` on cproxy's host, the repository gh's commands act on outside a checkout"},
		&cli.BoolFlag{Name: "go", Value: true, Usage: "send go's module downloads to cproxy's Go modules route with GOPROXY when the proxy URL is cproxy's TLS listener (https://…): go sends a module proxy's credentials only over HTTPS; --go=false leaves go alone"},
		&cli.StringFlag{Name: "ssl-cert-file", Usage: "set SSL_CERT_FILE to `PATH` (inside the sandbox), the file cproxy ca printed, which gh (and Go, curl, OpenSSL) then trusts in place of the system's certificates"},
		adminFlag(),
		configFlag(),
	}
}

func envCommand() *cli.Command {
	return &cli.Command{
		Name:  "env",
		Usage: "print the environment one sandbox command needs: eval \"$(cproxy env --sandbox ID)\"",
		Description: `With --sandbox it mints a token through the admin API; with --token it uses that one.

Examples:

   eval "$(cproxy env --sandbox conv-42 --proxy-url http://127.0.0.1:8080)"
   eval $(cproxy env --sandbox conv-42 --proxy-url http://127.0.0.1:8080)
   cproxy env --sandbox conv-42 --proxy-url http://127.0.0.1:8080 --format fish | source
   cproxy env --sandbox conv-42 --proxy-url http://10.20.30.4:8080 --format json
   eval "$(cproxy env --sandbox conv-42 --proxy-url https://10.20.30.4:8443 --gh-repo acme/app --ssl-cert-file /etc/cproxy/ca.pem)"
   cproxy env --token "$TOKEN" --proxy-url http://10.20.30.4:8080 --format env > sandbox.env`,
		Flags: append(sandboxEnvFlags(),
			&cli.StringFlag{Name: "format", Aliases: []string{"f"}, Value: "sh", Usage: "sh (export statements, safe under eval quoted or not), fish (for | source), json, or env (NAME=value lines)"},
		),
		Action: func(c *cli.Context) error {
			format := c.String("format")
			if err := checkFormat(format, envFormats); err != nil {
				return err
			}
			env, git, err := sandboxEnv(c)
			if err != nil {
				return err
			}
			var out []byte
			switch format {
			case "sh":
				// The shell numbers git's settings when it evaluates them,
				// after the GIT_CONFIG_COUNT it already has.
				s, err := env.Shell()
				if err != nil {
					return fail("", "%v", err)
				}
				g, err := git.Shell()
				if err != nil {
					return fail("", "%v", err)
				}
				// Real credentials in the shell that evals this must not
				// reach the sandbox command beside its token.
				out = []byte(env.UnsetShell() + s + g)
			case "fish":
				// Like sh: fish numbers git's settings when it reads them.
				s, err := env.Fish(git)
				if err != nil {
					return fail("", "%v", err)
				}
				out = []byte(s)
			case "env":
				// No shell to merge with: numbered from 0, for a sandbox
				// that has no GIT_CONFIG_COUNT of its own (the harness
				// merges otherwise). The count in cproxy's own
				// environment is no guide: it runs outside the sandbox.
				s, err := append(env, git.Env(0)...).EnvFile()
				if err != nil {
					return fail("", "%v", err)
				}
				out = []byte(s)
			case "json":
				if out, err = append(env, git.Env(0)...).JSON(); err != nil {
					return fail("", "%v", err)
				}
			}
			_, err = c.App.Writer.Write(out)
			return err
		},
	}
}

// sandboxEnv mints a token (or takes --token) and builds the environment
// and the git settings (none with --git=false).
func sandboxEnv(c *cli.Context) (sandboxenv.Env, sandboxenv.GitConfigs, error) {
	sandbox, token := c.String("sandbox"), c.String("token")
	switch {
	case sandbox == "" && token == "":
		return nil, nil, fail("pass --sandbox ID to mint a token, or --token TOKEN", "no sandbox")
	case token != "" && (c.IsSet("profile") || c.IsSet("ttl") || c.IsSet("source") || c.IsSet("bind") || c.IsSet("values") || c.IsSet("budget")):
		return nil, nil, fail("--profile, --ttl, --source, --bind, --values and --budget apply to a token cproxy mints; drop them or drop --token", "--token cannot be combined with --profile, --ttl, --source, --bind, --values or --budget")
	case token != "":
		if _, err := tokens.Parse(token); err != nil {
			return nil, nil, fail("copy the whole token, as POST /tokens or cproxy token create printed it", "--token is not a cproxy sandbox token")
		}
	case !tokens.ValidSandboxID(sandbox):
		return nil, nil, fail(sandboxIDRule, "invalid sandbox id %q", sandbox)
	}
	// Check what the sandbox will get before minting: a token minted for
	// output that is then refused would stay live, unused, for its ttl.
	proxyURL, err := sandboxProxyURL(c)
	if err != nil {
		return nil, nil, err
	}
	var sub sandboxenv.ClaudeSubscription
	if path := c.String("config"); path != "" && c.String("claude-auth") == sandboxenv.ClaudeAuthOAuth {
		cfg, err := loadConfig(path)
		if err != nil {
			return nil, nil, err
		}
		cl := cfg.Claude
		sub = sandboxenv.ClaudeSubscription{Type: cl.SubscriptionType, RateLimitTier: cl.RateLimitTier, Scopes: cl.OAuthScopes, AssumeFirstParty: cl.AssumeFirstParty}
	}
	if auth := c.String("claude-auth"); !slices.Contains(claudeAuths, auth) {
		return nil, nil, fail(fmt.Sprintf("use --claude-auth %s (ANTHROPIC_AUTH_TOKEN) or %s (CLAUDE_CODE_OAUTH_TOKEN)", sandboxenv.ClaudeAuthToken, sandboxenv.ClaudeAuthOAuth),
			"unknown --claude-auth %q", auth)
	}
	if err := checkGitFlags(c); err != nil {
		return nil, nil, err
	}
	if !c.Bool("npm") && c.IsSet("npmrc") {
		return nil, nil, fail("--npmrc says where npm's settings file is; drop it or drop --npm=false", "--npmrc cannot be combined with --npm=false")
	}
	if p := c.String("npmrc"); c.IsSet("npmrc") && (p == "" || strings.IndexByte(p, 0) >= 0) {
		return nil, nil, fail("pass the path of the file cproxy npmrc printed, as the sandbox sees it", "invalid --npmrc %q", p)
	}
	gh, err := ghFlags(c, proxyURL)
	if err != nil {
		return nil, nil, err
	}
	goSet, err := goFlag(c, proxyURL)
	if err != nil {
		return nil, nil, err
	}
	if token == "" {
		admin, err := newAdminClient(c)
		if err != nil {
			return nil, nil, err
		}
		opts, err := mintFlags(c)
		if err != nil {
			return nil, nil, err
		}
		created, err := admin.CreateToken(c.Context, sandbox, opts)
		if err != nil {
			return nil, nil, admin.failed(err)
		}
		token = created.Reveal()
	}
	env, git, err := sandboxenv.Build(sandboxenv.Options{
		ProxyURL:        proxyURL,
		Token:           token,
		ClaudeAuth:      c.String("claude-auth"),
		ClaudeConfigDir: c.String("claude-config-dir"),
		GitAuth:         c.String("git-auth"),
		NoGit:           !c.Bool("git"),
		NoNPM:           !c.Bool("npm"),
		NPMUserConfig:   c.String("npmrc"),
		Pip:             c.Bool("pip"),
		GH:              gh,
		GHRepo:          c.String("gh-repo"),
		Go:              goSet,
		SSLCertFile:     c.String("ssl-cert-file"),
		Subscription:    sub,
	})
	if err != nil {
		return nil, nil, fail("", "%v", err)
	}
	return env, git, nil
}

// sandboxProxyURL is cproxy's URL as the sandbox reaches it: --proxy-url,
// else listen.public_url or the proxy listener from --config, else
// CPROXY_URL, else CPROXY_CONFIG's, as newAdminClient orders the admin
// URL's, so that the token and the URL come from one cproxy; checked to
// be a plain http(s) URL.
func sandboxProxyURL(c *cli.Context) (string, error) {
	proxyURL := c.String("proxy-url") // CPROXY_URL, unless given
	if path := c.String("config"); !given(c, "proxy-url") && path != "" && (given(c, "config") || proxyURL == "") {
		cfg, err := loadConfig(path)
		if err != nil {
			return "", err
		}
		proxyURL = cfg.Listen.PublicURL
		if proxyURL == "" {
			addr, _, err := listening(cfg)
			if err != nil {
				return "", err
			}
			if strings.HasPrefix(addr, config.UnixPrefix) {
				return "", fail("pass --proxy-url, the address a bridge in the sandbox listens on (see docs/harness.md), or set listen.public_url",
					"the proxy listener is a Unix socket (%s): sandboxes reach it through a bridge", addr)
			}
			proxyURL = "http://" + addr
		}
	}
	if proxyURL == "" {
		return "", fail("pass --proxy-url (or set CPROXY_URL, or --config with listen.public_url)", "where do sandboxes reach cproxy?")
	}
	if u, err := url.Parse(proxyURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" ||
		u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return "", fail("use cproxy's address as the sandbox reaches it, such as http://10.20.30.4:8080", "invalid proxy URL %q", proxyURL)
	}
	return proxyURL, nil
}

// npmrcCommand prints an npm userconfig file for the sandbox image: cproxy's
// registry and a token line that names ${CPROXY_TOKEN}, which npm reads
// from the environment, so the file holds no secret.
func npmrcCommand() *cli.Command {
	return &cli.Command{
		Name:  "npmrc",
		Usage: "print an npm userconfig file, holding no secret, for the sandbox image (use with cproxy env --npmrc PATH)",
		Description: `The file names ${CPROXY_TOKEN}, which npm fills in from the sandbox's environment.

Examples:

   cproxy npmrc --proxy-url http://10.20.30.4:8080 > image/etc/cproxy/npmrc
   cproxy npmrc --config /etc/cproxy/cproxy.toml`,
		Flags: []cli.Flag{
			cmdline(&cli.StringFlag{Name: "proxy-url", Usage: "cproxy's `URL` as the sandbox reaches it (default: listen.public_url from --config)", EnvVars: []string{"CPROXY_URL"}}),
			configFlag(),
		},
		Action: func(c *cli.Context) error {
			proxyURL, err := sandboxProxyURL(c)
			if err != nil {
				return err
			}
			s, err := sandboxenv.NPMRC(proxyURL)
			if err != nil {
				return fail("", "%v", err)
			}
			_, err = io.WriteString(c.App.Writer, s)
			return err
		},
	}
}

// checkGitFlags validates --git and --git-auth.
func checkGitFlags(c *cli.Context) error {
	if !c.Bool("git") {
		if c.IsSet("git-auth") {
			return fail("--git-auth says how git gets the token; drop it or drop --git=false", "--git-auth cannot be combined with --git=false")
		}
		return nil
	}
	if auth := c.String("git-auth"); !slices.Contains(gitAuths, auth) {
		return fail(fmt.Sprintf("use --git-auth %s (git-credential-cproxy) or %s (an Authorization header in git's settings)", sandboxenv.GitAuthHelper, sandboxenv.GitAuthHeader),
			"unknown --git-auth %q", auth)
	}
	return nil
}

// ghFlags validates --gh, --gh-repo and --ssl-cert-file, and says whether
// gh is set up: by default only when the proxy URL is one gh can take
// (sandboxenv.GHHost), as a plain http URL cannot be; asked for with --gh,
// --gh-repo or --ssl-cert-file, a proxy URL gh cannot take is an error that
// says why.
func ghFlags(c *cli.Context, proxyURL string) (bool, error) {
	asked := c.IsSet("gh-repo") || c.IsSet("ssl-cert-file")
	if !c.Bool("gh") {
		if asked {
			return false, fail("--gh-repo and --ssl-cert-file set gh up; drop them or drop --gh=false", "--gh-repo and --ssl-cert-file cannot be combined with --gh=false")
		}
		return false, nil
	}
	if _, err := sandboxenv.GHHost(proxyURL); err != nil {
		if asked || given(c, "gh") {
			return false, fail("pass --proxy-url https://HOST:PORT, cproxy's TLS listener (listen.proxy_tls) as the sandbox reaches it (see docs/github-api.md)", "gh cannot be set up: %v", err)
		}
		return false, nil
	}
	if r := c.String("gh-repo"); c.IsSet("gh-repo") && !sandboxenv.ValidGHRepo(r) {
		return false, fail("give the repository as OWNER/REPO, such as acme/app", "invalid --gh-repo %q", r)
	}
	if p := c.String("ssl-cert-file"); c.IsSet("ssl-cert-file") && (p == "" || strings.IndexByte(p, 0) >= 0) {
		return false, fail("pass the path of the file cproxy ca printed, as the sandbox sees it", "invalid --ssl-cert-file %q", p)
	}
	return true, nil
}

// goFlag says whether go is set up: by default only when the proxy URL is
// https (sandboxenv.GoProxy), as go refuses to send a plain http proxy
// URL's credentials; asked for with --go, such a URL is an error that
// says why.
func goFlag(c *cli.Context, proxyURL string) (bool, error) {
	if !c.Bool("go") {
		return false, nil
	}
	if _, err := sandboxenv.GoProxy(proxyURL, "cpx_"); err != nil {
		if given(c, "go") {
			return false, fail("pass --proxy-url https://HOST:PORT, cproxy's TLS listener (listen.proxy_tls) as the sandbox reaches it (see docs/go-modules.md)", "go cannot be set up: %v", err)
		}
		return false, nil
	}
	return true, nil
}
