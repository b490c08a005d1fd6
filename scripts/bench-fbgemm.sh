#!/usr/bin/env bash
# quantjit side by side with FBGEMM itself on this machine. FBGEMM is not in Debian; it comes
# from PyPI (torch, whose quantized CPU ops call FBGEMM, and fbgemm-gpu-cpu) in a venv
# (default /work/.venv-fbgemm, or $FBGEMM_VENV). PyPI's Linux torch wheel imports only with its
# CUDA libraries present (a --no-deps install fails on libcufile.so.0), so the full wheel set
# is installed: about 5.5 GB on disk, no GPU needed. Not part of CI.
# Runs quantjit-bench, bench/peers/fbgemm_peer.py (FBGEMM through torch's ops, Python overhead
# measured) and, for FP16 and INT8 GEMM, the embedding kernels and RowWiseSparseAdaGradFused, bench/peers/
# fbgemm_direct (FBGEMM called from C++, built here, linked with libquantjit.so) one after the
# other on core 1, then prints bench/peers/compare.py's table. For the GEMM, embedding and AdaGrad sets
# fbgemm_direct also times quantjit's kernel in its own process, the calls interleaved
# (--with-quantjit): compare.py's "same process" tables, the least noisy ratios.
# Results stay in $OUT (default build/fbgemm-compare/).
#   scripts/bench-fbgemm.sh [fp16] [int8] [emb] [emb-fresh] [adagrad]   (default: all but emb-fresh)
# Environment: DIMS (default 32,64,128,256,512,1024), EMB_ROWS (emb / emb-fresh row formats, default
# fused8,fused4; also fused2, f32, f16), ADAGRAD_MODES (default warm,cold,fresh; fresh: new random
# indices before every call), REPS (quantjit-bench/peer sample counts), ROUNDS (emb / adagrad:
# alternating rounds per dim, default 1; compare.py keeps each side's best median of the rounds).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD:-$root/build}
venv=${FBGEMM_VENV:-/work/.venv-fbgemm}
out=${OUT:-$build/fbgemm-compare}
dims=${DIMS:-32,64,128,256,512,1024}
emb_rows=${EMB_ROWS:-fused8,fused4}
rounds=${ROUNDS:-1}
torch_ver=2.14.1   # fbgemm-gpu-cpu 1.9.x is built against torch 2.14
fbgemm_ver=1.9.0
what=("$@")
[ ${#what[@]} -eq 0 ] && what=(fp16 int8 emb adagrad)

# ---- FBGEMM venv ----
py=$venv/bin/python
if ! "$py" -c "import torch, fbgemm_gpu" >/dev/null 2>&1; then
  echo "bench-fbgemm: installing torch $torch_ver + fbgemm-gpu-cpu $fbgemm_ver into $venv"
  [ -x "$py" ] || python3 -m venv "$venv"
  "$venv/bin/pip" install -q "torch==$torch_ver" "fbgemm-gpu-cpu==$fbgemm_ver" numpy
fi

# ---- quantjit-bench (as scripts/bench.sh builds it) ----
"$root/scripts/install-deps.sh"
[ -f "$build/CMakeCache.txt" ] || cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" -j2 --target quantjit-bench quantjit >/dev/null  # (up to date with the sources)
qb=$build/bench/quantjit-bench
peer=$root/bench/peers/fbgemm_peer.py
# fbgemm_direct: links the wheel's fbgemm.so (which needs torch's libc10 / libtorch_cpu loaded and
# cpuinfo, from Debian's libcpuinfo-dev); DT_RPATH so that fbgemm.so's own dependencies resolve.
direct=$build/fbgemm_direct
site=$("$py" -c "import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))")
# bench/peers/fbgemm_int8.cpp (the INT8 GEMM) compiles against FBGEMM's own headers, which the
# torch wheel ships under torch/include.
if [ ! -x "$direct" ] || [ "$root/bench/peers/fbgemm_direct.cpp" -nt "$direct" ] ||
   [ "$root/bench/peers/fbgemm_int8.cpp" -nt "$direct" ] || [ "$root/bench/peers/fbgemm_int8.h" -nt "$direct" ] ||
   [ "$root/bench/driver/table_util.h" -nt "$direct" ] || [ "$build/libquantjit.so" -nt "$direct" ] ||
   ! readelf -d "$direct" 2>/dev/null | grep -qF "$site/fbgemm_gpu"; then  # new source or other venv
  g++ -O2 -std=c++20 -I"$root" -I"$site/torch/include" -c "$root/bench/peers/fbgemm_int8.cpp" -o "$build/fbgemm_int8.o"
  g++ -O2 -std=c++20 -I"$root" -I"$root/bench" -I"$root/include" "$root/bench/peers/fbgemm_direct.cpp" \
    "$build/fbgemm_int8.o" -o "$direct" "$build/libquantjit.so" -Wl,-rpath,"$build" \
    "$site/fbgemm_gpu/fbgemm.so" -Wl,--disable-new-dtags -Wl,-rpath,"$site/fbgemm_gpu" \
    -Wl,-rpath,"$site/torch/lib" -L"$site/torch/lib" -lc10 -ltorch_cpu -lcpuinfo
fi
pin=""
command -v taskset >/dev/null && [ "$(nproc)" -gt 1 ] && pin="taskset -c 1"
mkdir -p "$out"
fp16_shapes=$(seq -s';' 1 119 | sed 's/\([0-9]*\)/\1,512,512/g')
reps=()
[ -n "${REPS:-}" ] && reps=(--reps "$REPS")

for w in "${what[@]}"; do
  case $w in
    fp16)
      for mode in warm cold; do
        $pin "$qb" gemm --weights f16 --shapes "$fp16_shapes" --$mode --format json "${reps[@]}" 2>/dev/null > "$out/qj-fp16-$mode.jsonl"
        flag=(); [ $mode = cold ] && flag=(--cold)
        $pin "$py" "$peer" gemm --weights f16 --shapes "$fp16_shapes" "${flag[@]}" "${reps[@]}" > "$out/fb-fp16-$mode.jsonl"
        $pin "$direct" gemm --shapes "$fp16_shapes" --mode $mode --with-quantjit "${reps[@]}" > "$out/fb-fp16-$mode-direct.jsonl"
      done ;;
    int8)
      # quantjit-bench's "fbgemm" list (bench/shapes/gemm-fbgemm-{acc32,gemms}.csv) as inline shapes
      # for fbgemm_direct
      int8_shapes=$(for f in gemm-fbgemm-acc32.csv gemm-fbgemm-gemms.csv; do
        grep -v -e '^#' -e '^[[:space:]]*$' "$root/bench/shapes/$f" | tail -n +2; done | paste -sd';')
      for mode in warm cold; do
        $pin "$qb" gemm --weights s8 --shapes fbgemm --$mode --format json "${reps[@]}" 2>/dev/null > "$out/qj-int8-$mode.jsonl"
        flag=(); [ $mode = cold ] && flag=(--cold)
        $pin "$py" "$peer" gemm --weights s8 --shapes fbgemm "${flag[@]}" "${reps[@]}" > "$out/fb-int8-$mode.jsonl"
        $pin "$direct" int8 --shapes "$int8_shapes" --mode $mode --with-quantjit "${reps[@]}" > "$out/fb-int8-$mode-direct.jsonl"
      done ;;
    emb|emb-fresh)
      # One dim at a time, quantjit and FBGEMM right after each other: the shared machine's state
      # drifts over minutes (cold cases of one binary measured up to 4x apart in runs 5 minutes
      # apart, 2026-11-30), so each ratio comes from neighbouring measurements.
      modes=warm,cold; [ $w = emb-fresh ] && modes=fresh
      for fmt in ${emb_rows//,/ }; do
        : > "$out/qj-$w-$fmt.jsonl"; : > "$out/fb-$w-$fmt.jsonl"; : > "$out/fb-$w-$fmt-direct.jsonl"
        for dim in ${dims//,/ }; do for _ in $(seq "$rounds"); do
          $pin "$qb" embedding --rows $fmt --dims "$dim" --index 32,64 --weighted 0,1 --mode $modes --no-limit \
            --format json "${reps[@]}" 2>/dev/null >> "$out/qj-$w-$fmt.jsonl"
          $pin "$py" "$peer" embedding --rows $fmt --dims "$dim" --index 32,64 --weighted 0,1 --mode $modes \
            "${reps[@]}" >> "$out/fb-$w-$fmt.jsonl"
          $pin "$direct" emb --rows $fmt --dims "$dim" --index 32,64 --weighted 0,1 --prefetch 0,16 --mode $modes \
            --with-quantjit "${reps[@]}" >> "$out/fb-$w-$fmt-direct.jsonl"
        done; done
      done ;;
    adagrad)
      # FBGEMM updates once per occurrence (racy with threads); quantjit runs its default,
      # deterministic coalesced mode (the issue's target: at least FBGEMM's speed per row while
      # deterministic). ADAGRAD_UPDATE=occurrence times quantjit's FBGEMM-order mode instead.
      # (one dim at a time, as emb)
      : > "$out/qj-adagrad.jsonl"; : > "$out/fb-adagrad-direct.jsonl"
      for dim in ${dims//,/ }; do for _ in $(seq "$rounds"); do
        $pin "$qb" embedding --adagrad --rows f32,f16 --dims "$dim" --index 32,64 \
          --mode "${ADAGRAD_MODES:-warm,cold,fresh}" --update "${ADAGRAD_UPDATE:-coalesced}" --format json \
          "${reps[@]}" 2>/dev/null >> "$out/qj-adagrad.jsonl"
        $pin "$direct" adagrad --rows f32,f16 --dims "$dim" --index 32,64 \
          --mode "${ADAGRAD_MODES:-warm,cold,fresh}" --with-quantjit "${reps[@]}" >> "$out/fb-adagrad-direct.jsonl"
      done; done ;;
    *) echo "bench-fbgemm: unknown set '$w' (fp16 int8 emb emb-fresh adagrad)" >&2; exit 2 ;;
  esac
done
python3 "$root/bench/peers/compare.py" "$out"/qj-*.jsonl --fbgemm "$out"/fb-*.jsonl
