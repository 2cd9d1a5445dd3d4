#!/usr/bin/env bash
# Configures and builds k3 into build/ (or $K3_BUILD_DIR).
# Usage: scripts/build.sh [Release|Asan|Debug] [-DNAME=VALUE ...]
# Further arguments are CMake cache settings (e.g. -DK3_BENCHES=OFF); given, they are applied to
# an existing build directory too.
set -euo pipefail
cd "$(dirname "$0")/.."
TYPE="${1:-Release}"
shift || true
DIR="${K3_BUILD_DIR:-build}"
[[ "$TYPE" == "Asan" ]] && DIR="${K3_BUILD_DIR:-build-asan}"
GEN=(); command -v ninja >/dev/null 2>&1 && GEN=(-G Ninja)
if [[ ! -f "$DIR/CMakeCache.txt" ]]; then
  cmake -S . -B "$DIR" "${GEN[@]}" -DCMAKE_BUILD_TYPE="$TYPE" -DK3_WERROR=ON "$@"
elif (($#)); then
  cmake -S . -B "$DIR" "$@"
fi
cmake --build "$DIR" -j "$(nproc)"
