#!/bin/sh
# Installs the test-only client (the openai npm package, pinned in package-lock.json) into
# tests/server/node_modules. Idempotent; run by scripts/test.sh. Exit 77 (skipped; the server
# tests then skip too) when npm is missing.
exec "$(dirname "$0")/../npm_peer.sh" "$(dirname "$0")" openai
