#!/usr/bin/env bash
# Installs the nats CLI (natscli), the independent client the sinks e2e reads NATS streams and
# KV buckets back with, into $1.
set -euo pipefail
GOBIN=$1 GOWORK=off go install github.com/nats-io/natscli/nats@v0.5.0
