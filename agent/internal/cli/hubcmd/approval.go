package hubcmd

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
	"kollect.dev/proto/gen/kollect/fleet/v1/fleetv1connect"

	"kollect.dev/agent/internal/cli/cmdutil"
)

// newRegistrationWindow is how long a registration is listed as new, so that an admin who
// looks once a day sees every cluster that joined, approved at once or not.
const newRegistrationWindow = 24 * time.Hour

func pendingApproval(cl *fleetv1.Cluster) bool {
	return cl.GetApproval() == fleetv1.ClusterApproval_CLUSTER_APPROVAL_PENDING
}

// listedState is the STATE column: a registration waiting for approval or rejected says so
// before its liveness.
func listedState(cl *fleetv1.Cluster) string {
	switch cl.GetApproval() {
	case fleetv1.ClusterApproval_CLUSTER_APPROVAL_PENDING:
		return "PENDING APPROVAL"
	case fleetv1.ClusterApproval_CLUSTER_APPROVAL_REJECTED:
		return "REJECTED"
	}
	return strings.TrimPrefix(cl.GetState().String(), "CLUSTER_STATE_")
}

// newRegistration reports whether a cluster is listed under new registrations: pending
// approval, or registered within newRegistrationWindow of now.
func newRegistration(cl *fleetv1.Cluster, now time.Time) bool {
	if pendingApproval(cl) {
		return true
	}
	at := cl.GetRegisteredAt()
	return at != nil && cl.GetApproval() != fleetv1.ClusterApproval_CLUSTER_APPROVAL_REJECTED &&
		now.Sub(at.AsTime()) < newRegistrationWindow
}

// tokenText names a registration's bootstrap token: its id and description.
func tokenText(r *fleetv1.Registration) string {
	switch {
	case r.GetBootstrapTokenId() == "":
		return "(not recorded)"
	case r.GetBootstrapTokenDescription() != "":
		return fmt.Sprintf("%s (%s)", r.GetBootstrapTokenId(), r.GetBootstrapTokenDescription())
	}
	return r.GetBootstrapTokenId()
}

// writeRegistrations lists the new registrations — who registered, with which token, when,
// from where — and how to decide the pending ones; nothing when there is none.
func writeRegistrations(out io.Writer, clusters []*fleetv1.Cluster, now time.Time) error {
	var fresh []*fleetv1.Cluster
	pending := 0
	for _, cl := range clusters {
		if newRegistration(cl, now) {
			fresh = append(fresh, cl)
		}
		if pendingApproval(cl) {
			pending++
		}
	}
	if len(fresh) == 0 {
		return nil
	}
	fmt.Fprintln(out, "\nNew registrations (pending approval, or registered in the last 24 h):")
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "CLUSTER\tAPPROVAL\tREGISTERED\tBOOTSTRAP TOKEN\tTOKEN CREATED BY\tFROM\tAGENT")
	for _, cl := range fresh {
		r := cl.GetRegistration()
		approval := "approved"
		if pendingApproval(cl) {
			approval = "PENDING"
		} else if by := r.GetDecidedBy(); by != "" {
			approval = "approved by " + by
		}
		fmt.Fprintf(w, "%s\t%s\t%s ago\t%s\t%s\t%s\t%s\n", cl.GetName(), approval,
			now.Sub(cl.GetRegisteredAt().AsTime()).Round(time.Second), tokenText(r), orDash(r.GetBootstrapTokenCreatedBy()),
			orDash(r.GetPeerAddress()), orDash(r.GetAgentVersion()))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if pending > 0 {
		fmt.Fprintln(out, "A cluster pending approval receives no bundle. Decide with: kollect hub clusters approve NAME | kollect hub clusters reject NAME")
	}
	return nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// approvalCmds are `kollect hub clusters approve` and `reject`.
func approvalCmds(env *cmdutil.Env) []*cobra.Command {
	approve := &cobra.Command{
		Use:   "approve NAME",
		Short: "Approve a cluster's registration pending approval: it receives its bundles at once (admin)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withHub(cmd, func(ctx context.Context, c fleetv1connect.FleetServiceClient) error {
				if _, err := c.ApproveCluster(ctx, connect.NewRequest(&fleetv1.ApproveClusterRequest{ClusterName: args[0]})); err != nil {
					return hubErr(err)
				}
				fmt.Fprintf(env.Out, "approved the registration of %s: it receives the bundles that select it\n", args[0])
				return nil
			})
		},
	}
	reject := &cobra.Command{
		Use:   "reject NAME",
		Short: "Reject a cluster's registration: its agent is revoked, and the token it used can never register the name again (admin)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withHub(cmd, func(ctx context.Context, c fleetv1connect.FleetServiceClient) error {
				resp, err := c.RejectCluster(ctx, connect.NewRequest(&fleetv1.RejectClusterRequest{ClusterName: args[0]}))
				if err != nil {
					return hubErr(err)
				}
				r := resp.Msg.GetRegistration()
				fmt.Fprintf(env.Out, "rejected the registration of %s (bootstrap token %s, from %s): its agent is revoked\n",
					args[0], tokenText(r), orDash(r.GetPeerAddress()))
				if id := r.GetBootstrapTokenId(); id != "" {
					fmt.Fprintf(env.Out, "if the token leaked, revoke it: kollect hub token revoke %s\n", id)
				}
				return nil
			})
		},
	}
	return []*cobra.Command{approve, reject}
}
