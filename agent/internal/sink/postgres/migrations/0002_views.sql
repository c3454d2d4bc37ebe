-- The same object can be collected by several inventories or targets of one cluster: _latest
-- keeps one row per object and cluster, the most recently changed one.
CREATE VIEW {{.View "latest"}} AS
SELECT DISTINCT ON (r.cluster, r.api_group, r.kind, r.namespace, r.name)
       r.cluster, r.api_group, r.version, r.kind, r.namespace, r.name, r.uid,
       r.inventory, r.target, r.attributes, r.first_seen, r.updated_at, s.exported_at
  FROM {{.Rows}} r
  LEFT JOIN {{.State}} s ON s.cluster = r.cluster AND s.inventory = r.inventory
 ORDER BY r.cluster, r.api_group, r.kind, r.namespace, r.name, r.updated_at DESC;

-- Objects per cluster and kind, with the freshest change.
CREATE VIEW {{.View "counts"}} AS
SELECT cluster, api_group, kind,
       count(DISTINCT (namespace, name)) AS objects,
       max(updated_at)                   AS last_change
  FROM {{.Rows}}
 GROUP BY cluster, api_group, kind;

-- One row per object and container image. Images come from the attribute "images" (an array
-- of strings) or "image" (a string): name the attribute so in the profile.
CREATE VIEW {{.View "images"}} AS
SELECT r.cluster, r.api_group, r.kind, r.namespace, r.name, i.image
  FROM {{.Rows}} r
 CROSS JOIN LATERAL (
        SELECT jsonb_array_elements_text(r.attributes -> 'images') AS image
         WHERE jsonb_typeof(r.attributes -> 'images') = 'array'
        UNION
        SELECT r.attributes ->> 'image'
         WHERE jsonb_typeof(r.attributes -> 'image') = 'string'
       ) i;

-- Images in use across the fleet: how many clusters and objects run each.
CREATE VIEW {{.View "image_usage"}} AS
SELECT image,
       count(DISTINCT cluster)                       AS clusters,
       count(DISTINCT (cluster, namespace, kind, name)) AS objects,
       array_agg(DISTINCT cluster ORDER BY cluster)  AS cluster_names
  FROM {{.View "images"}}
 GROUP BY image;
