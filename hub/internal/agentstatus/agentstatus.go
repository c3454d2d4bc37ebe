package agentstatus

import (
	"encoding/base64"
	"fmt"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
)

// marshal is deterministic so that an unchanged status is stored as the same text: readers
// skip decoding a status whose text they have seen (fleet.View).
var marshal = proto.MarshalOptions{Deterministic: true}

// Encode returns st's stored form.
func Encode(st *fleetv1.AgentStatus) (string, error) {
	raw, err := marshal.Marshal(st)
	if err != nil {
		return "", fmt.Errorf("encoding the agent status: %w", err)
	}
	return base64.StdEncoding.EncodeToString(raw), nil
}

// Decode parses a stored status into st: the base64 protobuf Encode writes, or protobuf JSON
// (a '{' first, which base64 never holds) from rows written by older hubs.
func Decode(stored string, st *fleetv1.AgentStatus) error {
	if len(stored) > 0 && stored[0] == '{' {
		if err := protojson.Unmarshal([]byte(stored), st); err != nil {
			return fmt.Errorf("decoding the agent status (JSON): %w", err)
		}
		return nil
	}
	raw, err := base64.StdEncoding.DecodeString(stored)
	if err != nil {
		return fmt.Errorf("decoding the agent status: %w", err)
	}
	if err := proto.Unmarshal(raw, st); err != nil {
		return fmt.Errorf("decoding the agent status: %w", err)
	}
	return nil
}
