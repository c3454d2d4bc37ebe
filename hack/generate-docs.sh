#!/usr/bin/env bash
# Writes the CR reference (docs/reference/crds.md) from the generated CRDs. Run by
# `make generate`; `make test` fails when it is stale.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root/hack/gen-crd-reference"
GOWORK=off GOFLAGS=-buildvcs=false go run . "$root/api/crds" "$root/docs/reference/crds.md"
