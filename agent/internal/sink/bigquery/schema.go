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
}

// stateSchema is the state table's.
var stateSchema = bq.Schema{
	{Name: "cluster", Type: bq.StringFieldType, Required: true},
	{Name: "inventory", Type: bq.StringFieldType, Required: true},
	{Name: "checksum", Type: bq.StringFieldType, Required: true},
	{Name: "item_count", Type: bq.IntegerFieldType, Required: true},
	{Name: "exported_at", Type: bq.TimestampFieldType, Required: true},
}

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
			return fmt.Errorf("creating dataset %s: %w", s.cfg.dataset, err)
		}
	}
	for _, t := range []struct {
		name   string
		schema bq.Schema
		clust  *bq.Clustering
	}{{s.cfg.table, rowsSchema, clustering}, {s.cfg.table + "_state", stateSchema, nil}} {
		tbl := ds.Table(t.name)
		if _, err := tbl.Metadata(ctx); err == nil {
			continue
		} else if !isStatus(err, http.StatusNotFound) {
			return fmt.Errorf("reading table %s: %w", t.name, err)
		}
		if err := tbl.Create(ctx, &bq.TableMetadata{Schema: t.schema, Clustering: t.clust}); err != nil && !isStatus(err, http.StatusConflict) {
			return fmt.Errorf("creating table %s: %w", t.name, err)
		}
	}
	return nil
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
	return []string{
		fmt.Sprintf("CREATE SCHEMA IF NOT EXISTS `%s.%s` OPTIONS (location = %q)", s.cfg.project, s.cfg.dataset, s.cfg.location),
		table(s.cfg.table, rowsSchema, clustering),
		table(s.cfg.table+"_state", stateSchema, nil),
	}
}

// ref is the quoted, fully qualified name of a table of the sink's dataset.
func (s *Sink) ref(table string) string {
	return "`" + s.cfg.project + "." + s.cfg.dataset + "." + table + "`"
}

func isStatus(err error, code int) bool {
	var g *googleapi.Error
	return errors.As(err, &g) && g.Code == code
}
