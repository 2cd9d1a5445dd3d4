#!/usr/bin/env bash
# The whole test suite on a fresh machine: installs packages (with what the tests need, so none
# skips), builds (warnings are errors), runs every ctest test while it builds again with
# ASan+UBSan, then runs all tests but those labelled heavy under the sanitizers.
# Usage: scripts/test.sh [--no-asan]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh --tests
if [[ -x tests/tokenizer/setup.sh ]]; then tests/tokenizer/setup.sh; fi
if [[ -x tests/server/setup.sh ]]; then tests/server/setup.sh; fi
scripts/build.sh Release
asan=1; [[ "${1:-}" == "--no-asan" ]] && asan=0
# The ASan build runs beside the Release ctest in the SCHED_IDLE class (chrt --idle): its
# compilers get only the CPU the tests leave idle (most tests wait on child processes), so no
# test deadline sees them. At normal priority the same overlap made a compute-service test miss
# its 60 s deadline; docs/testing.md "Suite time". No benchmark binaries here: no test runs one,
# and the Release build above compiles them.
if ((asan)); then
  # Its own process group (setsid), so that a failed Release pass can stop the whole build.
  setsid chrt --idle 0 scripts/build.sh Asan -DK3_BENCHES=OFF > build/asan-build.log 2>&1 &
  asan_build=$!
fi
# -j 4 on 2 cores: most tests wait on child processes (docs/testing.md "Suite time").
release_tests=0
(cd build && ctest --output-on-failure -j 4 --timeout 1500) || release_tests=$?
if ((release_tests)); then
  if ((asan)); then kill -- "-$asan_build" 2>/dev/null || true; wait "$asan_build" || true; fi
  echo "k3: Release tests failed" >&2
  exit "$release_tests"
fi
if ((asan)); then
  if ! wait "$asan_build"; then
    tail -n 40 build/asan-build.log
    echo "k3: the ASan build failed (whole log: build/asan-build.log)" >&2
    exit 1
  fi
  # Under the sanitizers: every unit test, the pipeline tests (real processes) and the install
  # test, but not the tests labelled heavy (model gates, tokenizer parity, demo checks: the same
  # code as the Release pass above, and most of the CI budget). The label is set where each
  # test is registered (tests/CMakeLists.txt and its subfolders); gate_testdata is unlabelled:
  # it is the fixture that writes the test checkpoints.
  (cd build-asan && ASAN_OPTIONS=detect_leaks=1 LSAN_OPTIONS=suppressions=$PWD/../tests/lsan.supp ctest --output-on-failure -j 2 --timeout 1500 -LE heavy)
fi
echo "k3: all tests passed"
