#!/usr/bin/env bash
# The main job on the bundled default model: installs packages, builds, and runs the whole
# pipeline (k3-launch starts the trunk reader, expert fetcher, compute and tokenizer) on the
# trained demo model in models/k3-demo-tiny (configs/demo.toml).
# Usage: scripts/run.sh [PROMPT] [extra k3-launch flags...]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh >&2
scripts/build.sh Release >/dev/null
PROMPT="${1:-The meaning of life is}"
shift || true
exec build/bin/k3-launch configs/demo.toml --prompt "$PROMPT" --gen 48 --out build/run.json "$@"
