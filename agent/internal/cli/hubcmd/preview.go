package hubcmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/durationpb"

	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
	"kollect.dev/proto/gen/kollect/fleet/v1/fleetv1connect"

	"kollect.dev/agent/internal/cli/cmdutil"
)

// bundlePreviewCmd is `kollect hub bundle preview`.
func bundlePreviewCmd(env *cmdutil.Env) *cobra.Command {
	var (
		file, selector string
		samples        int32
		timeout        time.Duration
		out            outputFlag
	)
	c := &cobra.Command{
		Use:   "preview [NAME] -f FILE --selector k=v,... [--samples N] [--timeout D] [-o table|json|yaml]",
		Short: "Evaluate a bundle on selected clusters without applying it: objects matched, rows, errors, cardinality, bytes",
		Long: "preview asks the agents of the selected, connected clusters to evaluate the bundle's profiles, targets and " +
			"inventories against what their clusters hold, without applying or exporting anything, and prints each " +
			"cluster's answer: per target the kind's state and the objects listed, matched and failed; per attribute the " +
			"values, distinct values and extraction errors with a few object names; per inventory the rows and the " +
			"estimated bytes of one export. No rows reach the hub: --samples asks for a few sample rows per target, " +
			"given only by agents started with --preview-samples. NAME names the bundle in the hub's audit log.\n\n" +
			"Exit codes: 0 when every asked cluster answered without errors; 1 when a cluster reports extraction errors, " +
			"a kind not served or forbidden, could not evaluate the bundle, or did not answer within --timeout (and for " +
			"refusals by the hub); 2 for usage errors and a hub that cannot be reached.",
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.check(); err != nil {
				return err
			}
			raw, err := readInput(env, file)
			if err != nil {
				return cmdutil.Usage(err)
			}
			sel, err := parseSelector(selector)
			if err != nil {
				return cmdutil.Usage(err)
			}
			if len(sel.GetMatchLabels()) == 0 {
				return cmdutil.Usage(errors.New("--selector is required: a preview asks a few clusters (for example ring=canary), not the whole fleet"))
			}
			req := &fleetv1.PreviewBundleRequest{Manifests: string(raw), ClusterSelector: sel, MaxSamples: samples,
				Timeout: durationpb.New(timeout)}
			if len(args) == 1 {
				req.Bundle = args[0]
			}
			return withHub(cmd, func(ctx context.Context, c fleetv1connect.FleetServiceClient) error {
				// The hub answers within the timeout; a margin for the call itself.
				ctx, cancel := context.WithTimeout(ctx, timeout+30*time.Second)
				defer cancel()
				resp, err := c.PreviewBundle(ctx, connect.NewRequest(req))
				if err != nil {
					return hubErr(err)
				}
				if err := out.print(env, resp.Msg, func() error { return writePreview(env.Out, resp.Msg) }); err != nil {
					return err
				}
				if problems := previewProblems(resp.Msg); len(problems) > 0 {
					return cmdutil.Findings("preview %s: %s", resp.Msg.GetPreviewId(), strings.Join(problems, "; "))
				}
				return nil
			})
		},
	}
	c.Flags().StringVarP(&file, "filename", "f", "", "Multi-document YAML of Kollect objects (- for standard input).")
	c.Flags().StringVarP(&selector, "selector", "l", "", "Clusters to ask: k=v,k2=v2 (required).")
	c.Flags().Int32Var(&samples, "samples", 0, "Sample rows per target, 0 to 5 (only agents started with --preview-samples give them).")
	c.Flags().DurationVar(&timeout, "timeout", 10*time.Second, "How long the hub waits for answers (at most 1m).")
	out.bind(c)
	return c
}

// previewProblems lists what makes a preview's exit code 1.
func previewProblems(p *fleetv1.PreviewBundleResponse) []string {
	var out []string
	for _, r := range p.GetResults() {
		if r.GetError() != "" {
			out = append(out, fmt.Sprintf("%s could not evaluate the bundle", r.GetCluster()))
			continue
		}
		var errs int64
		for _, t := range r.GetTargets() {
			if t.GetKindState() != fleetv1.PreviewKindState_PREVIEW_KIND_STATE_SERVED {
				out = append(out, fmt.Sprintf("%s: target %s is %s", r.GetCluster(), t.GetTarget(), kindState(t.GetKindState())))
			}
			errs += t.GetFailed()
			for _, a := range t.GetAttributes() {
				errs += a.GetErrors()
			}
		}
		if errs > 0 {
			out = append(out, fmt.Sprintf("%s reports extraction errors", r.GetCluster()))
		}
	}
	if n := len(p.GetPending()); n > 0 {
		out = append(out, fmt.Sprintf("%d cluster(s) did not answer: %s", n, strings.Join(p.GetPending(), ", ")))
	}
	return out
}

func kindState(s fleetv1.PreviewKindState) string {
	return strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(s.String(), "PREVIEW_KIND_STATE_")), "_", " ")
}

// writePreview prints a preview's answers cluster by cluster.
func writePreview(w io.Writer, p *fleetv1.PreviewBundleResponse) error {
	fmt.Fprintf(w, "preview %s: %d answered, %d pending, %d not connected\n", p.GetPreviewId(), len(p.GetResults()),
		len(p.GetPending()), len(p.GetNotConnected()))
	for _, r := range p.GetResults() {
		fmt.Fprintf(w, "\ncluster %s", r.GetCluster())
		if v := r.GetAgentVersion(); v != "" {
			fmt.Fprintf(w, " (agent %s", v)
			if r.GetTook() != nil {
				fmt.Fprintf(w, ", evaluated in %s", r.GetTook().AsDuration().Round(time.Millisecond))
			}
			fmt.Fprint(w, ")")
		}
		fmt.Fprintln(w)
		if r.GetError() != "" {
			fmt.Fprintf(w, "  could not evaluate the bundle: %s\n", r.GetError())
			continue
		}
		if err := writePreviewTargets(w, r); err != nil {
			return err
		}
		if len(r.GetInventories()) > 0 {
			tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "  INVENTORY\tTARGETS\tROWS\tEST. BYTES")
			for _, inv := range r.GetInventories() {
				fmt.Fprintf(tw, "  %s\t%s\t%d\t%s\n", inv.GetInventory(), strings.Join(inv.GetTargets(), ","), inv.GetRows(),
					humanBytes(inv.GetEstimatedBytes()))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
		}
		if r.GetSamplesRefused() {
			fmt.Fprintln(w, "  samples refused: the agent runs without --preview-samples")
		}
	}
	if len(p.GetPending()) > 0 {
		fmt.Fprintf(w, "\npending (asked, no answer in time): %s\n", strings.Join(p.GetPending(), ", "))
	}
	if len(p.GetNotConnected()) > 0 {
		fmt.Fprintf(w, "\nnot connected (not asked: offline, stale, never connected or revoked): %s\n", strings.Join(p.GetNotConnected(), ", "))
	}
	return nil
}

// writePreviewTargets prints one cluster's targets, then each target's attributes with
// their error samples, then its sample rows.
func writePreviewTargets(w io.Writer, r *fleetv1.PreviewResult) error {
	if len(r.GetTargets()) == 0 {
		fmt.Fprintln(w, "  no targets")
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  TARGET\tKIND\tSTATE\tLISTED\tMATCHED\tROWS\tFAILED")
	for _, t := range r.GetTargets() {
		gvk := t.GetVersion() + " " + t.GetKind()
		if t.GetGroup() != "" {
			gvk = t.GetGroup() + "/" + gvk
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%d\t%d\t%d\t%d\n", t.GetTarget(), gvk, kindState(t.GetKindState()), t.GetObjectsListed(),
			t.GetObjectsMatched(), t.GetRows(), t.GetFailed())
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, t := range r.GetTargets() {
		if t.GetMessage() != "" {
			fmt.Fprintf(w, "  %s: %s\n", t.GetTarget(), t.GetMessage())
		}
		if len(t.GetAttributes()) > 0 {
			tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
			fmt.Fprintf(tw, "  ATTRIBUTE (%s)\tVALUES\tDISTINCT\tERRORS\n", t.GetTarget())
			for _, a := range t.GetAttributes() {
				distinct := fmt.Sprint(a.GetDistinctValues())
				if a.GetDistinctValuesCapped() {
					distinct += "+"
				}
				fmt.Fprintf(tw, "  %s\t%d\t%s\t%d\n", a.GetName(), a.GetValues(), distinct, a.GetErrors())
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			for _, a := range t.GetAttributes() {
				for _, e := range a.GetErrorSamples() {
					fmt.Fprintf(w, "    %s on %s: %s\n", a.GetName(), e.GetObject(), e.GetMessage())
				}
			}
		}
		for _, s := range t.GetSamples() {
			fmt.Fprintf(w, "    sample %s: %s\n", s.GetObject(), s.GetAttributesJson())
		}
	}
	return nil
}

// humanBytes prints a size in binary units (1.5 KiB).
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
