-- Staged rollouts. A bundle's stable revision is what newly selected clusters get; until now
-- that was always the latest revision.
ALTER TABLE bundles ADD COLUMN stable_revision BIGINT NOT NULL DEFAULT 0;
UPDATE bundles SET stable_revision = latest_revision;

-- strategy is protobuf JSON (fleetv1.RolloutStrategy), waves a JSON list; both belong to the
-- engine. version is compared by every write (several replicas run the engine). active is 1
-- in the progressing, paused and awaiting-approval phases.
CREATE TABLE rollouts (
	id            {{autoid}},
	bundle        TEXT NOT NULL REFERENCES bundles (name),
	from_revision BIGINT NOT NULL,
	to_revision   BIGINT NOT NULL,
	strategy      TEXT NOT NULL,
	phase         TEXT NOT NULL,
	active        INTEGER NOT NULL,
	message       TEXT NOT NULL,
	current_wave  INTEGER NOT NULL,
	waves         TEXT NOT NULL,
	rollback_of   BIGINT NOT NULL,
	created_by    TEXT NOT NULL,
	created_at    BIGINT NOT NULL,
	updated_at    BIGINT NOT NULL,
	finished_at   BIGINT NOT NULL,
	version       BIGINT NOT NULL
);
-- One active rollout per bundle, whichever replica starts it.
CREATE UNIQUE INDEX rollouts_one_active ON rollouts (bundle) WHERE active = 1;
CREATE INDEX rollouts_bundle ON rollouts (bundle, id);

-- baseline is JSON: the item counts and failing sinks the cluster reported when it was moved.
CREATE TABLE rollout_clusters (
	rollout_id    BIGINT NOT NULL REFERENCES rollouts (id) ON DELETE CASCADE,
	cluster       TEXT NOT NULL,
	wave          INTEGER NOT NULL,
	state         TEXT NOT NULL,
	gate          TEXT NOT NULL,
	message       TEXT NOT NULL,
	moved_at      BIGINT NOT NULL,
	healthy_since BIGINT NOT NULL,
	finished_at   BIGINT NOT NULL,
	baseline      TEXT NOT NULL,
	PRIMARY KEY (rollout_id, cluster)
);
CREATE INDEX rollout_clusters_cluster ON rollout_clusters (cluster);
