#!/usr/bin/env bash
# Builds fake-gcs-server (the GCS JSON API emulator the gcs sink tests use) into $1.
set -euo pipefail
GOWORK=off GOBIN="$1" go install github.com/fsouza/fake-gcs-server@v1.56.1
