#!/usr/bin/env bash
# README's main job: installs what is missing, builds (Release, -j2), measures this machine's
# peaks, then runs the default benchmark sweep (INT8 GEMM over FBGEMM's shape lists, single
# thread on core 1, side by side with oneDNN) and prints its table.
# Extra arguments are passed to `quantjit-bench gemm` (e.g. --shapes llm --format json).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/build
"$root/scripts/install-deps.sh"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" -j2 --target quantjit-bench
pin=""
command -v taskset >/dev/null && [ "$(nproc)" -gt 1 ] && pin="taskset -c 1"
# With --format json / csv the sweep's stdout is machine-readable: the peak table goes to stderr.
peak_to=1
for a in "$@"; do case $a in json|csv) peak_to=2 ;; esac; done
$pin "$build/bench/quantjit-bench" peak >&$peak_to
$pin "$build/bench/quantjit-bench" gemm --shapes fbgemm --vs onednn --format table "$@"
