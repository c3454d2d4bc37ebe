// Package pki gives the hub its TLS identity: either a certificate and key the operator brings,
// or a CA and serving certificate the hub creates once and keeps in its data directory. Agents
// and the CLI pin the CA by its SHA-256 fingerprint; the fingerprint and the check they make are
// kollect.dev/proto/capin, shared with them.
package pki
