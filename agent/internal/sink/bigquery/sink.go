package bigquery

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"

	bq "cloud.google.com/go/bigquery"
	"google.golang.org/api/googleapi"
	"google.golang.org/api/iterator"

	"kollect.dev/agent/internal/export"
	"kollect.dev/agent/internal/sink"
	v1alpha1 "kollect.dev/api/v1alpha1"
)

// Sink exports inventories into BigQuery.
type Sink struct {
	env    sink.Env
	cfg    *settings
	dest   string
	client *bq.Client

	mu          sync.Mutex
	provisioned bool

	// turns runs the sink's mutating jobs one at a time and retries those that lost to
	// another agent's (conflict.go).
	turns *turns
}

var _ sink.Sink = (*Sink)(nil)

// New is the bigquery backend's entry in the sink table: it builds the sink from a
// KollectDatabaseSink of type bigquery.
func New(ctx context.Context, obj sink.Object, env sink.Env) (sink.Sink, error) {
	spec, err := sink.DatabaseSpec(obj)
	if err != nil {
		return nil, err
	}
	s, err := open(ctx, spec.BigQuery, env)
	if err != nil {
		return nil, err // never a nil *Sink in a non-nil interface
	}
	return s, nil
}

// open builds a sink from its spec. Every request goes through the egress guard; wrap, when
// set, wraps the guarded transport (tests record requests).
func open(ctx context.Context, spec *v1alpha1.BigQuerySinkConfig, env sink.Env, wrap ...func(http.RoundTripper) http.RoundTripper) (*Sink, error) {
	cfg, err := resolve(ctx, spec, env)
	if err != nil {
		return nil, err
	}
	if spec.Endpoint != "" {
		if err := env.Guard().CheckURL(spec.Endpoint); err != nil {
			return nil, sink.TerminalError(err)
		}
	}
	var w func(http.RoundTripper) http.RoundTripper
	if len(wrap) > 0 {
		w = wrap[0]
	}
	opts, err := env.Guard().GoogleOptions(ctx, []string{bq.Scope}, cfg.options, w)
	if err != nil {
		return nil, sink.Terminalf("bigquery sink %s/%s: %w", env.Namespace, env.Name, err)
	}
	client, err := bq.NewClient(ctx, cfg.project, opts...)
	if err != nil {
		return nil, sink.Terminalf("bigquery sink %s/%s: %w", env.Namespace, env.Name, err)
	}
	client.Location = cfg.location
	return &Sink{env: env, cfg: cfg, client: client, turns: newTurns(),
		dest: fmt.Sprintf("bigquery://%s/%s.%s", cfg.project, cfg.dataset, cfg.table)}, nil
}

// Close releases the client.
func (s *Sink) Close() error { return s.client.Close() }

func (s *Sink) ensureProvisioned(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.provisioned {
		return nil
	}
	if err := s.provision(ctx); err != nil {
		return classify(fmt.Errorf("bigquery sink %s: %w", s.dest, err))
	}
	s.provisioned = true
	return nil
}

// Export writes the batch: nothing when the state table holds the envelope's checksum,
// otherwise a staged transaction (see the package documentation).
func (s *Sink) Export(ctx context.Context, b *sink.Batch) error {
	if err := checkBatch(s.env.Cluster, b); err != nil {
		return err
	}
	if err := s.ensureProvisioned(ctx); err != nil {
		return err
	}
	outcome, err := s.export(ctx, b)
	if err != nil {
		if isStatus(err, http.StatusNotFound) {
			// The dataset or a table vanished under us: provision again on the retry.
			s.mu.Lock()
			s.provisioned = false
			s.mu.Unlock()
			return sink.TransientError(fmt.Errorf("bigquery sink %s: exporting %s/%s: %w", s.dest, b.Envelope.Cluster, b.Envelope.Inventory, err))
		}
		return classify(fmt.Errorf("bigquery sink %s: exporting %s/%s: %w", s.dest, b.Envelope.Cluster, b.Envelope.Inventory, err))
	}
	if outcome != nil {
		return fmt.Errorf("bigquery sink %s: %w", s.dest, outcome)
	}
	return nil
}

// checkBatch refuses rows of another cluster or inventory: every delete is bounded by the
// envelope's cluster and inventory, and a stray row would escape that bound.
func checkBatch(cluster string, b *sink.Batch) error {
	env := &b.Envelope
	if env.Cluster == "" || env.Inventory == "" {
		return sink.Terminalf("bigquery sink: envelope without cluster or inventory")
	}
	if cluster != "" && env.Cluster != cluster {
		return sink.Terminalf("bigquery sink: envelope of cluster %q sent to the sink of cluster %q", env.Cluster, cluster)
	}
	for _, rows := range [][]export.Row{env.Rows, b.Diff.Added, b.Diff.Changed, b.Diff.Deleted} {
		for i := range rows {
			if rows[i].Cluster != env.Cluster || rows[i].Inventory != env.Inventory {
				return sink.Terminalf("bigquery sink: row %s does not belong to %s/%s", rows[i].Key(), env.Cluster, env.Inventory)
			}
		}
	}
	return nil
}

// Probe reads the dataset and table metadata: it authenticates and needs bigquery.datasets.get
// and bigquery.tables.get. A missing dataset is fine (the first export creates it) when the
// project exists: a 404 for the dataset also comes back for a project that does not, so the
// probe then lists the project's datasets, which fails for a missing or forbidden project.
func (s *Sink) Probe(ctx context.Context) error {
	ds := s.client.Dataset(s.cfg.dataset)
	if _, err := ds.Metadata(ctx); err != nil {
		if isStatus(err, http.StatusNotFound) {
			return s.probeProject(ctx)
		}
		return classify(fmt.Errorf("bigquery sink %s: reading dataset: %w", s.dest, err))
	}
	if _, err := ds.Table(s.cfg.table).Metadata(ctx); err != nil && !isStatus(err, http.StatusNotFound) {
		return classify(fmt.Errorf("bigquery sink %s: reading table: %w", s.dest, err))
	}
	return nil
}

// probeProject reads one page of one dataset of the project: the dataset the sink will
// create must have a project to live in.
func (s *Sink) probeProject(ctx context.Context) error {
	it := s.client.Datasets(ctx)
	it.PageInfo().MaxSize = 1
	if _, err := it.Next(); err != nil && !errors.Is(err, iterator.Done) {
		if isStatus(err, http.StatusNotFound) {
			return sink.TerminalError(fmt.Errorf("bigquery sink %s: project %s: %w", s.dest, s.cfg.project, err))
		}
		return classify(fmt.Errorf("bigquery sink %s: listing the datasets of project %s: %w", s.dest, s.cfg.project, err))
	}
	return nil
}

// Preview shows the provisioning DDL and the statements of an export, and what the state
// table holds for the inventory. It only reads.
func (s *Sink) Preview(ctx context.Context, cluster, inventory string) (sink.Preview, error) {
	p := sink.Preview{Destination: s.dest}
	p.Statements = append(s.ddl(),
		fmt.Sprintf("SELECT checksum, item_count FROM %s WHERE cluster = %q AND inventory = %q", s.ref(s.cfg.table+"_state"), cluster, inventory),
		"tabledata.insertAll into "+s.ref(s.cfg.table+"_stage_<random>")+" (expires after 1h): changed rows, or every row on a full reconcile",
		s.script("<stage>", true, "-- only when the coverage changed:\n"+
			"DELETE FROM "+s.ref(s.cfg.table+"_coverage")+" WHERE cluster = @cluster AND inventory = @inventory AND target IN (<changed or gone targets>);\n"+
			"INSERT INTO "+s.ref(s.cfg.table+"_coverage")+" (cluster, inventory, target, state, row_count, extraction_errors, reason, updated_at) VALUES (<changed or new entries>);\n", true),
		"-- a confirmation, while nothing changes:\n"+s.confirmSQL())
	st, _, err := s.readState(ctx, cluster, inventory)
	switch {
	case err != nil:
		p.Message = fmt.Sprintf("state unreadable (%v): the first export provisions the dataset and tables", err)
	case st == nil:
		p.Message = fmt.Sprintf("no export of %s/%s recorded: the next export is a full load", cluster, inventory)
	default:
		p.Message = fmt.Sprintf("%s/%s holds %d rows at checksum %s: the next export applies a diff or nothing",
			cluster, inventory, st.count, export.ShortChecksum(st.checksum))
	}
	return p, nil
}

// classify marks errors retrying cannot fix as terminal: invalid credentials or requests,
// missing permissions. Rate limits, quota, conflicts with other agents' writes (conflict.go),
// server errors and network errors stay transient.
func classify(err error) error {
	if err == nil || sink.ClassOf(err) == sink.Terminal {
		return err
	}
	if isConflict(err) {
		// A 400 like an invalid query's, but the next attempt may well win.
		return sink.TransientError(err)
	}
	var g *googleapi.Error
	if errors.As(err, &g) {
		for _, e := range g.Errors {
			switch e.Reason {
			case "rateLimitExceeded", "quotaExceeded", "backendError", "internalError":
				return sink.TransientError(err)
			}
		}
		switch g.Code {
		case http.StatusUnauthorized, http.StatusForbidden, http.StatusBadRequest:
			return sink.TerminalError(err)
		}
		return sink.TransientError(err)
	}
	if strings.Contains(err.Error(), "oauth2") && strings.Contains(err.Error(), "invalid_grant") {
		return sink.TerminalError(err)
	}
	return sink.TransientError(err)
}

// randomSuffix names staging tables.
func randomSuffix() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
