// Package egress decides where a sink may connect, and enforces it where connections are
// made: every sink client dials through a Guard, which checks the address actually being
// connected — after DNS resolution, on every dial, redirects and reconnects included — so a
// host name that resolves (or re-resolves) to a forbidden address cannot get around it.
//
// Link-local addresses (169.254.0.0/16, fe80::/10; where clouds serve instance metadata and
// credentials) and the known cloud metadata endpoints are always refused. Loopback and
// unspecified addresses, and file:// URLs, are refused unless the policy allows local
// destinations (the agent's --allow-local-sinks flag, for tests and the demo). A refusal is a
// *RefusedError naming the rule; no connection is attempted.
package egress
