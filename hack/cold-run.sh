#!/usr/bin/env bash
# Measures the newcomer's cold path: a fresh clone of this repository's HEAD runs `make demo`
# until the dashboard URL is printed, stops it with SIGINT as Ctrl-C would, checks that nothing
# survived, then runs `make test` to its end. Every phase reports "phase NAME: N s" (see
# hack/lib.sh); the log and a summary go to DIR.
#
# Usage: hack/cold-run.sh DIR
# The caches are KOLLECT_CACHE, GOCACHE and GOMODCACHE when set, else fresh ones under DIR, so
# the run is cold unless you point them at warm caches on purpose.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:?usage: hack/cold-run.sh DIR}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
export KOLLECT_CACHE=${KOLLECT_CACHE:-$dir/cache/kollect}
export GOCACHE=${GOCACHE:-$dir/cache/go-build}
export GOMODCACHE=${GOMODCACHE:-$dir/cache/go-mod}
rm -rf "$dir/clone"
git clone -q "$root" "$dir/clone"
cd "$dir/clone"
log=$dir/cold-run.log
: >"$log"
say() { echo "$*" | tee -a "$log"; }
say "cold run of $(git rev-parse --short HEAD) at $(date -u +%FT%TZ); caches: $KOLLECT_CACHE $GOCACHE $GOMODCACHE"

# make demo in its own process group, as a terminal runs it, until the dashboard URL shows.
start=$SECONDS
setsid make demo >>"$log" 2>&1 </dev/null &
demo=$!
until grep -q '^dashboard:' "$log"; do
  if ! kill -0 "$demo" 2>/dev/null; then say "make demo ended before printing the dashboard URL"; exit 1; fi
  sleep 2
done
say "phase make-demo-to-dashboard: $((SECONDS - start)) s"
kill -INT -- "-$demo"
wait "$demo" || true
# The demo's children end on their own after the signal; a loaded machine may take a few
# seconds. Whatever is still there after 20 s survived the Ctrl-C.
for _ in $(seq 40); do
  left=$(pgrep -f -- "$KOLLECT_CACHE|kollect-agent|kollect-hub|kollect-demo" || true)
  [ -z "$left" ] && break
  sleep 0.5
done
if [ -n "$left" ]; then left="$left ($(ps -o args= -p "${left//$'\n'/,}" 2>/dev/null | cut -c1-120 | tr '\n' ';'))"; fi
say "after Ctrl-C: processes left: ${left:-none}; temp dirs left: $(ls -d /tmp/kollect-demo-* /tmp/kollect-cp-demo-* 2>/dev/null | wc -l)"

start=$SECONDS
rc=0
make test >>"$log" 2>&1 </dev/null || rc=$?
say "phase make-test: $((SECONDS - start)) s (exit $rc)"
grep -E '^(\[[a-z]+\] )?phase |^(ok|FAIL|---) ' "$log" >"$dir/summary.txt" || true
exit $rc
