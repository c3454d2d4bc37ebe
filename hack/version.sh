#!/usr/bin/env bash
# Prints the version every binary is stamped with (kollect.dev/api/version): `git describe`
# against the release tags when there are any; else the charts' appVersion with the commit,
# in describe's form (v0.1.0-dev+gabc1234, -dirty with uncommitted changes); outside a git
# checkout, the appVersion alone.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
app=$(sed -n 's/^appVersion:[[:space:]]*"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' "$root/charts/agent/Chart.yaml")
if desc=$(git -C "$root" describe --tags --match 'v[0-9]*' --dirty 2>/dev/null); then
  echo "$desc"
elif rev=$(git -C "$root" rev-parse --short=7 HEAD 2>/dev/null); then
  dirty=
  git -C "$root" diff --quiet HEAD 2>/dev/null || dirty=-dirty
  echo "v$app-dev+g$rev$dirty"
else
  echo "v$app"
fi
