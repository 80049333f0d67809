package tokens

import (
	"context"
	"encoding/json"
	"errors"
	"time"
)

// MaxMCPDefinition bounds the definition an MCPPin keeps of a tool (its
// pinned one, and a changed one waiting for an operator): a server may send
// any size, the digest is what decides, and the definition is kept only for
// the operator to read. A longer one is kept as its digest alone.
const MaxMCPDefinition = 64 << 10

// MCPPin is what the store knows about one tool of one MCP server
// ([mcp.NAME]): the digest of the definition first listed (trust on first
// use), or the one an operator accepted since, and the definition the
// server lists now when it differs.
type MCPPin struct {
	Server string `json:"server"`
	Tool   string `json:"tool"`
	// Digest is the pinned definition's digest ("sha256:" and hex), and
	// Definition the definition as it was listed (nil when it was longer
	// than MaxMCPDefinition).
	Digest     string          `json:"digest"`
	Definition json.RawMessage `json:"definition,omitempty"`
	PinnedAt   time.Time       `json:"pinned_at"`
	// Changed is the digest of the definition the server last listed when
	// it is not the pinned one; empty while the server lists the pinned
	// one. ChangedDefinition is that definition (nil when too long, or
	// once rejected), ChangedAt when it was first listed.
	Changed           string          `json:"changed,omitempty"`
	ChangedDefinition json.RawMessage `json:"changed_definition,omitempty"`
	ChangedAt         time.Time       `json:"changed_at,omitzero"`
	// Rejected is set when an operator rejected the change: the tool stays
	// withheld while the server lists it, without asking again.
	Rejected bool `json:"rejected,omitempty"`
}

// Pending is the digest of the changed definition waiting for an
// operator's decision; empty when there is none.
func (p MCPPin) Pending() string {
	if p.Changed != "" && !p.Rejected {
		return p.Changed
	}
	return ""
}

// Withheld reports whether the tool is kept from the sandboxes: the server
// last listed a definition other than the pinned one.
func (p MCPPin) Withheld() bool { return p.Changed != "" }

// ErrNoPendingPin is AcceptMCPPin's and RejectMCPPin's refusal: the tool
// has no change waiting for an operator, or not the one named.
var ErrNoPendingPin = errors.New("no pending change")

// MCPPins is the part of a Store that keeps MCP tool pins, shared by every
// replica on the store.
type MCPPins interface {
	// MCPPins returns the pins of server (every server's when server is
	// empty), sorted by server then tool.
	MCPPins(ctx context.Context, server string) ([]MCPPin, error)
	// MCPPin returns the pin of server's tool, ErrNotFound when the tool
	// was never listed.
	MCPPin(ctx context.Context, server, tool string) (MCPPin, error)
	// SeeMCPTool records that a list showed server's tool with the
	// definition def whose digest is digest, in one atomic step: the first
	// definition seen is pinned at at; a definition other than the pin is
	// recorded as changed (and pending unless it is the one an operator
	// rejected), the pin kept; the pinned one again ends a change. It
	// returns the pin after it, and whether this call made a new change
	// pending. It writes nothing when nothing changes.
	SeeMCPTool(ctx context.Context, server, tool, digest string, def []byte, at time.Time) (MCPPin, bool, error)
	// AcceptMCPPin makes the pending change of server's tool its pin, at
	// at; digest, when not empty, must be the pending one. ErrNotFound
	// when the tool has no pin, ErrNoPendingPin when no such change waits.
	AcceptMCPPin(ctx context.Context, server, tool, digest string, at time.Time) (MCPPin, error)
	// RejectMCPPin drops the pending change of server's tool, keeping its
	// pin; digest as for AcceptMCPPin. The tool stays withheld while the
	// server lists the changed definition.
	RejectMCPPin(ctx context.Context, server, tool, digest string) (MCPPin, error)
}

// pinUpdate changes a pin read in a transaction (found false: none yet)
// and reports whether it must be written.
type pinUpdate func(p *MCPPin, found bool) (write bool, err error)

// see is SeeMCPTool's step; newly reports a new pending change.
func see(digest string, def []byte, at time.Time, newly *bool) pinUpdate {
	if len(def) > MaxMCPDefinition {
		def = nil
	}
	return func(p *MCPPin, found bool) (bool, error) {
		*newly = false
		switch {
		case !found:
			p.Digest, p.Definition, p.PinnedAt = digest, def, at.UTC()
			return true, nil
		case digest == p.Digest:
			if p.Changed == "" {
				return false, nil
			}
			p.Changed, p.ChangedDefinition, p.ChangedAt, p.Rejected = "", nil, time.Time{}, false
			return true, nil
		case digest == p.Changed:
			return false, nil
		}
		p.Changed, p.ChangedDefinition, p.ChangedAt, p.Rejected = digest, def, at.UTC(), false
		*newly = true
		return true, nil
	}
}

func accept(digest string, at time.Time) pinUpdate {
	return func(p *MCPPin, found bool) (bool, error) {
		if !found {
			return false, ErrNotFound
		}
		if p.Pending() == "" || (digest != "" && digest != p.Pending()) {
			return false, ErrNoPendingPin
		}
		p.Digest, p.Definition, p.PinnedAt = p.Changed, p.ChangedDefinition, at.UTC()
		p.Changed, p.ChangedDefinition, p.ChangedAt = "", nil, time.Time{}
		return true, nil
	}
}

func reject(digest string) pinUpdate {
	return func(p *MCPPin, found bool) (bool, error) {
		if !found {
			return false, ErrNotFound
		}
		if p.Pending() == "" || (digest != "" && digest != p.Pending()) {
			return false, ErrNoPendingPin
		}
		p.Rejected, p.ChangedDefinition = true, nil
		return true, nil
	}
}
