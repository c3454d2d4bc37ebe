#!/usr/bin/env bash
# Installs the Debian packages the tests need, only those missing, in one apt-get run.
# Usage: ensure-packages.sh [servers|tools|browser|demo]...   (no argument: all of them)
#   servers  PostgreSQL 15, git, kcat, clang (the BigQuery emulator's cgo build), and the
#            independent read-back clients of the sinks e2e: s3cmd (S3) and python3-pymongo
#            (MongoDB, run by Debian's /usr/bin/python3), Prometheus (the documented alerts
#            are evaluated by a real one), and jq and curl (the snapshot sinks' tests run the
#            documented coverage reads), npm (Azurite, the Azure Storage emulator, is an
#            npm package), and PgBouncer (the PostgreSQL sink's contract runs through it, in
#            transaction and session pooling; testenv.StartPgBouncer runs /usr/sbin/pgbouncer)
#   tools    shellcheck (the chart tests lint e2e/kind-fleet/run.sh)
#   browser  chromium and a font (the dashboard's browser e2e)
#   demo     what `make demo` runs beside its own binaries: PostgreSQL 15 (server and psql) and git
#   node     what a test node runs on: containerd, runc, the CNI plugins, iptables, conntrack and
#            iproute2 (see hack/ensure-node.sh)
# hack/ensure-all.sh runs it once before the concurrent builds, so that no two apt-get runs race.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
[ $# -gt 0 ] || set -- servers tools browser demo node
need=()
for group in "$@"; do
  case $group in
    servers)
      [ -x /usr/lib/postgresql/15/bin/initdb ] || need+=(postgresql-15)
      command -v git >/dev/null || need+=(git)
      command -v kcat >/dev/null || need+=(kcat)
      command -v clang++ >/dev/null || need+=(clang)
      [ -x /usr/bin/s3cmd ] || need+=(s3cmd)
      command -v jq >/dev/null || need+=(jq)
      command -v curl >/dev/null || need+=(curl)
      command -v npm >/dev/null || need+=(npm)
      /usr/bin/python3 -c 'import pymongo' 2>/dev/null || need+=(python3-pymongo)
      [ -x /usr/bin/prometheus ] || need+=(prometheus)
      [ -x /usr/sbin/pgbouncer ] || need+=(pgbouncer) ;;
    demo)
      [ -x /usr/lib/postgresql/15/bin/initdb ] || need+=(postgresql-15)
      [ -x /usr/lib/postgresql/15/bin/psql ] || need+=(postgresql-client-15) # /usr/bin/psql alone is a wrapper
      command -v git >/dev/null || need+=(git) ;;
    node)
      command -v containerd >/dev/null || need+=(containerd)
      command -v runc >/dev/null || need+=(runc)
      [ -x /usr/lib/cni/bridge ] || need+=(containernetworking-plugins)
      command -v iptables >/dev/null || need+=(iptables)
      command -v conntrack >/dev/null || need+=(conntrack)
      command -v ip >/dev/null || need+=(iproute2) ;;
    tools) command -v shellcheck >/dev/null || need+=(shellcheck) ;;
    browser)
      command -v chromium >/dev/null || need+=(chromium)
      [ -d /usr/share/fonts/truetype/dejavu ] || need+=(fonts-dejavu-core) ;;
    *) echo "ensure-packages.sh: unknown group $group (servers, tools, browser, demo, node)" >&2; exit 2 ;;
  esac
done
# A package two groups need is installed once.
[ ${#need[@]} -eq 0 ] || mapfile -t need < <(printf '%s\n' "${need[@]}" | sort -u)
apt_install "${need[@]}"
