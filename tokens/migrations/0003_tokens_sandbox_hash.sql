-- 3: a sandbox's tokens in hash order, so that a listing of one sandbox
-- reads each page by keyset (sandbox = $1 AND hash > $2 ORDER BY hash)
-- rather than sorting all of the sandbox's rows for every page. It serves
-- RevokeSandbox as the index it replaces did.

CREATE INDEX tokens_sandbox_hash ON tokens (sandbox, hash);
DROP INDEX tokens_sandbox;
