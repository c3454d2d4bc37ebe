#!/usr/bin/env bash
# build-scripts: workspace (flagdocs and the binaries it reads are workspace modules)
# Writes the flag tables of docs/operations.md and docs/hub.md from the -h output of the
# kollect-agent and kollect-hub binaries (e2e/cmd/flagdocs). Run by `make generate`.
set -euo pipefail
cd "$(dirname "$0")/.."
go run ./e2e/cmd/flagdocs
