-- Coverage: per (cluster, inventory, target), how much of the target's objects the rows
-- describe (complete, syncing, forbidden, kindNotServed, deniedByScope, failed, retired), so a
-- reader tells "all the objects" from "what the agent saw before it lost sight". Written in the
-- export's transaction with the rows and the state; updated_at moves only when an entry
-- changes. A target whose rows are unknown keeps its rows; a denied one has none.
CREATE TABLE {{.Coverage}} (
    cluster           text        NOT NULL,
    inventory         text        NOT NULL,
    target            text        NOT NULL,
    state             text        NOT NULL,
    rows              bigint      NOT NULL,
    extraction_errors bigint      NOT NULL,
    reason            text        NOT NULL DEFAULT '',
    updated_at        timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (cluster, inventory, target)
);

-- Every row with what a reader needs to trust it: its target's coverage state and its
-- inventory's last change and confirmation. NULL coverage columns mean no agent reported
-- coverage for the target (rows written before this migration): treat them as unknown.
CREATE VIEW {{.View "covered"}} AS
SELECT r.cluster, r.inventory, r.target, r.api_group, r.version, r.kind, r.namespace, r.name, r.uid,
       r.attributes, r.first_seen, r.updated_at,
       c.state AS coverage_state, c.reason AS coverage_reason, c.updated_at AS coverage_updated_at,
       s.exported_at, s.confirmed_at
  FROM {{.Rows}} r
  LEFT JOIN {{.Coverage}} c ON c.cluster = r.cluster AND c.inventory = r.inventory AND c.target = r.target
  LEFT JOIN {{.State}} s ON s.cluster = r.cluster AND s.inventory = r.inventory;
