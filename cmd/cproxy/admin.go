package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/cproxy/cproxy/policy"
	"github.com/cproxy/cproxy/routes"
	"github.com/cproxy/cproxy/tokens"
)

// adminResponseLimit bounds what cproxy reads back from the admin API.
const adminResponseLimit = 16 << 20

func adminFlag() cli.Flag {
	return &cli.StringFlag{Name: "admin", Usage: "admin API `URL` (default: from --config, else http://127.0.0.1:9001)", EnvVars: []string{"CPROXY_ADMIN_URL"}}
}

// listening returns the addresses a config's cproxy serve listens on: the
// configured ones, or for port 0 the ones it wrote to its ready file.
func listening(cfg *policy.Config) (proxy, admin string, err error) {
	proxy, admin = cfg.Listen.Proxy, cfg.Listen.Admin
	if !strings.HasSuffix(proxy, ":0") && !strings.HasSuffix(admin, ":0") {
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

// adminClient talks to a running cproxy's admin listener.
type adminClient struct {
	base string
	http *http.Client
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
		base = "http://" + addr
	}
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fail("use a URL such as http://127.0.0.1:9001", "invalid admin URL %q", base)
	}
	return &adminClient{base: strings.TrimRight(base, "/"), http: &http.Client{Timeout: 30 * time.Second}}, nil
}

func (a *adminClient) do(method, path string, q url.Values, want int, out any) error {
	return a.doBody(method, path, q, nil, want, out)
}

// doBody is do with a JSON request body (nil for none).
func (a *adminClient) doBody(method, path string, q url.Values, body []byte, want int, out any) error {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, a.base+path+"?"+q.Encode(), rd)
	if err != nil {
		return fail("", "%v", err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := a.http.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fail("is cproxy serve running? point --admin or CPROXY_ADMIN_URL at its admin listener",
			"cannot reach the admin API at %s: %v", a.base, err)
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, adminResponseLimit))
	if err != nil {
		return fail("", "reading the admin API's answer: %v", err)
	}
	if resp.StatusCode != want {
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(answer, &e) == nil && e.Error != "" {
			return fail("", "%s", strings.TrimPrefix(e.Error, "cproxy: "))
		}
		return fail("is that URL cproxy's admin listener?", "admin API at %s answered %s", a.base, resp.Status)
	}
	if out != nil {
		if err := json.Unmarshal(answer, out); err != nil {
			return fail("", "the admin API's answer is not what cproxy expects: %v", err)
		}
	}
	return nil
}

// mintRequest is what POST /tokens is asked for; empty fields are left out.
type mintRequest struct {
	Sandbox, Profile, TTL, Source, Bind string
	// Values are the per-token values (relay headers); nil for none.
	Values map[string]string
	// Budget is the token's own budget over its profile's, as JSON; nil
	// for the profile's.
	Budget json.RawMessage
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

// mintFlags reads the token flags that token create, env and exec share.
func mintFlags(c *cli.Context, sandbox string) (mintRequest, error) {
	values, err := readValues(c)
	if err != nil {
		return mintRequest{}, err
	}
	m := mintRequest{Sandbox: sandbox, Profile: c.String("profile"), TTL: c.String("ttl"), Source: c.String("source"), Bind: c.String("bind"), Values: values}
	if b := c.String("budget"); b != "" {
		if _, err := policy.ParseBudget([]byte(b)); err != nil {
			return mintRequest{}, fail(`e.g. --budget '{"requests": 100, "output_tokens": 200000, "window": "day"}' (see docs/policy.md#budgets)`, "--budget: %v", err)
		}
		m.Budget = json.RawMessage(b)
	}
	return m, nil
}

func (a *adminClient) createToken(m mintRequest) (routes.TokenCreated, error) {
	q := url.Values{"sandbox": {m.Sandbox}}
	for k, v := range map[string]string{"profile": m.Profile, "ttl": m.TTL, "source": m.Source, "bind": m.Bind} {
		if v != "" {
			q.Set(k, v)
		}
	}
	var body []byte
	if m.Values != nil || m.Budget != nil {
		req := map[string]any{}
		if m.Values != nil {
			req["values"] = m.Values
		}
		if m.Budget != nil {
			req["budget"] = m.Budget
		}
		body, _ = json.Marshal(req)
	}
	var out routes.TokenCreated
	err := a.doBody(http.MethodPost, "/tokens", q, body, http.StatusCreated, &out)
	return out, err
}

func (a *adminClient) revoke(sandbox string) error {
	return a.do(http.MethodDelete, "/tokens", url.Values{"sandbox": {sandbox}}, http.StatusNoContent, nil)
}

// list asks GET /tokens for the page q names (sandbox, state, limit,
// cursor).
func (a *adminClient) list(q url.Values) (routes.TokenList, error) {
	var out routes.TokenList
	err := a.do(http.MethodGet, "/tokens", q, http.StatusOK, &out)
	return out, err
}

// liveTokens returns the live tokens of sandbox, page after page.
func (a *adminClient) liveTokens(sandbox string) ([]routes.TokenInfo, error) {
	var all []routes.TokenInfo
	q := url.Values{"sandbox": {sandbox}, "state": {string(tokens.StateLive)}, "limit": {strconv.Itoa(routes.MaxListLimit)}}
	for {
		page, err := a.list(q)
		if err != nil {
			return nil, err
		}
		all = append(all, page.Tokens...)
		if page.Next == "" {
			return all, nil
		}
		q.Set("cursor", page.Next)
	}
}

// prune asks POST /tokens/prune; an empty olderThan leaves it to the
// server's store.retention.
func (a *adminClient) prune(dryRun bool, olderThan string) (routes.PruneResult, error) {
	q := url.Values{}
	if dryRun {
		q.Set("dry_run", "1")
	}
	if olderThan != "" {
		q.Set("older_than", olderThan)
	}
	var out routes.PruneResult
	err := a.do(http.MethodPost, "/tokens/prune", q, http.StatusOK, &out)
	return out, err
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
