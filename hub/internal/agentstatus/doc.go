// Package agentstatus is the form in which the hub stores an agent's reported status
// (fleetv1.AgentStatus) in its cluster's row: base64 of the binary protobuf. Every heartbeat
// writes it, so its encoding is on the hub's busiest path: protobuf JSON cost a replica of
// 5,000 agents a twelfth of its CPU (about 130 µs a heartbeat) and most of a heartbeat's
// garbage. Rows written before it hold protobuf JSON, which Decode still reads.
package agentstatus
