package bigquery

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"

	bq "cloud.google.com/go/bigquery"
	"google.golang.org/api/iterator"

	"kollect.dev/agent/internal/export"
)

// drifted reports whether the rows table no longer holds exactly the batch's rows for its
// cluster and inventory: a row missing, extra, or different in any column the export
// writes. A periodic resync whose state row already holds the batch's checksum asks it
// before staging anything, so that static data costs one read per resync and writes
// nothing (not even a staging table); only drift (rows edited or deleted by hand, a
// restore) pays for the full staged reconcile.
//
// Attributes are compared as decoded JSON: the table returns them re-serialised
// (TO_JSON_STRING), with its own key order and number spelling. A difference this
// comparison sees that the reconcile would not (a spelling it cannot decode alike) only
// costs one reconcile that changes nothing.
func (s *Sink) drifted(ctx context.Context, env *export.Envelope) (bool, error) {
	want := make(map[string]*export.Row, len(env.Rows))
	for i := range env.Rows {
		r := &env.Rows[i]
		want[r.Target+"/"+r.UID] = r
	}
	q := s.client.Query("SELECT target, uid, api_group, version, kind, namespace, name, IFNULL(profile, ''), " +
		"IFNULL(profile_generation, -1), TO_JSON_STRING(attributes)\n" +
		"FROM " + s.ref(s.cfg.table) + " WHERE cluster = @cluster AND inventory = @inventory")
	q.Parameters = []bq.QueryParameter{{Name: "cluster", Value: env.Cluster}, {Name: "inventory", Value: env.Inventory}}
	it, err := q.Read(ctx)
	if err != nil {
		return false, fmt.Errorf("reading the rows for a resync: %w", err)
	}
	seen := 0
	for {
		var v []bq.Value
		err := it.Next(&v)
		if errors.Is(err, iterator.Done) {
			break
		}
		if err != nil {
			return false, fmt.Errorf("reading the rows for a resync: %w", err)
		}
		str := func(i int) string { text, _ := v[i].(string); return text }
		r, ok := want[str(0)+"/"+str(1)]
		if !ok {
			return true, nil // a row the snapshot lacks, or a second copy of one
		}
		delete(want, str(0)+"/"+str(1))
		seen++
		generation, _ := v[8].(int64)
		if str(2) != r.Group || str(3) != r.Version || str(4) != r.Kind || str(5) != r.Namespace || str(6) != r.Name ||
			str(7) != r.Profile || generation != r.ProfileGeneration || !sameJSON(str(9), stagedAttributes(r)) {
			return true, nil
		}
	}
	return seen != len(env.Rows), nil
}

// sameJSON reports whether two JSON texts decode to the same value.
func sameJSON(a, b string) bool {
	var va, vb any
	if json.Unmarshal([]byte(a), &va) != nil || json.Unmarshal([]byte(b), &vb) != nil {
		return false
	}
	return reflect.DeepEqual(va, vb)
}
