#!/usr/bin/env bash
# The whole test suite on a fresh machine: installs packages, builds (warnings are errors),
# runs every ctest test, then rebuilds with ASan+UBSan and runs the unit tests under it.
# Usage: scripts/test.sh [--no-asan]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
if [[ -x tests/tokenizer/setup.sh ]]; then tests/tokenizer/setup.sh; fi
scripts/build.sh Release
(cd build && ctest --output-on-failure -j 2 --timeout 1500)
if [[ "${1:-}" != "--no-asan" ]]; then
  scripts/build.sh Asan
  # Unit tests only under the sanitizers: the model gates are the same code at -O1 and
  # would take most of the CI budget.
  (cd build-asan && ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -j 2 -E "^gate|parity" --timeout 1500)
fi
echo "k3: all tests passed"
