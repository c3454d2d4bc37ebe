#!/usr/bin/env bash
# build-scripts: workspace (the demo runs the workspace module kollect.dev/e2e)
# make demo: start a local control plane with the Kollect CRDs, apply the documented examples
# and list them. It grows with the agent (rows exported) and the hub (fleet view).
set -euo pipefail
cd "$(dirname "$0")/.."
export KUBEBUILDER_ASSETS=${KUBEBUILDER_ASSETS:-$(hack/ensure-k8s.sh)}
exec go run ./e2e/cmd/kollect-demo "$@"
