#!/usr/bin/env bash
# Keeps the Helm charts in step with the code: copies the generated CRDs (api/crds) into the
# agent chart, which installs and upgrades them from templates (Helm never upgrades a chart's
# crds/ directory), and writes each chart's README.md from README.intro.md and the comments of
# values.yaml. Run by `make generate`; the chart tests fail when its output is stale.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
crds=$root/charts/agent/files/crds
rm -rf "$crds"
mkdir -p "$crds"
cp "$root"/api/crds/*.yaml "$crds/"
cd "$root/hack/gen-chart-readme"
GOWORK=off GOFLAGS=-buildvcs=false go run . "$root/charts/agent" "$root/charts/hub"
