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
# The ASan+UBSan build (no benchmark binaries: no test runs one, and the Release build compiles
# them) runs beside the Release ctest: that pass keeps the CPU busy about half its wall time
# (most tests wait on child processes), so the build fills the rest (docs/testing.md "Suite time").
asan_pid=""
if [[ "${1:-}" != "--no-asan" ]]; then
  scripts/build.sh Asan -DK3_BENCHES=OFF > build/asan-build.log 2>&1 &
  asan_pid=$!
fi
release_rc=0
(cd build && ctest --output-on-failure -j 4 --timeout 1500) || release_rc=$?
if [[ -n "$asan_pid" ]]; then
  asan_rc=0
  wait "$asan_pid" || asan_rc=$?
  if [[ $asan_rc -ne 0 ]]; then tail -n 60 build/asan-build.log; echo "k3: the ASan build failed (build/asan-build.log)"; exit 1; fi
fi
if [[ $release_rc -ne 0 ]]; then echo "k3: Release tests failed"; exit "$release_rc"; fi
if [[ -n "$asan_pid" ]]; then
  # Under the sanitizers: every unit test, the pipeline tests (real processes) and the install
  # test, but not the tests labelled heavy (model gates, tokenizer parity, demo checks: the same
  # code as the Release pass above, and most of the CI budget). The label is set where each
  # test is registered (tests/CMakeLists.txt and its subfolders); gate_testdata is unlabelled:
  # it is the fixture that writes the test checkpoints.
  (cd build-asan && ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -j 2 --timeout 1500 -LE heavy)
fi
echo "k3: all tests passed"
