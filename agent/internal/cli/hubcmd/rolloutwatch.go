package hubcmd

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"connectrpc.com/connect"

	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
	"kollect.dev/proto/gen/kollect/fleet/v1/fleetv1connect"

	"kollect.dev/agent/internal/cli/cmdutil"
)

// Following a rollout: WatchFleet says when it changed, GetRollout says how (the stream's
// rollout events carry no clusters, and the display names the failing ones).

const (
	// refreshEvery redraws without an event: a failing cluster's message can change without
	// changing any count, and the hub coalesces events anyway.
	refreshEvery = 5 * time.Second
	// giveUpAfter ends a watch whose hub stays unreachable (exit code 2).
	giveUpAfter = 5 * time.Minute
	// barWidth is the width of a wave's progress bar in characters.
	barWidth = 20
	// maxFailingShown caps the failing clusters listed on a terminal; appended output lists
	// every change.
	maxFailingShown = 10
)

// followRollout draws rollout id until it ends: nil when it completes, a findings error (exit
// code 1) when it pauses, aborts or is superseded. Awaiting approval keeps following: someone
// may approve from elsewhere.
func followRollout(ctx context.Context, env *cmdutil.Env, c fleetv1connect.FleetServiceClient, id int64) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	changed := make(chan struct{}, 1)
	go watchRolloutEvents(ctx, c, id, changed)
	p := &rolloutDisplay{w: env.Out, width: env.Width, now: time.Now}
	tick := time.NewTicker(refreshEvery)
	defer tick.Stop()
	var unreachableSince time.Time
	for {
		resp, err := c.GetRollout(ctx, connect.NewRequest(&fleetv1.GetRolloutRequest{Id: id}))
		switch {
		case err == nil:
			if !unreachableSince.IsZero() {
				fmt.Fprintln(env.Err, "kollect: the hub answers again")
				unreachableSince = time.Time{}
			}
			r := resp.Msg.GetRollout()
			p.draw(r)
			if done, err := rolloutEnded(r); done {
				return err
			}
		case ctx.Err() != nil:
			return cmdutil.Usage(ctx.Err())
		case !retriable(err):
			return hubErr(err)
		case unreachableSince.IsZero():
			unreachableSince = time.Now()
			fmt.Fprintf(env.Err, "kollect: %v; retrying\n", err)
		case time.Since(unreachableSince) > giveUpAfter:
			return cmdutil.Usage(fmt.Errorf("the hub has not answered for %s: %w", giveUpAfter, err))
		}
		select {
		case <-ctx.Done():
			return cmdutil.Usage(ctx.Err())
		case <-changed:
		case <-tick.C:
		}
	}
}

// retriable is true for failures a restarting hub causes.
func retriable(err error) bool {
	switch connect.CodeOf(err) {
	case connect.CodeUnavailable, connect.CodeDeadlineExceeded, connect.CodeUnknown, connect.CodeAborted, connect.CodeInternal:
		return true
	}
	return false
}

// rolloutEnded says whether r is in a phase the watch ends on, and with which result.
func rolloutEnded(r *fleetv1.Rollout) (bool, error) {
	switch r.GetPhase() {
	case fleetv1.RolloutPhase_ROLLOUT_PHASE_COMPLETED:
		return true, nil
	case fleetv1.RolloutPhase_ROLLOUT_PHASE_PAUSED, fleetv1.RolloutPhase_ROLLOUT_PHASE_ABORTED, fleetv1.RolloutPhase_ROLLOUT_PHASE_SUPERSEDED:
		msg := strings.ToLower(rolloutPhase(r.GetPhase()))
		if why := rolloutReason(r); why != "" {
			msg += ": " + why
		}
		return true, cmdutil.Findings("rollout %d %s", r.GetId(), msg)
	}
	return false, nil
}

// rolloutReason is the rollout's message without the phase the hub may have put in front.
func rolloutReason(r *fleetv1.Rollout) string {
	msg := oneLine(r.GetMessage())
	prefix := strings.ToLower(strings.ReplaceAll(rolloutPhase(r.GetPhase()), "_", " ")) + ": "
	if len(msg) >= len(prefix) && strings.EqualFold(msg[:len(prefix)], prefix) {
		msg = msg[len(prefix):]
	}
	return msg
}

// watchRolloutEvents signals changed for every WatchFleet event about rollout id, and once
// after each reconnect (the rollout may have moved meanwhile), until ctx ends.
func watchRolloutEvents(ctx context.Context, c fleetv1connect.FleetServiceClient, id int64, changed chan<- struct{}) {
	signal := func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	for ctx.Err() == nil {
		stream, err := c.WatchFleet(ctx, connect.NewRequest(&fleetv1.WatchFleetRequest{}))
		if err == nil {
			signal()
			for stream.Receive() {
				if r := stream.Msg().GetRollout(); r != nil && r.GetId() == id {
					signal()
				}
			}
			_ = stream.Close()
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// rolloutDisplay draws a rollout's live state: redrawn in place when Out is a terminal (width > 0),
// otherwise as appended plain lines, each stamped with the time, for the lines that changed.
type rolloutDisplay struct {
	w     io.Writer
	width func() int
	now   func() time.Time
	// drawn is how many lines the last terminal frame took.
	drawn int
	// last holds the text of every line appended so far, by key.
	last map[string]string
}

// frameLine is one line of the display; key says which line it replaces when redrawn.
type frameLine struct{ key, text string }

func (p *rolloutDisplay) draw(r *fleetv1.Rollout) {
	if width := p.width(); width > 0 {
		lines := progressFrame(r, maxFailingShown)
		var b strings.Builder
		if p.drawn > 0 {
			fmt.Fprintf(&b, "\x1b[%dA\r", p.drawn) // back to the frame's first line
		}
		b.WriteString("\x1b[J") // and clear it and everything below
		for _, l := range lines {
			b.WriteString(truncate(l.text, width-1))
			b.WriteByte('\n')
		}
		p.drawn = len(lines)
		_, _ = io.WriteString(p.w, b.String())
		return
	}
	if p.last == nil {
		p.last = map[string]string{}
	}
	stamp := p.now().Format("15:04:05") + " "
	var b strings.Builder
	for _, l := range progressFrame(r, 0) {
		if p.last[l.key] != l.text {
			p.last[l.key] = l.text
			b.WriteString(stamp + strings.TrimLeft(l.text, " ") + "\n")
		}
	}
	_, _ = io.WriteString(p.w, b.String())
}

// progressFrame is the display of r: the title, why it stops (when it does), one line per
// wave with a bar and counts, and the clusters that failed or wait on a gate, with the gate
// (at most maxFailing of them, 0 for all).
func progressFrame(r *fleetv1.Rollout, maxFailing int) []frameLine {
	lines := []frameLine{{"title", rolloutTitle(r)}}
	switch r.GetPhase() {
	case fleetv1.RolloutPhase_ROLLOUT_PHASE_AWAITING_APPROVAL:
		lines = append(lines, frameLine{"message", fmt.Sprintf("  awaiting approval: %s (approve: kollect hub rollout resume %d)",
			rolloutReason(r), r.GetId())})
	case fleetv1.RolloutPhase_ROLLOUT_PHASE_PAUSED:
		lines = append(lines, frameLine{"message", fmt.Sprintf("  paused: %s (resume: kollect hub rollout resume %d; roll back: kollect hub rollout rollback %d)",
			rolloutReason(r), r.GetId(), r.GetId())})
	default:
		if r.GetMessage() != "" {
			lines = append(lines, frameLine{"message", "  " + oneLine(r.GetMessage())})
		}
	}
	nameWidth := 0
	for i := range r.GetWaves() {
		nameWidth = max(nameWidth, len(waveName(r, int32(i))))
	}
	for i, wv := range r.GetWaves() {
		done := wv.GetClustersHealthy() + wv.GetClustersFailed()
		lines = append(lines, frameLine{fmt.Sprintf("wave %d", i), fmt.Sprintf("  %-*s [%s] %d/%d  pending %d  in progress %d  healthy %d  failed %d  %s",
			nameWidth, waveName(r, int32(i)), bar(wv), done, wv.GetClustersTotal(), wv.GetClustersPending(), wv.GetClustersInProgress(),
			wv.GetClustersHealthy(), wv.GetClustersFailed(), wavePhase(wv.GetPhase()))})
	}
	var failing []frameLine
	for _, c := range sortedClusters(r) {
		if !needsAttention(c) {
			continue
		}
		text := fmt.Sprintf("  %s (%s) %s", c.GetCluster(), waveName(r, c.GetWave()), clusterState(c.GetState()))
		if c.GetGate() != "" {
			text += ", gate " + c.GetGate()
		}
		if m := oneLine(c.GetMessage()); m != "" {
			text += ": " + m
		}
		failing = append(failing, frameLine{"cluster " + c.GetCluster(), text})
	}
	if maxFailing > 0 && len(failing) > maxFailing {
		more := len(failing) - maxFailing
		failing = append(failing[:maxFailing], frameLine{"more", fmt.Sprintf("  … and %d more (kollect hub rollout status %d)", more, r.GetId())})
	}
	return append(lines, failing...)
}

// bar draws a wave's clusters in proportion: # healthy, x failed, > in progress, . pending.
func bar(wv *fleetv1.RolloutWave) string {
	total := wv.GetClustersTotal()
	if total <= 0 {
		if wv.GetPhase() == fleetv1.WavePhase_WAVE_PHASE_COMPLETED {
			return strings.Repeat("#", barWidth)
		}
		return strings.Repeat(".", barWidth)
	}
	var b strings.Builder
	var cum int64
	at := 0
	for _, part := range []struct {
		n int64
		c string
	}{{wv.GetClustersHealthy(), "#"}, {wv.GetClustersFailed(), "x"}, {wv.GetClustersInProgress(), ">"}, {wv.GetClustersPending(), "."}} {
		cum += part.n
		// Cumulative rounding keeps the bar exactly barWidth wide.
		end := int((cum*barWidth + total/2) / total)
		end = min(end, barWidth)
		if end > at {
			b.WriteString(strings.Repeat(part.c, end-at))
			at = end
		}
	}
	if at < barWidth {
		b.WriteString(strings.Repeat(".", barWidth-at))
	}
	return b.String()
}

// truncate cuts s to n runes, marking the cut, so a terminal never wraps a line (wrapping
// would break the cursor arithmetic of the redraw).
func truncate(s string, n int) string {
	if n <= 0 || utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}
