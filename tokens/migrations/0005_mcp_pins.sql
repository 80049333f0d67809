-- 5: the MCP route's tool pins (MCPPin), one row per server and tool, so
-- that every replica holds a tool to the same definition. Definitions are
-- kept as the server sent them (text, not jsonb, which would reorder them).

CREATE TABLE mcp_pins (
	server text NOT NULL,
	tool text NOT NULL,
	digest text NOT NULL,
	definition text,
	pinned_at timestamptz NOT NULL,
	changed text NOT NULL DEFAULT '',
	changed_definition text,
	changed_at timestamptz,
	rejected boolean NOT NULL DEFAULT false,
	PRIMARY KEY (server, tool)
);
