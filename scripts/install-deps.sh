#!/usr/bin/env bash
# Installs every Debian package k3 needs (idempotent).
# Usage: scripts/install-deps.sh [--tests] [--with-torch]
#   (none)        build the engine and run the demo
#   --tests       also what the test suite needs so that no test skips: torch for
#                 demo_train_parts, Node.js + npm for tokenizer_parity, tmux for the terminal
#                 tests and strace for the exit-status and whole-line checks of the pipeline
#                 tests (scripts/test.sh uses this)
#   --with-torch  also what training the demo model needs (train/, not part of CI)
set -euo pipefail
PKGS=(build-essential cmake ninja-build pkg-config
      libzmq3-dev cppzmq-dev libflatbuffers-dev flatbuffers-compiler
      libtomlplusplus-dev nlohmann-json3-dev libcli11-dev liburing-dev
      libpcre2-dev libxxhash-dev zlib1g-dev libssl-dev libsodium-dev
      libgtest-dev libgmock-dev googletest libcpp-httplib-dev libedit-dev
      python3 python3-numpy)
tests=0 torch=0
for a in "$@"; do
  case "$a" in
    --tests) tests=1 ;;
    --with-torch) torch=1 ;;
    *) echo "usage: scripts/install-deps.sh [--tests] [--with-torch]" >&2; exit 2 ;;
  esac
done
if ((tests || torch)); then PKGS+=(python3-torch); fi
# python3-jsonschema: tests/server/test_structured.py validates structured replies with it.
if ((tests)); then PKGS+=(tmux strace python3-prometheus-client python3-jsonschema); fi
# Node.js (the test-only tiktoken peer) ships with npm on some machines (and Debian's npm package
# conflicts with such a node); only add the Debian pair if npm is absent.
if ((tests)) && ! command -v npm >/dev/null 2>&1; then PKGS+=(nodejs npm); fi
# Training also needs the regex module, the training text and a threaded BLAS (the reference
# BLAS makes torch ~10x slower).
if ((torch)); then PKGS+=(python3-regex fortunes fortunes-min libopenblas0-pthread); fi
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
