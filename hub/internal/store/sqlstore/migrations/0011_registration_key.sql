-- registration_key_hash is the hash of the key the agent chose for its registration: only a
-- retry presenting the same key completes that registration again (a multi-use bootstrap
-- token's other holders do not know it). Empty for agents that sent none: they cannot retry.
ALTER TABLE clusters ADD COLUMN registration_key_hash TEXT NOT NULL DEFAULT '';
