-- A revoked cluster's name stays blocked until an admin releases it (ReleaseCluster): released
-- is set by the release and cleared by every revocation. Clusters revoked before this
-- migration are blocked like the ones revoked after it.
ALTER TABLE clusters ADD COLUMN released INTEGER NOT NULL DEFAULT 0;
