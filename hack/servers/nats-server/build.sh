#!/usr/bin/env bash
# Installs nats-server (the real server: JetStream, KV, Nats-Msg-Id dedupe) into $1.
set -euo pipefail
GOBIN=$1 GOWORK=off go install github.com/nats-io/nats-server/v2@v2.15.3
