package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"

	"kollect.dev/agent/internal/sink/postgres"
)

type postgresRLSFlags struct {
	rs      postgres.RowSecurity
	apply   bool
	url     string
	timeout time.Duration
}

// newPostgresRLSCmd prints (or applies) the SQL that makes a shared PostgreSQL sink enforce
// one writer per cluster. Printing is the default so an administrator reads the script before
// piping it into psql with their own connection, as they would any DDL.
func newPostgresRLSCmd(env *Env) *cobra.Command {
	var f postgresRLSFlags
	c := &cobra.Command{
		Use:   "postgres-rls --cluster NAME --role ROLE [--reader ROLE] [--schema S] [--table T] [--apply --postgres URL]",
		Short: "Print the SQL that lets a PostgreSQL sink's role write only its own cluster's rows (row-level security)",
		Long: "postgres-rls prints an idempotent SQL script for a shared PostgreSQL sink: it applies the sink's migrations " +
			"(agent roles may not create tables), maps --role to --cluster in <schema>.cluster_roles, grants the role its " +
			"tables and nothing else, and enables row-level security on every table with a cluster column, so that the " +
			"role reads and writes only its cluster's rows and --reader reads every cluster's. Run it as the role that owns " +
			"the tables (never one an agent uses), once per cluster, and again after an agent upgrade that adds migrations. " +
			"--apply runs it on --postgres instead of printing it.",
		Example: "  kollect sinks postgres-rls --cluster east --role kollect_east | psql \"$ADMIN_URL\" -v ON_ERROR_STOP=1 -q\n" +
			"  kollect sinks postgres-rls --cluster west --role kollect_west --reader fleet_reader --apply --postgres \"$ADMIN_URL\"",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := f.check(); err != nil {
				return usage(err)
			}
			script, err := postgres.RowSecuritySQL(f.rs)
			if err != nil {
				return usage(err)
			}
			if !f.apply {
				_, err := io.WriteString(env.Out, script)
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), f.timeout)
			defer cancel()
			if err := applyScript(ctx, f.url, script); err != nil {
				return usage(err)
			}
			_, err = fmt.Fprintf(env.Out, "row-level security applied: role %s writes only cluster %s in %s.%s\n",
				f.rs.Role, f.rs.Cluster, f.rs.Schema, f.rs.Table)
			return err
		},
	}
	fl := c.Flags()
	fl.StringVar(&f.rs.Cluster, "cluster", "", "The cluster name the agent exports as (required).")
	fl.StringVar(&f.rs.Role, "role", "", "The PostgreSQL role the cluster's sink Secret logs in as; created (LOGIN, no password) when missing (required).")
	fl.StringVar(&f.rs.Reader, "reader", "fleet_reader", "The role that reads every cluster's rows (created NOLOGIN when missing); empty for none.")
	fl.StringVar(&f.rs.Schema, "schema", "kollect", "Schema of the PostgreSQL sink.")
	fl.StringVar(&f.rs.Table, "table", "rows", "Table of the PostgreSQL sink.")
	fl.BoolVar(&f.apply, "apply", false, "Run the script on --postgres instead of printing it.")
	fl.StringVar(&f.url, "postgres", "", "PostgreSQL URL of the sink's database, as the tables' owner (with --apply).")
	fl.DurationVar(&f.timeout, "timeout", 2*time.Minute, "Give up after this long (with --apply).")
	return c
}

func (f *postgresRLSFlags) check() error {
	switch {
	case f.rs.Cluster == "":
		return errors.New("--cluster is required: the role writes only this cluster's rows")
	case f.rs.Role == "":
		return errors.New("--role is required: the role the cluster's sink Secret logs in as")
	case f.apply && f.url == "":
		return errors.New("--apply needs --postgres")
	case !f.apply && f.url != "":
		return errors.New("--postgres is only used with --apply: without it the script is printed")
	}
	return nil
}

// applyScript runs the script in one round trip (the simple protocol takes several statements;
// the script's own BEGIN and COMMIT make it one transaction).
func applyScript(ctx context.Context, url, script string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return fmt.Errorf("connecting to PostgreSQL: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.PgConn().Exec(ctx, script).ReadAll(); err != nil {
		return fmt.Errorf("applying row-level security: %w", err)
	}
	return nil
}
