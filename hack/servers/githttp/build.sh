#!/usr/bin/env bash
# Builds githttp (git http-backend behind net/http/cgi) into $1.
set -euo pipefail
cd "$(dirname "$0")" && GOWORK=off go build -o "$1/githttp" .
