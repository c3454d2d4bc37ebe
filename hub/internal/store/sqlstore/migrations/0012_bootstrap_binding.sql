-- A bootstrap token may be bound to one cluster name and to the exact labels its cluster asks
-- for (JSON object; '' for none): a holder of the token can then register neither another
-- name nor labels that select other bundles.
ALTER TABLE bootstrap_tokens ADD COLUMN cluster_name TEXT NOT NULL DEFAULT '';
ALTER TABLE bootstrap_tokens ADD COLUMN labels TEXT NOT NULL DEFAULT '';
