// Command flagdocs writes the flag tables of docs/operations.md (kollect-agent) and
// docs/hub.md (kollect-hub) from the binaries' own -h output. make generate runs it through
// hack/generate-flag-docs.sh; e2e/charts' TestFlagTablesMatchBinaries fails when the tables are
// stale.
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"kollect.dev/e2e/internal/flagdoc"
	"kollect.dev/testenv"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "flagdocs:", err)
		os.Exit(1)
	}
}

func run() error {
	root, err := testenv.RepoRoot()
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "kollect-flagdocs-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if _, err := testenv.BuildCommands(dir, "", "./agent/cmd/kollect-agent", "./hub/cmd/kollect-hub"); err != nil {
		return err
	}
	for command, page := range flagdoc.Documents {
		help, err := flagdoc.Help(filepath.Join(dir, command))
		if err != nil {
			return err
		}
		path := filepath.Join(root, page)
		doc, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		out, err := flagdoc.Splice(string(doc), command, flagdoc.Markdown(flagdoc.Parse(help)))
		if err != nil {
			return fmt.Errorf("%s: %w", page, err)
		}
		if out != string(doc) {
			if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
				return err
			}
		}
	}
	return nil
}
