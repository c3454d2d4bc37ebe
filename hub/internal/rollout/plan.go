package rollout

import (
	"errors"
	"fmt"
	"sort"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"kollect.dev/hub/internal/labelsel"
	"kollect.dev/hub/internal/store"
	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
)

// Errors the server maps to Connect codes.
var (
	// ErrInvalid: the request is malformed (CodeInvalidArgument).
	ErrInvalid = errors.New("invalid rollout request")
	// ErrPrecondition: the rollout or bundle is not in a state that allows the call
	// (CodeFailedPrecondition).
	ErrPrecondition = errors.New("not possible now")
)

// DefaultProgressDeadline applies when the strategy sets none.
const DefaultProgressDeadline = 10 * time.Minute

// CanaryWave is the name of the canary wave, always index 0 when present.
const CanaryWave = "canary"

// Member is a cluster a rollout covers, as the planner sees it.
type Member struct {
	Name   string
	Labels map[string]string
}

// Validate checks a strategy and returns it with defaults filled in (a copy).
func Validate(st *fleetv1.RolloutStrategy) (*fleetv1.RolloutStrategy, error) {
	out := &fleetv1.RolloutStrategy{}
	if st != nil {
		out = proto.Clone(st).(*fleetv1.RolloutStrategy)
	}
	if out.GetCanarySelector() != nil {
		if _, err := labelsel.FromProto(out.GetCanarySelector()); err != nil {
			return nil, fmt.Errorf("canary selector: %v: %w", err, ErrInvalid)
		}
	}
	switch v := out.GetWaveSize().GetSize().(type) {
	case nil:
		out.WaveSize = nil
	case *fleetv1.WaveSize_Percent:
		if v.Percent < 1 || v.Percent > 100 {
			return nil, fmt.Errorf("wave size %d%%: must be 1-100: %w", v.Percent, ErrInvalid)
		}
	case *fleetv1.WaveSize_Count:
		if v.Count < 1 {
			return nil, fmt.Errorf("wave size %d: must be at least 1: %w", v.Count, ErrInvalid)
		}
	}
	if out.GetMaxConcurrency() < 0 {
		return nil, fmt.Errorf("max_concurrency %d: must not be negative: %w", out.GetMaxConcurrency(), ErrInvalid)
	}
	if out.GetMaxFailures() < 0 {
		return nil, fmt.Errorf("max_failures %d: must not be negative: %w", out.GetMaxFailures(), ErrInvalid)
	}
	if d := out.GetMinHealthy(); d != nil && (d.CheckValid() != nil || d.AsDuration() < 0) {
		return nil, fmt.Errorf("min_healthy must be a non-negative duration: %w", ErrInvalid)
	}
	if d := out.GetProgressDeadline(); d != nil && (d.CheckValid() != nil || d.AsDuration() < 0) {
		return nil, fmt.Errorf("progress_deadline must be a non-negative duration: %w", ErrInvalid)
	}
	if out.GetProgressDeadline().AsDuration() == 0 {
		out.ProgressDeadline = durationpb.New(DefaultProgressDeadline)
	}
	if p := out.GetGates().GetMaxItemCountChangePercent(); p < 0 {
		return nil, fmt.Errorf("max_item_count_change_percent %g: must not be negative: %w", p, ErrInvalid)
	}
	return out, nil
}

// RollbackStrategy is a rollback's default: one wave, only the applied gate, no min_healthy.
func RollbackStrategy() *fleetv1.RolloutStrategy {
	return &fleetv1.RolloutStrategy{ProgressDeadline: durationpb.New(DefaultProgressDeadline),
		Gates: &fleetv1.RolloutGates{SkipInventoriesReady: true, SkipSinkErrors: true, SkipCoverage: true}}
}

// EncodeStrategy and DecodeStrategy convert the stored form (protobuf JSON).
func EncodeStrategy(st *fleetv1.RolloutStrategy) (string, error) {
	raw, err := protojson.Marshal(st)
	if err != nil {
		return "", fmt.Errorf("encoding strategy: %w", err)
	}
	return string(raw), nil
}

// DecodeStrategy parses a stored strategy.
func DecodeStrategy(raw string) (*fleetv1.RolloutStrategy, error) {
	st := &fleetv1.RolloutStrategy{}
	if err := protojson.Unmarshal([]byte(raw), st); err != nil {
		return nil, fmt.Errorf("decoding strategy: %w", err)
	}
	return st, nil
}

// Matcher reports whether labels match a selector.
type Matcher func(labels map[string]string) bool

// CanaryMatcher returns the strategy's canary selector as a Matcher, nil when it has none.
func CanaryMatcher(st *fleetv1.RolloutStrategy) (Matcher, error) {
	if st.GetCanarySelector() == nil {
		return nil, nil
	}
	return SelectorMatcher(st.GetCanarySelector())
}

// SelectorMatcher compiles a protocol selector.
func SelectorMatcher(sel *fleetv1.LabelSelector) (Matcher, error) {
	ls, err := labelsel.FromProto(sel)
	if err != nil {
		return nil, err
	}
	raw, err := labelsel.Encode(ls)
	if err != nil {
		return nil, err
	}
	return StoredMatcher(raw)
}

// StoredMatcher compiles a selector in its stored JSON form.
func StoredMatcher(selectorJSON string) (Matcher, error) {
	if _, err := labelsel.Match(selectorJSON, nil); err != nil {
		return nil, err
	}
	return func(l map[string]string) bool {
		ok, _ := labelsel.Match(selectorJSON, l) // compiled above; cannot fail now
		return ok
	}, nil
}

// Plan splits the members into waves: the canary wave first (when the strategy has a canary
// selector, even if it matches nobody), then waves of wave_size (a count, or a percentage of
// all members rounded up), every cluster in a stable order by name. Without a canary there is
// always at least one wave. Every cluster starts pending.
func Plan(st *fleetv1.RolloutStrategy, members []Member) ([]store.RolloutWave, []store.RolloutCluster, error) {
	canary, err := CanaryMatcher(st)
	if err != nil {
		return nil, nil, fmt.Errorf("canary selector: %v: %w", err, ErrInvalid)
	}
	sorted := append([]Member(nil), members...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	var (
		waves    []store.RolloutWave
		clusters []store.RolloutCluster
		rest     []Member
	)
	if canary != nil {
		waves = append(waves, store.RolloutWave{Name: CanaryWave})
		for _, m := range sorted {
			if canary(m.Labels) {
				clusters = append(clusters, store.RolloutCluster{Cluster: m.Name, Wave: 0, State: store.ClusterPending})
			} else {
				rest = append(rest, m)
			}
		}
	} else {
		rest = sorted
	}
	size := len(rest)
	switch v := st.GetWaveSize().GetSize().(type) {
	case *fleetv1.WaveSize_Percent:
		size = int((int64(v.Percent)*int64(len(sorted)) + 99) / 100)
	case *fleetv1.WaveSize_Count:
		size = int(v.Count)
	}
	size = max(size, 1)
	for i := 0; i < len(rest) || (i == 0 && canary == nil); i += size {
		idx := len(waves)
		waves = append(waves, store.RolloutWave{Name: fmt.Sprintf("wave %d", len(waves)-boolInt(canary != nil)+1)})
		for _, m := range rest[i:min(i+size, len(rest))] {
			clusters = append(clusters, store.RolloutCluster{Cluster: m.Name, Wave: idx, State: store.ClusterPending})
		}
	}
	sort.Slice(clusters, func(i, j int) bool { return clusters[i].Cluster < clusters[j].Cluster })
	Recount(waves, clusters)
	return waves, clusters, nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Recount sets every wave's counts from the clusters.
func Recount(waves []store.RolloutWave, clusters []store.RolloutCluster) {
	for i := range waves {
		w := &waves[i]
		w.Total, w.Pending, w.InProgress, w.Healthy, w.Failed = 0, 0, 0, 0, 0
	}
	for _, c := range clusters {
		if c.Wave < 0 || c.Wave >= len(waves) {
			continue
		}
		w := &waves[c.Wave]
		w.Total++
		switch c.State {
		case store.ClusterPending:
			w.Pending++
		case store.ClusterHealthy:
			w.Healthy++
		case store.ClusterFailed:
			w.Failed++
		default:
			w.InProgress++
		}
	}
}
