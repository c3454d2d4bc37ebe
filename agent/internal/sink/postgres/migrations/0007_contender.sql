-- One writer per (cluster, inventory): a second agent given the same cluster name is refused
-- while the state's writer (agent_instance) wrote within the conflict window, and its refused
-- export writes only this mark: who tried (contender_version, contender_instance) and when
-- (contended_at). The holder's next export or confirmation finds it and reports the conflict.
-- Empty and NULL: nobody contended.
ALTER TABLE {{.State}} ADD COLUMN contender_version text NOT NULL DEFAULT '';
ALTER TABLE {{.State}} ADD COLUMN contender_instance text NOT NULL DEFAULT '';
ALTER TABLE {{.State}} ADD COLUMN contended_at timestamptz;
