-- Provenance: the profile (namespace/name) and its generation that produced each row. Rows
-- written before this migration name none ('' and 0) until the agent exports them again,
-- which a newer agent does once, since a row's provenance is part of its checksum.
ALTER TABLE {{.Rows}} ADD COLUMN profile text NOT NULL DEFAULT '';
ALTER TABLE {{.Rows}} ADD COLUMN profile_generation bigint NOT NULL DEFAULT 0;

-- The views read the rows' provenance too. CREATE OR REPLACE VIEW may only add columns at
-- the end, which keeps queries written against the earlier columns working.
CREATE OR REPLACE VIEW {{.View "latest"}} AS
SELECT DISTINCT ON (r.cluster, r.api_group, r.kind, r.namespace, r.name)
       r.cluster, r.api_group, r.version, r.kind, r.namespace, r.name, r.uid,
       r.inventory, r.target, r.attributes, r.first_seen, r.updated_at, s.exported_at, s.confirmed_at,
       r.profile, r.profile_generation
  FROM {{.Rows}} r
  LEFT JOIN {{.State}} s ON s.cluster = r.cluster AND s.inventory = r.inventory
 ORDER BY r.cluster, r.api_group, r.kind, r.namespace, r.name, r.updated_at DESC;

CREATE OR REPLACE VIEW {{.View "covered"}} AS
SELECT r.cluster, r.inventory, r.target, r.api_group, r.version, r.kind, r.namespace, r.name, r.uid,
       r.attributes, r.first_seen, r.updated_at,
       c.state AS coverage_state, c.reason AS coverage_reason, c.updated_at AS coverage_updated_at,
       s.exported_at, s.confirmed_at,
       r.profile, r.profile_generation
  FROM {{.Rows}} r
  LEFT JOIN {{.Coverage}} c ON c.cluster = r.cluster AND c.inventory = r.inventory AND c.target = r.target
  LEFT JOIN {{.State}} s ON s.cluster = r.cluster AND s.inventory = r.inventory;
