#!/usr/bin/env bash
# Installs the Debian packages quantjit builds, tests and benchmarks with, if any is missing.
# Every dependency is a Debian package (see README.md); nothing is downloaded from elsewhere.
set -euo pipefail
pkgs=(cmake make g++ pkg-config libasmjit-dev libcpuinfo-dev googletest libgtest-dev
      libbenchmark-dev libdnnl-dev python3 python3-matplotlib)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
