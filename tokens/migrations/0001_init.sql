-- 1: tokens and their per-window usage, as the embedded store's schema 3
-- holds them.

CREATE TABLE tokens (
	hash bytea PRIMARY KEY,
	id text NOT NULL,
	sandbox text NOT NULL,
	profile text NOT NULL DEFAULT '',
	source text NOT NULL DEFAULT '',
	bind text NOT NULL DEFAULT '',
	token_values bytea,
	budget jsonb,
	created_at timestamptz NOT NULL,
	expires_at timestamptz NOT NULL,
	revoked_at timestamptz
);

-- RevokeSandbox touches only the sandbox's rows.
CREATE INDEX tokens_sandbox ON tokens (sandbox);

CREATE TABLE usage (
	key text PRIMARY KEY,
	requests bigint NOT NULL,
	input_tokens bigint NOT NULL,
	output_tokens bigint NOT NULL,
	cache_read_tokens bigint NOT NULL,
	cache_write_tokens bigint NOT NULL
);
