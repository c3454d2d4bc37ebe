package bigquery

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	bq "cloud.google.com/go/bigquery"
	"google.golang.org/api/googleapi"
)

// rowsSchema matches the Postgres sink's rows table; attributes are JSON.
var rowsSchema = bq.Schema{
	{Name: "cluster", Type: bq.StringFieldType, Required: true},
	{Name: "inventory", Type: bq.StringFieldType, Required: true},
	{Name: "target", Type: bq.StringFieldType, Required: true},
	{Name: "api_group", Type: bq.StringFieldType, Required: true},
	{Name: "version", Type: bq.StringFieldType, Required: true},
	{Name: "kind", Type: bq.StringFieldType, Required: true},
	{Name: "namespace", Type: bq.StringFieldType, Required: true},
	{Name: "name", Type: bq.StringFieldType, Required: true},
	{Name: "uid", Type: bq.StringFieldType, Required: true},
	{Name: "attributes", Type: bq.JSONFieldType, Required: true},
	{Name: "first_seen", Type: bq.TimestampFieldType, Required: true},
	{Name: "updated_at", Type: bq.TimestampFieldType, Required: true},
	profileColumn, profileGenerationColumn,
}

// The rows table's later columns: the row's provenance, the profile (namespace/name) and its
// generation that produced it. NULLABLE for the reason the state's later columns are; a row
// written before them has NULL until the agent exports it again.
var (
	profileColumn           = &bq.FieldSchema{Name: "profile", Type: bq.StringFieldType}
	profileGenerationColumn = &bq.FieldSchema{Name: "profile_generation", Type: bq.IntegerFieldType}
)

// addedRowColumns are the rows table's columns added after its first version, in order.
var addedRowColumns = []*bq.FieldSchema{profileColumn, profileGenerationColumn}

// stateSchema is the state table's.
var stateSchema = bq.Schema{
	{Name: "cluster", Type: bq.StringFieldType, Required: true},
	{Name: "inventory", Type: bq.StringFieldType, Required: true},
	{Name: "checksum", Type: bq.StringFieldType, Required: true},
	{Name: "item_count", Type: bq.IntegerFieldType, Required: true},
	{Name: "exported_at", Type: bq.TimestampFieldType, Required: true},
	confirmedAt, agentVersion, agentInstance, contenderVersion, contenderInstance, contendedAt,
}

// The state table's later columns, which provisioning adds to tables made before them. All
// NULLABLE: BigQuery adds no REQUIRED column to an existing table, and old rows have none.
var (
	// confirmedAt is when the agent last confirmed the state row's checksum is still the
	// inventory's (see Confirm).
	confirmedAt = &bq.FieldSchema{Name: "confirmed_at", Type: bq.TimestampFieldType}
	// agentVersion and agentInstance name the agent (export.Writer) that last wrote the state
	// row, by an export or a confirmation: provenance kept in the state only, never in rows,
	// so that an agent upgrade rewrites no row.
	agentVersion  = &bq.FieldSchema{Name: "agent_version", Type: bq.StringFieldType}
	agentInstance = &bq.FieldSchema{Name: "agent_instance", Type: bq.StringFieldType}
	// contenderVersion, contenderInstance and contendedAt are the contender mark: the last
	// other agent (same cluster name) whose write was refused, and when; NULL when none.
	contenderVersion  = &bq.FieldSchema{Name: "contender_version", Type: bq.StringFieldType}
	contenderInstance = &bq.FieldSchema{Name: "contender_instance", Type: bq.StringFieldType}
	contendedAt       = &bq.FieldSchema{Name: "contended_at", Type: bq.TimestampFieldType}
)

// addedStateColumns are the state table's columns added after its first version, in order.
var addedStateColumns = []*bq.FieldSchema{confirmedAt, agentVersion, agentInstance, contenderVersion, contenderInstance, contendedAt}

// stageSchema is a staging table's: the row content without cluster and inventory (query
// parameters supply them) and the operation to apply.
var stageSchema = bq.Schema{
	{Name: "op", Type: bq.StringFieldType, Required: true}, // upsert | delete
	{Name: "target", Type: bq.StringFieldType, Required: true},
	{Name: "api_group", Type: bq.StringFieldType, Required: true},
	{Name: "version", Type: bq.StringFieldType, Required: true},
	{Name: "kind", Type: bq.StringFieldType, Required: true},
	{Name: "namespace", Type: bq.StringFieldType, Required: true},
	{Name: "name", Type: bq.StringFieldType, Required: true},
	{Name: "uid", Type: bq.StringFieldType, Required: true},
	{Name: "profile", Type: bq.StringFieldType, Required: true},
	{Name: "profile_generation", Type: bq.IntegerFieldType, Required: true},
	// JSON text, parsed by the script (PARSE_JSON): the emulator stores a JSON value sent
	// through insertAll as a JSON string, BigQuery parses it; PARSE_JSON is the same on both.
	// Never NULL ("{}" for deletes): the emulator's TO_JSON_STRING fails on NULL.
	{Name: "attributes", Type: bq.StringFieldType, Required: true},
}

// clustering keeps one cluster's and inventory's rows together, which bounds the bytes the
// export's statements scan.
var clustering = &bq.Clustering{Fields: []string{"cluster", "inventory", "kind"}}

// provision creates the dataset and the two tables when missing. Creation races with another
// agent are fine: "already exists" counts as success.
func (s *Sink) provision(ctx context.Context) error {
	ds := s.client.Dataset(s.cfg.dataset)
	if _, err := ds.Metadata(ctx); err != nil {
		if !isStatus(err, http.StatusNotFound) {
			return fmt.Errorf("reading dataset %s: %w", s.cfg.dataset, err)
		}
		if err := ds.Create(ctx, &bq.DatasetMetadata{Location: s.cfg.location,
			Description: "Kollect inventory rows"}); err != nil && !isStatus(err, http.StatusConflict) {
			// Another agent may have created it meanwhile: BigQuery then answers 409, the
			// emulator 500 ("already created"). Either way the dataset is there to use.
			if _, merr := ds.Metadata(ctx); merr != nil {
				return fmt.Errorf("creating dataset %s: %w", s.cfg.dataset, err)
			}
		}
	}
	// The view reads the state's later columns: it is created only over a state table that
	// has them all (see addColumns).
	stateCurrent := true
	for _, t := range []struct {
		name   string
		schema bq.Schema
		clust  *bq.Clustering
	}{{s.cfg.table, rowsSchema, clustering}, {s.cfg.table + "_state", stateSchema, nil}, {s.cfg.table + "_coverage", coverageSchema, nil}} {
		tbl := ds.Table(t.name)
		if md, err := tbl.Metadata(ctx); err == nil {
			switch t.name {
			case s.cfg.table + "_state":
				current, err := addColumns(ctx, tbl, md, addedStateColumns)
				if err != nil {
					return err
				}
				stateCurrent = current
			case s.cfg.table:
				current, err := addColumns(ctx, tbl, md, addedRowColumns)
				if err != nil {
					return err
				}
				if !current {
					// Only the emulator: exports would fail on every statement naming them.
					return fmt.Errorf("table %s lacks the columns profile and profile_generation after the schema patch; "+
						"add them (ALTER TABLE ADD COLUMN, both NULLABLE)", t.name)
				}
			}
			continue
		} else if !isStatus(err, http.StatusNotFound) {
			return fmt.Errorf("reading table %s: %w", t.name, err)
		}
		if err := tbl.Create(ctx, &bq.TableMetadata{Schema: t.schema, Clustering: t.clust}); err != nil && !isStatus(err, http.StatusConflict) {
			return fmt.Errorf("creating table %s: %w", t.name, err)
		}
	}
	view := ds.Table(s.cfg.table + "_covered")
	if !stateCurrent {
		// Only the BigQuery emulator gets here: it answers a schema patch and keeps none, and
		// answers a view over missing columns with a 500 that the client retries until the
		// deadline. Exports need no view; the next provisioning tries again.
		s.env.Log.Info("the state table lacks columns after the schema patch: not creating the view", "view", view.TableID)
		return nil
	}
	if _, err := view.Metadata(ctx); err != nil {
		if !isStatus(err, http.StatusNotFound) {
			return fmt.Errorf("reading view %s: %w", view.TableID, err)
		}
		if err := view.Create(ctx, &bq.TableMetadata{ViewQuery: s.coveredView()}); err != nil && !isStatus(err, http.StatusConflict) {
			return fmt.Errorf("creating view %s: %w", view.TableID, err)
		}
	}
	return nil
}

// addColumns adds the columns a table made before them lacks (the state's confirmed_at,
// agent_version and agent_instance, the rows' profile and profile_generation): one schema
// patch, none when it has them all. It reports whether the table has them all afterwards,
// read back after a patch: BigQuery applies the patch, the emulator the tests run against
// does not.
func addColumns(ctx context.Context, tbl *bq.Table, md *bq.TableMetadata, columns []*bq.FieldSchema) (bool, error) {
	has := map[string]bool{}
	for _, f := range md.Schema {
		has[f.Name] = true
	}
	schema := append(bq.Schema(nil), md.Schema...)
	var added []string
	for _, f := range columns {
		if !has[f.Name] {
			schema = append(schema, f)
			added = append(added, f.Name)
		}
	}
	if len(added) == 0 {
		return true, nil
	}
	if _, err := tbl.Update(ctx, bq.TableMetadataToUpdate{Schema: schema}, md.ETag); err != nil {
		return false, fmt.Errorf("adding columns %s to table %s: %w", strings.Join(added, ", "), tbl.TableID, err)
	}
	after, err := tbl.Metadata(ctx)
	if err != nil {
		return false, fmt.Errorf("reading table %s: %w", tbl.TableID, err)
	}
	has = map[string]bool{}
	for _, f := range after.Schema {
		has[f.Name] = true
	}
	for _, f := range columns {
		if !has[f.Name] {
			return false, nil
		}
	}
	return true, nil
}

// ddl renders the provisioning as the equivalent DDL, for previews.
func (s *Sink) ddl() []string {
	table := func(name string, schema bq.Schema, clust *bq.Clustering) string {
		var cols []string
		for _, f := range schema {
			c := "  " + f.Name + " " + string(f.Type)
			if f.Type == bq.IntegerFieldType {
				c = "  " + f.Name + " INT64"
			}
			if f.Required {
				c += " NOT NULL"
			}
			cols = append(cols, c)
		}
		out := "CREATE TABLE IF NOT EXISTS " + s.ref(name) + " (\n" + strings.Join(cols, ",\n") + "\n)"
		if clust != nil {
			out += "\nCLUSTER BY " + strings.Join(clust.Fields, ", ")
		}
		return out
	}
	out := []string{
		fmt.Sprintf("CREATE SCHEMA IF NOT EXISTS `%s.%s` OPTIONS (location = %q)", s.cfg.project, s.cfg.dataset, s.cfg.location),
		table(s.cfg.table, rowsSchema, clustering),
		table(s.cfg.table+"_state", stateSchema, nil),
		table(s.cfg.table+"_coverage", coverageSchema, nil),
		"CREATE VIEW IF NOT EXISTS " + s.ref(s.cfg.table+"_covered") + " AS\n" + s.coveredView(),
	}
	// A state table made before a later column gets it (a schema update, not this DDL).
	for _, f := range addedStateColumns {
		out = append(out, "ALTER TABLE "+s.ref(s.cfg.table+"_state")+" ADD COLUMN IF NOT EXISTS "+f.Name+" "+string(f.Type))
	}
	return out
}

// ref is the quoted, fully qualified name of a table of the sink's dataset.
func (s *Sink) ref(table string) string {
	return "`" + s.cfg.project + "." + s.cfg.dataset + "." + table + "`"
}

func isStatus(err error, code int) bool {
	var g *googleapi.Error
	return errors.As(err, &g) && g.Code == code
}
