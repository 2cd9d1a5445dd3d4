#!/usr/bin/env bash
# The whole test suite on a fresh machine: installs packages (with what the tests need, so none
# skips), builds (warnings are errors), runs every ctest test, then rebuilds with ASan+UBSan and
# runs all tests but those labelled heavy under it.
# Usage: scripts/test.sh [--no-asan]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh --tests
if [[ -x tests/tokenizer/setup.sh ]]; then tests/tokenizer/setup.sh; fi
if [[ -x tests/server/setup.sh ]]; then tests/server/setup.sh; fi
scripts/build.sh Release
# -j 4 on 2 cores: the measured Release pass kept the CPU busy 22% of its wall time (most tests
# wait on child processes); docs/testing.md "Suite time".
(cd build && ctest --output-on-failure -j 4 --timeout 1500)
if [[ "${1:-}" != "--no-asan" ]]; then
  # No benchmark binaries here: no test runs one, and the Release build above compiles them.
  scripts/build.sh Asan -DK3_BENCHES=OFF
  # Under the sanitizers: every unit test, the pipeline tests (real processes) and the install
  # test, but not the tests labelled heavy (model gates, tokenizer parity, demo checks: the same
  # code as the Release pass above, and most of the CI budget). The label is set where each
  # test is registered (tests/CMakeLists.txt and its subfolders); gate_testdata is unlabelled:
  # it is the fixture that writes the test checkpoints.
  (cd build-asan && ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -j 2 --timeout 1500 -LE heavy)
fi
echo "k3: all tests passed"
