-- History (history: true on the sink): every version of every row, with the interval it was
-- current: [valid_from, valid_to), valid_to NULL while it still is. The export that changes a
-- row closes its open version and opens the new one in the rows' own transaction, at one
-- instant, so the versions of a row leave no gap and never overlap. Unchanged rows write
-- nothing. The table exists for every sink; only sinks with history: true fill it.
CREATE TABLE {{.History}} (
    cluster            text        NOT NULL,
    inventory          text        NOT NULL,
    target             text        NOT NULL,
    api_group          text        NOT NULL,
    version            text        NOT NULL,
    kind               text        NOT NULL,
    namespace          text        NOT NULL,
    name               text        NOT NULL,
    uid                text        NOT NULL,
    profile            text        NOT NULL,
    profile_generation bigint      NOT NULL,
    attributes         jsonb       NOT NULL,
    valid_from         timestamptz NOT NULL,
    valid_to           timestamptz,
    CHECK (valid_to IS NULL OR valid_to >= valid_from)
);
-- "What ran in this cluster at T": the versions of an inventory by interval.
CREATE INDEX {{.Index "history"}} ON {{.History}} (cluster, inventory, valid_from, valid_to);
-- The open version of a row, which the next change closes.
CREATE INDEX {{.Index "hopen"}} ON {{.History}} (cluster, inventory, target, uid) WHERE valid_to IS NULL;

-- The rows current at ts, with the interval of each version. Rows of clusters whose sink
-- keeps no history are not in it.
CREATE FUNCTION {{.Function "as_of"}}(ts timestamptz) RETURNS SETOF {{.History}}
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT * FROM {{.History}} h WHERE h.valid_from <= ts AND (h.valid_to IS NULL OR h.valid_to > ts)
$$;
