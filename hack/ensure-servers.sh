#!/usr/bin/env bash
# Installs the sink servers the tests start: Debian packages when missing (PostgreSQL, git,
# kcat, clang for the BigQuery emulator's cgo build, s3cmd, python3-pymongo and prometheus for the sinks
# e2e) and one Go-built server or client (the nats CLI) per hack/servers/<name>/build.sh, each
# cached under
# ~/.cache/kollect/servers/<name>-<hash>. Prints the cache directories joined by ':', which
# `make test` exports as KOLLECT_SERVERS for testenv.
#
# The BigQuery emulator is one single-threaded clang++ compile of ~20 minutes on a cold machine,
# so it builds in the background while the other servers build beside it.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
cache=$(kollect_cache)/servers

"$here/ensure-packages.sh" servers

# build NAME: builds hack/servers/NAME into its cache directory unless it is there.
build() {
  local name=$1 dir=$here/servers/$1 hash out
  hash=$(cd "$dir" && find . -type f | LC_ALL=C sort | xargs sha256sum | sha256sum | cut -c1-12)
  out=$cache/$name-$hash
  if [ ! -d "$out" ]; then
    echo "building test server $name into $out" >&2
    build_into "$out" "server $name" "$dir/build.sh" || return 1
  fi
  echo "$out"
}

bq_out=$(mktemp)
build bigquery-emulator >"$bq_out" &
bq=$!
trap 'kill "$bq" 2>/dev/null || true; rm -f "$bq_out"' EXIT
dirs=()
for b in "$here"/servers/*/build.sh; do
  name=$(basename "$(dirname "$b")")
  [ "$name" = bigquery-emulator ] && continue
  dirs+=("$(build "$name")")
done
wait "$bq"
dirs+=("$(cat "$bq_out")")
(IFS=:; echo "${dirs[*]}")
