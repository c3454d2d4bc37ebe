-- credential_used is 1 once a heartbeat presented the cluster's current credential. Until then
-- the previous credential of a rotation may rotate again (its agent could not store the new
-- one); after, the previous credential is only a stale copy, and rotating with it would hand
-- whoever holds it the cluster's identity.
ALTER TABLE clusters ADD COLUMN credential_used BIGINT NOT NULL DEFAULT 0;
