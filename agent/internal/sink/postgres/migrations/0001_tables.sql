-- Rows: one per (cluster, inventory, target, uid). Identity columns are typed so the common
-- filters use plain b-tree indexes; attributes stay JSONB because every profile extracts its own.
CREATE TABLE {{.Rows}} (
    cluster     text        NOT NULL,
    inventory   text        NOT NULL,
    target      text        NOT NULL,
    api_group   text        NOT NULL,
    version     text        NOT NULL,
    kind        text        NOT NULL,
    namespace   text        NOT NULL,
    name        text        NOT NULL,
    uid         text        NOT NULL,
    attributes  jsonb       NOT NULL,
    first_seen  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (cluster, inventory, target, uid)
);
-- One secondary index only: every index costs about as much as the row on a bulk load, and the
-- fleet questions filter by kind first. Add your own (for example on name) if you query so.
CREATE INDEX {{.Index "kind"}} ON {{.Rows}} (kind, cluster, namespace, name);

-- State: what each (cluster, inventory) exported last. An export whose checksum equals the
-- stored one writes nothing; a diff is applied only on top of the checksum it was computed from.
CREATE TABLE {{.State}} (
    cluster     text        NOT NULL,
    inventory   text        NOT NULL,
    checksum    text        NOT NULL,
    item_count  bigint      NOT NULL,
    exported_at timestamptz NOT NULL,
    PRIMARY KEY (cluster, inventory)
);
