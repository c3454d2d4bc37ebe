-- A bootstrap token may require an admin's approval of the clusters it registers. A cluster's
-- approval is 'approved', 'pending' or 'rejected'; clusters registered before approvals
-- existed are approved, as they were effectively. registration is how the current
-- registration happened (JSON of store.Registration: the token's id, description and creator,
-- the peer address, the agent version; '' for older registrations). approval_by and
-- approval_at record the admin's decision.
ALTER TABLE bootstrap_tokens ADD COLUMN require_approval INTEGER NOT NULL DEFAULT 0;
ALTER TABLE clusters ADD COLUMN approval TEXT NOT NULL DEFAULT 'approved';
ALTER TABLE clusters ADD COLUMN registration TEXT NOT NULL DEFAULT '';
ALTER TABLE clusters ADD COLUMN approval_by TEXT NOT NULL DEFAULT '';
ALTER TABLE clusters ADD COLUMN approval_at BIGINT NOT NULL DEFAULT 0;
-- A rejected registration's cluster name and bootstrap token: that token never registers the
-- name again, whether the name is released, registered by another token meanwhile or deleted.
CREATE TABLE rejected_registrations (
	cluster        TEXT NOT NULL,
	bootstrap_hash TEXT NOT NULL,
	rejected_at    BIGINT NOT NULL,
	PRIMARY KEY (cluster, bootstrap_hash)
);
