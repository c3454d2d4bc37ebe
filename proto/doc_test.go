package proto_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
)

// The agent and CLI are written against the .proto comments, so every service, RPC, message
// and enum of the fleet protocol must carry one. (The generated descriptors drop comments, so
// this reads the sources.)
func TestFleetProtocolIsDocumented(t *testing.T) {
	files, err := filepath.Glob("kollect/fleet/v1/*.proto")
	if err != nil || len(files) != 5 {
		t.Fatalf("proto files: %v %v", files, err)
	}
	for _, file := range files {
		raw, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(string(raw), "\n")
		for i, line := range lines {
			decl := strings.TrimSpace(line)
			for _, kw := range []string{"service ", "rpc ", "message ", "enum "} {
				if !strings.HasPrefix(decl, kw) {
					continue
				}
				if i == 0 || !strings.HasPrefix(strings.TrimSpace(lines[i-1]), "//") {
					t.Errorf("%s:%d: %q has no comment", file, i+1, decl)
				}
			}
		}
	}
}

// Agents and the hub agree on the wire names; renaming a service or RPC breaks every deployed
// agent, so the procedures the agent calls are pinned here.
func TestAgentProcedures(t *testing.T) {
	s := fleetv1.File_kollect_fleet_v1_agent_proto.Services().ByName("AgentService")
	var got []string
	for i := range s.Methods().Len() {
		m := s.Methods().Get(i)
		name := string(m.Name())
		if m.IsStreamingServer() {
			name += "(stream)"
		}
		got = append(got, name)
	}
	if strings.Join(got, ",") != "Register,WatchConfig(stream),ReportStatus,RotateCredential,ReportPreview" {
		t.Fatalf("AgentService methods: %v", got)
	}
}
