-- Provenance: which agent (version, and the installation's stable instance identity) last
-- exported or confirmed each (cluster, inventory). Written to the state only, never to rows,
-- so that an agent upgrade rewrites no row. States from before this migration name no writer.
ALTER TABLE {{.State}} ADD COLUMN agent_version text NOT NULL DEFAULT '';
ALTER TABLE {{.State}} ADD COLUMN agent_instance text NOT NULL DEFAULT '';
