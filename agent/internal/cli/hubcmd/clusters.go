package hubcmd

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"

	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
	"kollect.dev/proto/gen/kollect/fleet/v1/fleetv1connect"

	"kollect.dev/agent/internal/cli/cmdutil"
)

// notApplied is a bundle object a cluster's agent refused or failed to apply, with its
// reason. ListClusters carries only a count per bundle; the reasons are in each cluster's
// last heartbeat, which GetCluster returns: a count without a reason sends the operator to
// curl, so `hub clusters` asks for the clusters that have any.
type notApplied struct {
	Cluster string          `json:"cluster"`
	Bundle  string          `json:"bundle"`
	Object  json.RawMessage `json:"object"`
	Result  string          `json:"result"`
	Message string          `json:"message"`
	ref     *fleetv1.ObjectRef
}

func hubClustersCmd(env *cmdutil.Env) *cobra.Command {
	var selector string
	var asJSON bool
	c := &cobra.Command{
		Use:   "clusters",
		Short: "List clusters with their state, versions, bundle revisions and the objects their agents did not apply",
		Long: "List clusters with their state, versions and bundle revisions. Below the table, the new registrations " +
			"(pending approval, or registered in the last 24 h) with the bootstrap token and address they came with, and " +
			"(under objectsNotApplied with --json) each bundle object an agent refused or failed to apply, with its reason. " +
			"A cluster whose registration waits for an admin is PENDING APPROVAL and receives no bundle: decide with " +
			"`kollect hub clusters approve NAME` or `kollect hub clusters reject NAME`.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withHub(cmd, func(ctx context.Context, c fleetv1connect.FleetServiceClient) error {
				resp, err := c.ListClusters(ctx, connect.NewRequest(&fleetv1.ListClustersRequest{LabelSelector: selector}))
				if err != nil {
					return hubErr(err)
				}
				problems, err := objectsNotApplied(ctx, c, resp.Msg.GetClusters())
				if err != nil {
					return err
				}
				if asJSON {
					return writeClustersJSON(env.Out, resp.Msg, problems)
				}
				return writeClusters(env.Out, resp.Msg.GetClusters(), problems, time.Now())
			})
		},
	}
	c.Flags().StringVarP(&selector, "selector", "l", "", "Only clusters whose labels match (k=v,k2=v2).")
	c.Flags().BoolVar(&asJSON, "json", false, "Print JSON.")
	c.AddCommand(approvalCmds(env)...)
	return c
}

// notAppliedCount is how many bundle objects the cluster's agent refused or failed to apply.
func notAppliedCount(cl *fleetv1.Cluster) int64 {
	var n int64
	for _, b := range cl.GetBundles() {
		n += b.GetFailedObjects()
	}
	return n
}

// objectsNotApplied reads the last heartbeat of each cluster that has objects not applied.
func objectsNotApplied(ctx context.Context, c fleetv1connect.FleetServiceClient, clusters []*fleetv1.Cluster) ([]notApplied, error) {
	var out []notApplied
	for _, cl := range clusters {
		if notAppliedCount(cl) == 0 {
			continue
		}
		resp, err := c.GetCluster(ctx, connect.NewRequest(&fleetv1.GetClusterRequest{Name: cl.GetName()}))
		if err != nil {
			return nil, hubErr(err)
		}
		for _, b := range resp.Msg.GetStatus().GetBundles() {
			for _, o := range b.GetObjects() {
				if o.GetResult() != fleetv1.ApplyResult_APPLY_RESULT_FAILED && o.GetResult() != fleetv1.ApplyResult_APPLY_RESULT_REFUSED {
					continue
				}
				ref, err := protojson.Marshal(o.GetObject())
				if err != nil {
					return nil, fmt.Errorf("encoding an object reference: %w", err)
				}
				out = append(out, notApplied{Cluster: cl.GetName(), Bundle: b.GetBundle(), Object: ref,
					Result: o.GetResult().String(), Message: o.GetMessage(), ref: o.GetObject()})
			}
		}
	}
	return out, nil
}

// writeClusters prints the cluster table and, below it, every object not applied by reason.
func writeClusters(out io.Writer, clusters []*fleetv1.Cluster, problems []notApplied, now time.Time) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "CLUSTER\tSTATE\tAGENT\tKUBERNETES\tIN SYNC\tNOT APPLIED\tSINK ERRORS\tLAST HEARTBEAT")
	for _, cl := range clusters {
		hb := "never"
		if cl.GetLastHeartbeat() != nil {
			hb = now.Sub(cl.GetLastHeartbeat().AsTime()).Round(time.Second).String() + " ago"
		}
		// Nothing was sent to a cluster pending approval: "false" would read as skew.
		inSync := fmt.Sprint(cl.GetConfigInSync())
		if pendingApproval(cl) {
			inSync = "-"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\n", cl.GetName(), listedState(cl),
			cl.GetAgentVersion(), cl.GetKubernetesVersion(), inSync, notAppliedCount(cl), cl.GetSinkErrors(), hb)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if err := writeRegistrations(out, clusters, now); err != nil {
		return err
	}
	if len(problems) == 0 {
		return nil
	}
	fmt.Fprintln(out, "\nObjects not applied:")
	w = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "CLUSTER\tBUNDLE\tOBJECT\tRESULT\tREASON")
	for _, p := range problems {
		obj := p.ref.GetKind() + " " + p.ref.GetName()
		if p.ref.GetNamespace() != "" {
			obj = p.ref.GetKind() + " " + p.ref.GetNamespace() + "/" + p.ref.GetName()
		}
		reason := p.Message
		if reason == "" {
			reason = "(no reason given)"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", p.Cluster, p.Bundle, obj,
			strings.ToLower(strings.TrimPrefix(p.Result, "APPLY_RESULT_")), strings.ReplaceAll(reason, "\n", " "))
	}
	return w.Flush()
}

// writeClustersJSON prints the hub's answer as it is, with objectsNotApplied beside clusters.
func writeClustersJSON(out io.Writer, resp *fleetv1.ListClustersResponse, problems []notApplied) error {
	raw, err := protojson.Marshal(resp)
	if err != nil {
		return err
	}
	doc := map[string]json.RawMessage{}
	if err := json.Unmarshal(raw, &doc); err != nil {
		return fmt.Errorf("re-reading the hub's answer: %w", err)
	}
	if problems == nil {
		problems = []notApplied{}
	}
	if doc["objectsNotApplied"], err = json.Marshal(problems); err != nil {
		return err
	}
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(out, string(b))
	return err
}
