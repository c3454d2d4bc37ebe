package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
	"kollect.dev/agent/internal/sink/azureblob"
	"kollect.dev/agent/internal/sink/kafka"
)

// newSinksCmd groups the commands that work on a shared database sink directly.
func newSinksCmd(env *Env) *cobra.Command {
	c := &cobra.Command{
		Use:   "sinks",
		Short: "Maintain the shared database sinks directly",
		Args:  cobra.NoArgs,
	}
	c.AddCommand(newPurgeCmd(env), newPostgresRLSCmd(env))
	return c
}

type purgeFlags struct {
	db                 dbFlags
	store              storeFlags
	cluster, inventory string
	dryRun, force      bool
	retiredAfter       time.Duration
	output             string
	timeout            time.Duration
}

// purgeFormats are the output formats of sinks purge.
var purgeFormats = []string{"table", "json"}

func newPurgeCmd(env *Env) *cobra.Command {
	var f purgeFlags
	c := &cobra.Command{
		Use: "purge --cluster NAME (--postgres URL | --mongodb URI --database DB | --bigquery PROJECT --dataset D | " +
			"--s3 s3://BUCKET/PREFIX | --gcs gs://BUCKET/PREFIX | --azureblob ACCOUNT/CONTAINER/PREFIX | --kafka BROKERS --topic T | --nats URL --stream S) " +
			"[--inventory INV] [--dry-run] [--force]",
		Short: "Remove a retired cluster's rows, coverage and state from a shared sink",
		Long: "purge removes from a PostgreSQL, MongoDB or BigQuery sink every row, coverage entry and state record of " +
			"one cluster (of one inventory with --inventory), and nothing of any other cluster; from an S3, GCS or Azure Blob sink " +
			"the cluster's documents and manifests; from a Kafka topic it produces a tombstone per key of the cluster " +
			"(the state records' included); from a NATS stream it removes the cluster's messages by subject, and its " +
			"keys from --kv-bucket. It refuses while the " +
			"cluster's agent wrote its state within --retired-after (it is probably alive and would write the rows " +
			"again) unless --force. --dry-run prints what would be removed and removes nothing.",
		Example: "  kollect sinks purge --postgres postgres://admin@db/inventory --cluster old-eu-1 --dry-run\n" +
			"  kollect sinks purge --mongodb mongodb://mongo:27017 --database inventory --cluster old-eu-1\n" +
			"  kollect sinks purge --bigquery acme-fleet --dataset kollect --cluster old-eu-1 --inventory shop/workloads\n" +
			"  kollect sinks purge --s3 s3://acme-inventory/fleet --cluster old-eu-1 --dry-run\n" +
			"  AZURE_STORAGE_SAS_TOKEN=... kollect sinks purge --azureblob fleetlake/inventory/fleet --cluster old-eu-1\n" +
			"  kollect sinks purge --kafka kafka-0:9092 --topic kollect.changes --cluster old-eu-1",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := f.check(); err != nil {
				return usage(err)
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), f.timeout)
			defer cancel()
			return f.run(ctx, env.Out)
		},
	}
	fl := c.Flags()
	f.db.register(fl, true)
	f.store.register(fl, &f.db.endpoint)
	fl.StringVar(&f.cluster, "cluster", "", "The cluster whose rows, coverage and state to remove (required).")
	fl.StringVar(&f.inventory, "inventory", "", "Only this inventory of the cluster (namespace/name or a cluster inventory's name).")
	fl.BoolVar(&f.dryRun, "dry-run", false, "Print what would be removed and remove nothing.")
	fl.BoolVar(&f.force, "force", false, "Purge even when the cluster's agent wrote its state within --retired-after.")
	fl.DurationVar(&f.retiredAfter, "retired-after", time.Hour,
		"A cluster is retired when its state was last confirmed or changed longer ago than this.")
	fl.StringVarP(&f.output, "output", "o", "table", "Output format: "+strings.Join(purgeFormats, ", ")+".")
	fl.DurationVar(&f.timeout, "timeout", 5*time.Minute, "Give up after this long.")
	_ = c.RegisterFlagCompletionFunc("output", cobra.FixedCompletions(purgeFormats, cobra.ShellCompDirectiveNoFileComp))
	return c
}

func (f *purgeFlags) check() error {
	switch {
	case f.store.given() > 0 && (f.db.postgresURL != "" || f.db.mongoURI != "" || f.db.project != ""), f.store.given() > 1:
		return errors.New("give exactly one sink: --postgres, --mongodb, --bigquery, --s3, --gcs, --azureblob, --kafka or --nats")
	case f.store.given() == 1:
		if err := f.store.check(); err != nil {
			return err
		}
	case f.db.postgresURL == "" && f.db.mongoURI == "" && f.db.project == "":
		return errors.New("give exactly one sink: --postgres, --mongodb, --bigquery, --s3, --gcs, --azureblob, --kafka or --nats")
	default:
		if err := f.db.check(); err != nil {
			return err
		}
	}
	switch {
	case f.cluster == "":
		return errors.New("--cluster is required: purge removes one cluster's data")
	case f.retiredAfter <= 0:
		return errors.New("--retired-after must be positive (--force skips the check)")
	case f.output != "table" && f.output != "json":
		return fmt.Errorf("unknown output format %q (want one of %s)", f.output, strings.Join(purgeFormats, ", "))
	}
	if f.store.kafkaBrokers != "" {
		// The sink's own topic template (kollect.{cluster}.rows) works as given: a
		// per-cluster topic holds the cluster --cluster names, and only that one is read.
		topic, err := kafka.Topic(f.store.topic, f.cluster)
		if err != nil {
			return fmt.Errorf("--topic: %w", err)
		}
		f.store.topic = topic
	}
	if f.store.azureBlob != "" {
		// Likewise the sink's container template (kollect-{cluster}): only the container of
		// the cluster --cluster names is read.
		ref, err := azureblob.ExpandRef(f.store.azureBlob, f.cluster)
		if err != nil {
			return fmt.Errorf("--azureblob: %w", err)
		}
		f.store.azureBlob = ref
	}
	return nil
}

// scope names what the command works on, for messages.
func (f *purgeFlags) scope() string {
	if f.inventory != "" {
		return fmt.Sprintf("cluster %s inventory %s", f.cluster, f.inventory)
	}
	return "cluster " + f.cluster
}

// run reads what the sink holds, checks the cluster is retired and purges. Errors of the
// database are exit code 2 like query's; nothing held and a refusal are findings, 1.
func (f *purgeFlags) run(ctx context.Context, out io.Writer) error {
	open := f.db.open
	if f.store.given() > 0 {
		open = f.store.open
	}
	s, err := open(ctx)
	if err != nil {
		return usage(err)
	}
	defer s.Close()
	held, err := s.Holdings(ctx, f.cluster, f.inventory)
	if err != nil {
		return usage(err)
	}
	if len(held) == 0 {
		return findings("%s: nothing held in %s (no row, coverage entry or state record): check the name with kollect query",
			f.scope(), f.destination())
	}
	now := time.Now()
	cutoff := now.Add(-f.retiredAfter)
	late := sink.NotRetired(held, cutoff)
	if f.dryRun {
		return f.report(out, held, cutoff, now, false, late)
	}
	if len(late) > 0 && !f.force {
		return findings("%s", refusal(f.cluster, late, f.retiredAfter, now))
	}
	guard := cutoff
	if f.force {
		guard = time.Time{}
	}
	removed, err := s.Purge(ctx, f.cluster, f.inventory, guard)
	if err == nil && len(removed) == 0 {
		// Someone else purged it since Holdings read it.
		_, err := fmt.Fprintf(out, "removed nothing: %s held nothing any more in %s\n", f.scope(), f.destination())
		return err
	}
	if len(removed) > 0 {
		if rerr := f.report(out, removed, cutoff, now, true, nil); rerr != nil && err == nil {
			err = rerr
		}
	}
	if errors.Is(err, sink.ErrNotRetired) {
		return findings("%v: nothing more was removed; its agent is back, stop it first or pass --force", err)
	}
	if err != nil {
		return usage(err)
	}
	return nil
}

// destination names the sink for reports, without credentials.
func (f *purgeFlags) destination() string {
	if f.store.given() > 0 {
		return f.store.destination()
	}
	return f.db.destination()
}

// refusal says which inventories' agents wrote recently, when, and what to do.
func refusal(cluster string, late []sink.Holding, retiredAfter time.Duration, now time.Time) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "refusing to purge cluster %s: its agent wrote the state within --retired-after %s, so it is probably "+
		"still running and would write the rows again:", cluster, retiredAfter)
	for _, h := range late {
		what := "confirmed"
		if h.ChangedAt.After(h.ConfirmedAt) {
			what = "changed"
		}
		fmt.Fprintf(&sb, "\n  inventory %s: %s %s (%s), by %s", h.Inventory, what, ago(h.LastSeen(), now),
			h.LastSeen().UTC().Format(time.RFC3339), writer(h.Writer))
	}
	sb.WriteString("\nstop that agent (or remove the sink from its inventories) and purge once --retired-after has passed, or pass --force")
	return sb.String()
}

// purgeEntry is one inventory of the report.
type purgeEntry struct {
	sink.Holding
	// Retired is whether the state was last written before the cutoff.
	Retired bool `json:"retired"`
}

// purgeReport is what -o json prints.
type purgeReport struct {
	Cluster      string       `json:"cluster"`
	Inventory    string       `json:"inventory,omitempty"`
	Destination  string       `json:"destination"`
	DryRun       bool         `json:"dryRun"`
	Removed      bool         `json:"removed"`
	RetiredAfter string       `json:"retiredAfter"`
	Inventories  []purgeEntry `json:"inventories"`
}

// report prints the holdings, per inventory, and the totals: what would be removed (dry run)
// or what was.
func (f *purgeFlags) report(out io.Writer, hs []sink.Holding, cutoff, now time.Time, removed bool, late []sink.Holding) error {
	rep := purgeReport{Cluster: f.cluster, Inventory: f.inventory, Destination: f.destination(), DryRun: f.dryRun,
		Removed: removed, RetiredAfter: f.retiredAfter.String()}
	var rows, cov, states int
	for _, h := range hs {
		rep.Inventories = append(rep.Inventories, purgeEntry{Holding: h, Retired: h.Retired(cutoff)})
		rows, cov, states = rows+h.Rows, cov+h.CoverageEntries, states+h.StateRecords
	}
	if f.output == "json" {
		js, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			return fmt.Errorf("encoding the report: %w", err)
		}
		_, err = fmt.Fprintf(out, "%s\n", js)
		return err
	}
	// Snapshot and event sinks store objects (documents, messages, keys) besides the rows.
	withObjects := f.store.given() > 0
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	head := "CLUSTER\tINVENTORY\tROWS\tCOVERAGE\tSTATE\t"
	if withObjects {
		head += "OBJECTS\t"
	}
	fmt.Fprintln(tw, head+"CHANGED\tCONFIRMED\tWRITER\tRETIRED")
	objects := 0
	for _, e := range rep.Inventories {
		retired := "yes"
		if !e.Retired {
			retired = "no"
		}
		objects += e.Objects
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t", f.cluster, e.Inventory, e.Rows, e.CoverageEntries, e.StateRecords)
		if withObjects {
			fmt.Fprintf(tw, "%d\t", e.Objects)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", stamp(e.ChangedAt, now), stamp(e.ConfirmedAt, now), writer(e.Writer), retired)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	totals := fmt.Sprintf("%d rows, %d coverage entries and %d state records of %s from %s", rows, cov, states, f.scope(), rep.Destination)
	if withObjects {
		totals = fmt.Sprintf("%d rows, %d coverage entries, %d state records and %d objects of %s from %s", rows, cov, states, objects, f.scope(), rep.Destination)
	}
	var err error
	switch {
	case removed:
		_, err = fmt.Fprintf(out, "removed %s\n", totals)
	case len(late) > 0 && !f.force:
		_, err = fmt.Fprintf(out, "dry run: nothing removed; a purge would be refused: %d inventories were written within --retired-after %s (pass --force to purge anyway) and would remove %s\n",
			len(late), f.retiredAfter, totals)
	default:
		_, err = fmt.Fprintf(out, "dry run: nothing removed; a purge would remove %s\n", totals)
	}
	return err
}

// stamp is a time with its age, "-" when unset.
func stamp(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339) + " (" + ago(t, now) + ")"
}

// ago is how long before now t was; a time ahead of now (a clock skewed agent) says so.
func ago(t, now time.Time) string {
	d := now.Sub(t).Round(time.Second)
	if d < 0 {
		return (-d).String() + " ahead"
	}
	return d.String() + " ago"
}

// writer names the agent of a state, "-" when it names none (states from before provenance).
func writer(w export.Writer) string {
	switch {
	case w.Version == "" && w.Instance == "":
		return "-"
	case w.Instance == "":
		return w.Version
	case w.Version == "":
		return w.Instance
	}
	return w.Version + " " + w.Instance
}
