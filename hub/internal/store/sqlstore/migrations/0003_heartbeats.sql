-- Heartbeat history: a compact row for every heartbeat that changed one of these values, and
-- otherwise for at most one heartbeat a minute; RecordHeartbeat keeps the newest 100 rows of
-- each cluster (store.HistoryLimit). id orders the rows (several replicas' clocks may differ).
CREATE TABLE cluster_heartbeats (
	id                    {{autoid}},
	cluster               TEXT NOT NULL REFERENCES clusters (name) ON DELETE CASCADE,
	at                    BIGINT NOT NULL,
	agent_version         TEXT NOT NULL,
	applied_digest        TEXT NOT NULL,
	inventories           BIGINT NOT NULL,
	items                 BIGINT NOT NULL,
	inventories_not_ready BIGINT NOT NULL,
	sink_errors           BIGINT NOT NULL,
	state                 TEXT NOT NULL
);
CREATE INDEX cluster_heartbeats_cluster ON cluster_heartbeats (cluster, id);
