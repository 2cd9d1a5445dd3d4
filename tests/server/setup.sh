#!/bin/sh
# Installs the test-only client (the openai npm package, pinned in package-lock.json) into
# tests/server/node_modules. Idempotent; run by scripts/test.sh. Exit 77 (skipped; the server
# tests then skip too) when npm is missing.
set -eu
cd "$(dirname "$0")"
want=$(sed -n 's/.*"openai": "\([0-9.]*\)".*/\1/p' package.json)
have=$(sed -n 's/^  "version": "\([0-9.]*\)".*/\1/p' node_modules/openai/package.json 2>/dev/null || true)
if [ -n "$want" ] && [ "$want" = "$have" ]; then
  exit 0
fi
if ! command -v npm >/dev/null 2>&1; then
  echo "tests/server/setup.sh: skipped: npm not found (install the Debian packages nodejs and npm)" >&2
  exit 77
fi
npm ci --no-audit --no-fund --loglevel=error
