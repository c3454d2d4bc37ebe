#!/usr/bin/env bash
# Makes web/ buildable and testable: checks Node.js (vite needs >= 20.19), runs `npm ci` when
# node_modules is missing or older than package-lock.json, and with --browser also installs
# Debian's chromium (for the dashboard e2e) when it is missing. Run by make web, make test and
# make screenshots; a warm machine does nothing.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/hack/lib.sh"

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "Node.js 20.19+ and npm are needed to build the dashboard (web/); install them and retry" >&2
  exit 1
fi
if ! node -e 'const [a,b]=process.versions.node.split(".").map(Number); process.exit(a>20||(a===20&&b>=19)?0:1)'; then
  echo "Node.js $(node --version) is too old for the dashboard build: 20.19 or newer is needed" >&2
  exit 1
fi
web=$root/web
if [ ! -f "$web/node_modules/.package-lock.json" ] || [ "$web/package-lock.json" -nt "$web/node_modules/.package-lock.json" ]; then
  (cd "$web" && timed "npm ci" npm ci --no-audit --no-fund --loglevel=error) >&2
fi

if [ "${1:-}" = "--browser" ]; then
  "$root/hack/ensure-packages.sh" browser
fi
