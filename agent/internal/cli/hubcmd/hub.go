package hubcmd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"kollect.dev/agent/internal/hubdial"
	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
	"kollect.dev/proto/gen/kollect/fleet/v1/fleetv1connect"

	"kollect.dev/agent/internal/cli/cmdutil"
)

// hubLogin is what `kollect hub login` stores, in $KOLLECT_HUB_CONFIG or
// ~/.config/kollect/hub.json (mode 0600: it holds an API token).
type hubLogin struct {
	URL           string `json:"url"`
	Token         string `json:"token"`
	CAFingerprint string `json:"caFingerprint,omitempty"`
	CAFile        string `json:"caFile,omitempty"`
}

func hubConfigPath() (string, error) {
	if p := os.Getenv("KOLLECT_HUB_CONFIG"); p != "" {
		return p, nil
	}
	dir, err := os.UserConfigDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "kollect", "hub.json"), nil
}

func loadHubLogin() (*hubLogin, error) {
	p, err := hubConfigPath()
	if err != nil {
		return nil, err
	}
	raw, err := os.ReadFile(p)
	if err != nil {
		return nil, fmt.Errorf("not logged in to a hub (%v): run kollect hub login first", err)
	}
	l := &hubLogin{}
	if err := json.Unmarshal(raw, l); err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	return l, nil
}

// client builds a FleetService client that verifies the hub by CA pin, CA file or system roots
// (hubdial, the agent's own way to the hub), with the API token on every call. Unary calls
// without a deadline of their own get a minute; WatchFleet streams are not cut.
func (l *hubLogin) client() (fleetv1connect.FleetServiceClient, error) {
	token := l.Token
	conn, err := hubdial.New(hubdial.Options{URL: l.URL, CAFingerprint: l.CAFingerprint, CAFile: l.CAFile,
		Token: func() string { return token }, UnaryTimeout: time.Minute})
	if err != nil {
		return nil, err
	}
	return conn.Fleet(), nil
}

// hubErr maps an RPC failure to an exit code: refusals are findings (1), the rest usage or
// connection errors (2).
func hubErr(err error) error {
	switch connect.CodeOf(err) {
	case connect.CodeInvalidArgument, connect.CodePermissionDenied, connect.CodeFailedPrecondition, connect.CodeAlreadyExists, connect.CodeNotFound:
		return cmdutil.Findings("%v", err)
	}
	return cmdutil.Usage(err)
}

// New builds `kollect hub` and its subcommands: clusters, bundles, rollouts, tokens and agents,
// through the hub's FleetService.
func New(env *cmdutil.Env) *cobra.Command {
	hub := &cobra.Command{Use: "hub", Short: "Manage a fleet through its hub: clusters, bundles, rollouts, tokens"}
	var login hubLogin
	loginCmd := &cobra.Command{
		Use:   "login --url URL --token TOKEN [--ca-fingerprint sha256:…|--ca-file FILE]",
		Short: "Check a hub URL and API token, and remember them for the other hub commands",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if login.URL == "" || login.Token == "" {
				return cmdutil.Usage(errors.New("--url and --token are required"))
			}
			c, err := login.client()
			if err != nil {
				return cmdutil.Usage(err)
			}
			h, err := c.GetFleetHealth(cmd.Context(), connect.NewRequest(&fleetv1.GetFleetHealthRequest{}))
			if err != nil {
				return hubErr(err)
			}
			p, err := hubConfigPath()
			if err != nil {
				return cmdutil.Usage(err)
			}
			raw, _ := json.MarshalIndent(login, "", "  ")
			if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
				return cmdutil.Usage(err)
			}
			if err := os.WriteFile(p, raw, 0o600); err != nil {
				return cmdutil.Usage(err)
			}
			fmt.Fprintf(env.Out, "logged in to %s (%d clusters); saved to %s\n", login.URL, h.Msg.GetClustersTotal(), p)
			return nil
		},
	}
	loginCmd.Flags().StringVar(&login.URL, "url", "", "Hub URL, https://host:port.")
	loginCmd.Flags().StringVar(&login.Token, "token", "", "API token.")
	loginCmd.Flags().StringVar(&login.CAFingerprint, "ca-fingerprint", "", "Pin the hub's CA (sha256:… as the hub prints it).")
	loginCmd.Flags().StringVar(&login.CAFile, "ca-file", "", "PEM CA bundle that signed the hub's certificate.")
	hub.AddCommand(loginCmd, hubWhoAmICmd(env), hubClustersCmd(env), hubBundleCmd(env), hubRolloutCmd(env), hubTokenCmd(env), hubAgentCmd(env))
	return hub
}

func hubWhoAmICmd(env *cmdutil.Env) *cobra.Command {
	return &cobra.Command{
		Use:   "whoami",
		Short: "Print the name and role of the saved API token, and the hub it is for",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			l, err := loadHubLogin()
			if err != nil {
				return cmdutil.Usage(err)
			}
			c, err := l.client()
			if err != nil {
				return cmdutil.Usage(err)
			}
			resp, err := c.WhoAmI(cmd.Context(), connect.NewRequest(&fleetv1.WhoAmIRequest{}))
			if err != nil {
				return hubErr(err)
			}
			role := strings.ToLower(strings.TrimPrefix(resp.Msg.GetRole().String(), "ROLE_"))
			fmt.Fprintf(env.Out, "%s (%s) on %s\n", resp.Msg.GetName(), role, l.URL)
			return nil
		},
	}
}

// withHub runs fn with a client from the saved login.
func withHub(cmd *cobra.Command, fn func(context.Context, fleetv1connect.FleetServiceClient) error) error {
	l, err := loadHubLogin()
	if err != nil {
		return cmdutil.Usage(err)
	}
	c, err := l.client()
	if err != nil {
		return cmdutil.Usage(err)
	}
	return fn(cmd.Context(), c)
}

func hubBundleCmd(env *cmdutil.Env) *cobra.Command {
	b := &cobra.Command{Use: "bundle", Short: "Apply, preview, diff and list bundle revisions"}
	var file, selector, message string
	var dryRun, hold bool
	apply := &cobra.Command{
		Use:   "apply NAME -f FILE --selector k=v,... [--hold]",
		Short: "Upload a new revision of a bundle (validated by the hub)",
		Long: "apply uploads a new revision of a bundle. The hub validates it and sends it at once to every cluster the " +
			"selector matches, unless --hold is set: a held revision is stored and goes nowhere until " +
			"`kollect hub rollout start` moves the clusters to it in stages.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			raw, err := readInput(env, file)
			if err != nil {
				return cmdutil.Usage(err)
			}
			sel, err := parseSelector(selector)
			if err != nil {
				return cmdutil.Usage(err)
			}
			return withHub(cmd, func(ctx context.Context, c fleetv1connect.FleetServiceClient) error {
				resp, err := c.ApplyBundle(ctx, connect.NewRequest(&fleetv1.ApplyBundleRequest{Name: args[0], Manifests: string(raw),
					ClusterSelector: sel, Message: message, DryRun: dryRun, Hold: hold}))
				if err != nil {
					return hubErr(err)
				}
				verb := "created"
				switch {
				case dryRun:
					verb = "would create"
				case !resp.Msg.GetCreated():
					verb = "unchanged at"
				}
				held := ""
				if hold && resp.Msg.GetCreated() {
					held = " (held)"
				}
				fmt.Fprintf(env.Out, "bundle %s %s revision %d%s for %d clusters: %s\n", args[0], verb, resp.Msg.GetRevision().GetRevision(),
					held, len(resp.Msg.GetSelectedClusters()), strings.Join(resp.Msg.GetSelectedClusters(), ", "))
				if hold && resp.Msg.GetCreated() && !dryRun {
					fmt.Fprintf(env.Out, "distribute it with: kollect hub rollout start %s --revision %d\n", args[0], resp.Msg.GetRevision().GetRevision())
				}
				return nil
			})
		},
	}
	apply.Flags().StringVarP(&file, "filename", "f", "", "Multi-document YAML of Kollect objects (- for standard input).")
	apply.Flags().StringVarP(&selector, "selector", "l", "", "Clusters the bundle goes to: k=v,k2=v2 (empty: every cluster).")
	apply.Flags().StringVarP(&message, "message", "m", "", "Change note stored with the revision.")
	apply.Flags().BoolVar(&dryRun, "dry-run", false, "Validate and report without storing.")
	apply.Flags().BoolVar(&hold, "hold", false, "Store the revision without sending it anywhere; distribute it with kollect hub rollout start.")

	var from, to int64
	diff := &cobra.Command{
		Use:   "diff NAME [--from R] [--to R]",
		Short: "Show the unified diff between two revisions (default: the latest and the one before)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withHub(cmd, func(ctx context.Context, c fleetv1connect.FleetServiceClient) error {
				resp, err := c.DiffBundleRevisions(ctx, connect.NewRequest(&fleetv1.DiffBundleRevisionsRequest{Name: args[0], FromRevision: from, ToRevision: to}))
				if err != nil {
					return hubErr(err)
				}
				fmt.Fprintf(env.Out, "bundle %s: revision %d -> %d\n%s", args[0], resp.Msg.GetFromRevision(), resp.Msg.GetToRevision(), resp.Msg.GetUnifiedDiff())
				if resp.Msg.GetSelectorChanged() {
					fmt.Fprintln(env.Out, "the cluster selector changed")
				}
				return nil
			})
		},
	}
	diff.Flags().Int64Var(&from, "from", 0, "Older revision (0: the one before --to).")
	diff.Flags().Int64Var(&to, "to", 0, "Newer revision (0: the latest).")

	history := &cobra.Command{
		Use:   "history NAME",
		Short: "List a bundle's revisions",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withHub(cmd, func(ctx context.Context, c fleetv1connect.FleetServiceClient) error {
				resp, err := c.ListBundleRevisions(ctx, connect.NewRequest(&fleetv1.ListBundleRevisionsRequest{Name: args[0]}))
				if err != nil {
					return hubErr(err)
				}
				w := tabwriter.NewWriter(env.Out, 0, 4, 2, ' ', 0)
				fmt.Fprintln(w, "REVISION\tCREATED\tBY\tOBJECTS\tMESSAGE")
				for _, r := range resp.Msg.GetRevisions() {
					fmt.Fprintf(w, "%d\t%s\t%s\t%d\t%s\n", r.GetRevision(), r.GetCreatedAt().AsTime().Format(time.RFC3339), r.GetCreatedBy(),
						len(r.GetObjects()), r.GetMessage())
				}
				return w.Flush()
			})
		},
	}
	b.AddCommand(apply, diff, history, bundlePreviewCmd(env))
	return b
}

func hubTokenCmd(env *cmdutil.Env) *cobra.Command {
	t := &cobra.Command{Use: "token", Short: "Create and revoke bootstrap and API tokens (admin)"}
	var ttl time.Duration
	var uses int64
	var allowReplace, requireApproval bool
	var description, clusterName string
	var labels map[string]string
	create := &cobra.Command{
		Use:   "create",
		Short: "Create a bootstrap token for registering agents; the secret is printed once",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withHub(cmd, func(ctx context.Context, c fleetv1connect.FleetServiceClient) error {
				resp, err := c.CreateBootstrapToken(ctx, connect.NewRequest(&fleetv1.CreateBootstrapTokenRequest{
					Description: description, Ttl: durationpb.New(ttl), MaxUses: uses, AllowReplace: allowReplace,
					ClusterName: clusterName, Labels: labels, RequireApproval: requireApproval}))
				if err != nil {
					return hubErr(err)
				}
				tok := resp.Msg.GetToken()
				bound := ""
				if n := tok.GetClusterName(); n != "" {
					bound += ", cluster " + n
				}
				if l := tok.GetLabels(); len(l) > 0 {
					bound += ", labels exactly " + labelString(l)
				}
				if tok.GetRequireApproval() {
					bound += ", registrations wait for approval"
				}
				fmt.Fprintf(env.Out, "token %s (expires %s, %d uses%s)\nsecret: %s\n", tok.GetId(),
					tok.GetExpiresAt().AsTime().Format(time.RFC3339), uses, bound, resp.Msg.GetSecret())
				return nil
			})
		},
	}
	create.Flags().DurationVar(&ttl, "ttl", 24*time.Hour, "How long the token can be used.")
	create.Flags().Int64Var(&uses, "uses", 1, "How many agents may register with it.")
	create.Flags().BoolVar(&allowReplace, "allow-replace", false, "Allow taking over an existing cluster name.")
	create.Flags().StringVar(&description, "description", "", "What the token is for (audit log).")
	create.Flags().StringVar(&clusterName, "cluster-name", "", "Bind the token to this cluster name: it registers no other.")
	create.Flags().StringToStringVar(&labels, "labels", nil, "Bind the token to these cluster labels (k=v,…): a cluster registered with it must ask for exactly these.")
	create.Flags().BoolVar(&requireApproval, "require-approval", false, "Clusters registered with the token wait for an admin's approval (kollect hub clusters approve NAME) and receive no bundle until then: for a token handed to many people.")

	var role, name string
	var apiTTL time.Duration
	createAPI := &cobra.Command{
		Use:   "create-api --name NAME --role viewer|operator|admin",
		Short: "Create an API token for people and automation; the secret is printed once",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			r, ok := fleetv1.Role_value["ROLE_"+strings.ToUpper(role)]
			if !ok || r == 0 {
				return cmdutil.Usage(fmt.Errorf("--role %q: want viewer, operator or admin", role))
			}
			return withHub(cmd, func(ctx context.Context, c fleetv1connect.FleetServiceClient) error {
				req := &fleetv1.CreateAPITokenRequest{Name: name, Role: fleetv1.Role(r)}
				if apiTTL > 0 {
					req.Ttl = durationpb.New(apiTTL)
				}
				resp, err := c.CreateAPIToken(ctx, connect.NewRequest(req))
				if err != nil {
					return hubErr(err)
				}
				expires := "no expiry"
				if e := resp.Msg.GetToken().GetExpiresAt(); e != nil {
					expires = "expires " + e.AsTime().Format(time.RFC3339)
				}
				fmt.Fprintf(env.Out, "api token %s (%s, %s)\nsecret: %s\n", resp.Msg.GetToken().GetId(), role, expires, resp.Msg.GetSecret())
				return nil
			})
		},
	}
	createAPI.Flags().StringVar(&name, "name", "", "Unique name (audit log).")
	createAPI.Flags().StringVar(&role, "role", "viewer", "viewer, operator or admin.")
	createAPI.Flags().DurationVar(&apiTTL, "ttl", 0, "How long the token works (0: until revoked).")

	var api bool
	revoke := &cobra.Command{
		Use:   "revoke ID",
		Short: "Revoke a bootstrap token (or an API token with --api)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withHub(cmd, func(ctx context.Context, c fleetv1connect.FleetServiceClient) error {
				var err error
				if api {
					_, err = c.RevokeAPIToken(ctx, connect.NewRequest(&fleetv1.RevokeAPITokenRequest{Id: args[0]}))
				} else {
					_, err = c.RevokeBootstrapToken(ctx, connect.NewRequest(&fleetv1.RevokeBootstrapTokenRequest{Id: args[0]}))
				}
				if err != nil {
					return hubErr(err)
				}
				fmt.Fprintf(env.Out, "revoked %s\n", args[0])
				return nil
			})
		},
	}
	revoke.Flags().BoolVar(&api, "api", false, "ID is an API token.")
	t.AddCommand(create, createAPI, revoke)
	return t
}

func hubAgentCmd(env *cmdutil.Env) *cobra.Command {
	a := &cobra.Command{Use: "agent", Short: "Revoke a cluster's agent, release a revoked cluster's name (admin)"}
	a.AddCommand(&cobra.Command{
		Use:   "release CLUSTER",
		Short: "Let the name of a revoked cluster be registered again (by the next agent with a valid bootstrap token)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withHub(cmd, func(ctx context.Context, c fleetv1connect.FleetServiceClient) error {
				if _, err := c.ReleaseCluster(ctx, connect.NewRequest(&fleetv1.ReleaseClusterRequest{ClusterName: args[0]})); err != nil {
					return hubErr(err)
				}
				fmt.Fprintf(env.Out, "released the name %s: the next agent registering it with a valid bootstrap token takes it\n", args[0])
				return nil
			})
		},
	})
	a.AddCommand(&cobra.Command{
		Use:   "revoke CLUSTER",
		Short: "Revoke the agent of a cluster; it is refused on its next call and its name stays blocked until released",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withHub(cmd, func(ctx context.Context, c fleetv1connect.FleetServiceClient) error {
				if _, err := c.RevokeAgent(ctx, connect.NewRequest(&fleetv1.RevokeAgentRequest{ClusterName: args[0]})); err != nil {
					return hubErr(err)
				}
				fmt.Fprintf(env.Out, "revoked the agent of %s\n", args[0])
				return nil
			})
		},
	})
	return a
}

func readInput(env *cmdutil.Env, file string) ([]byte, error) {
	switch file {
	case "":
		return nil, errors.New("-f FILE is required")
	case "-":
		return io.ReadAll(env.In)
	}
	return os.ReadFile(file)
}

func parseSelector(s string) (*fleetv1.LabelSelector, error) {
	sel := &fleetv1.LabelSelector{MatchLabels: map[string]string{}}
	for _, kv := range strings.Split(s, ",") {
		if kv = strings.TrimSpace(kv); kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, fmt.Errorf("--selector %q: want k=v,k2=v2", s)
		}
		sel.MatchLabels[k] = v
	}
	return sel, nil
}

func printProto(env *cmdutil.Env, m proto.Message) error {
	raw, err := protojson.MarshalOptions{Multiline: true, Indent: "  "}.Marshal(m)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(env.Out, string(raw))
	return err
}

// labelString writes labels as k=v,… sorted by key.
func labelString(l map[string]string) string {
	keys := slices.Sorted(maps.Keys(l))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + l[k]
	}
	return strings.Join(parts, ",")
}
