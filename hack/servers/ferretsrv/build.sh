#!/usr/bin/env bash
# Builds ferretsrv (FerretDB v1 embedded, a MongoDB-wire server for the mongodb sink tests) into $1.
set -euo pipefail
cd "$(dirname "$0")" && GOWORK=off go build -o "$1/ferretsrv" .
