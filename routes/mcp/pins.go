package mcp

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/cproxy/cproxy/routes"
	"github.com/cproxy/cproxy/tokens"
)

// pinnedMembers are the members of a tool's definition its pin covers:
// what the agent reads (its name, title, description and annotations) and
// what it sends and gets back (its schemas). Others (_meta, icons) may
// change without the tool being withheld.
var pinnedMembers = []string{"name", "title", "description", "inputSchema", "outputSchema", "annotations"}

// definition is the canonical JSON (RFC 8785: sorted names, no space) of
// a listed tool's pinned members, and its digest, "sha256:" and hex.
func definition(tool map[string]jsontext.Value) (def []byte, digest string, err error) {
	m := make(map[string]jsontext.Value, len(pinnedMembers))
	for _, k := range pinnedMembers {
		if v, ok := tool[k]; ok {
			m[k] = v
		}
	}
	b, err := json.Marshal(m, json.Deterministic(true))
	if err != nil {
		return nil, "", err
	}
	v := jsontext.Value(b)
	if err := v.Canonicalize(); err != nil {
		return nil, "", err
	}
	sum := sha256.Sum256(v)
	return v, "sha256:" + hex.EncodeToString(sum[:]), nil
}

// pinner holds one request's server's tools to their pins: every tool a
// list shows is seen by the store (pinned the first time), and one whose
// definition is not its pin is withheld.
type pinner struct {
	server string
	store  tokens.MCPPins
	now    func() time.Time
	log    *slog.Logger
	// changed counts a new pending change (cproxy_mcp_pin_changes_total).
	changed func()
}

// errPins refuses a list whose tools cproxy could not hold to their pins
// (the store did not answer): it is not passed on unchecked.
func (p *pinner) errPins(err error) error {
	p.log.Error("mcp: reading or writing the tool pins failed", "server", p.server, "err", err)
	return routes.Refuse(routes.ErrUnavailable, "cproxy could not check the MCP server %s's tools against their pins; try again", p.server)
}

// withheld reports, for each of tools (their names and members), whether
// it is withheld: it reads the server's pins once and writes only what
// changed.
func (p *pinner) withheld(ctx context.Context, names []string, tools []map[string]jsontext.Value) ([]bool, error) {
	pins, err := p.store.MCPPins(ctx, p.server)
	if err != nil {
		return nil, p.errPins(err)
	}
	known := make(map[string]tokens.MCPPin, len(pins))
	for _, pin := range pins {
		known[pin.Tool] = pin
	}
	out := make([]bool, len(tools))
	for i, tool := range tools {
		def, digest, err := definition(tool)
		if err != nil {
			return nil, routes.Refuse(routes.ErrUpstream, "the MCP server %s listed a tool cproxy cannot read", p.server)
		}
		pin, found := known[names[i]]
		unchanged := found && ((digest == pin.Digest && pin.Changed == "") || digest == pin.Changed)
		if !unchanged {
			var newly bool
			if pin, newly, err = p.store.SeeMCPTool(ctx, p.server, names[i], digest, def, p.now()); err != nil {
				return nil, p.errPins(err)
			}
			if newly {
				p.log.Warn("mcp: a server changed a tool's definition since it was pinned; the tool is withheld until an operator accepts the change",
					"server", p.server, "tool", routes.Clip(names[i], 128), "pinned", pin.Digest, "pending", pin.Changed,
					"hint", "cproxy mcp pins accept "+p.server+" "+routes.Clip(names[i], 128))
				p.changed()
			}
		}
		out[i] = pin.Withheld()
	}
	return out, nil
}

// checkCall refuses a call of a tool that is withheld, and returns the
// digest of the definition the tool is pinned to for the audit line; a
// tool never listed is left to the policy alone (no digest).
func (p *pinner) checkCall(ctx context.Context, id jsontext.Value, tool string) (string, error) {
	pin, err := p.store.MCPPin(ctx, p.server, tool)
	switch {
	case errors.Is(err, tokens.ErrNotFound):
		return "", nil
	case err != nil:
		return "", &rpcError{id: id, code: -32603, err: p.errPins(err)}
	case pin.Withheld():
		return pin.Digest, &rpcError{id: id, code: -32001, err: routes.Refuse(routes.ErrForbidden,
			"MCP server %s changed the definition of tool %s since it was pinned; an operator must accept the change (cproxy mcp pins accept %s %s)",
			p.server, routes.Clip(tool, 128), p.server, routes.Clip(tool, 128))}
	}
	return pin.Digest, nil
}
