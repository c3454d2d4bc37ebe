#!/usr/bin/env bash
# build-scripts: workspace (the demo is the workspace module kollect.dev/e2e's kollect-demo)
# make demo: a hub, two local control planes and their agents (e2e/cmd/kollect-demo).
# The demo is built, not `go run`: `go run` dies on SIGTERM without passing it on, which would
# leave the demo and its control planes running. exec makes the demo the process make
# signals, so Ctrl-C and SIGTERM reach it and it stops everything it started.
set -euo pipefail
cd "$(dirname "$0")/.."
export KUBEBUILDER_ASSETS=${KUBEBUILDER_ASSETS:-$(hack/ensure-k8s.sh)}
# The fleet's PostgreSQL and psql, and git for the repository (Debian packages, when missing).
hack/ensure-packages.sh demo
go build -o bin/kollect-demo ./e2e/cmd/kollect-demo
exec bin/kollect-demo "$@"
