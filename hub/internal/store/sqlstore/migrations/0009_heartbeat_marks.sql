-- What a heartbeat needs to know of its cluster, kept on the cluster's row so that the common
-- heartbeat reads one row and writes it back: history_at and history_key describe the newest
-- record of the cluster's heartbeat history (when, and its values besides the item count),
-- history_unpruned counts the records added since the history was last pruned to its limit,
-- and applied_checked is the applied digest the cluster's applied revisions were last set from
-- ('!': not since its desired bundles were last written, so the next heartbeat sets them).
ALTER TABLE clusters ADD COLUMN history_at BIGINT NOT NULL DEFAULT 0;
ALTER TABLE clusters ADD COLUMN history_key TEXT NOT NULL DEFAULT '';
ALTER TABLE clusters ADD COLUMN history_unpruned BIGINT NOT NULL DEFAULT 0;
ALTER TABLE clusters ADD COLUMN applied_checked TEXT NOT NULL DEFAULT '!';
