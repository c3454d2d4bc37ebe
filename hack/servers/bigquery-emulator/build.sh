#!/usr/bin/env bash
# Builds goccy/bigquery-emulator (ZetaSQL on SQLite: the BigQuery REST API the bigquery sink
# tests run against) into $1. go-zetasql is C++ compiled through cgo: one clang++ of ~20 min and
# ~6.8 GB RAM on a cold Go build cache, which is why the result is cached once per machine.
# `go install …@v0.6.6` needs the proxy's version list, which is refused here; this module pins
# the emulator (tool line) and its dependencies (go.sum) instead.
set -euo pipefail
cd "$(dirname "$0")"
CGO_ENABLED=1 CXX=clang++ GOWORK=off go build -o "$1/bigquery-emulator" \
  github.com/goccy/bigquery-emulator/cmd/bigquery-emulator
