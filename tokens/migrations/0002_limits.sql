-- 2: what replicas share to apply a token's rate (requests_per_minute) and
-- concurrency (concurrent) limits together.

-- Per key, when its rate bucket is full again (the generic cell rate
-- algorithm's theoretical arrival time).
CREATE TABLE rates (
	key text PRIMARY KEY,
	tat timestamptz NOT NULL
);

-- One row per slot held by a request in flight, until it is released or its
-- lease runs out (a replica that died).
CREATE TABLE slots (
	id bigserial PRIMARY KEY,
	key text NOT NULL,
	expires_at timestamptz NOT NULL
);

CREATE INDEX slots_key ON slots (key, expires_at);
