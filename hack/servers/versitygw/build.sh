#!/usr/bin/env bash
# Builds versitygw (an S3 gateway; the s3 sink tests use its posix backend) into $1.
set -euo pipefail
GOWORK=off GOBIN="$1" go install github.com/versity/versitygw/cmd/versitygw@v1.8.0
