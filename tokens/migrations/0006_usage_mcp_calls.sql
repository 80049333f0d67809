-- 6: each budget window's MCP tool calls (budget.mcp_calls), counted with
-- the model's requests and tokens so that every replica charges one count.
-- A window saved before has made none.

ALTER TABLE usage ADD COLUMN mcp_calls bigint NOT NULL DEFAULT 0;
