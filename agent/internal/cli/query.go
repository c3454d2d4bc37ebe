package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"kollect.dev/agent/internal/cli/output"
	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
)

type queryFlags struct {
	db                                 dbFlags
	cluster, inventory, kind, ns, name string
	attrs                              []string
	limit                              int
	asOf                               string
	output                             string
	timeout                            time.Duration
}

func newQueryCmd(env *Env) *cobra.Command {
	var f queryFlags
	c := &cobra.Command{
		Use:   "query (--postgres URL | --mongodb URI --database DB) [filters]",
		Short: "Query the rows a fleet exported to a shared PostgreSQL or MongoDB sink",
		Long: "query reads the rows every agent exported to a database sink, across clusters, filtered by cluster, " +
			"inventory, kind, namespace, name and attribute values (--attr key=value, repeatable; the value is JSON " +
			"when it parses as JSON, a string otherwise; a map matches by containment). --as-of reads the rows as they " +
			"were at a time from the history of a PostgreSQL sink with history: true.",
		Example: "  kollect query --postgres postgres://reader@db/inventory --kind Deployment --attr team=payments\n" +
			"  kollect query --mongodb mongodb://mongo:27017 --database inventory --cluster prod-eu-1 -o ndjson\n" +
			"  kollect query --postgres postgres://reader@db/inventory --kind Deployment --as-of 2026-11-03T14:00:00Z",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			filter, err := f.filter()
			if err != nil {
				return usage(err)
			}
			if !validFormat(f.output) {
				return usage(fmt.Errorf("unknown output format %q (want one of %s)", f.output, strings.Join(output.Formats, ", ")))
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), f.timeout)
			defer cancel()
			rows, err := f.run(ctx, filter)
			if err != nil {
				return err
			}
			return output.Write(env.Out, f.output, rows)
		},
	}
	fl := c.Flags()
	f.db.register(fl, false)
	fl.StringVar(&f.cluster, "cluster", "", "Only rows of this cluster.")
	fl.StringVar(&f.inventory, "inventory", "", "Only rows of this inventory (namespace/name or a cluster inventory's name).")
	fl.StringVar(&f.kind, "kind", "", "Only rows of this kind.")
	fl.StringVarP(&f.ns, "namespace", "n", "", "Only rows of objects in this namespace.")
	fl.StringVar(&f.name, "name", "", "Only rows of objects with this name.")
	fl.StringArrayVar(&f.attrs, "attr", nil, "Attribute filter key=value (repeatable).")
	fl.IntVar(&f.limit, "limit", 1000, "At most this many rows.")
	fl.StringVar(&f.asOf, "as-of", "", "Rows as they were at this time (RFC 3339, or a date: its midnight UTC), from the history "+
		"of a PostgreSQL sink with history: true.")
	fl.StringVarP(&f.output, "output", "o", "table", "Output format: "+strings.Join(output.Formats, ", ")+".")
	fl.DurationVar(&f.timeout, "timeout", 30*time.Second, "Give up after this long.")
	_ = c.RegisterFlagCompletionFunc("output", cobra.FixedCompletions(output.Formats, cobra.ShellCompDirectiveNoFileComp))
	return c
}

func validFormat(f string) bool {
	for _, o := range output.Formats {
		if o == f {
			return true
		}
	}
	return false
}

// filter checks the flags and parses --attr values.
func (f *queryFlags) filter() (sink.RowFilter, error) {
	if err := f.db.check(); err != nil {
		return sink.RowFilter{}, err
	}
	pf := sink.RowFilter{Cluster: f.cluster, Inventory: f.inventory, Kind: f.kind, Namespace: f.ns, Name: f.name, Limit: f.limit}
	for _, kv := range f.attrs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return pf, fmt.Errorf("--attr %q: want key=value", kv)
		}
		if pf.Attributes == nil {
			pf.Attributes = map[string]any{}
		}
		var parsed any
		if err := json.Unmarshal([]byte(v), &parsed); err != nil {
			parsed = v // not JSON: a plain string
		}
		pf.Attributes[k] = parsed
	}
	if f.asOf != "" {
		if f.db.postgresURL == "" {
			return pf, fmt.Errorf("--as-of reads a PostgreSQL sink's history: it needs --postgres")
		}
		at, err := parseAsOf(f.asOf)
		if err != nil {
			return pf, err
		}
		pf.AsOf = at
	}
	return pf, nil
}

// parseAsOf accepts an RFC 3339 time, or a date meaning its midnight UTC.
func parseAsOf(v string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t, nil
	}
	if t, err := time.Parse(time.DateOnly, v); err == nil {
		return t, nil
	}
	return time.Time{}, fmt.Errorf("--as-of %q: want an RFC 3339 time (2026-11-03T14:00:00Z) or a date (2026-11-03, its midnight UTC)", v)
}

// rowQuerier is the read both database sinks of `kollect query` have (postgres.Sink.Query,
// mongodb.Sink.Query).
type rowQuerier interface {
	Query(ctx context.Context, f sink.RowFilter) ([]sink.StoredRow, error)
}

// run connects to the database, a connection error being exit code 2.
func (f *queryFlags) run(ctx context.Context, pf sink.RowFilter) ([]export.Row, error) {
	s, err := f.db.open(ctx)
	if err != nil {
		return nil, usage(err)
	}
	defer s.Close()
	q, ok := s.(rowQuerier)
	if !ok {
		return nil, usage(fmt.Errorf("%s cannot be queried", f.db.destination()))
	}
	recs, err := q.Query(ctx, pf)
	if err != nil {
		return nil, usage(err)
	}
	rows := make([]export.Row, len(recs))
	for i := range recs {
		rows[i] = recs[i].Row
	}
	return rows, nil
}
