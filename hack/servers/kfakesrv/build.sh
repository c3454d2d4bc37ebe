#!/usr/bin/env bash
# Builds kfakesrv (franz-go's kfake Kafka-protocol broker as a process) into $1.
set -euo pipefail
cd "$(dirname "$0")" && GOWORK=off go build -o "$1/kfakesrv" .
