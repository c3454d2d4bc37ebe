#!/usr/bin/env bash
# Builds the given tool packages of this module (its `tool` directives) into $1.
# Usage: hack/tools/build.sh OUT PACKAGE...   (run by hack/ensure-tools.sh and generate-proto.sh)
# GOWORK=off: the tools module is not part of the workspace, and its dependency graph must
# never change the project's; -trimpath keeps the binaries independent of the checkout's path.
set -euo pipefail
out=${1:?usage: build.sh OUT PACKAGE...}
shift
cd "$(dirname "$0")"
GOWORK=off GOFLAGS=-buildvcs=false go build -trimpath -ldflags "-s -w" -o "$out/" "$@"
