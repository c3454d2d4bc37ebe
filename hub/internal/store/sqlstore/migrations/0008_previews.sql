-- Bundle previews: a request to evaluate manifests on a few clusters without applying them, and
-- the clusters' answers (figures only, never rows). Both expire 15 minutes after the request
-- (store.PreviewTTL) and the hub deletes them then; nothing here is configuration, so the
-- config epoch never moves for them. clusters and not_connected are JSON lists of names.
CREATE TABLE previews (
	id            TEXT PRIMARY KEY,
	bundle        TEXT NOT NULL,
	requested_by  TEXT NOT NULL,
	manifests     TEXT NOT NULL,
	max_samples   BIGINT NOT NULL,
	clusters      TEXT NOT NULL,
	not_connected TEXT NOT NULL,
	created_at    BIGINT NOT NULL,
	deadline      BIGINT NOT NULL,
	expires_at    BIGINT NOT NULL
);
CREATE INDEX previews_expires ON previews (expires_at);
-- result is the agent's PreviewResult as protobuf JSON.
CREATE TABLE preview_results (
	preview_id  TEXT NOT NULL REFERENCES previews (id) ON DELETE CASCADE,
	cluster     TEXT NOT NULL,
	result      TEXT NOT NULL,
	received_at BIGINT NOT NULL,
	PRIMARY KEY (preview_id, cluster)
);
