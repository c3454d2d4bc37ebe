#!/usr/bin/env bash
# Builds the image builder (this module) into $1. GOWORK=off: the module is not part of the
# workspace; its dependencies (go-containerregistry, the SPDX tools, the CA bundle it ships)
# never change the project's.
set -euo pipefail
out=${1:?usage: build.sh OUT}
cd "$(dirname "$0")"
GOWORK=off GOFLAGS=-buildvcs=false go build -trimpath -o "$out/images" .
