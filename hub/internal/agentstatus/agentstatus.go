package agentstatus

import (
	"bytes"
	"compress/flate"
	"encoding/base64"
	"fmt"
	"io"
	"sync"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
)

// marshal is deterministic, and so is deflate, so that an unchanged status is stored as the
// same text: readers skip decoding a status whose text they have seen (fleet.View).
var marshal = proto.MarshalOptions{Deterministic: true}

// A deflate writer holds about 1 MiB of state and a reader about 40 KiB: both are reused.
var (
	writers = sync.Pool{New: func() any {
		w, err := flate.NewWriter(nil, flate.BestSpeed)
		if err != nil {
			panic(err) // only for an invalid level
		}
		return w
	}}
	readers = sync.Pool{New: func() any { return flate.NewReader(bytes.NewReader(nil)) }}
)

// Encode returns st's stored form.
func Encode(st *fleetv1.AgentStatus) (string, error) {
	raw, err := marshal.Marshal(st)
	if err != nil {
		return "", fmt.Errorf("encoding the agent status: %w", err)
	}
	var deflated bytes.Buffer
	deflated.Grow(len(raw)/3 + 64)
	w := writers.Get().(*flate.Writer)
	defer writers.Put(w)
	w.Reset(&deflated)
	if _, err := w.Write(raw); err != nil {
		return "", fmt.Errorf("compressing the agent status: %w", err)
	}
	if err := w.Close(); err != nil {
		return "", fmt.Errorf("compressing the agent status: %w", err)
	}
	return base64.StdEncoding.EncodeToString(deflated.Bytes()), nil
}

// Decode parses a stored status into st: the form Encode writes, or protobuf JSON (a '{'
// first, which base64 never holds) from rows written by older hubs.
func Decode(stored string, st *fleetv1.AgentStatus) error {
	if len(stored) > 0 && stored[0] == '{' {
		if err := protojson.Unmarshal([]byte(stored), st); err != nil {
			return fmt.Errorf("decoding the agent status (JSON): %w", err)
		}
		return nil
	}
	deflated, err := base64.StdEncoding.DecodeString(stored)
	if err != nil {
		return fmt.Errorf("decoding the agent status: %w", err)
	}
	r := readers.Get().(io.ReadCloser)
	defer readers.Put(r)
	if err := r.(flate.Resetter).Reset(bytes.NewReader(deflated), nil); err != nil {
		return fmt.Errorf("decompressing the agent status: %w", err)
	}
	raw, err := io.ReadAll(r)
	if err != nil {
		return fmt.Errorf("decompressing the agent status: %w", err)
	}
	if err := proto.Unmarshal(raw, st); err != nil {
		return fmt.Errorf("decoding the agent status: %w", err)
	}
	return nil
}
