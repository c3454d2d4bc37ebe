package cli

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/spf13/pflag"

	"kollect.dev/agent/internal/sink"
	"kollect.dev/agent/internal/sink/bigquery"
	"kollect.dev/agent/internal/sink/mongodb"
	"kollect.dev/agent/internal/sink/postgres"
)

// dbFlags name the database sink a command reaches directly by URL (kollect query, kollect
// sinks purge): the backend, where it is and its tables. The handles they open are the sink
// packages' own types, so table names and queries are the sinks'.
type dbFlags struct {
	postgresURL, schema, table     string
	mongoURI, database, collection string
	// withBigQuery is set for commands that reach BigQuery too (query does not).
	withBigQuery               bool
	project, dataset, endpoint string
}

// register adds the flags; bigQuery adds those of a BigQuery sink.
func (d *dbFlags) register(fl *pflag.FlagSet, bigQuery bool) {
	d.withBigQuery = bigQuery
	fl.StringVar(&d.postgresURL, "postgres", "", "PostgreSQL URL of the sink's database.")
	fl.StringVar(&d.schema, "schema", "kollect", "Schema of the PostgreSQL sink.")
	tableHelp := "Table of the PostgreSQL sink."
	if bigQuery {
		tableHelp = "Table of the PostgreSQL or BigQuery sink."
	}
	fl.StringVar(&d.table, "table", "rows", tableHelp)
	fl.StringVar(&d.mongoURI, "mongodb", "", "MongoDB URI of the sink's deployment.")
	fl.StringVar(&d.database, "database", "", "MongoDB database of the sink.")
	fl.StringVar(&d.collection, "collection", "rows", "MongoDB collection of the sink.")
	if bigQuery {
		fl.StringVar(&d.project, "bigquery", "", "Google Cloud project of the BigQuery sink (default credentials).")
		fl.StringVar(&d.dataset, "dataset", "", "BigQuery dataset of the sink.")
		fl.StringVar(&d.endpoint, "endpoint", "", "API endpoint of the sink, for an emulator or another cloud: BigQuery's or GCS's (no authentication then), "+
			"an S3-compatible store's, an Azure blob service URL.")
	}
}

// check accepts exactly one backend with what it needs.
func (d *dbFlags) check() error {
	given := 0
	for _, v := range []string{d.postgresURL, d.mongoURI, d.project} {
		if v != "" {
			given++
		}
	}
	switch {
	case given != 1 && d.withBigQuery:
		return errors.New("give exactly one of --postgres, --mongodb and --bigquery")
	case given != 1:
		return errors.New("give exactly one of --postgres and --mongodb")
	case d.mongoURI != "" && d.database == "":
		return errors.New("--mongodb needs --database")
	case d.project != "" && d.dataset == "":
		return errors.New("--bigquery needs --dataset")
	}
	return nil
}

// dbSink is what every database sink handle offers the commands.
type dbSink interface {
	sink.Purger
	Close() error
}

// open connects to the sink the flags name (check them first).
func (d *dbFlags) open(ctx context.Context) (dbSink, error) {
	switch {
	case d.postgresURL != "":
		return postgres.OpenURL(ctx, d.postgresURL, d.schema, d.table)
	case d.mongoURI != "":
		return mongodb.OpenURI(ctx, d.mongoURI, d.database, d.collection)
	default:
		s, err := bigquery.OpenProject(ctx, d.project, d.dataset, d.table, d.endpoint)
		if err != nil {
			return nil, fmt.Errorf("connecting to BigQuery: %w", err)
		}
		return s, nil
	}
}

// destination names the sink for reports, without credentials.
func (d *dbFlags) destination() string {
	hostOf := func(raw string) string {
		u, err := url.Parse(raw)
		if err != nil || u.Host == "" {
			return "(unparsed URL)" // a keyword/value connection string: it may hold a password
		}
		return u.Scheme + "://" + u.Host + strings.TrimSuffix(u.Path, "/")
	}
	switch {
	case d.postgresURL != "":
		return hostOf(d.postgresURL) + " " + d.schema + "." + d.table
	case d.mongoURI != "":
		return hostOf(d.mongoURI) + " " + d.database + "." + d.collection
	default:
		return "bigquery://" + d.project + "/" + d.dataset + "." + d.table
	}
}
