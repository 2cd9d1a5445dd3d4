#!/bin/sh
# Installs the test-only reference peer (the tiktoken npm package, pinned in
# package-lock.json) into tests/tokenizer/node_modules. Idempotent; run by the test set-up.
# Exit 77 (ctest's Skipped; parity then skips too) when npm is missing.
set -eu
cd "$(dirname "$0")"
want=$(sed -n 's/.*"tiktoken": "\([0-9.]*\)".*/\1/p' package.json)
have=$(sed -n 's/^  "version": "\([0-9.]*\)".*/\1/p' node_modules/tiktoken/package.json 2>/dev/null || true)
if [ -n "$want" ] && [ "$want" = "$have" ]; then
  exit 0
fi
if ! command -v npm >/dev/null 2>&1; then
  echo "tests/tokenizer/setup.sh: skipped: npm not found (install the Debian packages nodejs and npm)" >&2
  exit 77
fi
npm ci --no-audit --no-fund --loglevel=error
