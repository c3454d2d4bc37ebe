// Package proto is the root of the kollect.dev/proto module: the fleet protocol between agents,
// the hub and its dashboard, defined under kollect/fleet/v1 and generated with buf, and the CA
// pin both ends of an agent's or the CLI's connection agree on (package capin).
package proto
