package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/cproxy/cproxy/client"
	"github.com/cproxy/cproxy/config"
	"github.com/cproxy/cproxy/policy"
	adminapi "github.com/cproxy/cproxy/routes/admin"
	"github.com/cproxy/cproxy/tokens"
)

func adminFlag() cli.Flag {
	return &cli.StringFlag{Name: "admin", Usage: "admin API `URL`, or unix:PATH for its Unix socket (default: from --config, else http://127.0.0.1:9001)", EnvVars: []string{"CPROXY_ADMIN_URL"}}
}

// listening returns the addresses a config's cproxy serve listens on: the
// configured ones, or for port 0 the ones it wrote to its ready file.
func listening(cfg *config.Config) (proxy, admin string, err error) {
	proxy, admin = cfg.Listen.Proxy, cfg.Listen.Admin
	if !portZero(proxy) && !portZero(admin) {
		return proxy, admin, nil
	}
	if cfg.Listen.ReadyFile == "" {
		return "", "", fail("set listen.ready_file so cproxy can read the ports serve picked, or pass --admin and --proxy-url",
			"%s: a listener on port 0 has no fixed address", cfg.Path)
	}
	b, err := os.ReadFile(cfg.Listen.ReadyFile)
	if err != nil {
		return "", "", fail("is cproxy serve running with this config?", "%s: listener addresses: %v", cfg.Path, err)
	}
	var r readyInfo
	if err := json.Unmarshal(b, &r); err != nil || r.Proxy == "" || r.Admin == "" {
		return "", "", fail("", "%s: not a cproxy ready file", cfg.Listen.ReadyFile)
	}
	return r.Proxy, r.Admin, nil
}

// portZero reports whether a listener's address asks for a free port: a
// Unix socket's path is its address.
func portZero(addr string) bool {
	return !strings.HasPrefix(addr, config.UnixPrefix) && strings.HasSuffix(addr, ":0")
}

// adminURL is the admin API's URL for a listener's address: http://
// host:port, or a Unix socket's unix:PATH, which the client dials as it is.
func adminURL(addr string) string {
	if strings.HasPrefix(addr, config.UnixPrefix) {
		return addr
	}
	return "http://" + addr
}

// adminClient is the client package's Client for a running cproxy's admin
// listener, at base.
type adminClient struct {
	*client.Client
	base string
}

// newAdminClient finds the admin URL: --admin or CPROXY_ADMIN_URL, else
// the config's listen.admin, else the default listener.
func newAdminClient(c *cli.Context) (*adminClient, error) {
	base := c.String("admin")
	if base == "" {
		addr := "127.0.0.1:9001"
		if path := c.String("config"); path != "" {
			cfg, err := loadConfig(path)
			if err != nil {
				return nil, err
			}
			if _, addr, err = listening(cfg); err != nil {
				return nil, err
			}
		}
		base = adminURL(addr)
	}
	cl, err := client.New(base)
	if err != nil {
		return nil, fail("use a URL such as http://127.0.0.1:9001, or unix:PATH for the admin listener's Unix socket", "invalid admin URL %q", base)
	}
	return &adminClient{Client: cl, base: strings.TrimRight(base, "/")}, nil
}

// failed words an error of one of the client's calls for the CLI: the
// admin API's refusal in its own words, or why it could not be asked, with
// a hint. Nil stays nil.
func (a *adminClient) failed(err error) error {
	var refused *client.Error
	var unreached *url.Error
	switch {
	case err == nil:
		return nil
	case errors.As(err, &refused) && strings.HasPrefix(refused.Message, "cproxy: "):
		// cproxy's own refusal: every one starts so (docs/admin-api.md).
		return fail("", "%s", strings.TrimPrefix(refused.Message, "cproxy: "))
	case errors.As(err, &refused):
		return fail("is that URL cproxy's admin listener?", "admin API at %s answered %d %s", a.base, refused.StatusCode, http.StatusText(refused.StatusCode))
	case errors.As(err, &unreached):
		return fail("is cproxy serve running? point --admin or CPROXY_ADMIN_URL at its admin listener",
			"cannot reach the admin API at %s: %v", a.base, unreached.Err)
	}
	return fail("", "%s", strings.TrimPrefix(err.Error(), "cproxy client: "))
}

// budgetFlag is --budget, shared by token create, env and exec.
func budgetFlag() cli.Flag {
	return &cli.StringFlag{Name: "budget", Usage: "the token's own budget over its profile's, as `JSON`, e.g. {\"output_tokens\": 200000, \"window\": \"day\"}"}
}

// valuesFlag is --values, shared by token create, env and exec.
func valuesFlag() cli.Flag {
	return &cli.StringFlag{Name: "values", Usage: "per-token values for relays, from a JSON `FILE` such as {\"mod_token\": \"…\"} (- for standard input), sealed with the token"}
}

// readValues reads --values: a JSON object of names to string values,
// from a file or standard input, so that no value is on the command line.
func readValues(c *cli.Context) (map[string]string, error) {
	path := c.String("values")
	if path == "" {
		return nil, nil
	}
	var data []byte
	var err error
	if path == "-" {
		data, err = io.ReadAll(io.LimitReader(c.App.Reader, 64<<10))
	} else {
		data, err = os.ReadFile(path)
	}
	if err != nil {
		return nil, fail("", "--values: %v", err)
	}
	var values map[string]string
	if err := json.Unmarshal(data, &values); err != nil || values == nil {
		return nil, fail(`the file holds one JSON object of names to strings, e.g. {"mod_token": "…"}`, "--values %s is not a JSON object of strings", path)
	}
	return values, nil
}

// mintFlags reads the token flags that token create, env and exec share,
// checked here, as the admin API would, so that a mistake is refused even
// when serve is down.
func mintFlags(c *cli.Context) (client.CreateOptions, error) {
	values, err := readValues(c)
	if err != nil {
		return client.CreateOptions{}, err
	}
	o := client.CreateOptions{Profile: c.String("profile"), Source: c.String("source"), Bind: c.String("bind"), Values: values}
	if ttl := c.String("ttl"); ttl != "" {
		if o.TTL, err = adminapi.ParseTTL(ttl); err != nil {
			return client.CreateOptions{}, fail("", "%v", err)
		}
	}
	if b := c.String("budget"); b != "" {
		if dup, _ := adminapi.DuplicateKey([]byte(b)); dup != "" {
			return client.CreateOptions{}, fail("give each key once", "--budget: the key %q is given more than once (keys are matched without regard to case)", dup)
		}
		budget, err := policy.ParseBudget([]byte(b))
		if err != nil {
			return client.CreateOptions{}, fail(`e.g. --budget '{"requests": 100, "output_tokens": 200000, "window": "day"}' (see docs/policy.md#budgets)`, "--budget: %v", err)
		}
		cb := client.Budget(budget)
		o.Budget = &cb
	}
	return o, nil
}

func sandboxFlag() cli.Flag {
	return &cli.StringFlag{Name: "sandbox", Aliases: []string{"s"}, Usage: "sandbox `ID`"}
}

// sandboxIDRule is the hint for an invalid sandbox id.
const sandboxIDRule = "ids are 1-63 characters of a-z, 0-9 and '-', starting with a letter or digit"

// sandboxArg returns --sandbox, checked here rather than by the admin API
// so a typo is refused even when serve is down. The flag is not marked
// Required: urfave/cli would print the command's help on stdout, which is
// for data.
func sandboxArg(c *cli.Context, required bool) (string, error) {
	id := c.String("sandbox")
	switch {
	case id == "" && required:
		return "", fail("pass --sandbox ID", "no sandbox")
	case id != "" && !tokens.ValidSandboxID(id):
		return "", fail(sandboxIDRule, "invalid sandbox id %q", id)
	}
	return id, nil
}

func noArgs(c *cli.Context) error {
	if c.NArg() > 0 {
		return fail(fmt.Sprintf("see cproxy %s --help", c.Command.FullName()), "unexpected argument %q", c.Args().First())
	}
	return nil
}
