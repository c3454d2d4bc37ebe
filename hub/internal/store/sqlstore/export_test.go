package sqlstore

import "database/sql"

// DB is the store's connection pool, for tests that read a session's settings.
func DB(s *Store) *sql.DB { return s.db }
