#!/usr/bin/env bash
# Fails when `make generate` changes any generated file, i.e. when generated code is stale.
# It hashes the generated paths, regenerates, and compares: no git state is needed, so it
# works on uncommitted work and in a fresh clone alike.
set -euo pipefail
cd "$(dirname "$0")/.."
paths=(api/v1alpha1/zz_generated.deepcopy.go api/crds)
for p in proto/gen web/src/gen charts/agent/files/crds charts/agent/README.md charts/hub/README.md docs/reference docs/operations.md docs/hub.md; do [ -e "$p" ] && paths+=("$p"); done
snapshot() { find "${paths[@]}" -type f 2>/dev/null | LC_ALL=C sort | xargs sha256sum; }
before=$(snapshot)
make --no-print-directory generate >/dev/null
after=$(snapshot)
if [ "$before" != "$after" ]; then
  echo "generated files were stale; 'make generate' has updated them:" >&2
  diff <(echo "$before") <(echo "$after") >&2 || true
  echo "review and commit the regenerated files" >&2
  exit 1
fi
echo "generated files are up to date"
