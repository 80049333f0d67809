-- 7: approval requests and their grants (Approval), one row each. At most
-- one live approval (pending, or approved and unused) per sandbox, route
-- and subject, so that replicas asked the same at once make one; a live
-- row whose time has passed is marked expired before another is made.

CREATE TABLE approvals (
	id text PRIMARY KEY,
	sandbox text NOT NULL,
	route text NOT NULL,
	subject text NOT NULL,
	detail text,
	token_id text NOT NULL DEFAULT '',
	state text NOT NULL,
	created_at timestamptz NOT NULL,
	expires_at timestamptz NOT NULL,
	decided_at timestamptz,
	decided_by text NOT NULL DEFAULT '',
	used_at timestamptz
);
CREATE UNIQUE INDEX approvals_live ON approvals (sandbox, route, subject) WHERE state IN ('pending', 'approved');
