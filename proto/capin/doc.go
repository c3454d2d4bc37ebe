// Package capin is how a client trusts a Kollect hub by the fingerprint of its CA: the hub
// prints and publishes "sha256:<hex>" of its CA certificate (Fingerprint), and agents and the
// kollect CLI verify every connection against that pin (ClientConfig) without anyone
// distributing the CA file.
//
// It lives in the protocol module because both sides of the connection must agree on it: the
// hub produces the pin, the agent and the CLI check it, and DESIGN.md lets hub and agent share
// only api/ and proto/. It needs nothing beyond the standard library, so it adds no dependency
// to kollect.dev/proto.
package capin
