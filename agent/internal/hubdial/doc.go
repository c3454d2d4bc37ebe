// Package hubdial is the one way the agent (hubclient) and the kollect CLI (hub commands)
// connect to a Kollect hub: HTTP/2 over TLS, the hub verified by a pinned CA fingerprint
// (kollect.dev/proto/capin, host name checked), a CA file or the system roots, and a bearer
// token on every call, unary and streaming. It builds Connect clients; it holds no state of
// its own beyond the HTTP transport.
package hubdial
