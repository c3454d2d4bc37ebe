package sqlstore

import "database/sql"

// HeartbeatSlots and DB expose, to this package's external tests, the bound on heartbeats'
// connections and the pool it bounds.
func (s *Store) HeartbeatSlots() chan struct{} { return s.heartbeatSlots }
func (s *Store) DB() *sql.DB                   { return s.db }
