#!/usr/bin/env bash
# Writes docs/examples/agent-rbac.yaml: the RBAC of an agent run without Helm (docs/hub.md,
# "Joining a hub without Helm"), rendered from the agent chart with the values that match that
# section's command: a hub, bundles in kollect-fleet, the agent in kollect-system, no webhook,
# plain metrics, no leader election (the binary's defaults). Only the ServiceAccount and the
# RBAC objects are kept, without Helm's bookkeeping labels. Run by `make generate`; the chart
# tests (e2e/charts, TestJoinWithoutHelm) re-render it, fail when it is stale, and run the
# shipped agent with exactly this RBAC. An optional argument writes elsewhere.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${1:-$root/docs/examples/agent-rbac.yaml}
helm=${HELM:-$("$root/hack/ensure-tools.sh")/helm}
home=$(mktemp -d)
trap 'rm -rf "$home"' EXIT
values=$home/values.yaml
cat >"$values" <<'VALUES'
clusterName: east
hub:
  url: https://hub.example.internal:8443
  caFingerprint: sha256:0000000000000000000000000000000000000000000000000000000000000000
  bootstrapToken: {existingSecret: kollect-hub-bootstrap}
  namespaces: [kollect-fleet]
webhook: {enabled: false}
metrics: {secure: false}
leaderElection: {enabled: false}
VALUES
{
	echo "# The RBAC of a kollect-agent run without Helm, in namespace kollect-system, applying hub"
	echo "# bundles in kollect-fleet (docs/hub.md, \"Joining a hub without Helm\"). Generated from"
	echo "# charts/agent by hack/generate-agent-rbac.sh: do not edit."
	HELM_CONFIG_HOME=$home HELM_CACHE_HOME=$home HELM_DATA_HOME=$home \
		"$helm" template kollect-agent "$root/charts/agent" --namespace kollect-system --values "$values" \
		--show-only templates/serviceaccount.yaml --show-only templates/rbac.yaml |
		grep -v -E '^# Source: |^ +(helm\.sh/chart|app\.kubernetes\.io/managed-by|app\.kubernetes\.io/version): '
} >"$out.tmp"
mv "$out.tmp" "$out"
