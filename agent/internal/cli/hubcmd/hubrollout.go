package hubcmd

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	sigsyaml "sigs.k8s.io/yaml"

	fleetv1 "kollect.dev/proto/gen/kollect/fleet/v1"
	"kollect.dev/proto/gen/kollect/fleet/v1/fleetv1connect"

	"kollect.dev/agent/internal/cli/cmdutil"
)

// hubOutputs are the -o values of the rollout commands.
var hubOutputs = []string{"table", "json", "yaml"}

// outputFlag is -o for commands that print hub objects.
type outputFlag struct{ format string }

func (o *outputFlag) bind(c *cobra.Command) {
	c.Flags().StringVarP(&o.format, "output", "o", "table", "Output format: "+strings.Join(hubOutputs, ", ")+".")
	_ = c.RegisterFlagCompletionFunc("output", cobra.FixedCompletions(hubOutputs, cobra.ShellCompDirectiveNoFileComp))
}

func (o *outputFlag) check() error {
	for _, f := range hubOutputs {
		if o.format == f {
			return nil
		}
	}
	return cmdutil.Usage(fmt.Errorf("unknown output format %q (want one of %s)", o.format, strings.Join(hubOutputs, ", ")))
}

// print writes m as JSON or YAML, or calls table.
func (o *outputFlag) print(env *cmdutil.Env, m proto.Message, table func() error) error {
	if o.format == "table" {
		return table()
	}
	raw, err := protojson.MarshalOptions{Multiline: true, Indent: "  "}.Marshal(m)
	if err != nil {
		return fmt.Errorf("encoding the answer: %w", err)
	}
	if o.format == "yaml" {
		if raw, err = sigsyaml.JSONToYAML(raw); err != nil {
			return fmt.Errorf("encoding the answer: %w", err)
		}
		_, err = env.Out.Write(raw)
		return err
	}
	_, err = fmt.Fprintf(env.Out, "%s\n", raw)
	return err
}

func hubRolloutCmd(env *cmdutil.Env) *cobra.Command {
	r := &cobra.Command{
		Use:   "rollout",
		Short: "Move clusters to a bundle revision in stages, gated on health and data quality",
		Long: "A rollout moves the clusters of a bundle to one revision: a canary wave first, then waves of a set size, " +
			"each cluster gated on the revision being applied, its inventories Ready, no new sink errors and sane item " +
			"counts. Apply the revision with `kollect hub bundle apply --hold` first.\n\n" +
			"Exit codes of start --watch, status --watch and rollback --wait: 0 when the rollout completes, 1 when it " +
			"pauses, aborts or is superseded by a rollback (and for refusals by the hub), 2 for usage errors and a hub " +
			"that cannot be reached. A rollout awaiting approval keeps the watch waiting.",
	}
	r.AddCommand(rolloutStartCmd(env), rolloutStatusCmd(env), rolloutPauseCmd(env), rolloutResumeCmd(env), rolloutAbortCmd(env),
		rolloutRollbackCmd(env), rolloutHistoryCmd(env))
	return r
}

// strategyFlags are the flags of `rollout start` that make a RolloutStrategy.
type strategyFlags struct {
	canary, waveSize                                  string
	maxConcurrency, maxFailures                       int32
	minHealthy, progressDeadline                      time.Duration
	requireApproval                                   bool
	itemCountChange                                   float64
	skipInventoryGate, skipSinkGate, skipCoverageGate bool
}

func (f *strategyFlags) bind(c *cobra.Command) {
	fl := c.Flags()
	fl.StringVar(&f.canary, "canary", "", "Clusters of the first wave, a label selector: 'ring=canary' or 'ring in (a,b),!legacy' (default: no canary wave).")
	fl.StringVar(&f.waveSize, "wave-size", "", "Clusters per wave after the canary: a count (10) or a percentage of the rollout's clusters (10%) (default: one wave).")
	fl.Int32Var(&f.maxConcurrency, "max-concurrency", 0, "Clusters of a wave moving at once (0: the whole wave).")
	fl.DurationVar(&f.minHealthy, "min-healthy", 0, "How long a moved cluster must pass every gate without a break (0: the first passing heartbeat).")
	fl.DurationVar(&f.progressDeadline, "progress-deadline", defaultProgressDeadline, "Time a wave has, from its start, for its clusters to be healthy.")
	fl.Int32Var(&f.maxFailures, "max-failures", 0, "Failed clusters tolerated; one more pauses the rollout.")
	fl.BoolVar(&f.requireApproval, "require-approval", false, "Wait for kollect hub rollout resume after every wave.")
	fl.Float64Var(&f.itemCountChange, "max-item-count-change", 0, "Fail a cluster whose inventory item count moves by more than this percentage (0: no check).")
	fl.BoolVar(&f.skipInventoryGate, "skip-inventory-gate", false, "Do not require every inventory to be Ready.")
	fl.BoolVar(&f.skipSinkGate, "skip-sink-gate", false, "Do not fail clusters on new sink export errors.")
	fl.BoolVar(&f.skipCoverageGate, "skip-coverage-gate", false, "Do not fail clusters whose targets lose coverage (forbidden, kind not served, …) with the move.")
}

func (f *strategyFlags) strategy() (*fleetv1.RolloutStrategy, error) {
	s := &fleetv1.RolloutStrategy{
		MaxConcurrency:   f.maxConcurrency,
		MinHealthy:       durationpb.New(f.minHealthy),
		ProgressDeadline: durationpb.New(f.progressDeadline),
		MaxFailures:      f.maxFailures,
		RequireApproval:  f.requireApproval,
		Gates: &fleetv1.RolloutGates{SkipInventoriesReady: f.skipInventoryGate, SkipSinkErrors: f.skipSinkGate, SkipCoverage: f.skipCoverageGate,
			MaxItemCountChangePercent: f.itemCountChange},
	}
	switch {
	case f.maxConcurrency < 0:
		return nil, errors.New("--max-concurrency must not be negative")
	case f.maxFailures < 0:
		return nil, errors.New("--max-failures must not be negative")
	case f.minHealthy < 0:
		return nil, errors.New("--min-healthy must not be negative")
	case f.progressDeadline <= 0:
		return nil, errors.New("--progress-deadline must be positive")
	case f.itemCountChange < 0:
		return nil, errors.New("--max-item-count-change must not be negative")
	}
	if f.canary != "" {
		sel, err := parseLabelSelector(f.canary)
		if err != nil {
			return nil, fmt.Errorf("--canary: %w", err)
		}
		s.CanarySelector = sel
	}
	ws, err := parseWaveSize(f.waveSize)
	if err != nil {
		return nil, err
	}
	s.WaveSize = ws
	return s, nil
}

// parseWaveSize reads "10" (clusters) or "10%" (of the rollout's clusters); "" is unset.
func parseWaveSize(s string) (*fleetv1.WaveSize, error) {
	if s == "" {
		return nil, nil
	}
	num, percent := strings.CutSuffix(strings.TrimSpace(s), "%")
	n, err := strconv.ParseInt(num, 10, 32)
	switch {
	case err != nil || n < 1:
		return nil, fmt.Errorf("--wave-size %q: want a number of clusters (10) or a percentage (10%%), at least 1", s)
	case percent && n > 100:
		return nil, fmt.Errorf("--wave-size %q: a percentage is at most 100%%", s)
	case percent:
		return &fleetv1.WaveSize{Size: &fleetv1.WaveSize_Percent{Percent: int32(n)}}, nil
	}
	return &fleetv1.WaveSize{Size: &fleetv1.WaveSize_Count{Count: int32(n)}}, nil
}

// parseLabelSelector reads Kubernetes selector syntax (k=v, k!=v, k in (a,b), k notin (a),
// k, !k) into the protocol's selector.
func parseLabelSelector(s string) (*fleetv1.LabelSelector, error) {
	parsed, err := labels.Parse(s)
	if err != nil {
		return nil, err
	}
	reqs, _ := parsed.Requirements()
	sel := &fleetv1.LabelSelector{}
	for _, r := range reqs {
		values := r.Values().List()
		sort.Strings(values)
		var op string
		switch r.Operator() {
		case selection.Equals, selection.DoubleEquals:
			if sel.MatchLabels == nil {
				sel.MatchLabels = map[string]string{}
			}
			sel.MatchLabels[r.Key()] = values[0]
			continue
		case selection.In:
			op = "In"
		case selection.NotIn, selection.NotEquals:
			op = "NotIn"
		case selection.Exists:
			op = "Exists"
		case selection.DoesNotExist:
			op = "DoesNotExist"
		default:
			return nil, fmt.Errorf("%q: operator %s is not supported for cluster labels", s, r.Operator())
		}
		sel.MatchExpressions = append(sel.MatchExpressions, &fleetv1.LabelSelectorRequirement{Key: r.Key(), Operator: op, Values: values})
	}
	return sel, nil
}

// parseRolloutID reads a rollout id argument.
func parseRolloutID(s string) (int64, error) {
	id, err := strconv.ParseInt(strings.TrimPrefix(s, "#"), 10, 64)
	if err != nil || id < 1 {
		return 0, cmdutil.Usage(fmt.Errorf("%q is not a rollout id (a positive number; see kollect hub rollout history)", s))
	}
	return id, nil
}

func rolloutStartCmd(env *cmdutil.Env) *cobra.Command {
	var sf strategyFlags
	var out outputFlag
	var revision int64
	var dryRun, watch bool
	c := &cobra.Command{
		Use:   "start BUNDLE [--revision N] [--canary SELECTOR] [--wave-size N|N%] [flags]",
		Short: "Start a staged rollout of a bundle revision (the latest by default)",
		Long: "start moves the clusters of a bundle to a revision in waves: the clusters --canary selects first, then the " +
			"others in waves of --wave-size. A wave starts when the previous one is complete; each moved cluster must pass " +
			"the gates for --min-healthy within --progress-deadline of its wave's start. More than --max-failures failed " +
			"clusters pause the rollout. --dry-run prints which clusters land in which wave and starts nothing; --watch " +
			"follows the rollout until it completes (exit 0) or stops (exit 1).",
		Example: "  kollect hub bundle apply inventory -f bundle.yaml --selector env=prod --hold\n" +
			"  kollect hub rollout start inventory --canary ring=canary --wave-size 25% --min-healthy 1m --max-item-count-change 20 --dry-run\n" +
			"  kollect hub rollout start inventory --canary ring=canary --wave-size 25% --min-healthy 1m --max-item-count-change 20 --watch",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.check(); err != nil {
				return err
			}
			if watch && out.format != "table" {
				return cmdutil.Usage(errors.New("--watch draws a live display; it cannot be combined with -o " + out.format))
			}
			strategy, err := sf.strategy()
			if err != nil {
				return cmdutil.Usage(err)
			}
			return withHub(cmd, func(ctx context.Context, c fleetv1connect.FleetServiceClient) error {
				resp, err := c.StartRollout(ctx, connect.NewRequest(&fleetv1.StartRolloutRequest{Bundle: args[0], Revision: revision,
					Strategy: strategy, DryRun: dryRun}))
				if err != nil {
					return hubErr(err)
				}
				r := resp.Msg.GetRollout()
				if err := out.print(env, resp.Msg, func() error { return writePlan(env.Out, r, dryRun) }); err != nil {
					return err
				}
				if !watch || dryRun {
					return nil
				}
				fmt.Fprintln(env.Out)
				return followRollout(ctx, env, c, r.GetId())
			})
		},
	}
	sf.bind(c)
	out.bind(c)
	c.Flags().Int64Var(&revision, "revision", 0, "Revision to roll out (0: the latest).")
	c.Flags().BoolVar(&dryRun, "dry-run", false, "Print the plan (which clusters land in which wave) without starting anything.")
	c.Flags().BoolVarP(&watch, "watch", "w", false, "Follow the rollout until it completes or stops.")
	return c
}

func rolloutStatusCmd(env *cmdutil.Env) *cobra.Command {
	var out outputFlag
	var bundle string
	var watch, all bool
	c := &cobra.Command{
		Use:   "status [ID | --bundle BUNDLE] [--watch]",
		Short: "Show a rollout's waves and the clusters that fail a gate; --watch follows it live",
		Long: "status shows a rollout (by id, or the newest of --bundle): one row per wave with its counts, and the " +
			"clusters that failed or fail a gate, with the gate and its message (--clusters lists every cluster). " +
			"--watch follows the rollout: redrawn in place on a terminal, plain appended lines otherwise; it ends with " +
			"exit code 0 when the rollout completes and 1 when it pauses, aborts or is superseded.",
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.check(); err != nil {
				return err
			}
			if watch && out.format != "table" {
				return cmdutil.Usage(errors.New("--watch draws a live display; it cannot be combined with -o " + out.format))
			}
			req := &fleetv1.GetRolloutRequest{Bundle: bundle}
			switch {
			case len(args) == 1 && bundle != "":
				return cmdutil.Usage(errors.New("give a rollout ID or --bundle, not both"))
			case len(args) == 1:
				id, err := parseRolloutID(args[0])
				if err != nil {
					return err
				}
				req.Id = id
			case bundle == "":
				return cmdutil.Usage(errors.New("give a rollout ID or --bundle BUNDLE (kollect hub rollout history lists them)"))
			}
			return withHub(cmd, func(ctx context.Context, c fleetv1connect.FleetServiceClient) error {
				resp, err := c.GetRollout(ctx, connect.NewRequest(req))
				if err != nil {
					return hubErr(err)
				}
				if watch {
					return followRollout(ctx, env, c, resp.Msg.GetRollout().GetId())
				}
				return out.print(env, resp.Msg, func() error { return writeRollout(env.Out, resp.Msg.GetRollout(), time.Now(), all) })
			})
		},
	}
	out.bind(c)
	c.Flags().StringVar(&bundle, "bundle", "", "The newest rollout of this bundle.")
	c.Flags().BoolVarP(&watch, "watch", "w", false, "Follow the rollout until it completes or stops.")
	c.Flags().BoolVar(&all, "clusters", false, "List every cluster, not only those failing a gate.")
	return c
}

// rolloutActionCmd builds pause, resume and abort: one call on a rollout id, then one line.
func rolloutActionCmd(env *cmdutil.Env, use, short string, withReason bool,
	call func(ctx context.Context, c fleetv1connect.FleetServiceClient, id int64, reason string) (*fleetv1.Rollout, error)) *cobra.Command {
	var out outputFlag
	var reason string
	c := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.check(); err != nil {
				return err
			}
			id, err := parseRolloutID(args[0])
			if err != nil {
				return err
			}
			return withHub(cmd, func(ctx context.Context, c fleetv1connect.FleetServiceClient) error {
				r, err := call(ctx, c, id, reason)
				if err != nil {
					return hubErr(err)
				}
				return out.print(env, r, func() error {
					_, err := fmt.Fprintln(env.Out, rolloutTitle(r))
					return err
				})
			})
		},
	}
	out.bind(c)
	if withReason {
		c.Flags().StringVar(&reason, "reason", "", "Why (shown in the rollout's message and the audit log).")
	}
	return c
}

func rolloutPauseCmd(env *cmdutil.Env) *cobra.Command {
	return rolloutActionCmd(env, "pause ID [--reason TEXT]", "Pause a rollout: no further cluster is moved", true,
		func(ctx context.Context, c fleetv1connect.FleetServiceClient, id int64, reason string) (*fleetv1.Rollout, error) {
			resp, err := c.PauseRollout(ctx, connect.NewRequest(&fleetv1.PauseRolloutRequest{Id: id, Reason: reason}))
			if err != nil {
				return nil, err
			}
			return resp.Msg.GetRollout(), nil
		})
}

func rolloutResumeCmd(env *cmdutil.Env) *cobra.Command {
	return rolloutActionCmd(env, "resume ID", "Resume a paused rollout, or approve its next wave", false,
		func(ctx context.Context, c fleetv1connect.FleetServiceClient, id int64, _ string) (*fleetv1.Rollout, error) {
			resp, err := c.ResumeRollout(ctx, connect.NewRequest(&fleetv1.ResumeRolloutRequest{Id: id}))
			if err != nil {
				return nil, err
			}
			return resp.Msg.GetRollout(), nil
		})
}

func rolloutAbortCmd(env *cmdutil.Env) *cobra.Command {
	return rolloutActionCmd(env, "abort ID [--reason TEXT]",
		"Stop a rollout for good; moved clusters keep the new revision (roll back to undo)", true,
		func(ctx context.Context, c fleetv1connect.FleetServiceClient, id int64, reason string) (*fleetv1.Rollout, error) {
			resp, err := c.AbortRollout(ctx, connect.NewRequest(&fleetv1.AbortRolloutRequest{Id: id, Reason: reason}))
			if err != nil {
				return nil, err
			}
			return resp.Msg.GetRollout(), nil
		})
}

func rolloutRollbackCmd(env *cmdutil.Env) *cobra.Command {
	var out outputFlag
	var wait bool
	c := &cobra.Command{
		Use:   "rollback ID [--wait]",
		Short: "Move the clusters a rollout moved back to its previous revision, in one fast wave",
		Long: "rollback starts a new rollout back to the rolled-back rollout's from-revision, covering the clusters it " +
			"moved, in one wave with no gate beyond the revision being applied. The rolled-back rollout ends as " +
			"SUPERSEDED. --wait follows the rollback like status --watch.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.check(); err != nil {
				return err
			}
			if wait && out.format != "table" {
				return cmdutil.Usage(errors.New("--wait draws a live display; it cannot be combined with -o " + out.format))
			}
			id, err := parseRolloutID(args[0])
			if err != nil {
				return err
			}
			return withHub(cmd, func(ctx context.Context, c fleetv1connect.FleetServiceClient) error {
				resp, err := c.RollbackRollout(ctx, connect.NewRequest(&fleetv1.RollbackRolloutRequest{Id: id}))
				if err != nil {
					return hubErr(err)
				}
				r := resp.Msg.GetRollout()
				if err := out.print(env, resp.Msg, func() error { return writePlan(env.Out, r, false) }); err != nil {
					return err
				}
				if !wait {
					return nil
				}
				fmt.Fprintln(env.Out)
				return followRollout(ctx, env, c, r.GetId())
			})
		},
	}
	out.bind(c)
	c.Flags().BoolVar(&wait, "wait", false, "Follow the rollback until it completes or stops.")
	return c
}

func rolloutHistoryCmd(env *cmdutil.Env) *cobra.Command {
	var out outputFlag
	var bundle string
	var active bool
	var limit int32
	c := &cobra.Command{
		Use:   "history [--bundle BUNDLE] [--active]",
		Short: "List rollouts, newest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := out.check(); err != nil {
				return err
			}
			return withHub(cmd, func(ctx context.Context, c fleetv1connect.FleetServiceClient) error {
				resp, err := c.ListRollouts(ctx, connect.NewRequest(&fleetv1.ListRolloutsRequest{Bundle: bundle, ActiveOnly: active, Limit: limit}))
				if err != nil {
					return hubErr(err)
				}
				return out.print(env, resp.Msg, func() error { return writeHistory(env.Out, resp.Msg.GetRollouts()) })
			})
		},
	}
	out.bind(c)
	c.Flags().StringVar(&bundle, "bundle", "", "Only this bundle's rollouts.")
	c.Flags().BoolVar(&active, "active", false, "Only progressing, paused and awaiting-approval rollouts.")
	c.Flags().Int32Var(&limit, "limit", 0, "How many (0: the hub's default, 50; at most 500).")
	return c
}
