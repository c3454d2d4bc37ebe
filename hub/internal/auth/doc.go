// Package auth authenticates and authorises every hub call: agents by the per-agent credential
// Register handed out, FleetService callers by API tokens whose role must reach the one each
// procedure needs. Secrets are random, shown once and stored only as SHA-256 hashes. It also
// writes the audit event of every successful FleetService mutation and, through Guard, limits,
// logs and audits refused calls per client address.
package auth
