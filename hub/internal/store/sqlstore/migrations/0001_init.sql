-- The hub's schema. Times are Unix milliseconds (BIGINT) and flags are 0/1 INTEGERs so that
-- SQLite and PostgreSQL read and write them the same way. {{autoid}} is the one dialect word.

CREATE TABLE hub_state (
	key   TEXT PRIMARY KEY,
	value BIGINT NOT NULL
);
INSERT INTO hub_state (key, value) VALUES ('config_epoch', 0);

CREATE TABLE clusters (
	name               TEXT PRIMARY KEY,
	labels             TEXT NOT NULL,
	credential_hash    TEXT NOT NULL UNIQUE,
	revoked            INTEGER NOT NULL DEFAULT 0,
	agent_version      TEXT NOT NULL DEFAULT '',
	kubernetes_version TEXT NOT NULL DEFAULT '',
	registered_at      BIGINT NOT NULL,
	last_heartbeat     BIGINT NOT NULL DEFAULT 0,
	applied_digest     TEXT NOT NULL DEFAULT '',
	status             TEXT NOT NULL DEFAULT ''
);

CREATE TABLE bootstrap_tokens (
	id            TEXT PRIMARY KEY,
	hash          TEXT NOT NULL UNIQUE,
	description   TEXT NOT NULL,
	expires_at    BIGINT NOT NULL,
	max_uses      BIGINT NOT NULL,
	uses          BIGINT NOT NULL DEFAULT 0,
	revoked       INTEGER NOT NULL DEFAULT 0,
	allow_replace INTEGER NOT NULL DEFAULT 0,
	created_by    TEXT NOT NULL,
	created_at    BIGINT NOT NULL
);

CREATE TABLE api_tokens (
	id         TEXT PRIMARY KEY,
	name       TEXT NOT NULL,
	hash       TEXT NOT NULL UNIQUE,
	role       INTEGER NOT NULL,
	revoked    INTEGER NOT NULL DEFAULT 0,
	created_by TEXT NOT NULL,
	created_at BIGINT NOT NULL
);
CREATE UNIQUE INDEX api_tokens_live_name ON api_tokens (name) WHERE revoked = 0;

-- A deleted bundle keeps its revisions (history stays readable and numbering continues when
-- the name is used again).
CREATE TABLE bundles (
	name            TEXT PRIMARY KEY,
	description     TEXT NOT NULL,
	latest_revision BIGINT NOT NULL,
	selector        TEXT NOT NULL,
	deleted         INTEGER NOT NULL DEFAULT 0,
	created_at      BIGINT NOT NULL,
	updated_at      BIGINT NOT NULL
);

CREATE TABLE bundle_revisions (
	bundle     TEXT NOT NULL REFERENCES bundles (name),
	revision   BIGINT NOT NULL,
	manifests  TEXT NOT NULL,
	selector   TEXT NOT NULL,
	digest     TEXT NOT NULL,
	objects    TEXT NOT NULL,
	created_by TEXT NOT NULL,
	created_at BIGINT NOT NULL,
	message    TEXT NOT NULL,
	PRIMARY KEY (bundle, revision)
);

-- The desired revision of each bundle per cluster: the unit a staged rollout moves.
CREATE TABLE cluster_bundles (
	cluster          TEXT NOT NULL REFERENCES clusters (name) ON DELETE CASCADE,
	bundle           TEXT NOT NULL REFERENCES bundles (name),
	desired_revision BIGINT NOT NULL,
	applied_revision BIGINT NOT NULL DEFAULT 0,
	updated_at       BIGINT NOT NULL,
	PRIMARY KEY (cluster, bundle)
);
CREATE INDEX cluster_bundles_bundle ON cluster_bundles (bundle);

CREATE TABLE audit_log (
	id     {{autoid}},
	at     BIGINT NOT NULL,
	actor  TEXT NOT NULL,
	action TEXT NOT NULL,
	target TEXT NOT NULL,
	detail TEXT NOT NULL
);
