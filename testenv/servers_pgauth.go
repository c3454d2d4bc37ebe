package testenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// RequirePassword creates a login role with a password, allowed to create schemas in database
// postgres, and makes the server require that password (scram-sha-256) of the role over TCP.
// Every other role keeps trust auth, so URL still connects: tests of refused credentials need
// a server that checks them, which initdb -A trust does not.
func (pg *Postgres) RequirePassword(ctx context.Context, role, password string) error {
	quoted := `"` + strings.ReplaceAll(role, `"`, `""`) + `"`
	sql := fmt.Sprintf("CREATE ROLE %s LOGIN PASSWORD '%s'; GRANT CREATE ON DATABASE postgres TO %s;",
		quoted, strings.ReplaceAll(password, "'", "''"), quoted)
	if out, err := exec.CommandContext(ctx, "psql", pg.URL, "-v", "ON_ERROR_STOP=1", "-qc", sql).CombinedOutput(); err != nil {
		return fmt.Errorf("creating role %s: %v: %s", role, err, out)
	}
	// pg_hba.conf is read top down and the first matching line wins: the role's lines go first.
	hba := filepath.Join(pg.Dir, "data", "pg_hba.conf")
	old, err := os.ReadFile(hba)
	if err != nil {
		return fmt.Errorf("reading pg_hba.conf: %w", err)
	}
	lines := fmt.Sprintf("host all %s 127.0.0.1/32 scram-sha-256\nhost all %s ::1/128 scram-sha-256\n", quoted, quoted)
	// Writing in place keeps the file's owner (postgres when the tests run as root).
	if err := os.WriteFile(hba, append([]byte(lines), old...), 0o600); err != nil {
		return fmt.Errorf("writing pg_hba.conf: %w", err)
	}
	if out, err := exec.CommandContext(ctx, "psql", pg.URL, "-v", "ON_ERROR_STOP=1", "-qAtc", "SELECT pg_reload_conf()").CombinedOutput(); err != nil {
		return fmt.Errorf("reloading pg_hba.conf: %v: %s", err, out)
	}
	// The postmaster reloads on a signal, a moment later: wait until a wrong password is refused.
	url := fmt.Sprintf("postgres://%s@127.0.0.1:%d/postgres?sslmode=disable", role, pg.Port)
	deadline := time.Now().Add(10 * time.Second)
	for {
		cmd := exec.CommandContext(ctx, "psql", url, "-qAtc", "SELECT 1")
		cmd.Env = append(os.Environ(), "PGPASSWORD=not-"+password)
		out, err := cmd.CombinedOutput()
		if err != nil && strings.Contains(string(out), "password authentication failed") {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("role %s still connects without its password after pg_reload_conf: %v: %s", role, err, out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
