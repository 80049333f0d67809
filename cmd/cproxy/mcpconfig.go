package main

import (
	"encoding/json"
	"maps"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/cproxy/cproxy/config"
	"github.com/cproxy/cproxy/tokens"
)

// mcpConfigCommand prints the .mcp.json entries of the MCP servers a
// sandbox's profile may use, each reaching cproxy's /mcp/NAME with the
// sandbox token as ${CPROXY_TOKEN}, which Claude Code expands from the
// environment cproxy env gives: the file holds no secret.
func mcpConfigCommand() *cli.Command {
	return &cli.Command{
		Name:  "mcp-config",
		Usage: "print the .mcp.json entries, holding no secret, of the MCP servers a sandbox's profile may use",
		Description: `Each server is reached at cproxy's /mcp/NAME with "Authorization: Bearer ${CPROXY_TOKEN}", which
Claude Code fills in from the sandbox's environment (cproxy env exports CPROXY_TOKEN).

Examples:

   cproxy mcp-config --sandbox conv-42 --config /etc/cproxy/cproxy.toml > .mcp.json
   cproxy mcp-config --sandbox conv-42 --profile web --config cproxy.toml --proxy-url http://10.20.30.4:8080`,
		Flags: []cli.Flag{
			sandboxFlag(),
			&cli.StringFlag{Name: "profile", Usage: "the policy `PROFILE` of the sandbox's token, if it was minted with one"},
			cmdline(&cli.StringFlag{Name: "proxy-url", Usage: "cproxy's `URL` as the sandbox reaches it (default: listen.public_url from --config)", EnvVars: []string{"CPROXY_URL"}}),
			configFlag(),
		},
		Action: func(c *cli.Context) error {
			sandbox := c.String("sandbox")
			if !tokens.ValidSandboxID(sandbox) {
				return fail(sandboxIDRule, "invalid sandbox id %q", sandbox)
			}
			path := c.String("config")
			if path == "" {
				return fail("pass --config, the file that names the MCP servers and the policy", "no config")
			}
			cfg, err := loadConfig(path)
			if err != nil {
				return err
			}
			proxyURL, err := sandboxProxyURL(c)
			if err != nil {
				return err
			}
			prof, err := cfg.Rules.ProfileFor(sandbox, c.String("profile"))
			if err != nil {
				return fail("", "%v", err)
			}
			out, err := mcpConfig(cfg, prof.MCPServers(), proxyURL)
			if err != nil {
				return err
			}
			_, err = c.App.Writer.Write(out)
			return err
		},
	}
}

// mcpServerEntry is one server of .mcp.json, in Claude Code's shape.
type mcpServerEntry struct {
	Type    string            `json:"type"`
	URL     string            `json:"url"`
	Headers map[string]string `json:"headers"`
}

// mcpConfig is the .mcp.json of the servers allowed that the config names.
func mcpConfig(cfg *config.Config, allowed []string, proxyURL string) ([]byte, error) {
	servers := map[string]mcpServerEntry{}
	for _, name := range slices.Sorted(maps.Keys(cfg.MCP)) {
		if !slices.Contains(allowed, name) {
			continue
		}
		servers[name] = mcpServerEntry{Type: "http", URL: strings.TrimSuffix(proxyURL, "/") + config.MCPPrefix + name,
			Headers: map[string]string{"Authorization": "Bearer ${CPROXY_TOKEN}"}}
	}
	b, err := json.MarshalIndent(map[string]any{"mcpServers": servers}, "", "  ")
	if err != nil {
		return nil, fail("", "%v", err)
	}
	return append(b, '\n'), nil
}
