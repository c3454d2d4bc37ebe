// Package storetest is the one test suite every store.Store implementation must pass; the
// SQLite and PostgreSQL backends both run it (see sqlstore's tests).
package storetest
