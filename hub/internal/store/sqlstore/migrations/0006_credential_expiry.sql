-- Agent credentials expire and rotate: credential_expires_at (0: never, credentials issued
-- before this migration, which the hub asks their agents to rotate) and the previous
-- credential of a rotation, valid until previous_expires_at. API tokens may expire too.
ALTER TABLE clusters ADD COLUMN credential_expires_at BIGINT NOT NULL DEFAULT 0;
ALTER TABLE clusters ADD COLUMN previous_credential_hash TEXT NOT NULL DEFAULT '';
ALTER TABLE clusters ADD COLUMN previous_expires_at BIGINT NOT NULL DEFAULT 0;
CREATE INDEX clusters_previous_credential ON clusters (previous_credential_hash);
ALTER TABLE api_tokens ADD COLUMN expires_at BIGINT NOT NULL DEFAULT 0;
