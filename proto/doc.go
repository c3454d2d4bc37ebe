// Package proto is the root of the kollect.dev/proto module: the fleet protocol between agents,
// the hub and its dashboard, defined under kollect/fleet/v1 and generated with buf.
package proto
