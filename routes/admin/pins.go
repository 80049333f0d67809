package admin

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/cproxy/cproxy/client"
	"github.com/cproxy/cproxy/routes"
	"github.com/cproxy/cproxy/tokens"
)

// listPins is GET /mcp/pins[?server=NAME]: the MCP tool pins, with the
// changes waiting for an operator.
func (s *server) listPins(w http.ResponseWriter, r *http.Request) {
	q, ok := adminQuery(w, r, "server")
	if !ok {
		return
	}
	pins, err := s.Store().MCPPins(r.Context(), q.Get("server"))
	if err != nil {
		s.Log().Error("admin: listing the MCP tool pins failed", "err", err)
		adminError(w, http.StatusServiceUnavailable, "the token store did not answer; try again")
		return
	}
	out := client.MCPPins{Pins: make([]client.MCPPin, 0, len(pins))}
	for _, p := range pins {
		out.Pins = append(out.Pins, pinInfo(p))
	}
	writeJSON(w, http.StatusOK, out)
}

func pinInfo(p tokens.MCPPin) client.MCPPin {
	return client.MCPPin{Server: p.Server, Tool: p.Tool, Digest: p.Digest, PinnedAt: p.PinnedAt, Definition: p.Definition,
		Withheld: p.Withheld(), Changed: p.Changed, ChangedAt: p.ChangedAt, Pending: p.Pending(),
		PendingDefinition: p.ChangedDefinition, Rejected: p.Rejected}
}

// decidePin is POST /mcp/pins/accept and /mcp/pins/reject
// ?server=NAME&tool=NAME[&digest=DIGEST]: an operator's decision on a
// tool's pending change.
func (s *server) decidePin(acceptIt bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		q, ok := adminQuery(w, r, "server", "tool", "digest")
		if !ok {
			return
		}
		server, tool, digest := q.Get("server"), q.Get("tool"), q.Get("digest")
		if server == "" || tool == "" {
			adminError(w, http.StatusBadRequest, "missing server or tool: pass ?server=NAME&tool=NAME (GET /mcp/pins lists them)")
			return
		}
		var p tokens.MCPPin
		var err error
		if acceptIt {
			p, err = s.Store().AcceptMCPPin(r.Context(), server, tool, digest, s.Now())
		} else {
			p, err = s.Store().RejectMCPPin(r.Context(), server, tool, digest)
		}
		switch {
		case errors.Is(err, tokens.ErrNotFound):
			adminError(w, http.StatusNotFound, fmt.Sprintf("MCP server %s has no pinned tool %s", routes.Clip(server, 64), routes.Clip(tool, 128)))
			return
		case errors.Is(err, tokens.ErrNoPendingPin) && digest != "":
			adminError(w, http.StatusConflict, fmt.Sprintf("tool %s of MCP server %s has no pending change %s (GET /mcp/pins shows the one there is)", routes.Clip(tool, 128), routes.Clip(server, 64), routes.Clip(digest, 80)))
			return
		case errors.Is(err, tokens.ErrNoPendingPin):
			adminError(w, http.StatusConflict, fmt.Sprintf("tool %s of MCP server %s has no pending change", routes.Clip(tool, 128), routes.Clip(server, 64)))
			return
		case err != nil:
			s.Log().Error("admin: deciding an MCP tool pin failed", "err", err)
			adminError(w, http.StatusServiceUnavailable, "the token store did not answer; try again")
			return
		}
		verb := "rejected"
		if acceptIt {
			verb = "accepted"
		}
		s.Log().Info("mcp: an operator "+verb+" a tool's changed definition", "server", server, "tool", routes.Clip(tool, 128), "digest", p.Digest, "changed", p.Changed)
		writeJSON(w, http.StatusOK, pinInfo(p))
	}
}
