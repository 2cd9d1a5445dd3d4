#!/usr/bin/env bash
# The main job on the bundled default model: installs packages, builds, and generates text.
# Usage: scripts/run.sh [extra k3 flags...]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh Release >/dev/null
MODEL=models/k3-demo-tiny
if [[ ! -f "$MODEL/config.json" ]]; then
  # Until the trained demo model is committed, run a generated tiny checkpoint in the
  # released layout (random weights: the ids are meaningful only as a smoke test).
  MODEL=build/testdata/tiny
  [[ -f "$MODEL/config.json" ]] || /usr/bin/python3 tests/generator/make_checkpoint.py "$MODEL" --preset tiny
fi
exec build/bin/k3-compute --standalone "$MODEL" --ids 1,2,3,4,5 --gen 16 --out build/run.json "$@"
