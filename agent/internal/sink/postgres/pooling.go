package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// How the sink talks to PostgreSQL so that it works the same directly and behind a
// transaction-pooling PgBouncer, where consecutive transactions of one client connection run
// on different server connections and one server connection serves many clients in turn:
//
//   - No session state. The statement timeout is not a startup parameter (PgBouncer refuses
//     every one it does not track, "unsupported startup parameter: statement_timeout", and
//     options too) nor a session SET (it would stay on the server connection, for whichever
//     client gets it next): every transaction begins with SET LOCAL, in the BEGIN's own round
//     trip. Advisory locks are transaction-scoped, the staging table is ON COMMIT DROP.
//   - No named prepared statements. pgx's default (cache_statement) prepares each statement
//     once per client connection under a name derived from its text: behind transaction
//     pooling the next client on that server connection preparing the same text failed with
//     "prepared statement stmtcache_… already exists", and a client whose next transaction
//     ran elsewhere with "… does not exist". PgBouncer keeps named statements across server
//     connections only from 1.21 (max_prepared_statements); Debian 12 ships 1.18. cache_describe
//     caches only the statement's parameter and result types in the client and sends each
//     execution as unnamed Parse/Bind/Execute in one message, so still one round trip, which
//     any pooler relays whole; the server parses and plans every execution, a fraction of a
//     millisecond for the sink's statements.
const (
	queryExecMode = pgx.QueryExecModeCacheDescribe
	// maxConnIdleTime closes an idle connection after a minute: an agent exports only on a
	// change and confirms every few minutes, so across a fleet most pools then hold nothing,
	// and 500 agents do not keep 500 × maxConnections server connections open.
	maxConnIdleTime = time.Minute
	// healthCheckPeriod is how often the pool looks for idle connections to close (pgx's
	// default, a minute, would keep one up to two minutes). It is a check in the agent only.
	healthCheckPeriod = 15 * time.Second
)

// tuneForPoolers applies the settings above to a pool configuration.
func tuneForPoolers(cfg *pgxpool.Config) {
	cfg.ConnConfig.DefaultQueryExecMode = queryExecMode
	// Nothing may prepare a named statement, even by asking for cache_statement explicitly.
	cfg.ConnConfig.StatementCacheCapacity = 0
	cfg.MaxConnIdleTime = maxConnIdleTime
	cfg.HealthCheckPeriod = healthCheckPeriod
}

// beginWithTimeout is the BEGIN of every transaction of a sink: the statement timeout for
// that transaction only, in the same simple-protocol message (no extra round trip).
func beginWithTimeout(timeout time.Duration) pgx.TxOptions {
	return pgx.TxOptions{BeginQuery: fmt.Sprintf("BEGIN; SET LOCAL statement_timeout = %d", timeout.Milliseconds())}
}

// txPool is the sink's pool whose Begin starts transactions with the sink's BEGIN. Every
// transaction of the sink goes through pgx.BeginFunc or migrate, which call Begin, so none
// can miss the statement timeout.
type txPool struct {
	*pgxpool.Pool
	begin pgx.TxOptions
}

func (p txPool) Begin(ctx context.Context) (pgx.Tx, error) {
	tx, err := p.Pool.BeginTx(ctx, p.begin)
	if err != nil {
		return nil, fmt.Errorf("beginning a transaction: %w", err)
	}
	return tx, nil
}
