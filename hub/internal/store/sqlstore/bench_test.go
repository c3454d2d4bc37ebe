package sqlstore_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"kollect.dev/hub/internal/store"
	"kollect.dev/hub/internal/store/sqlstore"
)

// BenchmarkRecordHeartbeat measures the store's part of a heartbeat (SQLite, 1,000 clusters
// with one bundle each): "unchanged" reports what the cluster reported a moment ago, so the
// history gets nothing; "changed" reports a new item count every time, so every heartbeat adds
// a history record and prunes the cluster's oldest beyond store.HistoryLimit.
func BenchmarkRecordHeartbeat(b *testing.B) {
	const clusters = 1000
	ctx := context.Background()
	s, err := sqlstore.Open(ctx, filepath.Join(b.TempDir(), "hub.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	t0 := time.Now()
	if err := s.CreateBootstrapToken(ctx, store.BootstrapToken{ID: "b", Hash: "h-b", ExpiresAt: t0.Add(time.Hour), CreatedAt: t0}); err != nil {
		b.Fatal(err)
	}
	all := func(string, map[string]string) (bool, error) { return true, nil }
	for i := range clusters {
		if _, err := s.RegisterCluster(ctx, store.RegisterParams{TokenHash: "h-b", Name: fmt.Sprintf("c%04d", i),
			CredentialHash: fmt.Sprintf("cred-%d", i), Now: t0}, all); err != nil {
			b.Fatal(err)
		}
	}
	if _, _, _, err := s.CreateRevision(ctx, store.Revision{Bundle: "base", Manifests: "x", Selector: "{}", Digest: "d",
		Objects: "[]", CreatedAt: t0}, "", false, all); err != nil {
		b.Fatal(err)
	}
	status := `{"agentVersion":"v1","inventories":[{"name":"workloads","itemCount":"100"}]}`
	for _, changing := range []bool{false, true} {
		name := "unchanged"
		if changing {
			name = "changed"
		}
		b.Run(name, func(b *testing.B) {
			i := 0
			for b.Loop() {
				rec := store.HeartbeatRecord{AgentVersion: "v1", AppliedDigest: "sha256:a", Inventories: 1, Items: 100, State: "online"}
				if changing {
					rec.Items += int64(i)
				}
				if err := s.RecordHeartbeat(ctx, store.Heartbeat{Cluster: fmt.Sprintf("c%04d", i%clusters), At: t0.Add(time.Duration(i) * time.Millisecond),
					AgentVersion: "v1", AppliedDigest: "sha256:a", Applied: map[string]int64{"base": 1}, Status: status, Record: rec}); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}
