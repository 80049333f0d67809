-- 4: what Prune looks rows up by. The dead tokens by when they died
-- (least passes over a NULL revoked_at), so a batch reads the tokens it
-- deletes and not the live ones; and each token's usage rows by its id
-- (a key is the id, or the id, "/" and a day), so a batch deletes them
-- without reading every row of usage.

CREATE INDEX tokens_dead_since ON tokens (least(expires_at, revoked_at));
CREATE INDEX usage_token ON usage (split_part(key, '/', 1));
