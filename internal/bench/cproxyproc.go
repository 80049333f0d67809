package bench

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

const cproxyRouteConfig = `policy = "policy.toml"

[listen]
proxy = "127.0.0.1:0"
admin = "127.0.0.1:0"
ready_file = "ready.json"
drain = "2s"

[store]
path = "cproxy.db"

[upstream.anthropic]
url = "http://127.0.0.1:9"
credential = "file:anthropic-key"

[upstream.{{name}}]
url = "{{url}}"
credential = "file:upstream-token"
`

// startCproxyFor starts `cproxy serve` in front of one upstream (github or
// npm, at url, with realToken as its credential) under policy, and mints a
// token for sandbox; it returns the target and the token.
func (e *Env) startCproxyFor(bin, upstream, url, realToken, policy, sandbox string) (*Target, string, error) {
	files := map[string]string{
		"anthropic-key":  "sk-ant-api03-bench-unused\n",
		"upstream-token": realToken + "\n",
		"policy.toml":    policy,
		"cproxy.toml":    strings.NewReplacer("{{name}}", upstream, "{{url}}", url).Replace(cproxyRouteConfig),
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(e.dir, name), []byte(content), 0o600); err != nil {
			return nil, "", err
		}
	}
	ready := filepath.Join(e.dir, "ready.json")
	cmd := exec.Command(bin, "serve", "--config", filepath.Join(e.dir, "cproxy.toml"))
	cmd.Dir = e.dir
	p, err := e.start("cproxy", cmd)
	if err != nil {
		return nil, "", err
	}
	var addrs struct{ Proxy, Admin string }
	deadline := time.Now().Add(startTimeout)
	for {
		select {
		case <-p.exited:
			return nil, "", p.failed("exited at start")
		default:
		}
		if b, err := os.ReadFile(ready); err == nil && json.Unmarshal(b, &addrs) == nil && addrs.Proxy != "" {
			break
		}
		if time.Now().After(deadline) {
			return nil, "", p.failed("wrote no ready file within " + startTimeout.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	token, _, err := mintToken("http://"+addrs.Admin, sandbox)
	if err != nil {
		return nil, "", p.failed(err.Error())
	}
	return &Target{Name: "cproxy", URL: "http://" + addrs.Proxy, proc: p}, token, nil
}
