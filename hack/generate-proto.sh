#!/usr/bin/env bash
# Regenerates the fleet protocol's Go code (proto/gen) from proto/kollect/fleet/v1 with the
# buf, protoc-gen-go and protoc-gen-connect-go pinned in hack/tools/go.mod. Idempotent: the
# same .proto files always give the same output. Run by `make generate`.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export GOWORK=off GOFLAGS=-buildvcs=false
tools="$root/hack/tools/go.mod"

# The plugins must be on PATH for buf's local plugins; build them once into a version-keyed
# directory outside the work tree so reruns build nothing.
key="$(sha256sum "$tools" "$root/hack/tools/go.sum" "$root/hack/tools/build.sh" | sha256sum | cut -c1-16)"
bin="${KOLLECT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kollect}/proto-tools-$key"
if [ ! -x "$bin/buf" ] || [ ! -x "$bin/protoc-gen-go" ] || [ ! -x "$bin/protoc-gen-connect-go" ]; then
	mkdir -p "$bin"
	"$root/hack/tools/build.sh" "$bin" github.com/bufbuild/buf/cmd/buf \
		google.golang.org/protobuf/cmd/protoc-gen-go connectrpc.com/connect/cmd/protoc-gen-connect-go
fi
export PATH="$bin:$PATH"

cd "$root/proto"
buf lint
buf generate

# TypeScript for the dashboard, with the protoc-gen-es pinned in web/package-lock.json.
# npm ci runs only when node_modules is missing or older than the lock file.
web="$root/web"
if [ ! -x "$web/node_modules/.bin/protoc-gen-es" ] || [ "$web/package-lock.json" -nt "$web/node_modules/.package-lock.json" ]; then
	(cd "$web" && npm ci --no-audit --no-fund --loglevel=error >&2)
fi
buf generate --template buf.gen.es.yaml
