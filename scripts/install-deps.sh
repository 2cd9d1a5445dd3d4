#!/usr/bin/env bash
# Installs every Debian package k3 needs to build and test (idempotent).
# Usage: scripts/install-deps.sh [--with-torch]   (torch is only for training the demo model)
set -euo pipefail
PKGS=(build-essential cmake ninja-build pkg-config
      libgtest-dev libgmock-dev googletest
      libzmq3-dev cppzmq-dev libflatbuffers-dev flatbuffers-compiler
      libtomlplusplus-dev nlohmann-json3-dev libcli11-dev liburing-dev
      libpcre2-dev libxxhash-dev libomp-dev zlib1g-dev
      python3 python3-numpy)
# Node.js (for the test-only tiktoken peer) ships with npm on these machines; only add it if absent.
command -v npm >/dev/null 2>&1 || PKGS+=(nodejs npm)
# Training the demo model (train/, not part of CI) also needs torch, the regex module, the
# training text and a threaded BLAS (the reference BLAS makes torch ~10x slower).
if [[ "${1:-}" == "--with-torch" ]]; then PKGS+=(python3-torch python3-regex fortunes fortunes-min libopenblas0-pthread); fi
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "install-deps: installing ${missing[*]}"
  SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO=sudo
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "install-deps: all packages present"
fi
