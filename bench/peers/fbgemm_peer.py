#!/usr/bin/env python3
# FBGEMM as a peer of quantjit-bench, measured on THIS machine. FBGEMM is not packaged for
# Debian, so it is reached through PyPI's torch (whose CPU quantized ops call FBGEMM) and
# fbgemm-gpu-cpu; scripts/bench-fbgemm.sh makes the venv. The script runs FBGEMM's kernels on
# the shapes and data rules of `quantjit-bench gemm` / `quantjit-bench embedding` and prints
# JSON Lines with the same field names plus peer="fbgemm", kernel (the op that was called) and
# overhead_ns: the median time of the same op on a trivially small case, i.e. what the Python /
# dispatcher / allocation path costs per call, which quantjit's C loop does not pay. `seconds`
# is the raw time per call (overhead included); compare.py shows ratios with and without it.
#
#   fbgemm_peer.py gemm --weights f16|s8 --shapes fp16|acc32|gemms|fbgemm|FILE|"M,N,K;..." [--cold]
#   fbgemm_peer.py embedding --rows fused8,fused4 --dims 32,64 --index 32,64 --weighted 0,1
#                            --mode warm,cold,fresh
#
# Which FBGEMM kernel each op reaches (checked with `perf record` on this machine;
# docs/measurement-log.md, section 2):
#   f16 : torch.fbgemm_linear_fp16_weight -> fbgemm::cblas_gemm_compute (gemmkernel_*_Avx512_fp16)
#   s8  : torch.ops.quantized.linear (fbgemm engine, per-channel qint8 weights, quint8 out)
#         -> fbgemm::fbgemmPacked<PackAWithRowOffset, PackBMatrix, ReQuantizeOutput<.., OUT_CHANNEL,
#         float bias>> (acc32, A packed per call as in FBGEMM's own benchmark)
#   emb : torch.ops.quantized.embedding_bag_byte_rowwise_offsets / embedding_bag_4bit_rowwise_offsets
#         -> fbgemm::GenerateEmbeddingSpMDM / GenerateEmbeddingSpMDMNBit kernels (prefetch 16, fixed
#         by torch: "prefetch off" is not reachable through these ops).
# Timing: time.perf_counter_ns around many calls per sample (warm) or one call after an untimed
# flush (cold / fresh), medians of the samples. Run pinned: taskset -c 1 (threads set to 1 here).
import argparse
import ctypes
import json
import os
import subprocess
import sys
import tempfile
import time

import warnings

import numpy as np

warnings.filterwarnings("ignore")  # torch's deprecation notices for the quantized / fbgemm ops

HERE = os.path.dirname(os.path.abspath(__file__))
SHAPES = os.path.join(os.path.dirname(HERE), "shapes")
MASK = (1 << 64) - 1

# A few C helpers the timing needs and Python cannot do: clflushopt of the touched rows (FBGEMM's
# and quantjit's "cold"), a cache-evicting 512 MiB read (quantjit-bench gemm --cold), a table on
# 2 MiB-aligned THP memory (qj_embedding_table_alloc's rule) and quantjit-bench's exact table fill.
C_SRC = r"""
#include <immintrin.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
void flush_rows(uint8_t* t, int64_t rb, const int64_t* idx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    uint8_t* p = t + idx[i] * rb;
    for (int64_t o = 0; o < rb; o += 64) _mm_clflushopt(p + o);
    _mm_clflushopt(p + rb - 1);
  }
  _mm_mfence();
}
void flush_bytes(const uint8_t* p, int64_t n) {
  for (int64_t o = 0; o < n; o += 64) _mm_clflushopt((void*)(p + o));
  if (n) _mm_clflushopt((void*)(p + n - 1));
  _mm_mfence();
}
static uint8_t* g_buf; static size_t g_len;
uint64_t flush_caches(size_t bytes) {
  if (g_len < bytes) { free(g_buf); g_buf = malloc(bytes); memset(g_buf, 1, bytes); g_len = bytes; }
  const volatile uint8_t* p = g_buf; uint64_t s = 0;
  for (size_t i = 0; i < bytes; i += 64) s += p[i];
  return s;
}
void* table_alloc(size_t bytes) {
  const size_t huge = (size_t)2 << 20, len = (bytes + huge - 1) / huge * huge;
  uint8_t* raw = mmap(0, len + huge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return 0;
  uintptr_t a = (uintptr_t)raw, al = (a + huge - 1) / huge * huge, end = a + len + huge;
  if (al > a) munmap(raw, al - a);
  if (end > al + len) munmap((void*)(al + len), end - (al + len));
  madvise((void*)al, len, MADV_HUGEPAGE);
  return (void*)al;
}
void table_free(void* p, size_t bytes) {
  const size_t huge = (size_t)2 << 20;
  munmap(p, (bytes + huge - 1) / huge * huge);
}
static uint64_t xs(uint64_t* x) { *x ^= *x << 13; *x ^= *x >> 7; *x ^= *x << 17; return *x; }
/* quantjit-bench embedding's fill_table for fused rows: random codes, fixed scale / bias. */
void fill_fused(uint8_t* t, int64_t rows, int64_t rb, int64_t dim, int bits, uint64_t seed,
                uint32_t s32, uint32_t b32, uint16_t s16, uint16_t b16) {
  uint64_t x = seed | 1, *w = (uint64_t*)t;
  size_t words = (size_t)(rows * rb) / 8;
  for (size_t i = 0; i < words; ++i) w[i] = xs(&x);
  for (int64_t r = 0; r < rows; ++r) {
    uint8_t* row = t + r * rb;
    if (bits == 8) { memcpy(row + dim, &s32, 4); memcpy(row + dim + 4, &b32, 4); }
    else { memcpy(row + rb - 4, &s16, 2); memcpy(row + rb - 2, &b16, 2); }
  }
}
"""


def helpers():
    cache = os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "quantjit-fbgemm-peer")
    os.makedirs(cache, exist_ok=True)
    import hashlib
    tag = hashlib.sha1(C_SRC.encode()).hexdigest()[:12]
    so = os.path.join(cache, f"peerhelp-{tag}.so")
    if not os.path.exists(so):
        with tempfile.TemporaryDirectory() as d:
            src = os.path.join(d, "h.c")
            with open(src, "w") as f:
                f.write(C_SRC)
            subprocess.check_call(["cc", "-O2", "-mclflushopt", "-shared", "-fPIC", src, "-o", so + ".tmp"])
            os.replace(so + ".tmp", so)
    lib = ctypes.CDLL(so)
    P, I64, SZ = ctypes.c_void_p, ctypes.c_int64, ctypes.c_size_t
    lib.flush_rows.argtypes = [P, I64, P, I64]
    lib.flush_bytes.argtypes = [P, I64]
    lib.flush_caches.argtypes = [SZ]
    lib.flush_caches.restype = ctypes.c_uint64
    lib.table_alloc.argtypes = [SZ]
    lib.table_alloc.restype = P
    lib.table_free.argtypes = [P, SZ]
    lib.fill_fused.argtypes = [P, I64, I64, I64, ctypes.c_int, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint32,
                               ctypes.c_uint16, ctypes.c_uint16]
    return lib


H = None
torch = None


def setup_torch():
    global torch
    import torch as t
    torch = t
    torch.set_num_threads(1)
    torch.backends.quantized.engine = "fbgemm"


def emit(rec):
    print(json.dumps(rec), flush=True)


def now():
    return time.perf_counter_ns()


# ---- timing -------------------------------------------------------------------------------------
def time_warm(fn, min_seconds=0.25, min_reps=5, max_reps=1000, reps=0):
    """Median ns per call: samples of `batch` back-to-back calls, each sample >= ~200 us.
    As bench/driver/timing.h: 100 ms of untimed calls first (the steady state)."""
    w0 = now()
    while now() - w0 < 100e6:
        fn()
    t0 = now(); fn(); one = now() - t0
    batch = max(1, min(2000, int(200e3 / max(one, 1)) + 1))
    samples, spent, r = [], 0, 0
    while True:
        if reps > 0 and r >= reps:
            break
        if reps == 0 and (r >= max_reps or (r >= min_reps and spent >= min_seconds * 1e9)):
            break
        t0 = now()
        for _ in range(batch):
            fn()
        dt = now() - t0
        samples.append(dt / batch)
        spent += dt
        r += 1
    samples.sort()
    return samples[len(samples) // 2], len(samples), batch


def time_prepared(fn, prepare, reps=41):
    """Median ns of one call after an untimed prepare() (cold: flush; fresh: new indices)."""
    fn()
    s = []
    for r in range(reps):
        prepare(r)
        t0 = now()
        fn()
        s.append(now() - t0)
    s.sort()
    return s[len(s) // 2], len(s), 1


def time_gemm_cold(fn, budget=0.5, min_reps=5, max_reps=200, reps=0, flush=512 << 20):
    """quantjit-bench gemm --cold: 512 MiB read through the caches before every timed call."""
    H.flush_caches(flush)
    fn()
    s, spent, r = [], 0, 0
    while True:
        if reps > 0 and r >= reps:
            break
        if reps == 0 and (r >= max_reps or (r >= min_reps and spent >= budget * 1e9)):
            break
        t0 = now()
        H.flush_caches(flush)
        t1 = now()
        fn()
        t2 = now()
        s.append(t2 - t1)
        spent += t2 - t0
        r += 1
    s.sort()
    return s[len(s) // 2], len(s), 1


# ---- shapes -------------------------------------------------------------------------------------
NAMED = {"fbgemm": ["gemm-fbgemm-acc32.csv", "gemm-fbgemm-gemms.csv"], "acc32": ["gemm-fbgemm-acc32.csv"],
         "gemms": ["gemm-fbgemm-gemms.csv"], "llm": ["gemm-llm.csv"], "fp16": ["gemm-fbgemm-fp16.csv"]}


def read_csv(path):
    rows, cols = [], None
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            cells = [c.strip() for c in line.split(",")]
            if cols is None:
                cols = cells
                continue
            rows.append({c: int(v) for c, v in zip(cols, cells)})
    return rows


def gemm_shapes(spec):
    if spec in NAMED:
        out = []
        for f in NAMED[spec]:
            out += [(r["M"], r["N"], r["K"]) for r in read_csv(os.path.join(SHAPES, f))]
        return out
    if os.path.exists(spec):
        return [(r["M"], r["N"], r["K"]) for r in read_csv(spec)]
    return [tuple(int(x) for x in s.split(",")) for s in spec.split(";") if s.strip()]


# ---- GEMM ---------------------------------------------------------------------------------------
def gemm_case_f16(m, n, k, rng):
    """fp32 A x fp16-packed B (FBGEMM FP16 GEMM), fp32 C, fp32 bias. Data as quantjit-bench gemm
    --weights f16: A, B and bias uniform in [-1, 1]. torch.fbgemm_linear_fp16_weight calls
    fbgemm::cblas_gemm_compute (beta 0) and then adds the bias in a second pass over C (quantjit
    fuses it). torch.ops.quantized.linear_dynamic_fp16 reaches the same kernel but costs ~11 us
    more per call here (it throws and catches a C++ exception on every call), so it is not used."""
    a = torch.from_numpy(rng.uniform(-1, 1, (m, k)).astype(np.float32))
    w = torch.from_numpy(rng.uniform(-1, 1, (n, k)).astype(np.float32))  # torch: out x in
    bias = torch.from_numpy(rng.uniform(-1, 1, n).astype(np.float32))
    packed = torch.fbgemm_pack_gemm_matrix_fp16(w)
    fn = lambda: torch.fbgemm_linear_fp16_weight(a, packed, bias)
    out = fn()
    ref = a.double() @ w.half().double().T + bias.double()
    rel = float((out.double() - ref).abs().max() / ref.abs().max())
    return fn, {"a_type": "f32", "w_type": "f16", "c_type": "f32", "peer_rel_diff": round(rel, 7)}, \
        "aten::fbgemm_linear_fp16_weight -> fbgemm::cblas_gemm_compute (gemmkernel_*_Avx512_fp16)"


def gemm_case_s8(m, n, k, rng):
    """u8 A (zero point 3) x s8 B full range, per-channel scales, fp32 bias, u8 C (zero point 5):
    quantjit-bench gemm's s8 setting, through torch's fbgemm quantized linear."""
    a_scale, a_zp = 0.02, 3
    a_u8 = torch.from_numpy(rng.integers(0, 256, (m, k), dtype=np.uint8))
    b_s8 = rng.integers(-128, 128, (n, k), dtype=np.int8)
    b_scale = rng.uniform(0.004, 0.012, n)
    spread = np.sqrt(k) * 147.0 * 74.0
    c_scale = float(np.float32(a_scale * 0.008 * spread / 40.0))
    c_zp = 5
    bias = (c_scale * rng.uniform(80, 120, n)).astype(np.float32)
    qa = torch._make_per_tensor_quantized_tensor(a_u8, a_scale, a_zp)
    qw = torch._make_per_channel_quantized_tensor(torch.from_numpy(b_s8), torch.from_numpy(b_scale),
                                                  torch.zeros(n, dtype=torch.int64), 0)
    packed = torch.ops.quantized.linear_prepack(qw, torch.from_numpy(bias))
    fn = lambda: torch.ops.quantized.linear(qa, packed, c_scale, c_zp)
    out = fn().int_repr().numpy().astype(np.int64)
    # exact reference on up to 8 rows (double precision, ties to even, as quantjit-bench's check)
    rows = sorted(set(int(i) for i in np.linspace(0, m - 1, min(m, 8))))
    acc = (a_u8.numpy()[rows].astype(np.int64) - a_zp) @ b_s8.astype(np.int64).T
    y = np.float32(a_scale) * b_scale.astype(np.float32).astype(np.float64) * acc + bias.astype(np.float64)
    want = np.clip(np.rint(y / c_scale) + c_zp, 0, 255)
    diff = int(np.abs(out[rows] - want).max())
    return fn, {"a_type": "u8", "w_type": "s8", "c_type": "u8", "ref_max_diff": diff}, \
        "quantized::linear(fbgemm) -> fbgemm::fbgemmPacked<PackAWithRowOffset,ReQuantizeOutput<OUT_CHANNEL>>"


def cmd_gemm(o):
    rng = np.random.default_rng(1)
    make = gemm_case_f16 if o.weights == "f16" else gemm_case_s8
    # Per-call overhead: the same op on a 1 x 16 x 16 problem (its kernel work is a few ns), timed
    # the same way as the shapes. Cold, it is much larger than warm: the 512 MiB flush also evicts
    # the interpreter's and torch's own code and data, which a C caller like quantjit-bench barely has.
    ofn, _, _ = make(1, 16, 16, rng)
    overhead = time_gemm_cold(ofn)[0] if o.cold else time_warm(ofn, min_seconds=0.3)[0]
    for (m, n, k) in gemm_shapes(o.shapes):
        fn, info, kernel = make(m, n, k, rng)
        if o.cold:
            ns, reps, batch = time_gemm_cold(fn, reps=o.reps)
        else:
            ns, reps, batch = time_warm(fn, reps=o.reps)
        rec = {"m": m, "n": n, "k": k, **{x: info[x] for x in ("a_type", "w_type", "c_type")}, "threads": 1,
               "mode": "cold" if o.cold else "warm", "seconds": ns * 1e-9, "gops": round(2.0 * m * n * k / ns, 1),
               "reps": reps, "batch": batch, "peer": "fbgemm", "overhead_ns": round(overhead, 1),
               "gops_net": round(2.0 * m * n * k / max(ns - overhead, 1.0), 1), "kernel": kernel,
               "torch": torch.__version__}
        for x in ("ref_max_diff", "peer_rel_diff"):
            if x in info:
                rec[x] = info[x]
        emit(rec)


# ---- embedding ----------------------------------------------------------------------------------
def xorshift(x):
    x ^= (x << 13) & MASK
    x ^= x >> 7
    x ^= (x << 17) & MASK
    return x


def make_lookups(bags, rows, avg_len, seed):
    """quantjit-bench embedding's make_lookups(bags, rows, avg, false, 1, seed), bit for bit:
    lengths 1 + xorshift % (2 avg + 1), indices xorshift % rows, weights 0.5 + (x % 1000) / 1000."""
    x = (seed * 0x9E3779B97F4A7C15 + 1) & MASK
    offs = [0]
    for _ in range(bags):
        x = xorshift(x)
        offs.append(offs[-1] + 1 + x % (2 * avg_len + 1))
    n = offs[-1]
    idx = []
    for _ in range(n):
        x = xorshift(x)
        idx.append(x % rows)
    w = []
    for _ in range(n):
        x = xorshift(x)
        w.append(0.5 + (x % 1000) / 1000.0)
    return np.array(offs, np.int64), np.array(idx, np.int64), np.array(w, np.float32)


def row_bytes(fmt, dim):
    return dim + 8 if fmt == "fused8" else (dim + 1) // 2 + 4


def thp_share(addr, nbytes):
    kb, inside = 0.0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split(" ", 1)[0]
            if "-" in head and ":" not in head:
                a, b = (int(v, 16) for v in head.split("-"))
                inside = a < addr + nbytes and b > addr
            elif inside and line.startswith("AnonHugePages:"):
                kb += float(line.split()[1])
    return min(1.0, kb * 1024 / nbytes)


def emb_op(fmt):
    return (torch.ops.quantized.embedding_bag_byte_rowwise_offsets if fmt == "fused8"
            else torch.ops.quantized.embedding_bag_4bit_rowwise_offsets)


def emb_call(fmt, table, idx, offs, w):
    op = emb_op(fmt)
    # (weight, indices, offsets, scale_grad_by_freq, mode=sum, pruned_weights, per_sample_weights,
    #  compressed_indices_mapping, include_last_offset): offsets carry bags + 1 entries like quantjit's.
    return lambda: op(table, idx, offs, False, 0, False, w, None, True)


def emb_overhead(fmt, dim, ib, weighted):
    """The op on one bag of one lookup from a 16-row table: the per-call cost of the Python,
    dispatcher, output allocation and kernel-cache lookup path, with ~nothing to compute."""
    t = torch.zeros((16, row_bytes(fmt, dim)), dtype=torch.uint8)
    idx = torch.zeros(1, dtype=torch.int32 if ib == 32 else torch.int64)
    offs = torch.tensor([0, 1], dtype=torch.int64)
    w = torch.ones(1) if weighted else None
    ns, _, _ = time_warm(emb_call(fmt, t, idx, offs, w), min_seconds=0.2)
    return ns


def cmd_embedding(o):
    shapes = read_csv(os.path.join(SHAPES, "embedding-fbgemm.csv")) if o.shapes == "fbgemm" else read_csv(o.shapes)
    fmts = o.rows.split(",")
    dims = [int(d) for d in o.dims.split(",")] if o.dims else None
    ibits = [int(b) for b in o.index.split(",")]
    weighted = [int(w) for w in o.weighted.split(",")]
    modes = o.mode.split(",")
    f16 = lambda v: int(np.array([v], np.float16).view(np.uint16)[0])
    f32 = lambda v: int(np.array([v], np.float32).view(np.uint32)[0])
    fresh_rng = np.random.default_rng(0x5851F42D)
    for fmt in fmts:
        for sh in shapes:
            dim, rows, bags, avg = sh["dim"], sh["rows"], sh["batch"], sh["avg_len"]
            if dims and dim not in dims:
                continue
            if o.max_rows:
                rows = min(rows, o.max_rows)
            rb = row_bytes(fmt, dim)
            nbytes = rows * rb
            p = H.table_alloc(nbytes)
            if not p:
                print(f"cannot allocate {nbytes} bytes", file=sys.stderr)
                return 1
            try:
                H.fill_fused(p, rows, rb, dim, 8 if fmt == "fused8" else 4, 0x1234 + dim,
                             f32(0.01), f32(-0.5), f16(0.01), f16(-0.5))
                arr = np.ctypeslib.as_array((ctypes.c_uint8 * nbytes).from_address(p)).reshape(rows, rb)
                table = torch.from_numpy(arr)
                thp = thp_share(p, nbytes)
                offs64, idx64, wts = make_lookups(bags, rows, avg, 7 + dim)
                n = len(idx64)
                offs_t = torch.from_numpy(offs64)
                w_t = torch.from_numpy(wts)
                for ib in ibits:
                    idx_np = idx64.astype(np.int32 if ib == 32 else np.int64)
                    idx_t = torch.from_numpy(idx_np)
                    for wflag in weighted:
                        fn = emb_call(fmt, table, idx_t, offs_t, w_t if wflag else None)
                        # check once against a numpy reference (fp32 sums may differ in order only)
                        out = fn().numpy()
                        want = ref_bags(arr, fmt, dim, idx64, offs64, wts if wflag else None)
                        err = float(np.abs(out - want).max() / max(1e-30, np.abs(want).max()))
                        overhead = emb_overhead(fmt, dim, ib, wflag)
                        for mode in modes:
                            if mode == "warm":
                                ns, reps, batch = time_warm(fn, reps=o.reps)
                            else:
                                def prep(r, mode=mode):
                                    if mode == "cold":
                                        H.flush_rows(p, rb, idx64.ctypes.data, n)
                                        H.flush_bytes(idx_np.ctypes.data, idx_np.nbytes)
                                        H.flush_bytes(offs64.ctypes.data, offs64.nbytes)
                                        if wflag:
                                            H.flush_bytes(wts.ctypes.data, wts.nbytes)
                                    else:  # fresh: new random indices, in place (untimed)
                                        idx_np[:] = fresh_rng.integers(0, rows, n)
                                ns, reps, batch = time_prepared(fn, prep, reps=o.reps or 41)
                                if mode == "fresh":
                                    idx_np[:] = idx64
                            sec = ns * 1e-9
                            emit({"op": "emb", "rows_fmt": fmt, "dim": dim, "rows": rows, "bags": bags, "lookups": n,
                                  "index_bits": ib, "prefetch": "16", "weighted": wflag, "mode": mode,
                                  "pages": "thp", "thp_share": round(thp, 2), "seconds": sec,
                                  "us_per_call": round(ns * 1e-3, 2), "ns_per_row": round(ns / n, 2),
                                  "rows_per_s": round(n / sec), "gbps": round(n * rb / sec * 1e-9, 2),
                                  "reps": reps, "batch": batch, "peer": "fbgemm", "overhead_ns": round(overhead, 1),
                                  "ns_per_row_net": round(max(ns - overhead, 0) / n, 2), "ref_rel_diff": err,
                                  "offset_bits": 64, "kernel": "quantized::" + emb_op(fmt)._qualified_op_name.split("::")[-1]
                                  + (" -> fbgemm::GenerateEmbeddingSpMDM" if fmt == "fused8"
                                     else " -> fbgemm::GenerateEmbeddingSpMDMNBit(4)"),
                                  "torch": torch.__version__})
            finally:
                table = arr = None
                H.table_free(p, nbytes)
    return 0


def ref_bags(arr, fmt, dim, idx, offs, w):
    rows = arr[idx]
    if fmt == "fused8":
        q = rows[:, :dim].astype(np.float32)
        sc = rows[:, dim:dim + 4].copy().view(np.float32)
        bi = rows[:, dim + 4:dim + 8].copy().view(np.float32)
    else:
        data = rows[:, :(dim + 1) // 2]
        q = np.empty((len(idx), dim), np.float32)
        q[:, 0::2] = data & 15
        q[:, 1::2] = (data >> 4)[:, :dim // 2]
        rb = arr.shape[1]
        sc = rows[:, rb - 4:rb - 2].copy().view(np.float16).astype(np.float32)
        bi = rows[:, rb - 2:rb].copy().view(np.float16).astype(np.float32)
    v = q * sc + bi
    if w is not None:
        v = v * w[:, None]
    out = np.zeros((len(offs) - 1, dim), np.float64)
    for b in range(len(offs) - 1):
        out[b] = v[offs[b]:offs[b + 1]].sum(0)
    return out


def main():
    global H
    ap = argparse.ArgumentParser(description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("gemm")
    g.add_argument("--weights", default="s8", choices=["s8", "f16"])
    g.add_argument("--shapes", default="gemms")
    g.add_argument("--cold", action="store_true")
    g.add_argument("--reps", type=int, default=0)
    e = sub.add_parser("embedding")
    e.add_argument("--shapes", default="fbgemm")
    e.add_argument("--rows", default="fused8,fused4")
    e.add_argument("--dims", default="")
    e.add_argument("--index", default="64")
    e.add_argument("--weighted", default="0")
    e.add_argument("--mode", default="warm,cold")
    e.add_argument("--max-rows", type=int, default=0)
    e.add_argument("--reps", type=int, default=0)
    o = ap.parse_args()
    H = helpers()
    setup_torch()
    return cmd_gemm(o) if o.cmd == "gemm" else cmd_embedding(o)


if __name__ == "__main__":
    sys.exit(main() or 0)
