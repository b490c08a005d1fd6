// The GEMM driver: plan creation (blocking, kernel keys, precomputed output-stage vectors) and
// the run loop (partition, A packing, kernel calls). Integer weights (S8, and S4 / U4 decoded in
// the kernel) go through the JIT kernels of codegen/gemm_int, F16 / BF16 weights through
// codegen/gemm_float; the scalar tier (or a key a generator declines) runs src/ref, and says so
// in the verbose log.
#pragma once
#include <quantjit/quantjit.h>

#include <atomic>
#include <memory>
#include <vector>

#include "codegen/gemm_float.h"
#include "codegen/gemm_int.h"
#include "src/core/buffer.h"
#include "src/core/kernel_cache.h"
#include "src/ops/int_weights.h"
#include "src/ref/gemm_float_ref.h"
#include "src/ref/gemm_ref.h"

namespace qj {

struct GemmBlocking {
  int mr = 0, nr = 0;
  int64_t mc = 0;      // rows of A packed at a time (L2-resident A block)
  int64_t nc_panels = 0;  // panels per N block (L2-resident B block)
  int64_t kc = 0;      // K groups per K block (0: K is not blocked). With K blocks the B block
                       // is nc_panels slices of kc groups, and the int32 sums of a tile pass
                       // between the blocks' kernel calls through per-thread scratch.
  int kc_min_rows = 0; // K blocks serve calls whose tiles have at least this many rows
};

// What the packed A tile and the kernels look like for the weight type.
enum class GemmKind { kInt8, kDecoded, kFloat };

// The K for which an N = 4 plan takes the row-lane variant of the narrow-N kernel (codegen/
// gemm_int emit_s8_narrow_rows), on Zen 5: a multiple of 4 from 16 to 4 * kNarrowRowsMaxKGroups
// where it measured faster than the narrow kernel (20000 x 4 x K, u8 C, time ratio in one
// process): K = 4 mod 8 (K = 20 / 28 / 36 / 44 / 52 / 60: 0.95 / 0.88 / 0.83 / 0.95 / 0.85 /
// 0.82) and K = 16 / 56 / 64 (0.87 / 0.93 / 0.89); not K = 24 / 32 / 40 / 48 (1.05 / 0.99 /
// 1.11 / 1.02), whole 8-byte chunks of the narrow kernel.
inline bool narrow_rows_k(int64_t k) {
  return k % 4 == 0 && k >= 16 && k <= 4 * kNarrowRowsMaxKGroups && (k % 8 == 4 || k == 16 || k >= 56);
}
// The K for which an N = 8 plan takes the 8-column row-lane variant (codegen/gemm_int
// emit_s8_narrow_rows8), except on Zen 5: a multiple of 4 from 8 to 28, where it measured faster
// than the narrow kernel on Zen 4 (2026-12-02, 20000 x 8 x K, u8 C, fraction of the VNNI peak in
// two alternating runs, narrow -> row lanes): K = 8 / 12 / 16 / 20 / 24 / 28 0.30 / 0.38 / 0.51 /
// 0.46-0.54 / 0.56-0.65 / 0.66 -> 0.36 / 0.47 / 0.55 / 0.61 / 0.66 / 0.70; K = 36 (FBGEMM's
// 156800 x 8 x 36) 0.72 both; not K = 32 / 40 / 48 / 64 (0.75-0.76 / 0.79-0.80 / 0.86-0.87 /
// 0.73-0.86 -> 0.69-0.70 / 0.73-0.75 / 0.64-0.78 / 0.69-0.71), the narrow kernel's whole 8-byte
// chunks.
inline bool narrow_rows8_k(int64_t k) { return k % 4 == 0 && k >= 8 && k <= 28; }

// The banks kernel (codegen/gemm_int emit_s8_banks) against the ordinary 6 x 64 kernels, new /
// old time in one process (2026-12-02, Zen 5, u8 C): K = 128: M x N = 6 x 256 0.94, 9 x 256 0.93,
// 12 x 256 0.94, 16 x 128 0.96, 24 x 256 0.96, 33 x 256 0.95, 128 x 128 0.93, 1024 x 128 0.93, but
// 8 x 512 1.13 and 20 x 256 1.05 (rows left over to the ordinary kernels); K = 256: 48 / 64 / 128 /
// 512 rows 0.96 / 0.98 / 0.96 / 0.97, 16 rows 1.07; K = 384: 256 x 256 0.98; K = 512: 64 x 768 1.00,
// 256 x 512 1.00, 16 x 256 1.09 (f32 / s32 C: 1024 x 128 x 128 0.90 / 0.93, K = 256 1.00; bf16 C:
// 128 x 128 x 128 0.93, 1024 x 128 x 128 0.91, 9 x 256 x 128 0.93, 48 x 256 x 256 0.96, 60 x 192 x
// 80, 256 x 512 x 256 and 96 x 768 x 384 1.00). Plans hold it for K <= kBanksMaxK; runs take it
// for these M.
constexpr int64_t kBanksMaxK = 384;
inline bool banks_rows_ok(int64_t m, int64_t k) {
  return (k <= 128 && m >= 6 && (m % 3 == 0 || m >= 32)) || (k <= kBanksMaxK && m >= 48);
}

struct GemmPlan {
  GemmKind kind = GemmKind::kInt8;
  qj_gemm_desc desc{};
  std::vector<float> bias;  // copy of desc.bias
  std::shared_ptr<const PackedWeights> w;
  qj_isa isa = QJ_ISA_SCALAR;
  bool jit = false;
  GemmBlocking blk;
  std::vector<KernelRef> kernels;  // kernels[r - 1] computes r rows (r = 1..mr)
  // Dense MXFP6 E2M3 weights (VNNI tier, a CPU with VBMI): the same kernels for panels of one
  // byte per code (key.param[4] = 1). A block of at least kFp6BytesMinTiles row tiles first
  // unpacks each of its N blocks into per-thread scratch (fp6_panels_to_bytes) and runs these.
  std::vector<KernelRef> kernels_b8;
  // S4 / U4, MXFP4 and E2M3 weights at the AVX2 tier (one column vector a panel), and s8 byte
  // pairs (the AVX2 tier's GEMV, gemv_direct, per tensor or channel): the one-row kernel's pair
  // form (codegen/gemm_int.h, param[1] = 3), two whole panels a pass; one-row tiles (the s8 GEMV)
  // run it on their panels in pairs and kernels[0] on what is left (an odd panel, the tail panel).
  KernelRef pair;
  // K-blocked s8 plans (blk.kc > 0): the first, middle and last K-block stages (gemm_int.h),
  // [r - 1] for r rows; empty below blk.kc_min_rows - 1 rows (such calls are not K-blocked).
  std::vector<KernelRef> kblock_kernels[3];
  int32_t za = 0;                   // zero point of A as packed (s8 on VNNI is shifted by 128)
  int64_t n_pad = 0;
  AlignedBuffer col_corr, b_zp, group_scale, col_mult, col_bias;  // [groups][n_pad] / [n_pad]
  cg::EpilogueConsts consts{};
  // Decoded weights (S4 / U4): A packed as s8 quads, row sums times row_sum_mult.
  bool row_sums = false;
  bool a_pairs = false;   // decoded weights read A as s16 pairs (int16-pair weights, quads_as_pairs)
  bool direct_a = false;  // u8 A read in place, rows K bytes apart (no tile packing)
  int32_t row_sum_mult = 1;
  int64_t kblock_min_tiles = 0;  // s8: K blocks only for calls of this many row tiles (a slice's)
  std::vector<int> ksets;   // float kernels: accumulator sets of kernels[r - 1]
  // GEMV with u8 A read in place (s8 weights, one thread): the kernel's arguments apart from A, C
  // and ldc, built once here; gemm_run makes one call over every panel (or, see below, calls
  // over chunks of them).
  bool gemv_direct = false;
  // ... or, for s16-pair weights (below VNNI), u8 / s8 A widened to pairs in scratch first (one
  // row: the values in order, pack_a.cpp pairs_x1_avx2) instead of a pass through the tile loop.
  bool gemv_widen_a = false;
  GemmIntArgs gemv_args{};
  // gemv_rotate_panels > 0: each call of this plan starts that many panels before the last one
  // started (modulo the panels) and reads forward, wrapping around, so that it starts on the
  // lines the previous call read last (gemm.cpp: half of L2 of panels); gemv_calls counts the calls
  // (relaxed: any start gives the same output).
  int64_t gemv_rotate_panels = 0;
  mutable std::atomic<uint32_t> gemv_calls{0};
  // Narrow N (4 or 8; codegen/gemm_int flags bit 6): whole banks of narrow_mr rows run the
  // narrow-N kernel (or its row-lane variants: 4 rows a group at N = 4, narrow_rows_k(K), on Zen
  // 5; 8 rows a bank at N = 8, narrow_rows8_k(K), elsewhere) on B and the column arrays
  // expanded to its layout; the rows left over run the ordinary kernels above (both exact: any
  // split gives the same bits).
  KernelRef narrow;
  int narrow_mr = 0;
  // B patterns ([chunks][N][8]; the row-lane variants [K / 4][16 or 8 lanes][4]); start, mult, bias
  // vectors
  AlignedBuffer narrow_b, narrow_cols;
  // Tall (K <= 4 * kTallMaxKGroups, N not the narrow-N kernel's; codegen/gemm_int flags bit 6
  // with nr = 16): `narrow` is the software-pipelined kernel of emit_s8_tall for 16 columns (or
  // for all N when N < 16), `narrow_tail` the one for the last N % 16 columns (N > 16). gemm_run
  // runs them on each 16 columns of the packed panels in turn, for blocks of tall_block banks of
  // rows (A read from L1 after the first 16 columns; one block when there is one column slice),
  // with the plan's column arrays.
  bool narrow_tall = false;
  KernelRef narrow_tail;
  int64_t tall_block = 0;
  int tall_cols = 16;  // columns per kernel call of the tall path: 16, or 64 (the banks kernel)
  // Every kernel the plan holds (and so pins in the cache), each once.
  template <class F>
  void for_each_kernel(F&& f) const {
    for (const KernelRef& r : kernels) f(r);
    for (const KernelRef& r : kernels_b8) f(r);
    if (pair) f(pair);
    for (const auto& stage : kblock_kernels)
      for (const KernelRef& r : stage) f(r);
    if (narrow) f(narrow);
    if (narrow_tail) f(narrow_tail);
  }
  ref::IntWeights ref_w;    // scalar path only (integer weights)
  ref::FloatWeights ref_fw; // scalar path only (float weights)
  double gen_us = 0;      // generation time of the kernels this plan created (0 if all cached)
};

qj_status gemm_plan_create(const qj_gemm_desc& desc, std::shared_ptr<const PackedWeights> w,
                           std::unique_ptr<GemmPlan>* out);
// Tests only: plans created while set act as if the CPU had no AVX512-VBMI (the VNNI tier then
// runs the vpshufb decoders, as on CPUs with VNNI and without VBMI).
void gemm_hide_vbmi_for_tests(bool hide);

// The slice {thread_id, num_threads} of a run, with the calling thread's scratch. Everything it
// allocates is allocated before it writes C: on QJ_ERR_OUT_OF_MEMORY, C is untouched.
qj_status gemm_run(const GemmPlan& p, int64_t m, const void* a, int64_t lda, void* c, int64_t ldc,
                   int32_t thread_id, int32_t num_threads);
// The whole run over num_threads slices on the pool (run_slices; work_ns as parallel_for's). The
// calling thread sizes every slice's scratch before any slice starts, so a call that runs out of
// memory also leaves C untouched.
qj_status gemm_run_parallel(const GemmPlan& p, int64_t m, const void* a, int64_t lda, void* c, int64_t ldc,
                            int32_t num_threads, int64_t work_ns);

// Whether a call (a slice's) of `tiles` row tiles, the largest of `largest_rows` rows, runs the
// plan's K-block kernels (s8 plans that have them; see GemmBlocking::kc_min_rows and
// GemmPlan::kblock_min_tiles).
bool gemm_call_kblocked(const GemmPlan& p, int64_t tiles, int largest_rows);

// MXFP8 kernels of plans created from now on: -1 the measured choice per tier (default), 0 decoded
// weights times their block scales, 1 per-block accumulators (codegen/gemm_float.h flags bit 1).
// For tests and experiments: both ways are exact to the same bound.
void gemm_fp8_force_block_accumulators(int mode);

// The one-row INT4 kernel's form in plans created from now on (key.param[1], codegen/gemm_int.h):
// -1 the plan's rule (default: the L2 form for weights of at most 5/8 of L2, the streaming form
// for weights streamed from DRAM; the pair form at the AVX2 tier), 0 / 1 / 2 / 3 that form
// wherever it applies (1, 2: the VNNI tier, 2 with scaled high nibbles; 3: the AVX2 tier, two
// panels or more) and the plain form elsewhere. Tests use it to run every form on any machine; the
// forms compute identical results.
void gemm_force_int4_gemv_form(int form);

// How the float-weight kernels (f16, bf16, MX through fp32) take A at zmm (tests): -1 (default)
// the CPU's rule (see gemm.cpp), 0 an embedded {1to16} broadcast in each FMA, 1 each A element
// broadcast into a register once (codegen/gemm_float.h flags bit 3). The forms compute identical
// results.
void gemm_force_register_broadcast(int mode);
// That setting for the lifetime of the object, then the CPU's rule again (tests).
struct ScopedRegisterBroadcast {
  explicit ScopedRegisterBroadcast(int mode) { gemm_force_register_broadcast(mode); }
  ~ScopedRegisterBroadcast() { gemm_force_register_broadcast(-1); }
  ScopedRegisterBroadcast(const ScopedRegisterBroadcast&) = delete;
  ScopedRegisterBroadcast& operator=(const ScopedRegisterBroadcast&) = delete;
};

// Whether N = 8 plans take the 8-column row-lane variant of the narrow-N kernel (tests): -1
// (default) the rule (narrow_rows8_k, not on Zen 5), 0 never, 1 for every K it takes (a multiple
// of 4 up to 4 * kNarrowRows8MaxKGroups). The kernels compute identical results.
void gemm_force_narrow_rows8(int mode);

// The blocking quantjit chooses for an ISA and problem (exposed for tests and the bench).
GemmBlocking choose_blocking(qj_isa isa, int nr, bool grouped, int64_t kp, int64_t n_panels,
                             int kg);

// K blocking of s8 plans created from now on: -1 the blocking's choice (default), 0 never,
// > 0 blocks of that many K groups whenever K has more (tests use it to reach every stage with
// small shapes).
void gemm_force_k_block(int64_t kc);

}  // namespace qj
