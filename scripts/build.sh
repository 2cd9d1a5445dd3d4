#!/usr/bin/env bash
# Configures and builds k3 into build/ (or $K3_BUILD_DIR). Usage: scripts/build.sh [Release|Asan|Debug]
set -euo pipefail
cd "$(dirname "$0")/.."
TYPE="${1:-Release}"
DIR="${K3_BUILD_DIR:-build}"
[[ "$TYPE" == "Asan" ]] && DIR="${K3_BUILD_DIR:-build-asan}"
GEN=(); command -v ninja >/dev/null 2>&1 && GEN=(-G Ninja)
if [[ ! -f "$DIR/CMakeCache.txt" ]]; then
  cmake -S . -B "$DIR" "${GEN[@]}" -DCMAKE_BUILD_TYPE="$TYPE" -DK3_WERROR=ON
fi
cmake --build "$DIR" -j "$(nproc)"
