-- The hash of the bootstrap token a cluster registered with: a retry with the same token,
-- soon and before the credential was ever used, completes that registration again instead of
-- being refused (the agent may have failed to store the credential it was given).
ALTER TABLE clusters ADD COLUMN bootstrap_hash TEXT NOT NULL DEFAULT '';
