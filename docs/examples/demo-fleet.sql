-- The cross-cluster question `make demo` asks its PostgreSQL: how many rows each cluster
-- exported, whether they are all of its objects (coverage: "complete", or the targets whose
-- rows are kept from earlier and why), and how long ago its agent last confirmed them current. Run it with
--   psql postgres://kollect_agent@127.0.0.1:PORT/inventory -f docs/examples/demo-fleet.sql
-- (the demo prints the command with its port). One CTE per fact about a cluster, joined on
-- cluster: a new column is one more CTE and one more join.
WITH freshness AS (   -- per cluster, over its inventories: the least recently confirmed
  SELECT cluster, min(confirmed_at) AS confirmed_at, max(exported_at) AS exported_at
    FROM kollect.rows_state
   GROUP BY cluster
), objects AS (       -- one row per object and cluster
  SELECT cluster, count(*) AS rows
    FROM kollect.rows_latest
   GROUP BY cluster
), coverage AS (      -- per cluster: "complete", or each target that is not, with its state
  SELECT cluster,
         coalesce(string_agg(target || ' ' || state, ', ' ORDER BY target) FILTER (WHERE state <> 'complete'),
                  'complete') AS coverage
    FROM kollect.rows_coverage
   GROUP BY cluster
)
SELECT cluster,
       coalesce(objects.rows, 0) AS rows,
       coalesce(coverage.coverage, 'unknown') AS coverage,
       date_trunc('second', now() - freshness.confirmed_at) AS confirmed_ago,
       date_trunc('second', now() - freshness.exported_at) AS changed_ago
  FROM freshness
  LEFT JOIN objects USING (cluster)
  LEFT JOIN coverage USING (cluster)
 ORDER BY cluster;
