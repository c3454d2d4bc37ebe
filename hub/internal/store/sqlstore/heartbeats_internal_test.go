package sqlstore

import (
	"testing"
	"time"

	"kollect.dev/hub/internal/store"
)

// TestHistoryKeyIsSameBesidesItems: the cluster row's mark of its newest history record tells
// records apart exactly as SameBesidesItems does, so the history reads nothing to decide.
func TestHistoryKeyIsSameBesidesItems(t *testing.T) {
	base := store.HeartbeatRecord{At: time.Unix(100, 0), AgentVersion: "v1", AppliedDigest: "sha256:a", Inventories: 3,
		Items: 10, InventoriesNotReady: 1, SinkErrors: 0, State: "online"}
	variants := []func(*store.HeartbeatRecord){
		func(r *store.HeartbeatRecord) { r.At = r.At.Add(time.Hour) },
		func(r *store.HeartbeatRecord) { r.Items++ },
		func(r *store.HeartbeatRecord) { r.AgentVersion = "v2" },
		func(r *store.HeartbeatRecord) { r.AppliedDigest = "sha256:b" },
		func(r *store.HeartbeatRecord) { r.Inventories++ },
		func(r *store.HeartbeatRecord) { r.InventoriesNotReady++ },
		func(r *store.HeartbeatRecord) { r.SinkErrors++ },
		func(r *store.HeartbeatRecord) { r.State = "stale" },
		func(r *store.HeartbeatRecord) { r.AgentVersion, r.AppliedDigest = "v1 \"sha256:a\"", "" },
	}
	for i, change := range variants {
		r := base
		change(&r)
		if same, key := base.SameBesidesItems(r), historyKey(base) == historyKey(r); same != key {
			t.Errorf("variant %d: SameBesidesItems %v, equal keys %v", i, same, key)
		}
	}
}
