-- 7: approval requests and their grants (Approval), one row each. At most
-- one open approval (pending, approved and unused, or denied) per sandbox,
-- route and subject, so that replicas asked the same at once make one; an
-- open row whose time has passed is closed before another is made, and a
-- used grant is closed when it is used.

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
	used_at timestamptz,
	closed boolean NOT NULL DEFAULT false
);
CREATE UNIQUE INDEX approvals_open ON approvals (sandbox, route, subject) WHERE NOT closed;
