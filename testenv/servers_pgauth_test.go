package testenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestPostgresRequirePassword: the role connects with its password, not with another, and
// the superuser still connects without one.
func TestPostgresRequirePassword(t *testing.T) {
	pg, err := StartPostgres()
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Stop()
	ctx := context.Background()
	if err := pg.RequirePassword(ctx, "probe", "s3cret'pw"); err != nil {
		t.Fatal(err)
	}
	connect := func(url, password string) (string, error) {
		cmd := exec.CommandContext(ctx, "psql", url, "-qAtc", "SELECT current_user")
		cmd.Env = append(os.Environ(), "PGPASSWORD="+password)
		out, err := cmd.CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	role := fmt.Sprintf("postgres://probe@127.0.0.1:%d/postgres?sslmode=disable", pg.Port)
	if out, err := connect(role, "s3cret'pw"); err != nil || out != "probe" {
		t.Fatalf("with its password: %q %v", out, err)
	}
	if out, err := connect(role, "wrong"); err == nil || !strings.Contains(out, "password authentication failed") {
		t.Fatalf("with a wrong password: %q %v", out, err)
	}
	if out, err := connect(pg.URL, ""); err != nil || out != "postgres" {
		t.Fatalf("superuser without a password: %q %v", out, err)
	}
}
