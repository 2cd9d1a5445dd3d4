#!/bin/sh
# Installs the test-only reference peer (the tiktoken npm package, pinned in
# package-lock.json) into tests/tokenizer/node_modules. Idempotent; run by the test set-up.
# Exit 77 (ctest's Skipped; parity then skips too) when npm is missing.
exec "$(dirname "$0")/../npm_peer.sh" "$(dirname "$0")" tiktoken
