package hubcmd

import (
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
)

// The renderers of `kollect hub rollout`: pure functions of a rollout and the current time, so
// the golden tests pin them.

// defaultProgressDeadline is the hub's deadline for a strategy that sets none (rollout.proto).
const defaultProgressDeadline = 10 * time.Minute

func rolloutPhase(p fleetv1.RolloutPhase) string {
	return strings.TrimPrefix(p.String(), "ROLLOUT_PHASE_")
}

func wavePhase(p fleetv1.WavePhase) string { return strings.TrimPrefix(p.String(), "WAVE_PHASE_") }

func clusterState(s fleetv1.RolloutClusterState) string {
	return strings.TrimPrefix(s.String(), "ROLLOUT_CLUSTER_STATE_")
}

// formatSelector prints a selector in the syntax parseLabelSelector reads, sorted.
func formatSelector(sel *fleetv1.LabelSelector) string {
	var parts []string
	for k, v := range sel.GetMatchLabels() {
		parts = append(parts, k+"="+v)
	}
	sort.Strings(parts)
	for _, e := range sel.GetMatchExpressions() {
		switch e.GetOperator() {
		case "Exists":
			parts = append(parts, e.GetKey())
		case "DoesNotExist":
			parts = append(parts, "!"+e.GetKey())
		default:
			parts = append(parts, fmt.Sprintf("%s %s (%s)", e.GetKey(), strings.ToLower(e.GetOperator()), strings.Join(e.GetValues(), ",")))
		}
	}
	if len(parts) == 0 {
		return "every cluster"
	}
	return strings.Join(parts, ",")
}

// strategyText summarises a strategy on one line.
func strategyText(s *fleetv1.RolloutStrategy) string {
	var parts []string
	if s.GetCanarySelector() != nil {
		parts = append(parts, "canary "+formatSelector(s.GetCanarySelector()))
	} else {
		parts = append(parts, "no canary")
	}
	switch s.GetWaveSize().GetSize().(type) {
	case *fleetv1.WaveSize_Count:
		parts = append(parts, fmt.Sprintf("waves of %d", s.GetWaveSize().GetCount()))
	case *fleetv1.WaveSize_Percent:
		parts = append(parts, fmt.Sprintf("waves of %d%%", s.GetWaveSize().GetPercent()))
	case nil:
		if s.GetCanarySelector() != nil {
			parts = append(parts, "the rest in one wave")
		} else {
			parts = append(parts, "one wave")
		}
	}
	if n := s.GetMaxConcurrency(); n > 0 {
		parts = append(parts, fmt.Sprintf("at most %d moving at once", n))
	}
	parts = append(parts, "healthy after "+s.GetMinHealthy().AsDuration().String())
	deadline := defaultProgressDeadline
	if s.GetProgressDeadline() != nil {
		deadline = s.GetProgressDeadline().AsDuration()
	}
	parts = append(parts, "deadline "+deadline.String()+" per wave")
	parts = append(parts, fmt.Sprintf("max failures %d", s.GetMaxFailures()))
	if s.GetRequireApproval() {
		parts = append(parts, "approval after every wave")
	}
	return strings.Join(parts, "; ") + "; gates: " + gatesText(s.GetGates())
}

func gatesText(g *fleetv1.RolloutGates) string {
	gates := []string{"applied"}
	if !g.GetSkipInventoriesReady() {
		gates = append(gates, "inventoriesReady")
	}
	if !g.GetSkipSinkErrors() {
		gates = append(gates, "sinkErrors")
	}
	if !g.GetSkipCoverage() {
		gates = append(gates, "coverage")
	}
	if p := g.GetMaxItemCountChangePercent(); p > 0 {
		gates = append(gates, "itemCount ±"+strconv.FormatFloat(p, 'f', -1, 64)+"%")
	}
	return strings.Join(gates, ", ")
}

// ago prints how long before now t was; "-" when unset.
func ago(t *timestamppb.Timestamp, now time.Time) string {
	if t == nil {
		return "-"
	}
	d := now.Sub(t.AsTime())
	if d < 0 {
		d = 0
	}
	return d.Round(time.Second).String() + " ago"
}

// waveName is a wave's name, or "wave N" when the hub sent none.
func waveName(r *fleetv1.Rollout, i int32) string {
	if int(i) < len(r.GetWaves()) && r.GetWaves()[i].GetName() != "" {
		return r.GetWaves()[i].GetName()
	}
	return fmt.Sprintf("wave %d", i+1)
}

// rolloutTitle is the rollout on one line: id, bundle, revisions, phase and where it is.
func rolloutTitle(r *fleetv1.Rollout) string {
	s := fmt.Sprintf("rollout %d: bundle %s, revision %d -> %d, %s", r.GetId(), r.GetBundle(), r.GetFromRevision(), r.GetToRevision(),
		rolloutPhase(r.GetPhase()))
	if r.GetRollbackOf() != 0 {
		s = fmt.Sprintf("rollout %d (rollback of %d): bundle %s, revision %d -> %d, %s", r.GetId(), r.GetRollbackOf(), r.GetBundle(),
			r.GetFromRevision(), r.GetToRevision(), rolloutPhase(r.GetPhase()))
	}
	if n := len(r.GetWaves()); n > 0 && r.GetPhase() != fleetv1.RolloutPhase_ROLLOUT_PHASE_COMPLETED {
		s += fmt.Sprintf(" at %s (%d of %d)", waveName(r, r.GetCurrentWave()), r.GetCurrentWave()+1, n)
	}
	return s
}

// writePlan prints which clusters land in which wave: the output of start and start --dry-run.
func writePlan(w io.Writer, r *fleetv1.Rollout, dryRun bool) error {
	byWave := make([][]string, len(r.GetWaves()))
	total := 0
	for _, c := range r.GetClusters() {
		if i := int(c.GetWave()); i >= 0 && i < len(byWave) {
			byWave[i] = append(byWave[i], c.GetCluster())
			total++
		}
	}
	size := plural(total, "cluster") + " in " + plural(len(byWave), "wave")
	if dryRun {
		fmt.Fprintf(w, "plan for bundle %s: revision %d -> %d, %s\n", r.GetBundle(), r.GetFromRevision(), r.GetToRevision(), size)
	} else {
		fmt.Fprintf(w, "rollout %d started: bundle %s, revision %d -> %d, %s\n", r.GetId(), r.GetBundle(), r.GetFromRevision(),
			r.GetToRevision(), size)
	}
	fmt.Fprintf(w, "strategy: %s\n", strategyText(r.GetStrategy()))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "WAVE\tCLUSTERS\tNAMES")
	for i, names := range byWave {
		sort.Strings(names)
		list := strings.Join(names, ", ")
		if list == "" {
			list = "(none)"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\n", waveName(r, int32(i)), len(names), list)
	}
	return tw.Flush()
}

// writeRollout prints a rollout for `status`: a summary, the wave table and the clusters that
// need attention (all of them with allClusters).
func writeRollout(w io.Writer, r *fleetv1.Rollout, now time.Time, allClusters bool) error {
	fmt.Fprintln(w, rolloutTitle(r))
	if r.GetMessage() != "" {
		fmt.Fprintf(w, "message: %s\n", r.GetMessage())
	}
	fmt.Fprintf(w, "strategy: %s\n", strategyText(r.GetStrategy()))
	fmt.Fprintf(w, "created %s by %s", ago(r.GetCreatedAt(), now), r.GetCreatedBy())
	if r.GetFinishedAt() != nil {
		fmt.Fprintf(w, ", finished %s", ago(r.GetFinishedAt(), now))
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w)
	if err := writeWaveTable(w, r, now); err != nil {
		return err
	}
	var shown []*fleetv1.RolloutCluster
	for _, c := range sortedClusters(r) {
		if allClusters || needsAttention(c) {
			shown = append(shown, c)
		}
	}
	if len(shown) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CLUSTER\tWAVE\tSTATE\tGATE\tMOVED\tMESSAGE")
	for _, c := range shown {
		gate := c.GetGate()
		if gate == "" {
			gate = "-"
		}
		msg := oneLine(c.GetMessage())
		if msg == "" {
			msg = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", c.GetCluster(), waveName(r, c.GetWave()), clusterState(c.GetState()), gate,
			ago(c.GetMovedAt(), now), msg)
	}
	return tw.Flush()
}

// writeWaveTable prints one row per wave with its counts.
func writeWaveTable(w io.Writer, r *fleetv1.Rollout, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "WAVE\tPHASE\tCLUSTERS\tPENDING\tIN PROGRESS\tHEALTHY\tFAILED\tSTARTED\tCOMPLETED")
	for i, wv := range r.GetWaves() {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%s\t%s\n", waveName(r, int32(i)), wavePhase(wv.GetPhase()), wv.GetClustersTotal(),
			wv.GetClustersPending(), wv.GetClustersInProgress(), wv.GetClustersHealthy(), wv.GetClustersFailed(),
			ago(wv.GetStartedAt(), now), ago(wv.GetCompletedAt(), now))
	}
	return tw.Flush()
}

// writeHistory prints rollouts one per line, newest first as the hub lists them.
func writeHistory(w io.Writer, rollouts []*fleetv1.Rollout) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tBUNDLE\tREVISION\tPHASE\tWAVES\tHEALTHY\tFAILED\tCREATED\tBY\tMESSAGE")
	for _, r := range rollouts {
		var done int
		var total, healthy, failed int64
		for _, wv := range r.GetWaves() {
			if wv.GetPhase() == fleetv1.WavePhase_WAVE_PHASE_COMPLETED {
				done++
			}
			total += wv.GetClustersTotal()
			healthy += wv.GetClustersHealthy()
			failed += wv.GetClustersFailed()
		}
		msg := oneLine(r.GetMessage())
		if r.GetRollbackOf() != 0 {
			msg = strings.TrimSuffix(fmt.Sprintf("rollback of %d; %s", r.GetRollbackOf(), msg), "; ")
		}
		if msg == "" {
			msg = "-"
		}
		fmt.Fprintf(tw, "%d\t%s\t%d -> %d\t%s\t%d/%d\t%d/%d\t%d\t%s\t%s\t%s\n", r.GetId(), r.GetBundle(), r.GetFromRevision(),
			r.GetToRevision(), rolloutPhase(r.GetPhase()), done, len(r.GetWaves()), healthy, total, failed,
			r.GetCreatedAt().AsTime().UTC().Format(time.RFC3339), r.GetCreatedBy(), msg)
	}
	return tw.Flush()
}

// needsAttention is true for a cluster that failed or has a failing gate.
func needsAttention(c *fleetv1.RolloutCluster) bool {
	return c.GetState() == fleetv1.RolloutClusterState_ROLLOUT_CLUSTER_STATE_FAILED || c.GetGate() != ""
}

// sortedClusters orders clusters by wave, then name.
func sortedClusters(r *fleetv1.Rollout) []*fleetv1.RolloutCluster {
	cs := append([]*fleetv1.RolloutCluster(nil), r.GetClusters()...)
	sort.SliceStable(cs, func(i, j int) bool {
		if cs[i].GetWave() != cs[j].GetWave() {
			return cs[i].GetWave() < cs[j].GetWave()
		}
		return cs[i].GetCluster() < cs[j].GetCluster()
	})
	return cs
}

// oneLine keeps a multi-line message on one table row.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// plural is "1 wave", "2 waves".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
