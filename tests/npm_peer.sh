#!/bin/sh
# Installs one test-only npm peer, pinned in DIR/package-lock.json, into DIR/node_modules.
# Idempotent: nothing is done when the installed version is the one package.json names.
# Exit 77 (ctest's Skipped; the tests that need the peer then skip too) when npm is missing.
# Usage: tests/npm_peer.sh DIR PACKAGE   (the callers: tests/tokenizer/setup.sh, tests/server/setup.sh)
set -eu
dir=$1 pkg=$2
cd "$dir"
want=$(sed -n "s/.*\"$pkg\": \"\([0-9.]*\)\".*/\1/p" package.json)
have=$(sed -n 's/^  "version": "\([0-9.]*\)".*/\1/p' "node_modules/$pkg/package.json" 2>/dev/null || true)
if [ -n "$want" ] && [ "$want" = "$have" ]; then
  exit 0
fi
if ! command -v npm >/dev/null 2>&1; then
  echo "$dir/setup.sh: skipped: npm not found (install the Debian packages nodejs and npm)" >&2
  exit 77
fi
npm ci --no-audit --no-fund --loglevel=error
