-- Confirmation: when the agent last confirmed, writing no row, that the state's checksum is
-- still the cluster's current snapshot (its watches synced, the agent alive). Freshness is
-- measured from confirmed_at; exported_at stays the time of the last change. A state written
-- before this migration counts as confirmed when it was exported.
ALTER TABLE {{.State}} ADD COLUMN confirmed_at timestamptz;
UPDATE {{.State}} SET confirmed_at = exported_at;
ALTER TABLE {{.State}} ALTER COLUMN confirmed_at SET NOT NULL;

CREATE OR REPLACE VIEW {{.View "latest"}} AS
SELECT DISTINCT ON (r.cluster, r.api_group, r.kind, r.namespace, r.name)
       r.cluster, r.api_group, r.version, r.kind, r.namespace, r.name, r.uid,
       r.inventory, r.target, r.attributes, r.first_seen, r.updated_at, s.exported_at, s.confirmed_at
  FROM {{.Rows}} r
  LEFT JOIN {{.State}} s ON s.cluster = r.cluster AND s.inventory = r.inventory
 ORDER BY r.cluster, r.api_group, r.kind, r.namespace, r.name, r.updated_at DESC;
