#include "src/ops/gemm.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>

#include <emmintrin.h>

#include "src/core/isa.h"
#include "src/core/log.h"
#include "src/core/status.h"
#include "src/core/threading.h"
#include "src/formats/half.h"
#include "src/formats/mx.h"
#include "src/ops/mx16_weights.h"
#include "src/ops/mx_act.h"
#include "src/ops/mx_weights.h"
#include "src/ops/pack_a.h"

namespace qj {

namespace {
std::atomic<int> g_fp8_mode{-1};  // gemm_fp8_force_block_accumulators
std::atomic<int64_t> g_force_kc{-1};  // gemm_force_k_block
std::atomic<int> g_int4_gemv_form{-1};  // gemm_force_int4_gemv_form
std::atomic<int> g_register_bcast{-1};  // gemm_force_register_broadcast
std::atomic<int> g_narrow_rows8{-1};  // gemm_force_narrow_rows8
// The forced A-broadcast form, or the CPU's rule `rule`.
bool register_broadcast(bool rule) {
  const int forced = g_register_bcast.load(std::memory_order_relaxed);
  return forced >= 0 ? forced == 1 : rule;
}
}  // namespace

void gemm_fp8_force_block_accumulators(int mode) { g_fp8_mode.store(mode, std::memory_order_relaxed); }
void gemm_force_k_block(int64_t kc) { g_force_kc.store(kc, std::memory_order_relaxed); }
void gemm_force_int4_gemv_form(int form) { g_int4_gemv_form.store(form, std::memory_order_relaxed); }
void gemm_force_register_broadcast(int mode) { g_register_bcast.store(mode, std::memory_order_relaxed); }
void gemm_force_narrow_rows8(int mode) { g_narrow_rows8.store(mode, std::memory_order_relaxed); }

GemmBlocking choose_blocking(qj_isa isa, int nr, bool grouped, int64_t kp, int64_t n_panels, int kg) {
  GemmBlocking b;
  b.nr = nr;
  const int lanes = isa >= QJ_ISA_AVX512 ? 16 : 8;
  const int regs = isa >= QJ_ISA_AVX512 ? 32 : 16;
  const int nrv = nr / lanes;
  // Accumulators (doubled when grouped: int32 group sums + fp32 totals), B vectors, A broadcasts,
  // a product temp on the vpmaddwd path.
  const int reserve = nrv + 2 + (isa >= QJ_ISA_AVX512_VNNI ? 0 : 1);
  int mr = (regs - reserve) / (nrv * (grouped ? 2 : 1));
  b.mr = std::max(1, std::min(mr, 16));
  // K blocks (integer sums only: group scales fold each group in fp32): when a tile of A, mr rows
  // x K, would not stay in half the L1 across the panels of a call, K is cut into equal blocks
  // whose tiles take at most a third of it. Measured at 256 x 4096 x K (VNNI, 6-row tiles,
  // fractions of the peak): K = 11008 0.76-0.81 unblocked, 0.91-0.93 in blocks of 384 groups
  // (0.89-0.91 at 256 or 512); K = 4096 0.89-0.92 -> 0.92-0.93; K = 2048 (12 KiB tiles) lost
  // 0.95 -> 0.915 when blocked.
  const int64_t k_groups = kp / kg;
  const int64_t force = g_force_kc.load(std::memory_order_relaxed);
  if (grouped || force == 0) {
  } else if (force > 0) {
    if (k_groups > force) b.kc = force;
    b.kc_min_rows = 1;
  } else {
    const int64_t budget = static_cast<int64_t>(l1d_cache_bytes() / 3) / (4 * b.mr);
    const int64_t half_l1 = static_cast<int64_t>(l1d_cache_bytes() / 2);
    if (k_groups * 4 * b.mr > half_l1) {
      const int64_t blocks = (k_groups + budget - 1) / budget;
      b.kc = (k_groups + blocks - 1) / blocks;
      // Smaller tiles that fit run unblocked (8 x 4096 x 4096, 4-row tiles: 0.82-0.89 of the peak
      // unblocked, 0.71-0.77 blocked).
      b.kc_min_rows = static_cast<int>(half_l1 / (k_groups * 4)) + 1;
    }
  }
  const int64_t block_groups = b.kc ? b.kc : k_groups;
  // A block: mc rows x kp bytes (u8) or 2*kp (s16), of which one K block (mc x kc groups) is kept
  // near 256 KiB; B block: half the L2.
  const int64_t a_row_bytes = block_groups * 4;
  int64_t mc = (256 << 10) / std::max<int64_t>(a_row_bytes, 1);
  mc = std::max<int64_t>(b.mr, mc / b.mr * b.mr);
  b.mc = std::min<int64_t>(mc, 4096);
  // (s8 pairs of the AVX2 tier are bytes: kPair8)
  const bool byte_pairs = kg == 2 && weights_layout(isa, QJ_S8) == PackLayout::kPair8;
  const int64_t step_bytes = static_cast<int64_t>(nr) * (byte_pairs ? 2 : 4);
  const int64_t panel_bytes = block_groups * step_bytes;
  // Half of the L2 for the B block: a block the size of the whole L2 (1 MiB on Zen 4) thrashed in
  // some runs (1024^3: 236 or 431 GOPS by the pages it got; 434-436 GOPS steady at L2 / 2).
  b.nc_panels = std::max<int64_t>(1, static_cast<int64_t>(l2_cache_bytes() / 2) / std::max<int64_t>(panel_bytes, 1));
  b.nc_panels = std::min(b.nc_panels, n_panels);
  return b;
}

namespace {

std::atomic<bool> g_hide_vbmi{false};

bool has_vbmi() { return cpu_features().avx512vbmi && !g_hide_vbmi.load(std::memory_order_relaxed); }

// True when no live E8M0 byte of MX weights is 0x00 or 0xFF (bytes of the padding columns are
// never stored to C, whatever they decode to).
bool mx_scales_plain(const PackedWeights& w) {
  const int64_t groups = w.groups();
  for (int64_t p = 0; p < w.n_panels; ++p) {
    const int64_t live = std::min<int64_t>(w.nr, w.n - p * w.nr);
    const uint8_t* panel = w.packed.data<uint8_t>() + p * w.panel_bytes();
    int special = 0;  // no early exit inside a panel: the loop vectorizes
    for (int64_t g = 0; g < groups; ++g) {
      const uint8_t* sc = panel + w.mx_scale_offset(g);
      for (int64_t c = 0; c < live; ++c) special |= static_cast<uint8_t>(sc[c] + 1) <= 1;
    }
    if (special) return false;
  }
  return true;
}

// The desc's enum fields hold caller values: compare them as integers before anything reads them
// through the C++ enum types (an out-of-range enum load is undefined behaviour).
qj_status check_desc_enums(const qj_gemm_desc& d) {
  const int32_t at = raw_enum(d.a_type), ct = raw_enum(d.c_type), act = raw_enum(d.activation);
  if (at != QJ_U8 && at != QJ_S8 && at != QJ_F32 && at != QJ_BF16 && !mx_act_type(at))
    return fail(QJ_ERR_INVALID_ARGUMENT, "desc->a_type=%d must be QJ_U8, QJ_S8, QJ_F32, QJ_BF16 or an OCP MX type", at);
  if (ct != QJ_U8 && ct != QJ_S8 && ct != QJ_S32 && ct != QJ_F32 && ct != QJ_BF16)
    return fail(QJ_ERR_INVALID_ARGUMENT, "desc->c_type=%d must be QJ_U8, QJ_S8, QJ_S32, QJ_F32 or QJ_BF16", ct);
  if (act != QJ_ACT_NONE && act != QJ_ACT_RELU)
    return fail(QJ_ERR_INVALID_ARGUMENT, "desc->activation=%d is not a qj_activation", act);
  if (at == QJ_F32 || at == QJ_BF16) {
    const int32_t ag = raw_enum(d.a_granularity);
    if (ag != QJ_GRAN_ROW && ag != QJ_GRAN_TENSOR && ag != QJ_GRAN_GROUP)
      return fail(QJ_ERR_INVALID_ARGUMENT,
                  "desc->a_granularity=%d must be QJ_GRAN_ROW, QJ_GRAN_TENSOR or QJ_GRAN_GROUP for %s A",
                  ag, qj_dtype_name(static_cast<qj_dtype>(at)));
  }
  return QJ_OK;
}

// Names the first non-finite element of row `row` of fp32 / bf16 A.
qj_status nonfinite_a(const qj_gemm_desc& d, const void* a, int64_t lda, int64_t row, int64_t k) {
  for (int64_t j = 0; j < k; ++j) {
    float v = d.a_type == QJ_F32 ? static_cast<const float*>(a)[row * lda + j]
                                 : bf16_to_f32(static_cast<const uint16_t*>(a)[row * lda + j]);
    if (!std::isfinite(v))
      return fail(QJ_ERR_INVALID_ARGUMENT, "a[%lld][%lld]=%g is not finite (row %lld, column %lld)",
                  (long long)row, (long long)j, (double)v, (long long)row, (long long)j);
  }
  return fail(QJ_ERR_INVALID_ARGUMENT, "a: row %lld holds a non-finite value", (long long)row);
}

// What every plan does first: copy the desc and its bias (checked finite), take the ISA cap, and
// repack weights packed for another tier (the cap changed since packing).
qj_status plan_common(const qj_gemm_desc& desc, std::shared_ptr<const PackedWeights>* w, GemmPlan* p) {
  p->desc = desc;
  if (desc.bias) {
    p->bias.assign(desc.bias, desc.bias + (*w)->n);
    for (int64_t i = 0; i < (*w)->n; ++i)
      if (!std::isfinite(p->bias[i]))
        return fail(QJ_ERR_INVALID_ARGUMENT, "desc->bias[%lld]=%g is not finite", (long long)i, (double)p->bias[i]);
    p->desc.bias = p->bias.data();
  }
  p->isa = max_isa();
  if (!weights_match_isa(**w, p->isa)) {
    std::shared_ptr<PackedWeights> rw;
    QJ_TRY(repack_int_weights(**w, p->isa, &rw));
    QJ_LOG(1, "gemm: weights packed for %s repacked for %s", isa_name((*w)->isa), isa_name(p->isa));
    *w = std::move(rw);
  }
  p->w = *w;
  return QJ_OK;
}

qj_status check_desc(const qj_gemm_desc& d) {
  QJ_TRY(check_desc_enums(d));  // a_type, c_type, activation and dynamic A's granularity
  const bool mx_a = mx_act_type(d.a_type);  // MX A: a_scale / zero point / granularity unused
  const bool dynamic = d.a_type == QJ_F32 || d.a_type == QJ_BF16;
  if (!dynamic && !mx_a) {
    if (!std::isfinite(d.a_scale) || !(d.a_scale > 0.0f))
      return fail(QJ_ERR_INVALID_ARGUMENT, "desc->a_scale=%g must be finite and > 0", (double)d.a_scale);
    int lo = d.a_type == QJ_U8 ? 0 : -128, hi = d.a_type == QJ_U8 ? 255 : 127;
    if (d.a_zero_point < lo || d.a_zero_point > hi)
      return fail(QJ_ERR_INVALID_ARGUMENT, "desc->a_zero_point=%d is outside [%d, %d]", d.a_zero_point, lo, hi);
  }
  switch (d.c_type) {
    case QJ_U8:
    case QJ_S8: {
      if (!std::isfinite(d.c_scale) || !(d.c_scale > 0.0f))
        return fail(QJ_ERR_INVALID_ARGUMENT, "desc->c_scale=%g must be finite and > 0", (double)d.c_scale);
      int lo = d.c_type == QJ_U8 ? 0 : -128, hi = d.c_type == QJ_U8 ? 255 : 127;
      if (d.c_zero_point < lo || d.c_zero_point > hi)
        return fail(QJ_ERR_INVALID_ARGUMENT, "desc->c_zero_point=%d is outside [%d, %d]", d.c_zero_point, lo, hi);
      break;
    }
    case QJ_S32:
      if (d.bias || d.activation != QJ_ACT_NONE || dynamic)
        return fail(QJ_ERR_INVALID_ARGUMENT,
                    "desc->c_type=QJ_S32 is the raw integer sum: bias, activation and fp32/bf16 A do not apply");
      break;
    default: break;  // F32, BF16
  }
  if (!std::isfinite(d.beta))
    return fail(QJ_ERR_INVALID_ARGUMENT, "desc->beta=%g must be finite", (double)d.beta);
  if (d.beta != 0.0f && d.c_type != QJ_F32)
    return fail(QJ_ERR_INVALID_ARGUMENT, "desc->beta=%g needs c_type QJ_F32 (got %s)", (double)d.beta,
                qj_dtype_name(d.c_type));
  return QJ_OK;
}

bool fill_buffer(AlignedBuffer& b, size_t bytes) { return b.allocate(bytes, true); }

}  // namespace

namespace {

// MXFP8 kernels: per-block accumulators (no multiply per weight vector, twice the accumulator
// registers: mr 6 with two zmm per row) or weight vectors multiplied by their block scales (one
// vmulps per weight vector, mr 13). Measured on the Zen 4 host, E5M2, warm, one core: zmm
// 6x4096x1024 94% of the FMA peak with block accumulators against 82% scaled (M = 1: 51 against
// 41 GFLOPS); AVX2 (16 registers: mr 2 against 4) is faster scaled beyond 2 rows (4x4096x1024
// 60 against 51 GFLOPS, 2 rows 58 against 52). For a kernel of r rows (14: the plan's tile).
bool fp8_block_accumulators(qj_isa isa, int r) {
  const int mode = g_fp8_mode.load(std::memory_order_relaxed);
  if (mode >= 0) return mode != 0;
  return isa >= QJ_ISA_AVX512 || r <= 2;
}

// Everything a plan needs beyond the integer path: F16 / BF16 weights with fp32 / bf16 A.
qj_status float_plan_create(const qj_gemm_desc& desc, std::shared_ptr<const PackedWeights> w,
                            std::unique_ptr<GemmPlan>* out);

// fp32 A read in place by the float kernels (no packing): whole K units only (nothing past a row
// may be read) and a 14-row tile of A small enough for L1.
bool float_direct_a(const qj_gemm_desc& d, const PackedWeights& w) {
  return d.a_type == QJ_F32 && w.kp == w.k && w.k * 4 * 14 <= (32 << 10);
}

// The blocking of the float kernels: mr rows of fp32 A (up to 14, FBGEMM's AVX-512 tile) share
// every converted weight vector.
GemmBlocking float_blocking(const PackedWeights& w, int mr) {
  GemmBlocking b;
  b.nr = w.nr;
  b.mr = mr;
  // A block of ~2 MiB of packed rows (L3), B block of ~512 KiB of panels (half of Zen 4's 1 MiB L2,
  // the rest for the A tile streaming through): every B panel is reused by all the tiles of an A
  // block while it sits in L2 (measured at 64..256 x 4096 x 4096: ~10% over 256 KiB / 1 MiB).
  const int64_t a_row_bytes = w.kp * 4;  // fp32 A
  int64_t mc = (2 << 20) / std::max<int64_t>(a_row_bytes, 1);
  mc = std::max<int64_t>(b.mr, mc / b.mr * b.mr);
  b.mc = std::min<int64_t>(mc, 4096);
  b.nc_panels = std::max<int64_t>(1, (512 << 10) / std::max<int64_t>(w.panel_bytes(), 1));
  b.nc_panels = std::min(b.nc_panels, w.n_panels);
  return b;
}

}  // namespace

// E3M2 A (16v, no int8 form) with int8-form MX weights, the weights read in place either way:
//  - at the VNNI tier, the int8 kernels with A split into two s8 parts, 16v = 32 hi + lo
//    (PackASpec::split32, key flags bit 7);
//  - below it, where each vpmaddubsw would multiply a weight by one part of the split A only (and
//    MXINT8 weights by one nibble of it), the int16-pair kernel with A as s16 pairs: each step's
//    decoded quads widened into pair rows (key.param[3] = 1, codegen/gemm_int.h).
// MXINT8 weights take that int16-pair kernel at the AVX2 tier under every A type: its s8 codes,
// d = q + 128, overflow vpmaddubsw pairs, so the quad kernel splits them into nibbles (two
// vpmaddubsw and two vpmaddwd per 32 codes and row); widened to s16 pairs they take one vpshufb
// per pair row and a vpmaddwd per row. Zen 3 (2026-12-07 ~05:35 UTC, fp32 A by group, both plans
// in one process, calls alternating, median time ratio pairs / quads; the outputs identical):
// 4 / 16 / 64 x 4096 x 4096 0.751 / 0.733 / 0.736 (74-78 -> 99-107 GOPS), 2 x 4096 x 4096 1.00,
// 1 x 4096 x 4096 0.94, 1 x 11008 x 4096 1.02. Not MXFP4 or E2M3, whose nibble / byte codes fit
// vpmaddubsw as they are: pairs 1.50-1.60 / 1.26-1.77 the time. The AVX-512 tier (zmm), not
// measured with it, keeps the quads.
// isa: the plan's tier (weights packed for AVX-512 serve it unrepacked: same layout).
static bool split_a(int32_t a_type, const PackedWeights& w, qj_isa isa) {
  return a_type == QJ_MXFP6_E3M2 && w.is_mx() && !w.is_mx16() && isa >= QJ_ISA_AVX512_VNNI;
}
static bool quads_as_pairs(int32_t a_type, const PackedWeights& w, qj_isa isa) {
  if (w.dtype == QJ_MXINT8 && isa == QJ_ISA_AVX2) return true;
  return a_type == QJ_MXFP6_E3M2 && w.is_mx() && !w.is_mx16() && isa < QJ_ISA_AVX512_VNNI;
}

// The weight-stream prefetch of the GEMM kernels (key params; codegen/simd.h): on Zen 5 (AMD
// family 0x1A) weights of at least twice L2 are prefetched far ahead, where a kernel that decodes
// or multiplies as it streams leaves the hardware prefetcher too little lead (the measurements are
// with each family's rule below); elsewhere the Zen 4 rules stay.
constexpr int kFarWeightPrefetchBytes = 16384;
constexpr int kNearWeightPrefetchBytes = 8192;
constexpr int kPairWeightPrefetchBytes = 4096;  // the one-row pair forms' (one_row_pairs)
static bool far_weight_prefetch(size_t weight_bytes) {
  return amd_family() >= 0x1a && weight_bytes >= static_cast<size_t>(l2_cache_bytes()) * 2;
}

// How far ahead the decoded-weight (INT4, MX) kernel of `rows` rows prefetches its weight stream
// (key.param[5]; 0: none), for packed weights of `bytes`.
//  - Two rows and more: cg::kWeightPrefetchBytes on Zen 4. From DRAM (Zen 4, --cold, 4096 x 4096,
//    us): MXFP4 M = 4 529-543 -> 422, S4 448-452 -> 390-395, M = 16 3-5% and M = 64 1-3% faster;
//    warm within noise. On Zen 5 16 KiB (2026-12-01 ~15:50 UTC, S4 group 128, GOPS, two runs,
//    3 / 8 / 16 KiB ahead): warm x 11008 x 4096 (23 MB) M = 2 303-338 / 384-430 / 513-530, M = 4
//    505-526 / 693-737 / 821-833, M = 8 623-637 / 755-759 / 819-829, M = 16 741-761 / 840-867 /
//    886-898; x 4096 x 4096 (8.5 MB) within noise (M = 2 572-597 / 584-611 / 593-597, M = 64
//    837-869 / 792-850 / 891-903); cold x 4096 x 4096 S4 M = 4 461-465 -> 503-530, M = 16 622-732
//    -> 790-842, MXFP4 431-432 -> 482-498 and 556-620 -> 654-678, x 11008 x 4096 M = 4 S4 446-454
//    -> 493-549, MXFP4 441-463 -> 497-509.
//  - One row (GEMV, weights streamed once per call), Zen 5: every line 16 KiB ahead once the
//    weights outgrow what L3 keeps between calls, 8 KiB below. Warm S4 group 128, medians in
//    GB/s of weights, none / 3 / 8 / 16 KiB ahead: 1 x 4096 x 4096 (8.5 MB) 111-112 / 113 / 112-114
//    / 104-108; 1 x 11008 x 4096 (23 MB) 46-60 / 49-61 / 61-72 / 73-83; 1 x 4096 x 11008 43-65 /
//    49-53 / 60-68 / 72-78; 1 x 14336 x 4096 (30 MB) 37-38 / 45 / 58-61 / 68-73. (The slower
//    consumer leaves the hardware prefetcher too little lead from L3; a plain read keeps ~100.)
//    The other decoded types alike (two runs, 1 x 11008 x 4096, GB/s, none -> this rule): U4
//    45-47 -> 57-69, MXINT8 47-50 -> 53-54, E2M3 39-42 -> 56-65, E3M2 33-34 -> 43-52, MX9 33 ->
//    50-52, MX6 31-32 -> 47-49, MX4 34-35 -> 44-46, MXFP8 27-28 unchanged (its decode bounds it);
//    1 x 4096 x 4096 within the runs' noise for all.
//    Elsewhere (the Zen 4 rule) one row of 4-bit weights (S4, U4, MXFP4) prefetches 16 KiB ahead
//    at the AVX-512 tiers from 16 MiB of weights up. Zen 4, 2026-12-02 ~17:10 UTC, group 128 /
//    MX, fp32 A, both plans in one process, calls alternating (each after an untimed call of its
//    own), median of the per-round time ratios 16 KiB / none, two or three runs: VNNI S4 / MXFP4
//    1 x 4096 x 11008 0.65-0.85 / 0.71-0.76, 1 x 11008 x 4096 0.85-0.93 / 0.76-0.81, 1 x 14336 x
//    4096 1.01 / 0.86, 1 x 4096 x 14336 0.99-1.01 / 0.87; U4 0.95-0.97; AVX-512 (QJ_MAX_ISA) S4 /
//    MXFP4 0.80-0.90 / 0.81-0.89. Not for the other decoded types (1 x 11008 x 4096 and 1 x 4096
//    x 14336: MXINT8 1.10-1.14, MX9 1.02-1.08, MXFP8 0.99-1.02, E2M3 0.97-1.08, MX4 0.86-1.00,
//    MX6 0.95-1.01, E3M2 0.94), nor at AVX2, whose heavier decode bounds it (S4 / MXFP4
//    1.03-1.09), nor below 16 MiB: 8 KiB at 1 x 4096 x 4096 (8.4 MB) 1.41 / 1.04, as earlier
//    sessions found for shorter distances. Two rows and more gain too little to change (S4 /
//    MXFP4, 16 KiB at 23-29 MB: M = 2 0.76-0.99, M = 4 0.91-1.04, M = 8 1.01-1.05). The streaming
//    form below stays with Zen 5: with the 16 KiB prefetch it was 2-9% slower here.
//  - A CPU without AVX-512 (its own tier AVX2): one row prefetches from 16 MiB of weights up, 8 KiB
//    ahead for 4-bit weights, 16 KiB for the others. Zen 3 (family 25 model 1), 2026-12-07 ~01:55
//    UTC, warm, GOPS, runs of `quantjit-bench gemm` with the distance forced, none / 8 / 16 KiB:
//    S4 group 128 1 x 11008 x 4096 (23 MB) 72-73 / 128-129 / 103-121, 1 x 4096 x 14336 62-65 /
//    105-115 / 113-114, 1 x 14336 x 4096 68-75 / 94-119 / 104-106, U4 1 x 11008 x 4096 65 / 122 /
//    120; MXFP4 1 x 11008 x 4096 65 / 66-93 / 67-87, 1 x 4096 x 14336 59 / 86-92 / 82-89; MXINT8
//    1 x 11008 x 4096 23 / 42-44 / 45-55, E2M3 24 / 39-41 / 34-45, MX9 24 / 32 / 32, MX4 44 / 41-49
//    / 48-50; E3M2 and MXFP8 unchanged (their decode bounds them). Below 16 MiB (1 x 4096 x 4096
//    S4, 8.4 MB, L3) it changed nothing at 8 KiB and cost 6% at 16 KiB; the gain begins between 12.6
//    MB (1 x 6144 x 4096, none 88-122) and 16.8 MB (1 x 8192 x 4096, none 62-69 / 8 KiB 92-124).
//    Two rows and more keep the 3 KiB (S4 M = 2 / 4 / 16 x 11008 x 4096 the same at 3, 8 and 16).
//  - Zen 5 weights below twice L2 keep the Zen 4 rule: in L2 the prefetches only cost (two runs,
//    GOPS, none / 8 KiB at M = 1: S4 1 x 512 x 512 484-497 / 451-462, 1 x 1024 x 1024 522-555 /
//    496-510, MXFP4 368 / 347-354 and 433-438 / 411-421; 1 x 2048 x 1024 alike; 1 x 2048 x 2048,
//    2 MB, 367-372 / 407-417), and 16 KiB at two rows and more was 0-3% slower than 3 KiB (x 512 x
//    512, x 1024 x 1024, M = 2 / 4 / 16 / 64).
static int decoded_prefetch_bytes(int rows, const PackedWeights& w, qj_isa isa) {
  const size_t bytes = w.panel_bytes() * w.n_panels;
  const bool four_bit = w.is_int4() || w.dtype == QJ_MXFP4_E2M1;
  if (rows == 1 && cpu_isa() < QJ_ISA_AVX512 && bytes >= (size_t{16} << 20))
    return four_bit ? kNearWeightPrefetchBytes : kFarWeightPrefetchBytes;
  if (!far_weight_prefetch(bytes)) {
    if (rows >= 2) return cg::kWeightPrefetchBytes;
    return four_bit && isa >= QJ_ISA_AVX512 && bytes >= (size_t{16} << 20) ? kFarWeightPrefetchBytes : 0;
  }
  if (rows >= 2) return kFarWeightPrefetchBytes;
  return bytes >= (size_t{16} << 20) ? kFarWeightPrefetchBytes : kNearWeightPrefetchBytes;
}

// The one-row kernel of 4-bit weights of at most 5/8 of L2 takes its L2 form (key.param[1] = 1,
// codegen/gemm_int.h): the A quads broadcast into a register and a second accumulator copy for odd
// K steps. (Zen 5, 2026-12-02 ~10:15 UTC, f32 A, one process per figure, 3000 calls, us, two runs
// each: S4 1 x 1024 x 1024 group 128 3.79 / 3.75 -> 3.00 / 3.02 (either change alone 0.98 / 0.90),
// per channel 4.14 / 4.13 -> 2.72 / 2.69; U4 3.82 -> 3.15-3.20, per channel 4.17-4.21 -> 2.71-2.75;
// 1 x 512 x 512 group 128 1.45-1.64 -> 1.37-1.42, per channel 1.26-2.18 -> 1.12-1.13. Not for
// more: at 1 x 1536 x 1024 (0.8 MB; ~11:10 UTC, four alternating runs) such runs gained (group 128
// 5.91-6.14 -> 5.26-5.48, once 6.80; per channel 5.96-6.11 -> 4.42-5.49) but `quantjit-bench
// gemm` did not (three alternating runs, S4 / U4: 5.93-6.18 / 6.51-8.83 -> 5.66-6.25 /
// 6.61-9.05); 1 x 2048 x 1024 mixed, 1 x 2048 x 2048 0-7% slower; from L3 / DRAM, A/B in one
// process, 1 x 11008 x 4096 / 1 x 4096 x 14336 per channel, the register broadcast alone 1.12 /
// 1.04x the time (more instructions a byte leave fewer weight loads in flight), the second copy
// alone 0.98-1.03. MXFP4, MXINT8 and E2M3 gain nothing in L2 (MXFP4 4.2 -> 4.3-4.6 us: their
// decode's shuffles, not the loads, bound them).)
//
// Weights streamed from DRAM (where the one-row prefetch goes 16 KiB ahead, above) take the
// streaming form instead (key.param[1] = 2; the VNNI tier's scaled high nibbles, key flags bit 3):
// the nibble masks read the packed bytes as memory operands, one instruction fewer per 64 bytes.
// (2026-12-02 ~10:50 UTC, S4 group 128,
// per channel in one process, A/B in both orders, time new / old: 1 x 11008 x 4096 0.97 / 0.98 and
// 0.96 / 0.98, 1 x 4096 x 14336 0.97 / 0.97 and 0.98 / 0.97; `quantjit-bench gemm` three runs
// each, us: 1 x 11008 x 4096 297-302 -> 288-294, 1 x 4096 x 11008 284-286 -> 276-282, 1 x 14336 x
// 4096 442-459 -> 428-445, 1 x 4096 x 14336 438-457 -> 432-440; --cold, two runs, S4 / U4 1 x
// 4096 x 14336 830-842 / 889-894 -> 814-831 / 866-889. From L2 / L3 it was slower: 1 x 1536 x
// 1024 +15%, 1 x 2048 x 1024 / 2048 +7%, 1 x 4096 x 4096 +4%.)
static int decoded_gemv_form(int rows, const PackedWeights& w, qj_isa isa, bool scaled) {
  if (rows != 1 || !w.is_int4() || isa < QJ_ISA_AVX512_VNNI) return 0;
  const int forced = g_int4_gemv_form.load(std::memory_order_relaxed);
  if (forced >= 0) return (forced == 2 && !scaled) || forced == 3 ? 0 : forced;  // (3: below VNNI)
  const size_t bytes = w.panel_bytes() * w.n_panels;
  if (bytes * 8 <= static_cast<size_t>(l2_cache_bytes()) * 5) return 1;
  if (scaled && far_weight_prefetch(bytes) && decoded_prefetch_bytes(rows, w, isa) == kFarWeightPrefetchBytes)
    return 2;
  return 0;
}

// The same for the s8 kernels over the whole K (key.param[5]): none on Zen 4 (M = 4 / 16 cold
// there: no gain), nor for one row (the GEMV streams near the roof: Zen 5, 1 x 11008 x 4096, 45
// MB, 139-143 -> 119-122 GOPS with 16 KiB); 16 KiB on Zen 5 for two rows and more once the
// weights outgrow L2 (2026-12-01 ~15:59 UTC, warm GOPS, three runs, none -> 16 KiB): x 11008 x
// 4096 M = 2 182-191 -> 205-228, M = 4 296-307 -> 380-444, M = 16 607-623 -> 684-781; x 4096 x
// 4096 M = 4 749-812 -> 774-820, M = 16 874-896 -> 950-966, M = 64 790-886 -> 910-932.
//
// A CPU without AVX-512 (its own tier AVX2), weights of 16 MiB and more as packed: 16 KiB ahead
// too, and K blocks only for calls of kKBlockMinTilesStreamed row tiles or more
// (GemmPlan::kblock_min_tiles): the K-blocked kernels cannot prefetch, and their
// panel slices, a panel stride apart, stream from DRAM as badly. Zen 3 (2026-12-07 ~05:45 UTC, u8
// A, u8 C, both plans in one process, calls alternating, GOPS, K-blocked without a prefetch ->
// unblocked with 4 / 16 KiB; the outputs identical): x 4096 x 4096 (32 MB) M = 4 57.6 -> 101.9 /
// 100.0, M = 8 76.6 -> 109.6 / 115.5, M = 16 77.5 -> 117.1 / 120.9, 4 x 11008 x 4096 54.8 -> 73.6
// / 83.7; M = 2 (never blocked) 34.6 -> 49.7 / 54.8. With the prefetch, unblocked / blocked time:
// M = 16 0.85, M = 32 0.98, M = 40 1.00, M = 48 1.02, M = 64 1.03-1.13 (7 / 8 / 10 / 13 tiles).
// At 16 MB (4 x 4096 x 2048, not blocked) 107 -> 136 GOPS with 16 KiB; at 8 MB (L3) 3-5% slower,
// so not there (2048 x 2048 and 4096 x 1024, M = 4 / 16: 143-144 -> 137-138). Those were s16
// pairs; with the byte pairs (kPair8, half the bytes) the rule stays at 16 MiB as packed: the
// prefetch alone, both in one process, 20-40 rounds, time with 4 / 16 KiB over without (~14:05
// UTC): x 4096 x 4096 (16.8 MB) M = 2 0.86 / 0.88, M = 4 1.04 / 1.05, M = 16 1.04 / 1.05; x 11008 x
// 4096 (45 MB) M = 2 0.64 / 0.64, M = 4 0.86 / 0.87, M = 16 1.03 / 1.04.
constexpr int64_t kKBlockMinTilesStreamed = 8;
static bool s8_stream_prefetch(size_t bytes) {
  return cpu_isa() < QJ_ISA_AVX512 && bytes >= (size_t{16} << 20);
}
// The s8 GEMV (one row) on a CPU without AVX-512 (the AVX2 tier's byte pairs, kPair8) prefetches
// 16 KiB ahead once its weights are half of L3 or more. Measured 2026-12-07 ~14:00 UTC (Zen 3, 32
// MiB L3; plans with and without in one process, 40-100 rounds alternating, median time ratio
// with 8 / 16 KiB over without, three sessions of the machine's changing states): 1 x 1024 x
// 4096 (4.2 MB) 1.31-1.39, 1 x 2048 x 4096 (8.4 MB) 1.02-1.39, 1 x 3072 x 4096 (12.6 MB) 1.18-1.32
// (any distance from 1 to 32 KiB: a one-row call with the prefetch stayed near 52 GOPS there while
// the hardware prefetcher alone gave 66-75); 1 x 4096 x 4096 (16.8 MB) 0.75-1.02 / 0.67-1.01, 1 x
// 6144 x 4096 0.65-0.71 / 0.67, 1 x 7168 x 4096 0.68 / 0.68, 1 x 8192 x 4096 0.70-0.90 / 0.68-0.89,
// 1 x 11008 x 4096 (45 MB, DRAM) 0.92-0.94 / 0.91-0.93, 1 x 14336 x 4096 0.93 / 0.91. (With s16
// pairs, two bytes a weight, the window had been a quarter to three quarters of L3, 8 KiB.)
static bool s8_gemv_prefetch(size_t bytes) {
  return cpu_isa() < QJ_ISA_AVX512 && 2 * bytes >= l3_cache_bytes();
}
static int s8_prefetch_bytes(int rows, size_t bytes) {
  if (rows == 1) return s8_gemv_prefetch(bytes) ? kFarWeightPrefetchBytes : 0;
  return (far_weight_prefetch(bytes) || s8_stream_prefetch(bytes)) ? kFarWeightPrefetchBytes : 0;
}

// The one-row pair form (key param[1] = 3; see one_row_pairs) of the plan's one-row kernel
// `one_row` into p->pair; a kernel the JIT declines leaves it empty (logged). Where the one-panel
// kernel prefetches, the pair form's streams prefetch kPairWeightPrefetchBytes ahead. For the s8
// byte pairs, time with 4 / 8 / 32 KiB over 16 KiB (60 alternating rounds, ~15:15 UTC, two machine
// states): 1 x 4096 x 4096 0.93 / 0.96 / 1.09 and 0.86 / 0.89 / 1.05, 1 x 6144 x 4096 0.95 / 0.94 /
// 1.07, 1 x 11008 x 4096 0.99 / 0.97 / 0.99, 1 x 3072 x 4096 (no prefetch by the rule) 0.83 / 0.90
// / 1.05. (The decoded weights' figures are at one_row_pairs.)
static void acquire_pair_form(KernelKey key, GemmPlan* p) {
  key.param[1] = 3;
  key.n_tail = 0;
  if (key.param[5] != 0) key.param[5] = kPairWeightPrefetchBytes;
  if (acquire_kernel(key, gemm_int_family(), &p->pair) == QJ_OK)
    p->gen_us += p->pair.gen_us();
  else
    QJ_LOG(1, "gemm: JIT declined the one-row pair form (%s); one-row tiles take a panel a pass", last_error());
}

// The s8 GEMV (one row, u8 A in place) streams all of its weights once per call. When they are a
// little larger than L2, a call that reads them in the same order as the last finds nothing of
// them there (the last call's final lines evicted its first ones, which this call reads first).
// So each call starts half of L2 of panels earlier than the last (modulo the panels), reads
// forward to the last panel, then from the first panel up to where it started: its first half
// L2 of weights are the last call's final ones, still in L2, and the weights stream forward,
// which the hardware prefetchers follow when they come from DRAM. For weights of 3/4 L2 to 4 L2
// only: below, they stay in L2 anyway; above, the share read from L2 is small, and DRAM-resident
// weights gained nothing from the earlier form of this rule (docs/measurement-log.md).
// It replaced (2026-12-08) every other call walking the panels backwards in 128 KiB chunks
// (2026-12-02, measured on Zen 5: 1 x 2048 x 1024 20.9-21.4 -> 16.3-16.6 us warm), whose backward
// walks the prefetchers do not follow. Zen 4 with 1 MiB L2 (`quantjit-bench gemm`, us, medians of
// four runs alternating the builds; backward chunks / forward every call / this rule): warm
// (L3-resident) 1 x 1024 x 768 7.32 / 7.63 / 7.52, 1 x 2048 x 512 10.17 / 11.09 / 10.37, 1 x 2048 x
// 1024 21.78 / 21.79 / 21.40, 1 x 800 x 3200 27.1 / 27.0 / 26.4, 1 x 4096 x 1024 44.6 / 43.5 /
// 42.9; from DRAM (`--cold`) see docs/measurement-log.md. Three quarters of L2 measured the same
// as half warm. (Not yet measured on Zen 5, where the backward chunks had gained most.)

// Slice tid of nth: its row tiles *mt and panels *np (whole tiles, so any partition computes
// every element identically). Rows when there are enough of them (4 tiles a slice) and they split
// about as evenly as the panels, else columns (each slice then packs all of A). Measured, two
// threads, 64 x 4096 x 4096 (11 tiles: 6 and 5 a slice, 36 and 28 rows) 739-757 GOPS by rows,
// 863-868 by columns; 16 x 4096 x 4096, 256 x 4096 x 4096 and 1024^3 as before.
void split_tiles(int64_t m_tiles, int64_t n_panels, int32_t tid, int32_t nth, Range* mt, Range* np) {
  if (nth <= 1) return;
  const int64_t t = nth;
  // Largest share against the mean (1 = even).
  const double rows_uneven = static_cast<double>((m_tiles + t - 1) / t * t) / static_cast<double>(m_tiles);
  const double cols_uneven = static_cast<double>((n_panels + t - 1) / t * t) / static_cast<double>(n_panels);
  if (n_panels < t || (m_tiles >= 4 * t && rows_uneven <= cols_uneven + 0.03))
    *mt = split_range(m_tiles, tid, nth);
  else
    *np = split_range(n_panels, tid, nth);
}

// Rows per bank of the narrow-N kernel (two register banks, software-pipelined). Before the
// pipeline (one register bank per call's iteration) 8 rows measured as fast as 12 or 16 at
// 156800 x {4, 8} x 36 and faster at 120 x 4 x 288, with fewer rows left to the ordinary kernels.
constexpr int kNarrowMr = 8;
// Dense E2M3 GEMM (GemmPlan::kernels_b8): row tiles from which a call unpacks its B blocks into
// scratch, and the packed A of a row block then (one unpack of B per row block). Measured 4096 x
// 4096 (GOPS, in-kernel unpack -> B blocks unpacked, the same minutes): M = 64 276-288 -> 299-308,
// M = 256 262-282 -> 323-334 (one byte per code before the dense panels: 325-331), M = 1024
// 284-293 -> 314-324; M = 16 / 32 (3 / 6 tiles) lost (267-283 -> 215-228 / 276-289 -> 267-276):
// there B is unpacked for too few tiles. The default row block (b.mc, 64 rows at K = 4096)
// unpacked B ten times as often: 294-298 at M = 256.
constexpr int64_t kFp6BytesMinTiles = 8;
constexpr int64_t kFp6BytesMaxA = int64_t(2) << 20;
// The narrow-N kernel (codegen/gemm_int flags bit 6) and its expanded operands: B patterns per
// 8-byte K chunk (chunk t covers K [8t, 8t + 8); when K is not a multiple of 8 the last chunk is
// K [K - 8, K) with zeros where the previous chunk already counted), qword c of a pattern holding
// column c; the accumulators' start (column correction c in dword 2c); the multipliers and bias
// per lane of the epilogue's narrow layout (codegen/epilogue.h). `key` is the plan's s8 key.
// N = 4 with the K of narrow_rows_k tries the row-lane variant first (on Zen 5).
static qj_status plan_narrow_rows(KernelKey key, GemmPlan* p, bool* taken);
// N = 8 with the K of narrow_rows8_k tries the 8-column row-lane variant first (not on Zen 5).
static qj_status plan_narrow_rows8(KernelKey key, GemmPlan* p, bool* taken);
// Generates the kernel of `key` as the plan's narrow / tall kernel (key.mr rows per bank); false
// (and a verbose note naming `what` and what runs instead) if the generator declines: the
// ordinary kernels cover every row anyway, this only costs speed.
static bool take_narrow_kernel(const KernelKey& key, GemmPlan* p, const char* what, const char* instead) {
  KernelRef ref;
  if (acquire_kernel(key, gemm_int_family(), &ref) != QJ_OK) {
    QJ_LOG(1, "gemm: %s kernel declined (%s); %s", what, last_error(), instead);
    return false;
  }
  p->gen_us += ref.gen_us();
  p->narrow = std::move(ref);
  p->narrow_mr = key.mr;
  return true;
}
// The key of one of the kernels of flags bit 6 (codegen/gemm_int: narrow-N, its row-lane variant,
// tall, banks) from the plan's s8 key: rows per bank, columns, K, the variant (param[4]); the
// s8 kernels' other parameters (lda, K blocking, B stride, prefetch) cleared.
static KernelKey narrow_family_key(KernelKey key, int mr, int nr, int64_t k, uint32_t variant) {
  key.mr = static_cast<uint16_t>(mr);
  key.nr = static_cast<uint16_t>(nr);
  key.flags = 64;
  key.n_tail = 0;
  for (uint32_t& v : key.param) v = 0;
  key.param[1] = static_cast<uint32_t>(k);
  key.param[4] = variant;
  return key;
}
qj_status plan_narrow(KernelKey key, GemmPlan* p) {
  const PackedWeights& w = *p->w;
  const int n = static_cast<int>(w.n);
  const int64_t k = w.k, n_full = k / 8, chunks = n_full + (k % 8 != 0 ? 1 : 0);
  if (n == 4 && narrow_rows_k(k) && amd_family() >= 0x1a) {
    bool taken = false;
    QJ_TRY(plan_narrow_rows(key, p, &taken));
    if (taken) return QJ_OK;
  }
  const int rows8 = g_narrow_rows8.load(std::memory_order_relaxed);
  if (n == 8 && k % 4 == 0 && k / 4 <= kNarrowRows8MaxKGroups &&
      (rows8 >= 0 ? rows8 == 1 : narrow_rows8_k(k) && amd_family() < 0x1a)) {
    bool taken = false;
    QJ_TRY(plan_narrow_rows8(key, p, &taken));
    if (taken) return QJ_OK;
  }
  if (!fill_buffer(p->narrow_b, static_cast<size_t>(chunks * n) * 8) ||
      !fill_buffer(p->narrow_cols, 3 * 64))
    return fail(QJ_ERR_OUT_OF_MEMORY, "cannot allocate the plan's narrow-N operands");
  const int8_t* panel = w.packed.data<int8_t>();  // N <= nr: one panel, [K / 4][nr][4]
  int8_t* b = p->narrow_b.data<int8_t>();
  for (int64_t t = 0; t < chunks; ++t) {
    const int64_t off = t < n_full ? 8 * t : k - 8;
    for (int c = 0; c < n; ++c)
      for (int e = 0; e < 8; ++e) {
        const int64_t kk = off + e;
        b[(t * n + c) * 8 + e] = kk < 8 * t ? 0 : panel[(kk / 4) * w.nr * 4 + c * 4 + kk % 4];
      }
  }
  int32_t* corr = p->narrow_cols.data<int32_t>();
  float* mult = reinterpret_cast<float*>(corr + 16);
  float* bias = mult + 16;
  for (int c = 0; c < n; ++c) corr[2 * c] = p->col_corr.data<int32_t>()[c];
  for (int l = 0; l < 16; ++l) {
    const int c = cg::narrow_lane_col(n, l);
    mult[l] = p->col_mult.data<float>()[c];
    bias[l] = p->col_bias.data<float>()[c];
  }
  take_narrow_kernel(narrow_family_key(key, kNarrowMr, n, k, 0), p, "narrow-N", "using the column-vectorized kernels");
  return QJ_OK;
}

static int c_bytes(qj_dtype c_type) { return c_type == QJ_U8 || c_type == QJ_S8 ? 1 : (c_type == QJ_BF16 ? 2 : 4); }

// Rows per bank of the tall kernel (emit_s8_tall: two register banks alternate over the banks).
// Measured (fraction of the VNNI peak, 156800 x 16 x 36 / 20000 x 16 x 64): 8 rows 0.865-0.872 /
// 0.85-0.90, 6 rows 0.863 / 0.90-0.91, 4 rows 0.82-0.86 / 0.84-0.86; K above 44 leaves fewer
// registers (plan_tall).
constexpr int kTallMr = 8;
// Above 16 columns the tall kernels store 16 columns of many rows per call, each row ldc apart:
// with rows of C 4096 bytes or more apart that ran slower than the ordinary kernels (u8 C,
// 64 / 128 / 256 x 4096 x 36: 0.77 -> 0.50-0.58 of the peak; f32 C at N = 1024 too), below it
// faster (u8 C, N = 64 / 256 / 1024, M = 128 to 1024, K = 36: 0.66-0.76 -> 0.83-0.86).
constexpr int64_t kTallMaxRowBytes = 4096;
// Whether the tall kernels may run N > 16 columns over rows of C row_bytes apart. On Zen 5 rows a
// multiple of 1024 bytes apart also ran far slower than the ordinary kernels (u8 C, K = 36, tall
// / ordinary time in one process, 2026-12-02: 2000 x 1024 / 2048 / 3072 0.42 / 0.24 / 0.66 of
// their speed, 20000 x 1024 0.46, f32 C 2000 x 256 0.71-0.73), where the other strides kept
// their gain (u8 C N = 256 / 512 / 640 / 768 / 1536 / 2560 1.12 / 1.06 / 1.15 / 1.11 / 1.05 /
// 1.02x the ordinary kernels' speed). Such rows put a column slice's stores 4 KiB apart every
// 4 / 2 / 4 rows and into few L1 sets (which of the two costs was not measured). Zen 4 gained
// at N = 1024 (above).
static bool tall_row_bytes_ok(int64_t row_bytes) {
  return row_bytes < kTallMaxRowBytes && !(row_bytes % 1024 == 0 && amd_family() >= 0x1a);
}
// The row-lane variants' operands (N = n columns): B_q per quad of K as b_lanes dwords, lane l
// quad q of column l % n; the accumulators' start, the multipliers and the bias per lane of the
// 16-lane output vectors (column l % n).
static qj_status row_lane_operands(GemmPlan* p, int n, int b_lanes) {
  const PackedWeights& w = *p->w;
  const int64_t kg = w.k / 4;
  if (!fill_buffer(p->narrow_b, static_cast<size_t>(kg * b_lanes) * 4) || !fill_buffer(p->narrow_cols, 3 * 64))
    return fail(QJ_ERR_OUT_OF_MEMORY, "cannot allocate the plan's narrow-N operands");
  const int8_t* panel = w.packed.data<int8_t>();  // N <= nr: one panel, [K / 4][nr][4]
  int8_t* b = p->narrow_b.data<int8_t>();
  for (int64_t q = 0; q < kg; ++q)
    for (int l = 0; l < b_lanes; ++l)
      for (int e = 0; e < 4; ++e) b[(q * b_lanes + l) * 4 + e] = panel[q * w.nr * 4 + (l % n) * 4 + e];
  int32_t* corr = p->narrow_cols.data<int32_t>();
  float* mult = reinterpret_cast<float*>(corr + 16);
  float* bias = mult + 16;
  for (int l = 0; l < 16; ++l) {
    corr[l] = p->col_corr.data<int32_t>()[l % n];
    mult[l] = p->col_mult.data<float>()[l % n];
    bias[l] = p->col_bias.data<float>()[l % n];
  }
  return QJ_OK;
}
// The row-lane variant of the narrow-N kernel (codegen/gemm_int emit_s8_narrow_rows: N = 4, K a
// multiple of 4 from 16 to 64; flags bit 6, param[4] = 1) and its operands: B_q per quad of K
// (lane l: quad q of column l % 4), and the accumulators' start, the multipliers and the bias
// per lane (column l % 4). *taken tells whether the kernel was generated (else plan_narrow goes on
// to the narrow-N kernel, which overwrites these buffers). Zen 5 only (AMD family 0x1A), where it
// was measured (156800 x 4 x 36, see the kernel): at K = 36 it trades the narrow kernel's twenty
// 256-bit multiplies per 4 rows for nine 512-bit ones and eleven 512-bit shuffles. On Zen 4 it
// lost (2026-12-02, fraction of the VNNI peak, two alternating runs beside a build that shared
// the core, so the ratios only, narrow -> row lanes):
// 156800 x 4 x 36 0.53-0.55 -> 0.44, 20000 x 4 x 16 / 20 / 28 / 44 / 64 0.387 / 0.409 / 0.494 /
// 0.60-0.61 / 0.65-0.67 -> 0.377 / 0.34 / 0.40 / 0.42 / 0.47 (its vpermt2d takes most of a
// 512-bit multiply's slot there).
static qj_status plan_narrow_rows(KernelKey key, GemmPlan* p, bool* taken) {
  QJ_TRY(row_lane_operands(p, 4, 16));
  *taken = take_narrow_kernel(narrow_family_key(key, 4, 4, p->w->k, 1), p, "row-lane narrow-N",
                              "trying the narrow-N kernel");
  return QJ_OK;
}

// The 8-column row-lane variant (codegen/gemm_int emit_s8_narrow_rows8: N = 8, K a multiple of 4
// up to 4 * kNarrowRows8MaxKGroups; flags bit 6, param[4] = 1, nr = 8) and its operands: B_q per
// quad of K (32 bytes, lane c: quad q of column c), the accumulators' start per column, the
// multipliers and bias per lane of two rows in row order (column l % 8). *taken as
// plan_narrow_rows. Not on Zen 5, whose 512-bit vpdpbusd issue as often as its 256-bit ones (the
// narrow kernel's zmm multiplies then do twice the work per slot); measured on Zen 4 (see the
// kernel and narrow_rows8_k).
static qj_status plan_narrow_rows8(KernelKey key, GemmPlan* p, bool* taken) {
  QJ_TRY(row_lane_operands(p, 8, 8));
  const int mr = gemm_int_narrow_rows8_max_mr(p->w->k, 8);  // rows per bank
  if (mr == 0) return QJ_OK;
  *taken = take_narrow_kernel(narrow_family_key(key, mr, 8, p->w->k, 1), p, "row-lane narrow-N (8 columns)",
                              "using the narrow-N kernel");
  return QJ_OK;
}

// The banks kernel (codegen/gemm_int emit_s8_banks: flags bit 6, nr = 64): banks of 3 rows over
// each 64-column panel in turn, software-pipelined, for K too long for the tall kernels (u8 A in
// place, u8 / s8 / f32 / s32 / bf16 C, N a multiple of 64, K a multiple of 4 up to kBanksMaxK); gemm_run
// takes it for the M of banks_rows_ok.
static void plan_banks(KernelKey key, GemmPlan* p) {
  const PackedWeights& w = *p->w;
  if (!take_narrow_kernel(narrow_family_key(key, 3, 64, w.k, 0), p, "banks", "using the ordinary kernels")) return;
  p->narrow_tall = true;
  p->tall_cols = 64;
  p->tall_block = std::max<int64_t>(1, static_cast<int64_t>(l1d_cache_bytes() / 3) / (w.k * 3));
}

// The tall kernels (codegen/gemm_int flags bit 6, nr = 16) where the narrow-N kernel does not
// apply (N other than 4 / 8, K < 8, bf16 output, beta), u8 A in place: they read 16 columns of
// the packed panels (K quads nr * 4 bytes apart) and the plan's column arrays as they are: one
// kernel for 16 columns, one for the last N % 16. `key` is the plan's s8 key.
void plan_tall(KernelKey key, GemmPlan* p) {
  const PackedWeights& w = *p->w;
  // rows per bank: what the registers leave beside B, at most kTallMr
  key = narrow_family_key(key, gemm_int_tall_max_mr(w.k, kTallMr), 16, w.k, 0);
  key.param[3] = static_cast<uint32_t>(w.nr * 4);
  KernelRef full, tail;
  key.n_tail = 0;
  qj_status st = w.n >= 16 ? acquire_kernel(key, gemm_int_family(), &full) : QJ_OK;
  key.n_tail = static_cast<uint16_t>(w.n % 16);
  if (st == QJ_OK && key.n_tail) st = acquire_kernel(key, gemm_int_family(), &tail);
  if (st != QJ_OK) {
    QJ_LOG(1, "gemm: tall kernel declined (%s); using the ordinary kernels", last_error());
    return;
  }
  p->gen_us += (full ? full.gen_us() : 0) + (tail ? tail.gen_us() : 0);
  if (full) {
    p->narrow = std::move(full);
    p->narrow_tail = std::move(tail);  // empty when 16 divides N
  } else {
    p->narrow = std::move(tail);  // N < 16: the one kernel
  }
  p->narrow_mr = key.mr;
  p->narrow_tall = true;
  // Banks of rows per call: A rows of the block stay in L1 (a third of it) while the kernels
  // visit each 16 columns (with N <= 16, run_narrow makes one call of all the banks).
  p->tall_block = std::max<int64_t>(1, static_cast<int64_t>(l1d_cache_bytes() / 3) / (w.k * key.mr));
}

void gemm_hide_vbmi_for_tests(bool hide) { g_hide_vbmi.store(hide, std::memory_order_relaxed); }

qj_status gemm_plan_create(const qj_gemm_desc& desc, std::shared_ptr<const PackedWeights> w,
                           std::unique_ptr<GemmPlan>* out) {
  // MX A (src/ops/mx_act.h): decoded to int8 while packed, its block scales fed through the
  // per-(row, group) A-scale path of group-quantized fp32 A.
  const bool mx_a = mx_act_type(raw_enum(desc.a_type));
  const int32_t at = raw_enum(desc.a_type);  // not validated yet
  const bool fp8_a = at == QJ_MXFP8_E4M3 || at == QJ_MXFP8_E5M2;
  if (mx_a) {
    QJ_TRY(check_desc_enums(desc));
    QJ_TRY(check_mx_a_plan(desc, *w));
    // MXFP8 A x integer-form MX / BDR weights: fp32 route. The float kernels read every one of
    // them in place (their integer kernels' layouts; codegen/gemm_float.cpp). E2M3 / E3M2 in
    // place measured 39 / 108 and 34-35 / 107-109 GOPS at M = 1 / 256 (zmm), as through their
    // former E4M3 copies (38 / 108, 36-37 / 106-109); AVX2 23 / 67 and 20-21 / 78-79 against
    // 27 / 65 and 25 / 65. Measured (zmm, one core, 1 x 4096 x 4096 / 1 x 1024 x 1024 /
    // 64 x 4096 x 4096 GOPS): MXFP4 in place 64.5 / - / 109 against 38 / - / 108 through an E4M3
    // copy; MXINT8 in place 39 / 40 / 108 against 52 / 56 / 108 through an int8 copy (two shifts
    // per vector instead of one vpmovsxbd): the copy would be faster at M = 1 but would double the
    // weights' memory for every plan. BDR: see docs/measurement-log.md, section 1 (MX9 / MX6 /
    // MX4 in place against their former integer-form copies).
    if (fp8_a && w->is_mx()) return float_plan_create(desc, std::move(w), out);
  }
  if (w->is_float() || w->is_mx_fp8()) return float_plan_create(desc, std::move(w), out);
  QJ_TRY(check_desc(desc));
  const bool dynamic = desc.a_type == QJ_F32 || desc.a_type == QJ_BF16;
  if (dynamic && desc.a_granularity == QJ_GRAN_GROUP && w->gran != QJ_GRAN_GROUP) {
    // Weights of one group along K (per tensor, per channel, or grouped with G = K, which packing
    // keeps as per channel): A per (row, weight group) is A per row (src/ref does the same).
    qj_gemm_desc per_row = desc;
    per_row.a_granularity = QJ_GRAN_ROW;
    return gemm_plan_create(per_row, std::move(w), out);
  }
  const bool decoded = w->dtype != QJ_S8;
  if (desc.c_type == QJ_S32 && w->gran == QJ_GRAN_GROUP)
    return fail(QJ_ERR_INVALID_ARGUMENT, "desc->c_type=QJ_S32 needs per-tensor or per-channel weights "
                "(group scales are applied in fp32)");
  // int32 exactness of one (group) sum: |(a - za)(q - zb)| <= 255 * 255 (s8), 255 * 15 (4-bit).
  const int64_t max_k = 2147483647LL / (255LL * (decoded ? 15 : 255));
  if (w->k > max_k)
    return fail(QJ_ERR_UNSUPPORTED, "k=%lld: int32 accumulation is exact only for k <= %lld",
                (long long)w->k, (long long)max_k);
  const bool group_a = (dynamic && desc.a_granularity == QJ_GRAN_GROUP) || mx_a;
  if (group_a && !decoded)
    return fail(QJ_ERR_UNSUPPORTED, "desc->a_granularity=QJ_GRAN_GROUP is implemented for S4 / U4 "
                "weights, not %s", qj_dtype_name(w->dtype));
  auto p = std::make_unique<GemmPlan>();
  p->kind = decoded ? GemmKind::kDecoded : GemmKind::kInt8;
  QJ_TRY(plan_common(desc, &w, p.get()));
  const int64_t n = w->n, groups = w->groups();
  const bool a_split = split_a(desc.a_type, *w, p->isa);
  const bool a_pairs = w->is_mx16() || quads_as_pairs(desc.a_type, *w, p->isa);  // s16 pairs of A
  p->a_pairs = a_pairs;

  // Zero point of A as the kernel sees it.
  p->za = dynamic || mx_a ? 0 : desc.a_zero_point;
  if (!decoded && w->kg == 4 && desc.a_type != QJ_U8) p->za += 128;
  // A is the signed operand: u8 - 128 in s8 quads; A in s16 pairs (int16-pair weights, E3M2 and
  // BDR, and the quads widened to pairs, quads_as_pairs) is u8 as is (s16 pairs hold 0..255), its
  // zero point removed by the column corrections.
  if (decoded && desc.a_type == QJ_U8 && !a_pairs) p->za -= 128;
  // Decoded weights d = q + off are the unsigned operand; the constant part z0 of z = zb + off
  // (no per-column zero points) is removed with row sums pre-multiplied by -z0.
  const int32_t off = decoded ? w->nibble_offset() : 0;
  int32_t z0 = 0;
  if (decoded && !w->zp_vec) z0 = off + (w->zero_points.empty() ? 0 : w->zero_points[0]);
  p->row_sums = decoded ? (w->zp_vec || z0 != 0) : !w->zero_points.empty();
  p->row_sum_mult = decoded && !w->zp_vec ? -z0 : 1;

  if (p->isa >= QJ_ISA_AVX2) {
    p->blk = choose_blocking(p->isa, w->nr, w->gran == QJ_GRAN_GROUP, w->kp, w->n_panels, w->kg);
    if (decoded) {
      // The register budget is the emitter's (gemm_int_max_mr); B blocks of ~1 MiB of panels.
      KernelKey probe = KernelKey::zeroed();
      probe.op = KernelOp::kGemmInt;
      probe.isa = static_cast<uint8_t>(p->isa);
      probe.a_type = QJ_S8;
      probe.b_type = w->dtype;
      probe.nr = static_cast<uint16_t>(w->nr);
      probe.granularity = static_cast<uint8_t>(w->gran == QJ_GRAN_GROUP ? QJ_GRAN_GROUP : QJ_GRAN_CHANNEL);
      probe.has_b_zp = w->zp_vec;
      if (w->is_mx() && has_vbmi()) probe.flags = 32;  // vpermb decoders
      if (a_split) probe.flags |= 128;
      if (a_pairs && !w->is_mx16()) probe.param[3] = 1;
      p->blk.mr = std::max(1, gemm_int_max_mr(probe, 12));
      p->blk.kc = 0;  // decoded weights: K is not blocked
      p->blk.kc_min_rows = 0;
      // s8 A: kp bytes per row (s16 pairs for int16-pair weights, split A: 2 kp)
      int64_t mc = (256 << 10) / std::max<int64_t>(w->kp * (a_pairs || a_split ? 2 : 1), 1);
      mc = std::max<int64_t>(p->blk.mr, mc / p->blk.mr * p->blk.mr);
      p->blk.mc = std::min<int64_t>(mc, 4096);
      p->blk.nc_panels = std::min<int64_t>(
          w->n_panels, std::max<int64_t>(1, static_cast<int64_t>(l2_cache_bytes() / 2) / std::max<size_t>(w->panel_bytes(), 1)));
    }
    p->n_pad = w->n_panels * w->nr;
    const size_t col_bytes = static_cast<size_t>(groups * p->n_pad) * 4;
    if (!fill_buffer(p->col_corr, col_bytes) || !fill_buffer(p->b_zp, col_bytes) ||
        !fill_buffer(p->group_scale, col_bytes) || !fill_buffer(p->col_mult, p->n_pad * 4) ||
        !fill_buffer(p->col_bias, p->n_pad * 4))
      return fail(QJ_ERR_OUT_OF_MEMORY, "cannot allocate the plan's column vectors");
    const int64_t gk = w->k / groups;
    int32_t* cc = p->col_corr.data<int32_t>();
    int32_t* bz = p->b_zp.data<int32_t>();
    float* gs = p->group_scale.data<float>();
    float* ml = p->col_mult.data<float>();
    float* bi = p->col_bias.data<float>();
    const std::vector<float> wsc = w->all_scales();  // [groups][n]
    for (int64_t g = 0; g < groups; ++g)
      for (int64_t c = 0; c < n; ++c) {
        // Decoded: in terms of d = q + off and z = zb + off (the column sum of d is colsum + gk*off).
        int64_t zb = w->zp(g, c) + off;
        int64_t csum = w->colsum[g * n + c] + gk * off;
        // sum (a - za)(b - zb) = sum a*b - za*colsum - zb*rowsum + gk*za*zb   (mod 2^32, exact)
        int64_t corr = gk * static_cast<int64_t>(p->za) * zb - static_cast<int64_t>(p->za) * csum;
        cc[g * p->n_pad + c] = static_cast<int32_t>(static_cast<uint32_t>(corr));
        bz[g * p->n_pad + c] = static_cast<int32_t>(zb);
        gs[g * p->n_pad + c] = wsc[g * n + c];
      }
    const double a_scale = dynamic || mx_a ? 1.0 : desc.a_scale;
    // MX: the kernel folds 2^(b - 127) per block; the element type's 2^-int_shift is applied here.
    const double grp_mult = w->is_mx() ? std::ldexp(1.0, -mx_int_shift(w->dtype)) : 1.0;
    for (int64_t c = 0; c < n; ++c) {
      const double b_scale = w->gran == QJ_GRAN_GROUP ? grp_mult : wsc[c];
      ml[c] = ref::out_multiplier(desc, a_scale, b_scale);
      // Each scale is finite, but their product (over c_scale) may not be: a sum of 0 would then
      // give NaN. (Per-group weights and dynamic A apply their scales in the kernel, in fp32.)
      if (!std::isfinite(ml[c])) {
        if (desc.c_type == QJ_U8 || desc.c_type == QJ_S8)
          return fail(QJ_ERR_INVALID_ARGUMENT,
                      "the output multiplier of column %lld overflows fp32: desc->a_scale=%g times the weight scale "
                      "%g over desc->c_scale=%g",
                      static_cast<long long>(c), a_scale, b_scale, static_cast<double>(desc.c_scale));
        return fail(QJ_ERR_INVALID_ARGUMENT,
                    "the output multiplier of column %lld overflows fp32: desc->a_scale=%g times the weight scale %g",
                    static_cast<long long>(c), a_scale, b_scale);
      }
      bi[c] = ref::out_bias(desc, c);
    }
    cg::EpilogueConsts& k = p->consts;
    k.c_zp = desc.c_zero_point;
    k.q_lo = desc.c_type == QJ_U8 ? 0 : -128;
    k.q_hi = desc.c_type == QJ_U8 ? 255 : 127;
    if (desc.activation == QJ_ACT_RELU && desc.c_zero_point > k.q_lo) k.q_lo = desc.c_zero_point;
    // The saturation bounds shifted by the zero point, as floats (exact: |value| <= 510): the
    // kernel clamps before rounding, so round(clamp(y)) + zp needs no integer clamp afterwards.
    k.f_lo = static_cast<float>(k.q_lo - k.c_zp);
    k.f_hi = static_cast<float>(k.q_hi - k.c_zp);
    // The packed row store's int16 constants (both halves of a dword: embedded broadcasts).
    k.c_zp_w = static_cast<int32_t>((static_cast<uint32_t>(k.c_zp) & 0xffffu) * 0x10001u);
    k.q_lo_w = static_cast<int32_t>((static_cast<uint32_t>(k.q_lo) & 0xffffu) * 0x10001u);
    k.beta = desc.beta;
    k.zero = 0.0f;
    const int64_t n_tail = n % w->nr;
    for (int l = 0; l < 16; ++l) k.tail_mask[l] = l < n_tail ? -1 : 0;

    KernelKey key = KernelKey::zeroed();
    key.op = KernelOp::kGemmInt;
    key.isa = static_cast<uint8_t>(p->isa);
    key.a_type = decoded ? QJ_S8 : (w->kg == 4 ? QJ_U8 : QJ_S8);
    key.b_type = w->dtype;
    key.c_type = desc.c_type;
    key.nr = static_cast<uint16_t>(w->nr);
    key.granularity = static_cast<uint8_t>(w->gran == QJ_GRAN_GROUP ? QJ_GRAN_GROUP : QJ_GRAN_CHANNEL);
    key.has_bias = desc.bias != nullptr;
    key.activation = desc.activation;
    key.has_b_zp = decoded ? w->zp_vec : !w->zero_points.empty();
    key.has_row_scale = dynamic && !group_a;
    key.has_beta = desc.beta != 0.0f;
    key.n_tail = static_cast<uint8_t>(n_tail);
    // The shorter u8 / s8 output stage when no input can take |y| to 2^30 (codegen/epilogue.h):
    // |sum of (a - za)(b - zb)| <= K * 255 * bmax, times the largest group scale (grouped) and the
    // column's multiplier, plus its bias. bmax bounds |b - zb|: 255 for s8; 1024 for the decoded
    // types' integer forms (4-bit codes with zero points; MX / BDR elements up to 448, E3M2).
    // Not with dynamic A (its scale comes with the data).
    if ((desc.c_type == QJ_U8 || desc.c_type == QJ_S8) && !key.has_row_scale && !group_a) {
      double smax = w->gran == QJ_GRAN_GROUP ? 0.0 : 1.0;
      if (w->gran == QJ_GRAN_GROUP)
        for (int64_t g = 0; g < groups; ++g)
          for (int64_t c = 0; c < n; ++c) {
            const double sc = std::fabs(static_cast<double>(wsc[g * n + c]));
            smax = std::isfinite(sc) ? std::max(smax, sc) : HUGE_VAL;
          }
      double ymax = 0.0;
      for (int64_t c = 0; c < n; ++c)
        ymax = std::max(ymax, static_cast<double>(w->k) * 255.0 * (decoded ? 1024.0 : 255.0) * smax *
                                      std::fabs(static_cast<double>(ml[c])) +
                                  std::fabs(static_cast<double>(bi[c])));
      if (ymax < 1073741824.0) key.epilogue = cg::kEpiBoundedY;  // false for inf / NaN
    }
    // group_size stays 0: the group length is a run-time loop count, so one kernel serves every G.
    // u8 A on the VNNI path needs no packing when no row sums are needed: the kernel reads the
    // rows in place, K bytes apart (key.param[0]). Only while a tile of rows stays in L1 across
    // the panels; longer rows are packed into K-group-major tiles. When K is not whole quads the
    // last quad of a row reaches into the next row, against B's zero padding (gemm_run copies
    // the tile that holds A's last row). 16x128x1567: 0.85 of the peak packed, 0.975 in place.
    p->direct_a = !decoded && p->blk.kc == 0 && desc.a_type == QJ_U8 && w->kg == 4 &&
                  w->zero_points.empty() && static_cast<int64_t>(p->blk.mr) * w->k <= 16384;
    if (p->direct_a) key.param[0] = static_cast<uint32_t>(w->k);
    // MX: without 0x00 / 0xFF scale bytes (2^-127 and NaN) the kernels decode 2^(b - 127) with
    // one shift (key flags bit 6).
    // (OCP int8 MX layouts only: the int16 types keep the full E8M0 decode.)
    const bool mx_plain_scales = w->is_mx() && !w->is_mx16() && mx_scales_plain(*w);
    qj_cache_stats_t before;
    cache_stats(&before);
    // Few rows: two accumulator sets over alternate K groups hide the vpdpbusd latency.
    auto s8_flags = [&](int r) -> uint8_t { return (r <= 2 && w->gran != QJ_GRAN_GROUP) ? 1 : 0; };
    std::vector<KernelKey> keys;  // of p->kernels
    for (int r = 1; r <= p->blk.mr; ++r) {
      key.mr = static_cast<uint8_t>(r);
      key.flags = s8_flags(r);
      if (decoded) {
        // Dual sets while fewer than 4 accumulators would chain the vpdpbusd latency (VNNI).
        const int nrv = w->nr / (p->isa >= QJ_ISA_AVX512 ? 16 : 8);
        key.flags = (r * nrv < 4 && p->isa >= QJ_ISA_AVX512_VNNI) ? 1 : 0;
        // ... and then the high nibbles need no shift when 16 * a group's sum stays below 2^31:
        // |sum| <= (gk / 2) * 15 * 128.
        if ((key.flags & 1) && w->is_int4() && (w->k / groups) * 15 * 128 * 8 < 2147483647LL) key.flags |= 8;
        if (p->za != 0) key.flags |= 2;
        if (!w->zp_vec && z0 != 0) key.flags |= 4;
        if (group_a) key.flags |= 16;
        if (w->is_mx() && has_vbmi()) key.flags |= 32;
        if (w->is_mx() && mx_plain_scales) key.flags |= 64;
        if (a_split) key.flags |= 128;
        key.param[3] = a_pairs && !w->is_mx16() ? 1 : 0;
        key.param[5] = static_cast<uint32_t>(decoded_prefetch_bytes(r, *w, p->isa));
        key.param[1] = static_cast<uint32_t>(decoded_gemv_form(r, *w, p->isa, (key.flags & 8) != 0));
      } else {
        key.param[5] = static_cast<uint32_t>(s8_prefetch_bytes(r, w->panel_bytes() * w->n_panels));
      }
      KernelRef ref;
      qj_status st = acquire_kernel(key, gemm_int_family(), &ref);
      if (st != QJ_OK) {
        QJ_LOG(1, "gemm: JIT declined (%s); falling back to the scalar reference", last_error());
        p->kernels.clear();
        break;
      }
      p->gen_us += ref.gen_us();
      p->kernels.push_back(std::move(ref));
      keys.push_back(key);
    }
    // Dense E2M3: the same kernels for byte panels (GemmPlan::kernels_b8), all or none. (Not for
    // the 6-bit int16 types E3M2 / MX6: their dense kernels, one byte permute and one shift per
    // 32 codes, measured as fast as byte-panel kernels plus the unpack at M = 32..256, 4096 x
    // 4096: E3M2 188-192 against 180-191 GOPS, MX6 170-175 against 164-175.)
    for (size_t r = 0; decoded && w->fp6_dense() && !w->is_mx16() && has_vbmi() && r < p->kernels.size(); ++r) {
      KernelKey kb = keys[r];
      kb.param[4] = 1;
      KernelRef rb;
      if (acquire_kernel(kb, gemm_int_family(), &rb) != QJ_OK) {
        QJ_LOG(1, "gemm: JIT declined the E2M3 byte-panel kernels (%s); every block unpacks in the kernel",
               last_error());
        p->kernels_b8.clear();
        break;
      }
      p->gen_us += rb.gen_us();
      p->kernels_b8.push_back(std::move(rb));
    }
    const int forced_form = g_int4_gemv_form.load(std::memory_order_relaxed);
    // (MXINT8's nibble split leaves no registers for a second column vector.)
    const bool pair_type = w->is_int4() || w->dtype == QJ_MXFP4_E2M1 || w->dtype == QJ_MXFP6_E2M3;
    if (decoded && !p->kernels.empty() && p->isa == QJ_ISA_AVX2 && pair_type && w->n_panels >= 2 &&
        (forced_form < 0 || forced_form == 3)) {
      acquire_pair_form(keys[0], p.get());
    }
    key.param[5] = 0;  // (the K-blocked, narrow and tall kernels prefetch nothing)
    if (!decoded && s8_stream_prefetch(w->panel_bytes() * w->n_panels)) p->kblock_min_tiles = kKBlockMinTilesStreamed;
    if (!p->kernels.empty() && !decoded && p->blk.kc > 0) {
      // K blocks: the stages before the last store raw sums (no output stage in their keys).
      for (uint32_t stage = 1; stage <= 3 && !p->kernels.empty(); ++stage) {
        KernelKey kk = key;
        kk.param[2] = stage;
        if (stage < 3) {
          kk.c_type = 0;
          kk.has_bias = kk.activation = kk.has_b_zp = kk.has_row_scale = kk.has_beta = kk.n_tail = 0;
          kk.epilogue = 0;
        }
        for (int r = 1; r <= p->blk.mr; ++r) {
          KernelRef ref;
          // Calls use K blocks when their largest tile has kc_min_rows rows; the others have at
          // most one row fewer (gemm_run spreads rows evenly).
          if (r + 1 < p->blk.kc_min_rows) {
            p->kblock_kernels[stage - 1].push_back(std::move(ref));
            continue;
          }
          kk.mr = static_cast<uint8_t>(r);
          kk.flags = s8_flags(r);
          if (acquire_kernel(kk, gemm_int_family(), &ref) != QJ_OK) {
            QJ_LOG(1, "gemm: JIT declined (%s); falling back to the scalar reference", last_error());
            p->kernels.clear();
            for (auto& v : p->kblock_kernels) v.clear();
            break;
          }
          p->gen_us += ref.gen_us();
          p->kblock_kernels[stage - 1].push_back(std::move(ref));
        }
      }
    }
    p->jit = !p->kernels.empty();
    if (p->jit && !decoded && p->isa >= QJ_ISA_AVX512_VNNI && desc.a_type == QJ_U8 &&
        (n == 4 || n == 8) && w->k >= 8 && w->layout == PackLayout::kQuad8 &&
        w->gran != QJ_GRAN_GROUP && w->zero_points.empty() && desc.beta == 0.0f &&
        (desc.c_type == QJ_U8 || desc.c_type == QJ_S8 || desc.c_type == QJ_F32 || desc.c_type == QJ_S32))
      QJ_TRY(plan_narrow(key, p.get()));
    else if (p->jit && !decoded && p->isa >= QJ_ISA_AVX512_VNNI && desc.a_type == QJ_U8 &&
             (n <= 16 || n * c_bytes(desc.c_type) < kTallMaxRowBytes) &&
             w->k % 4 == 0 && w->k / 4 <= kTallMaxKGroups && w->layout == PackLayout::kQuad8 && w->nr % 16 == 0 &&
             w->gran != QJ_GRAN_GROUP && w->zero_points.empty())
      plan_tall(key, p.get());
    else if (p->jit && !decoded && p->isa >= QJ_ISA_AVX512_VNNI && desc.a_type == QJ_U8 &&
             (desc.c_type == QJ_U8 || desc.c_type == QJ_S8 || desc.c_type == QJ_F32 || desc.c_type == QJ_S32 ||
              desc.c_type == QJ_BF16) &&
             w->k % 4 == 0 && w->k <= kBanksMaxK &&
             w->layout == PackLayout::kQuad8 && w->nr == 64 && w->n % 64 == 0 &&
             w->gran != QJ_GRAN_GROUP && w->zero_points.empty() && desc.beta == 0.0f &&
             n * c_bytes(desc.c_type) < kTallMaxRowBytes)
      plan_banks(key, p.get());
    const bool gemv_in_place = desc.a_type == QJ_U8 && w->kg == 4 && w->k == w->kp;
    const bool gemv_widen = (desc.a_type == QJ_U8 || desc.a_type == QJ_S8) && w->kg == 2;
    if (p->jit && !decoded && (gemv_in_place || gemv_widen) && w->zero_points.empty()) {
      GemmIntArgs& g = p->gemv_args;
      g.consts = p->consts;
      g.b = w->packed.data<uint8_t>();
      g.k_groups = w->k_groups() / groups;
      g.groups = groups;
      g.n_panels = w->n_panels;
      g.last_is_tail = n_tail != 0 ? 1 : 0;
      g.col_corr = p->col_corr.data<int32_t>();
      g.b_zp = p->b_zp.data<int32_t>();
      g.group_scale = p->group_scale.data<float>();
      g.col_stride = p->n_pad * 4;
      g.col_mult = p->col_mult.data<float>();
      g.col_bias = p->col_bias.data<float>();
      p->gemv_direct = true;
      p->gemv_widen_a = gemv_widen;
      if (gemv_widen && gemm_int_s8_bytes(p->isa) && w->n_panels >= 2 && groups == 1) {
        acquire_pair_form(keys[0], p.get());  // the byte pairs' one-row pair form
      }
      const size_t bytes = w->n_panels * w->panel_bytes();
      if (4 * bytes >= 3 * l2_cache_bytes() && bytes <= 4 * l2_cache_bytes())
        p->gemv_rotate_panels = std::max<int64_t>(1, static_cast<int64_t>(l2_cache_bytes() / 2 / w->panel_bytes()));
    }
  } else {
    QJ_LOG(1, "gemm: isa cap is scalar: using the scalar reference");
  }
  if (!p->jit) {
    cache_note_fallback();
    ref::IntWeights& r = p->ref_w;
    r.k = w->k;
    r.n = n;
    r.gran = w->gran;
    r.group_size = w->group_size;
    r.scales = w->scales;
    r.zero_points = w->zero_points;
    if (w->is_mx()) {  // the block scales with the element type's shift: 2^(b - 127 - shift)
      r.scales.resize(groups * n);
      for (int64_t g = 0; g < groups; ++g)
        for (int64_t c = 0; c < n; ++c)
          r.scales[g * n + c] = std::ldexp(w->scale(g, c), -mx_int_shift(w->dtype));
    }
    r.q.resize(w->k * n);
    for (int64_t kk = 0; kk < w->k; ++kk)
      for (int64_t c = 0; c < n; ++c) r.q[kk * n + c] = w->q(kk, c);
  }
  clear_error();
  *out = std::move(p);
  return QJ_OK;
}

namespace {

qj_status check_float_desc(const qj_gemm_desc& d, qj_dtype wt) {
  QJ_TRY(check_desc_enums(d));
  if (d.a_type != QJ_F32 && d.a_type != QJ_BF16 && !mx_act_type(d.a_type))  // MX: decoded to fp32
    return fail(QJ_ERR_INVALID_ARGUMENT, "desc->a_type=%d (%s): %s weights need QJ_F32 or QJ_BF16 A",
                (int)d.a_type, qj_dtype_name(d.a_type), qj_dtype_name(wt));
  if (d.c_type != QJ_F32 && d.c_type != QJ_BF16)
    return fail(QJ_ERR_INVALID_ARGUMENT, "desc->c_type=%d (%s): %s weights give QJ_F32 or QJ_BF16 C",
                (int)d.c_type, qj_dtype_name(d.c_type), qj_dtype_name(wt));
  if (d.activation != QJ_ACT_NONE && d.activation != QJ_ACT_RELU)
    return fail(QJ_ERR_INVALID_ARGUMENT, "desc->activation=%d is not a qj_activation", (int)d.activation);
  if (!std::isfinite(d.beta))
    return fail(QJ_ERR_INVALID_ARGUMENT, "desc->beta=%g must be finite", (double)d.beta);
  if (d.beta != 0.0f && d.c_type != QJ_F32)
    return fail(QJ_ERR_INVALID_ARGUMENT, "desc->beta=%g needs c_type QJ_F32 (got %s)", (double)d.beta,
                qj_dtype_name(d.c_type));
  return QJ_OK;
}

// How far ahead the f16 / bf16 kernel of `rows` rows prefetches its weight stream (key.param[1];
// 0: none).
//  - Zen 4: 3 KiB (cg::kWeightPrefetchBytes) for rows > the lines of a K unit (f16 1, bf16 2 at
//    nr = 2 vectors). Cold f16 512 x 512 (3 rounds, us): M = 4 31-43 -> 27-30, M = 8 55-75 ->
//    43-45, M = 16 85-90 -> 78-81, M = 64 310-330 -> 300; warm unchanged (2048 to 4096 bytes ahead
//    measured alike). Few rows keep enough lines in flight by themselves, and their load ports
//    are busier: warm 512 x 512 lost 8% at bf16 M = 1 and 4-15% at bf16 M = 2 (two lines per 4
//    FMAs), f16 M = 2 nothing.
//  - Zen 5, weights of at least twice L2: 16 KiB for every row count (2026-12-01 ~15:50 UTC, warm
//    GFLOPS, two runs, the Zen 4 rule -> 16 KiB): x 4096 x 4096 (32 MB) f16 M = 1 40-41 -> 57-66,
//    M = 2 73-74 -> 124-131, M = 8 188-189 -> 242-250, bf16 M = 1 / 2 46-48 / 73-74 -> 50-59 /
//    122; 1 x 4096 x 1024 (8 MB) f16 93 -> 106, bf16 95-96 -> 105-109; 1 x 2048 x 1024 (4 MB) f16
//    95-99 -> 105-106, bf16 97 -> 113-114; 1 x 1024 x 1024 (2 MB) 101-102 -> 103-105; M = 2 x 2048
//    x 1024 f16 -2%, bf16 +3%; M = 64 / 256 x 4096 x 4096 within noise. Smaller weights keep the
//    Zen 4 rule: at 512 x 512 (0.5 MB, in L2; FBGEMM's FP16 shapes; three runs) 16 KiB lost f16
//    M = 2 / 3 8% / 4% (197-202 -> 182-184, 235-239 -> 228) and a prefetch at M = 1 8%.
//  - Zen 5, f16 at one row too (2026-12-02 ~08:25-08:45 UTC): from DRAM (--cold, 1 x 512 x 512,
//    us, medians of the bench's cold calls): four rounds alternating with FBGEMM's
//    cblas_gemm_compute, none 20.6 / 27.7 / 25.4 / 25.2 -> 3 KiB 18.9 / 19.6 / 20.7 / 22.3
//    (FBGEMM 20.8 / 19.9 / 22.7 / 22.6); later twelve rounds alternating the two rules, medians
//    21.05 -> 20.45 (0.97; the DRAM latency of this shared machine moves by more than that
//    between minutes); warm in one process, new / old time: 1 x 512 x 512 0.96-1.01 (four
//    runs), 1 x 512 x 1024 0.98, 1 x 768 x 768 1.00, 1 x 256 x 256 1.02, 1 x 128 x 512 1.01.
//    (bf16 at one row still lost there: 1 x 512 x 512 1.07, 1 x 512 x 1024 1.03; at two rows
//    1.00-1.01.)
static int float_prefetch_bytes(const PackedWeights& w, int rows) {
  const int unit_lines = (gemm_float_unit_bytes(w.dtype, static_cast<int>(w.nr)) + 63) / 64;
  if (far_weight_prefetch(w.panel_bytes() * w.n_panels)) return kFarWeightPrefetchBytes;
  if (amd_family() >= 0x1a && w.dtype == QJ_F16) return cg::kWeightPrefetchBytes;
  return rows > unit_lines ? cg::kWeightPrefetchBytes : 0;
}

qj_status float_plan_create(const qj_gemm_desc& desc, std::shared_ptr<const PackedWeights> w,
                            std::unique_ptr<GemmPlan>* out) {
  QJ_TRY(check_float_desc(desc, w->dtype));
  auto p = std::make_unique<GemmPlan>();
  p->kind = GemmKind::kFloat;
  QJ_TRY(plan_common(desc, &w, p.get()));
  const int64_t n = w->n;
  // MX blocks with scales per block: MXFP8, and under MXFP8 A the integer-form MX / BDR weights
  // (all read in place).
  const bool mx_blocks = w->is_mx_fp8() || w->is_mx();
  if (p->isa >= QJ_ISA_AVX2) {
    KernelKey key = KernelKey::zeroed();
    key.op = KernelOp::kGemmFloat;
    key.isa = static_cast<uint8_t>(p->isa);
    key.a_type = QJ_F32;
    key.b_type = w->dtype;
    key.c_type = desc.c_type;
    key.nr = static_cast<uint16_t>(w->nr);
    key.has_bias = desc.bias != nullptr;
    key.activation = desc.activation;
    key.has_beta = desc.beta != 0.0f;
    const int64_t n_tail = n % w->nr;
    key.n_tail = static_cast<uint8_t>(n_tail);
    key.param[0] = 1;
    // fp32 A is read in place when every K unit is whole (no padding to read): no packing pass.
    // Only while a whole tile of A rows stays in L1 across the panels (mr * K * 4 <= 32 KiB):
    // beyond that its rows are as many L2 streams as the tile has rows, and the FMA pipes starve
    // (measured: 64x512xK, K = 1024: 67% of the FMA peak direct, 92% packed).
    key.flags = float_direct_a(desc, *w) ? 1 : 0;
    // Scaled weight vectors hold decoded value * 2^(b - 127), exact while it stays in fp32: every
    // decoded form is below 2^16 (E5M2's 57344 the largest), so up to scale byte 238. Weights with
    // a larger block scale take the per-block accumulators, which scale the block's sum instead
    // (the header's "a weight beyond fp32 on its own still takes part exactly").
    const bool blockacc_needed = mx_blocks && w->max_mx_scale_byte() > 238;
    if (mx_blocks && (blockacc_needed || fp8_block_accumulators(p->isa, 14))) key.flags |= 2;
    // E2M3 decoded by vpermb; dense E3M2 / MX6 unpacked by vpermb (else vpermd + vpshufb)
    if ((w->dtype == QJ_MXFP6_E2M3 || w->fp6_dense()) && has_vbmi()) key.flags |= 4;
    // Each A element broadcast into a register (flags bit 3) on Zen 5 (codegen/gemm_float.cpp
    // has the measurements), elsewhere embedded broadcasts but for one-row bf16 tiles. Zen 4
    // (2026-12-02, EPYC family 0x19, 512 x 512 warm, fraction of the FMA peak, three alternating
    // runs, register -> embedded): f16 M = 1 0.41-0.42 -> 0.49-0.51 (one run 0.34), M = 2
    // 0.60-0.61 -> 0.77-0.78 (the same run 0.50), M = 4 0.73-0.75 -> 0.94-0.95, M = 8-119
    // 0.83-0.91 -> 0.93-1.00, 64 x 4096 x 4096 0.61-0.86 -> 0.90-0.96; MXFP8 E4M3 / E5M2 M = 8
    // 0.65-0.66 / 0.69-0.71 -> 0.81-0.82 / 0.88-0.90, M = 64 0.70 / 0.52-0.74 -> 0.91-0.92 /
    // 0.93-0.94 (two runs); bf16 M = 8 / 64 0.92-0.94 / 0.94-0.96 -> 0.98 / 0.98, but M = 1
    // 0.59-0.63 -> 0.51-0.54 (five runs; M = 2 0.82 -> 0.76-0.82).
    auto register_bcast = [&](int r) {
      return register_broadcast(amd_family() >= 0x1a || (w->dtype == QJ_BF16 && r == 1));
    };
    if (register_bcast(14)) key.flags |= 8;
    const int mr = std::max(1, gemm_float_max_mr(key, 14));
    p->blk = float_blocking(*w, mr);
    p->n_pad = w->n_panels * w->nr;
    if (!fill_buffer(p->col_mult, p->n_pad * 4) || !fill_buffer(p->col_bias, p->n_pad * 4))
      return fail(QJ_ERR_OUT_OF_MEMORY, "cannot allocate the plan's column vectors");
    float* ml = p->col_mult.data<float>();
    float* bi = p->col_bias.data<float>();
    // Float weights have no scale: y = fma(acc, 1, bias) = acc + bias. MXFP8 E4M3 is decoded as
    // value * 2^-8, MXFP6 E3M2 as value * 2^-12 (codegen/gemm_float.cpp): the exact 2^8 / 2^12
    // is applied here. (Dense E3M2 panels, VNNI tier, are decoded to 16 v, the 2^-4 folded into
    // the block scales as the other integer forms'.)
    const float mult = w->dtype == QJ_MXFP8_E4M3                         ? 256.0f
                       : w->dtype == QJ_MXFP6_E3M2 && !w->fp6_dense() ? 4096.0f
                                                                       : 1.0f;
    for (int64_t c = 0; c < n; ++c) {
      ml[c] = mult;
      bi[c] = desc.bias ? p->bias[c] : 0.0f;
    }
    cg::EpilogueConsts& k = p->consts;
    k.f_lo = -16777216.0f;
    k.f_hi = 16777216.0f;
    k.beta = desc.beta;
    k.zero = 0.0f;
    for (int l = 0; l < 16; ++l) k.tail_mask[l] = l < n_tail ? -1 : 0;
    const int lanes = p->isa >= QJ_ISA_AVX512 ? 16 : 8;
    const int nrv = w->nr / lanes;
    for (int r = 1; r <= mr; ++r) {
      // Independent FMA chains: latency 4 x throughput 1 (zmm) or 2 (ymm) per cycle needs 4-8;
      // K-interleaved sets supply them when the tile has few accumulators.
      int sets = 1;
      while (sets < 4 && r * nrv * sets < 8) sets *= 2;
      key.mr = static_cast<uint8_t>(r);
      key.param[0] = static_cast<uint32_t>(sets);
      if (!mx_blocks) key.param[1] = static_cast<uint32_t>(float_prefetch_bytes(*w, r));
      key.flags = static_cast<uint8_t>((key.flags & ~8) | (register_bcast(r) ? 8 : 0));
      if (mx_blocks)
        key.flags = (key.flags & 13) | (blockacc_needed || fp8_block_accumulators(p->isa, r) ? 2 : 0);
      while (sets > 1 && gemm_float_max_mr(key, r) < r) key.param[0] = sets /= 2;
      KernelRef ref;
      qj_status st = acquire_kernel(key, gemm_float_family(), &ref);
      if (st != QJ_OK) {
        QJ_LOG(1, "gemm: JIT declined (%s); falling back to the scalar reference", last_error());
        p->kernels.clear();
        p->ksets.clear();
        break;
      }
      p->gen_us += ref.gen_us();
      p->kernels.push_back(std::move(ref));
      p->ksets.push_back(sets);
    }
    p->jit = !p->kernels.empty();
  } else {
    QJ_LOG(1, "gemm: isa cap is scalar: using the scalar reference");
  }
  if (!p->jit) {
    cache_note_fallback();
    ref::FloatWeights& r = p->ref_fw;
    r.k = w->k;
    r.n = n;
    r.w.resize(w->k * n);
    if (mx_blocks) {  // MX blocks: element values (integer forms) and the block factors
      const bool fp8 = mx_fp8_weights_type(w->dtype);
      const int shift = fp8 ? 0 : mx_int_shift(w->dtype);
      const mx::ElemFormat* f = fp8 ? mx::format(w->dtype) : nullptr;
      r.block = w->group_size;
      r.block_scale = w->all_scales();
      for (float& v : r.block_scale) v = mx::mul_pow2(v, -shift);  // NaN stays NaN
      for (int64_t kk = 0; kk < w->k; ++kk)
        for (int64_t c = 0; c < n; ++c)
          r.w[kk * n + c] = fp8 ? mx::decode_elem(*f, w->mx_code(kk, c)) : static_cast<float>(w->q(kk, c));
    } else {
      for (int64_t kk = 0; kk < w->k; ++kk)
        for (int64_t c = 0; c < n; ++c) r.w[kk * n + c] = w->value(kk, c);
    }
  }
  clear_error();
  *out = std::move(p);
  return QJ_OK;
}

}  // namespace

// Everything one slice of a run allocates. A run sizes all of it before it writes any output, so
// that running out of memory leaves C untouched; gemm_run_parallel sizes one per slice before any
// slice starts.
struct GemmScratch {
  AlignedBuffer a_pack;  // packed A of a row block (dense E2M3 with many rows: up to kFp6BytesMaxA)
  AlignedBuffer acc;  // K-blocked plans: int32 sums of the tiles of one MC x NC block
  std::vector<int32_t> row_sum;
  std::vector<float> amax, inv, pre, row_scale, rg_scale;
  std::vector<float> amax_col;  // group-quantized A: one group's amax over a tile's rows
  AlignedBuffer b8;   // dense E2M3: one N block's panels with one byte per code (GemmPlan::kernels_b8)
  PackAScratch pack;  // the A packing functions' rows
};

namespace {

// The calling thread's scratch, for runs of one slice (qj_gemm_run).
GemmScratch& thread_scratch() {
  static thread_local GemmScratch s;
  return s;
}

// Grows buf to at least bytes; false when that fails.
bool grow_buffer(AlignedBuffer& buf, size_t bytes) { return buf.size() >= bytes || buf.allocate(bytes, false); }

// The runs below compute the slice {tid, nth}. With reserve_only they size s for it and return:
// everything a slice allocates is allocated before its first write to C.
qj_status float_run(const GemmPlan& p, int64_t m, const void* a, int64_t lda, void* c, int64_t ldc,
                    int32_t tid, int32_t nth, GemmScratch& s, bool reserve_only) {
  const PackedWeights& w = *p.w;
  const qj_gemm_desc& d = p.desc;
  const bool mx_a = mx_act_type(d.a_type);  // MX A: dequantized exactly to fp32 while packed
  if (!p.jit) {
    if (tid != 0 || reserve_only) return QJ_OK;  // the reference computes the whole problem on thread 0
    if (mx_a) {
      std::vector<float> af(m * w.k);
      mx_act_decode_rows_f32(d.a_type, *static_cast<const qj_mx_matrix*>(a), lda, m, w.k, af.data(), w.k);
      qj_gemm_desc df = d;
      df.a_type = QJ_F32;
      ref::gemm_float(df, p.ref_fw, m, af.data(), w.k, c, ldc);
      return QJ_OK;
    }
    ref::gemm_float(d, p.ref_fw, m, a, lda, c, ldc);
    return QJ_OK;
  }
  const GemmBlocking& b = p.blk;
  const int mr = b.mr;
  // Balanced tile heights (16 rows: 8 + 8, not 14 + 2): every kernel of 4 rows or more keeps the
  // FMA pipes full, a 2-row remainder does not.
  const int64_t m_tiles = (m + mr - 1) / mr;
  const int64_t h = m / m_tiles, extra = m % m_tiles;
  auto tile_row0 = [&](int64_t t) { return t * h + std::min(t, extra); };
  auto tile_rows = [&](int64_t t) { return static_cast<int>(h + (t < extra ? 1 : 0)); };
  const int64_t n_panels = w.n_panels;
  Range mt{0, m_tiles}, np{0, n_panels};
  split_tiles(m_tiles, n_panels, tid, nth, &mt, &np);
  if (mt.begin >= mt.end || np.begin >= np.end) return QJ_OK;

  const bool direct = float_direct_a(d, w);  // as the plan keyed the kernels
  const size_t tile_bytes = static_cast<size_t>(w.kp) * mr * 4;
  // (a row block of MC rows, or the slice's rows if fewer: a run over many threads sizes one
  // block per slice before any starts)
  const int64_t mc_tiles = std::clamp<int64_t>(b.mc / mr, 1, mt.end - mt.begin);
  if (!direct && !grow_buffer(s.a_pack, tile_bytes * mc_tiles))
    return fail(QJ_ERR_OUT_OF_MEMORY, "cannot allocate %zu bytes to pack A", tile_bytes * mc_tiles);
  if (mx_a) reserve_pack_a_float_tile_mx(tile_rows(mt.begin), w.k, s.pack);  // the slice's tallest tile
  if (reserve_only) return QJ_OK;
  const int out_bytes = d.c_type == QJ_BF16 ? 2 : 4;
  const size_t a_esz = d.a_type == QJ_BF16 ? 2 : 4;
  const int64_t n_tail = w.n % w.nr;
  const int64_t units = w.layout == PackLayout::kBf16Pair ? w.kp / 2 : w.kp;
  const bool fp8 = w.is_mx_fp8() || w.is_mx();  // the kernel counts blocks (32 k; BDR 16)

  GemmFloatArgs args;
  args.consts = p.consts;
  args.ldc = ldc * out_bytes;
  args.row_scale = nullptr;
  args.lda_bytes = lda * 4;
  for (int64_t t0 = mt.begin; t0 < mt.end; t0 += mc_tiles) {
    const int64_t t1 = std::min(mt.end, t0 + mc_tiles);
    for (int64_t t = t0; t < t1 && !direct; ++t) {
      const int64_t row0 = tile_row0(t);
      const int rows = tile_rows(t);
      if (mx_a) {
        pack_a_float_tile_mx(d.a_type, *static_cast<const qj_mx_matrix*>(a), lda, row0, rows, w.k, w.kp,
                             reinterpret_cast<float*>(s.a_pack.data<uint8_t>() + (t - t0) * tile_bytes), s.pack);
        continue;
      }
      pack_a_float_tile(d.a_type, static_cast<const uint8_t*>(a) + row0 * lda * a_esz, lda, rows, rows,
                        w.k, w.kp, reinterpret_cast<float*>(s.a_pack.data<uint8_t>() + (t - t0) * tile_bytes));
    }
    for (int64_t p0 = np.begin; p0 < np.end; p0 += b.nc_panels) {
      const int64_t p1 = std::min(np.end, p0 + b.nc_panels);
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t row0 = tile_row0(t);
        const int rows = tile_rows(t);
        const int sets = p.ksets[rows - 1];
        args.a = direct ? static_cast<const float*>(a) + row0 * lda
                        : reinterpret_cast<const float*>(s.a_pack.data<uint8_t>() + (t - t0) * tile_bytes);
        args.b = w.packed.data<uint8_t>() + p0 * w.panel_bytes();
        args.c = static_cast<uint8_t*>(c) + (row0 * ldc + p0 * w.nr) * out_bytes;
        args.k_main = fp8 ? units / w.group_size : units / sets;
        args.k_rem = fp8 ? 0 : units % sets;
        args.n_panels = p1 - p0;
        args.last_is_tail = (p1 == n_panels && n_tail != 0) ? 1 : 0;
        args.col_mult = p.col_mult.data<float>() + p0 * w.nr;
        args.col_bias = p.col_bias.data<float>() + p0 * w.nr;
        p.kernels[rows - 1].fn<GemmFloatKernel>()(&args);
      }
    }
  }
  return QJ_OK;
}

// A copy of a GemmIntArgs (280 bytes) in 16-byte moves. As a plain assignment or a zeroing
// `{}`, GCC copies or clears it with rep movsq / rep stosq, whose start-up took 12 ns of a
// one-row call's ~40 ns outside its kernel on the Zen 4 (perf, 1 x 128 x 512: two thirds of
// int_run's samples).
static inline void copy_args(GemmIntArgs* dst, const GemmIntArgs& src) {
  auto* d = reinterpret_cast<unsigned char*>(dst);
  const auto* s = reinterpret_cast<const unsigned char*>(&src);
  constexpr size_t n = sizeof(GemmIntArgs), n16 = n / 16 * 16;
#pragma GCC unroll 32
  for (size_t i = 0; i < n16; i += 16)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i), _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i)));
  if constexpr (n > n16) std::memcpy(d + n16, s + n16, n - n16);
}
// The arguments `GemmIntArgs{}` makes (a copy of that constant, for the reason above).
static inline void clear_args(GemmIntArgs* dst) {
  static const GemmIntArgs kZero{};
  copy_args(dst, kZero);
}

// The narrow-N or tall kernels on rows [0, m4) (whole banks of narrow_mr rows; this slice's
// banks).
void run_narrow(const GemmPlan& p, int64_t m4, const void* a, int64_t lda, void* c, int64_t ldc, int out_bytes,
                int32_t tid, int32_t nth) {
  const PackedWeights& w = *p.w;
  const int64_t iters = m4 / p.narrow_mr;
  const Range r = nth > 1 ? split_range(iters, tid, nth) : Range{0, iters};
  if (r.begin >= r.end) return;
  GemmIntArgs args;
  clear_args(&args);
  args.consts = p.consts;
  args.a = static_cast<const uint8_t*>(a) + r.begin * p.narrow_mr * lda;
  args.lda = lda;
  args.c = static_cast<uint8_t*>(c) + r.begin * p.narrow_mr * ldc * out_bytes;
  args.ldc = ldc * out_bytes;
  args.n_panels = r.end - r.begin;
  if (p.narrow_tall) {
    // Blocks of tall_block banks; within a block, each tall_cols columns of B in turn. With one
    // column slice (N <= tall_cols) no A block is read twice: the slice's banks run in one call,
    // so the software pipeline fills and drains once per slice of rows instead of once per
    // block (2026-12-02, u8 C, new / old time in one process, geometric mean of the two orders
    // of the A/B: 156800 x 16 x 36 0.98, 156800 x 12 x 36 0.98, 20000 x 16 x 36 0.96, 20000 x 16
    // x 64 0.99; the banks kernel at N = 64, one order: 1024 x 64 x 128 / 300 x 64 x 256 / 2000 x
    // 64 x 384 0.99).
    const int64_t tc = p.tall_cols, subs = (w.n + tc - 1) / tc, per_panel = w.nr / tc;
    const int64_t block = subs == 1 ? r.end - r.begin : p.tall_block;
    for (int64_t b0 = r.begin; b0 < r.end; b0 += block) {
      const int64_t b1 = std::min(r.end, b0 + block);
      args.a = static_cast<const uint8_t*>(a) + b0 * p.narrow_mr * lda;
      args.n_panels = b1 - b0;
      for (int64_t j = 0; j < subs; ++j) {
        args.c = static_cast<uint8_t*>(c) + (b0 * p.narrow_mr * ldc + tc * j) * out_bytes;
        args.b = w.packed.data<uint8_t>() + (j / per_panel) * w.panel_bytes() + (j % per_panel) * tc * 4;
        args.col_corr = p.col_corr.data<int32_t>() + tc * j;
        args.col_mult = p.col_mult.data<float>() + tc * j;
        args.col_bias = p.col_bias.data<float>() + tc * j;
        const KernelRef& kr = j + 1 == subs && p.narrow_tail ? p.narrow_tail : p.narrow;
        kr.fn<GemmIntKernel>()(&args);
      }
    }
  } else {
    args.b = p.narrow_b.data<uint8_t>();
    args.col_corr = p.narrow_cols.data<int32_t>();
    args.col_mult = reinterpret_cast<const float*>(args.col_corr + 16);
    args.col_bias = args.col_mult + 16;
    p.narrow.fn<GemmIntKernel>()(&args);
  }
}

// How an integer run takes A: fp32 / bf16 quantized while packed (dynamic), MX, and with scales
// per (row, K group) (group: MX, or dynamic A per group).
struct AKind {
  bool dynamic, mx, group;
  explicit AKind(const qj_gemm_desc& d)
      : dynamic(d.a_type == QJ_F32 || d.a_type == QJ_BF16),
        mx(mx_act_type(d.a_type)),
        group((dynamic && d.a_granularity == QJ_GRAN_GROUP) || mx) {}
};

// A one-row tile over `count` panels from args.b on (the last of them the tail panel if
// `last_is_tail`): whole panels in pairs by the pair form (GemmPlan::pair), each A quad broadcast
// once for two column vectors instead of one (s8 byte pairs: each A pair for four); the panel
// left over, if any, and the tail panel by the one-panel kernel. s8 (u8 A, per channel, u8 C;
// 2026-12-07 ~14:55 UTC, both plans in one process, 100 alternating rounds, median time ratio pair
// / one panel): 1 x 128 x 512 0.91-0.96, 1 x 1024 x 256 0.97, 1 x 1024 x 512 0.91, 1 x 128 x
// 2876 0.88, 1 x 800 x 8000 0.87, 1 x 2048 x 4096 0.86, 1 x 3072 x 4096 0.84, 1 x 4096 x 4096
// 0.86-1.06 (three runs), 1 x 6144 x 4096 0.86, 1 x 11008 x 4096 0.82. Decoded weights, Zen 3
// (AVX2 CPU), 2026-12-07 ~02:00-02:20 UTC, warm, S4 group 128 f32 A, both plans in one process,
// 200-300 alternating calls, median time ratio pair / one panel:
// 1 x 512 x 512 0.89, 1 x 1024 x 2048 0.87-0.89, 1 x 2048 x 2048 0.91, 1 x 4096 x 4096 0.90
// (122 -> 143 GOPS), 1 x 6144 x 4096 0.89, U4 1 x 4096 x 4096 0.88. From 16 MiB up, where the
// one-panel kernel prefetches 8 KiB ahead, the pair form prefetches 4 KiB ahead (its first stream
// a pair ahead, codegen): 1 x 8192 x 4096 0.95, 1 x 11008 x 4096 0.91-0.95, 1 x 14336 x 4096
// 0.96, 1 x 4096 x 11008 0.99-1.01, 1 x 4096 x 14336 0.87 (8 KiB: 0.96-1.07; each stream
// prefetching its own panel ahead, 8 KiB: 1.00-1.20, the next pair's second panel starting
// unfetched). MXFP4 (A per 32-block) 1 x 1024 x 2048 0.89, 1 x 4096 x 4096 0.94, 1 x 11008 x 4096
// 0.95; E2M3 0.95 / 0.97 / 0.97.
static void one_row_pairs(const GemmPlan& p, const GemmIntArgs& args, int64_t count, bool last_is_tail, int out_bytes) {
  const PackedWeights& w = *p.w;
  const int64_t pairs = (count - (last_is_tail ? 1 : 0)) / 2;
  GemmIntArgs q;
  copy_args(&q, args);
  if (pairs > 0) {
    q.n_panels = pairs;
    q.last_is_tail = 0;
    q.panel_bytes = static_cast<int64_t>(w.panel_bytes());
    p.pair.fn<GemmIntKernel>()(&q);
  }
  const int64_t done = 2 * pairs;
  if (done == count) return;
  copy_args(&q, args);
  q.b += done * static_cast<int64_t>(w.panel_bytes());
  q.c += done * w.nr * out_bytes;
  q.col_corr += done * w.nr;
  q.b_zp += done * w.nr;
  q.group_scale += done * w.nr;
  q.col_mult += done * w.nr;
  q.col_bias += done * w.nr;
  q.n_panels = count - done;
  p.kernels[0].fn<GemmIntKernel>()(&q);
}

// The ordinary kernels on rows [0, m) of a and c: row tiles packed per row block, then the
// slice's N blocks (and K blocks). For fp32 / bf16 A, s.amax holds the rows' amax (int_run).
qj_status run_tiles(const GemmPlan& p, int64_t m, const void* a, int64_t lda, void* c, int64_t ldc,
                    int32_t tid, int32_t nth, GemmScratch& s, bool reserve_only) {
  const PackedWeights& w = *p.w;
  const qj_gemm_desc& d = p.desc;
  const AKind ak(d);
  const bool dynamic = ak.dynamic, mx_a = ak.mx, group_a = ak.group;
  const int out_bytes = c_bytes(d.c_type);
  const GemmBlocking& b = p.blk;
  const int mr = b.mr;
  const int64_t m_tiles = (m + mr - 1) / mr;
  // Rows are spread evenly over the tiles (sizes differ by at most one: M = 16 with MR = 9 runs
  // 8 + 8, not 9 + 7); the split depends on M and MR only, never on the partition.
  const int64_t tile_base = m / m_tiles, tile_extra = m % m_tiles;
  auto tile_rows = [&](int64_t t, int64_t* row0) {
    *row0 = t * tile_base + std::min(t, tile_extra);
    return static_cast<int>(tile_base + (t < tile_extra ? 1 : 0));
  };
  const int64_t n_panels = w.n_panels;
  Range mt{0, m_tiles}, np{0, n_panels};
  split_tiles(m_tiles, n_panels, tid, nth, &mt, &np);
  if (mt.begin >= mt.end || np.begin >= np.end) return QJ_OK;

  const bool decoded = p.kind == GemmKind::kDecoded;
  const int64_t groups = w.groups();
  // 4-byte A groups per row: decoded weights read A as s8 quads over K padded to the step.
  // int16-pair weights (kMx16), and int8-form MX weights under E3M2 A below VNNI or MXINT8 at the
  // AVX2 tier (GemmPlan::a_pairs, quads_as_pairs), read A as s16 pairs: 4-byte groups of 2 K.
  const bool a_pairs = decoded && p.a_pairs;
  const bool a_split = decoded && split_a(d.a_type, w, p.isa);  // two s8 quads per quad of K
  const int64_t kgroups = decoded ? w.kp / (a_pairs ? 2 : 4) * (a_split ? 2 : 1) : w.k_groups();
  const size_t tile_bytes = static_cast<size_t>(kgroups) * mr * 4;
  // Dense E2M3 with byte-panel kernels: a call of enough row tiles unpacks each N block once
  // (fp6_panels_to_bytes) for a row block of up to kFp6BytesMaxA bytes of packed A, instead of
  // every tile's kernel unpacking every vector (two ops per 64 codes against mr multiplies each).
  const bool b8_any = !p.kernels_b8.empty() && mt.end - mt.begin >= kFp6BytesMinTiles;
  const int64_t mc_tiles = b8_any ? std::max<int64_t>(1, std::min<int64_t>(mt.end - mt.begin,
                                                                           kFp6BytesMaxA / static_cast<int64_t>(tile_bytes)))
                                  : std::clamp<int64_t>(b.mc / mr, 1, mt.end - mt.begin);
  if (!grow_buffer(s.a_pack, tile_bytes * mc_tiles))
    return fail(QJ_ERR_OUT_OF_MEMORY, "cannot allocate %zu bytes to pack A", tile_bytes * mc_tiles);
  // K blocks (s8 plans whose tiles of A outgrow the L1): sums of the MC x NC block in scratch.
  // (the plan holds K-block kernels only for s8 weights with b.kc > 0)
  const bool kblocked = gemm_call_kblocked(p, mt.end - mt.begin, static_cast<int>(tile_base + (tile_extra ? 1 : 0)));
  const size_t acc_tile_bytes = static_cast<size_t>(b.nc_panels) * mr * w.nr * 4;
  if (kblocked && !grow_buffer(s.acc, acc_tile_bytes * mc_tiles))
    return fail(QJ_ERR_OUT_OF_MEMORY, "cannot allocate %zu bytes of K-block sums", acc_tile_bytes * mc_tiles);
  const size_t b8_bytes = b8_any ? static_cast<size_t>(std::min(b.nc_panels, np.end - np.begin)) * w.mx_panel_bytes(8) : 0;
  if (b8_any && !grow_buffer(s.b8, b8_bytes))
    return fail(QJ_ERR_OUT_OF_MEMORY, "cannot allocate %zu bytes to unpack E2M3 weights", b8_bytes);
  grow(s.row_sum, static_cast<size_t>(mc_tiles) * groups * mr);
  const int64_t scale_slots = group_a ? groups * mr : mr;  // A scales per tile
  grow(s.inv, static_cast<size_t>(mc_tiles) * scale_slots);
  grow(s.pre, static_cast<size_t>(mc_tiles) * scale_slots);
  grow(s.rg_scale, static_cast<size_t>(mc_tiles) * scale_slots);
  grow(s.row_scale, static_cast<size_t>(mc_tiles) * mr);

  PackASpec spec{d.a_type, w.kg, w.k, w.kp, groups, !w.zero_points.empty()};
  if (decoded) {
    spec.kg = a_pairs ? 2 : 4;
    spec.row_sums = p.row_sums;
    spec.signed_quads = !a_pairs;
    spec.row_sum_mult = p.row_sum_mult;
    spec.group_quant = group_a;
    spec.split32 = a_split;
  }
  // The packing functions' rows, for the slice's tallest tile (its first).
  int64_t first_row0;
  const int rows_max = tile_rows(mt.begin, &first_row0);
  if (mx_a)
    reserve_pack_a_tile_mx(spec, rows_max, s.pack);
  else if (!p.direct_a)
    reserve_pack_a_tile(spec, rows_max, s.pack);
  if (reserve_only) return QJ_OK;
  const int64_t n_tail = w.n % w.nr;

  // A one-row tile of u8 A in the VNNI layout is the row itself (K groups of 4 bytes), so it needs
  // no packing when K needs no padding and no row sums are needed: the GEMV case.
  const bool direct_row = d.a_type == QJ_U8 && w.kg == 4 && w.k == w.kp && w.zero_points.empty();

  // A read in place by the p.direct_a kernels: rows K bytes apart, and a K that is not whole
  // quads reads up to 3 bytes past a row, so never for the tile that holds A's last row.
  auto a_in_place = [&](int64_t row0, int rows) {
    return lda == w.k && (w.k == w.kp || row0 + rows < m);
  };

  GemmIntArgs args;
  clear_args(&args);
  args.consts = p.consts;
  args.ldc = ldc * out_bytes;
  args.k_groups = decoded ? w.group_steps() : kgroups / groups;
  args.groups = groups;
  args.col_stride = p.n_pad * 4;

  for (int64_t t0 = mt.begin; t0 < mt.end; t0 += mc_tiles) {
    const int64_t t1 = std::min(mt.end, t0 + mc_tiles);
    const bool b8 = b8_any && t1 - t0 >= std::min<int64_t>(kFp6BytesMinTiles, mc_tiles);
    // Pack this block of row tiles (with quantization and row sums).
    for (int64_t t = t0; t < t1; ++t) {
      int64_t row0;
      const int rows = tile_rows(t, &row0);
      const int64_t slot = t - t0;
      float* inv = s.inv.data() + slot * scale_slots;
      float* pre = s.pre.data() + slot * scale_slots;
      float* rsc = s.row_scale.data() + slot * mr;
      if (mx_a) {  // decode, row sums and the per-(row, block) scales in one pass
        pack_a_tile_mx(spec, *static_cast<const qj_mx_matrix*>(a), lda, row0, rows,
                       s.a_pack.data<uint8_t>() + slot * tile_bytes, s.row_sum.data() + slot * groups * mr,
                       s.rg_scale.data() + slot * scale_slots, s.pack);
        continue;
      }
      if (group_a) {
        float* rg = s.rg_scale.data() + slot * scale_slots;
        float* col = s.amax_col.data();  // this group's amax of the tile's rows, contiguous
        for (int64_t g = 0; g < groups; ++g) {
          for (int i = 0; i < rows; ++i) col[i] = s.amax[(row0 + i) * groups + g];
          dynamic_scales_n(col, rows, &inv[g * rows], &pre[g * rows], &rg[g * rows]);
        }
      } else if (dynamic) {
        dynamic_scales_n(&s.amax[row0], rows, inv, pre, rsc);
      }
      const size_t esz = (d.a_type == QJ_U8 || d.a_type == QJ_S8) ? 1 : (d.a_type == QJ_BF16 ? 2 : 4);
      if (direct_row && rows == 1) continue;  // GEMV: the kernel streams the row of A in place
      if (p.direct_a) {
        if (!a_in_place(row0, rows)) {  // rows K bytes apart, as the kernel was generated for
          uint8_t* dst = s.a_pack.data<uint8_t>() + slot * tile_bytes;
          for (int i = 0; i < rows; ++i)
            std::memcpy(dst + i * w.k, static_cast<const uint8_t*>(a) + (row0 + i) * lda, w.k);
          std::memset(dst + rows * w.k, 0, w.kp - w.k);  // the last row's quad over-read
        }
        continue;
      }
      pack_a_tile(spec, static_cast<const uint8_t*>(a) + row0 * lda * esz, lda, rows, rows, inv, pre,
                  s.a_pack.data<uint8_t>() + slot * tile_bytes, s.row_sum.data() + slot * groups * mr, s.pack);
    }
    // Then every N block of this thread for these tiles (and every K block of it in turn: the
    // tiles' sums wait in scratch while the B block of the next K block is streamed).
    const int64_t k_blocks = kblocked ? (kgroups + b.kc - 1) / b.kc : 1;
    for (int64_t p0 = np.begin; p0 < np.end; p0 += b.nc_panels) {
      const int64_t p1 = std::min(np.end, p0 + b.nc_panels);
      for (int64_t kb = 0; kb < k_blocks; ++kb) {
        const int64_t kg0 = kb * b.kc;
        const int64_t kgn = kblocked ? std::min(b.kc, kgroups - kg0) : kgroups;
        const int stage = !kblocked ? 0 : kb == 0 ? 1 : kb + 1 == k_blocks ? 3 : 2;
        const std::vector<KernelRef>& kernels = b8 ? p.kernels_b8 : stage ? p.kblock_kernels[stage - 1] : p.kernels;
        if (kblocked) {
          args.k_groups = kgn;
          args.b_skip = static_cast<int64_t>(w.panel_bytes()) - kgn * w.step_bytes();
        }
        // What is the same for every tile of this N (and K) block is set once (the kernel gets
        // the struct's address, so the compiler cannot keep these out of the loop itself).
        args.b = w.packed.data<uint8_t>() + p0 * w.panel_bytes() + kg0 * w.step_bytes();
        if (b8) {
          fp6_panels_to_bytes(w, p0, p1, s.b8.data<uint8_t>(), true);
          args.b = s.b8.data<uint8_t>();
        }
        args.n_panels = p1 - p0;
        args.last_is_tail = (p1 == n_panels && n_tail != 0) ? 1 : 0;
        args.col_corr = p.col_corr.data<int32_t>() + p0 * w.nr;
        args.b_zp = p.b_zp.data<int32_t>() + p0 * w.nr;
        args.group_scale = p.group_scale.data<float>() + p0 * w.nr;
        args.col_mult = p.col_mult.data<float>() + p0 * w.nr;
        args.col_bias = p.col_bias.data<float>() + p0 * w.nr;
        uint8_t* const c_block = static_cast<uint8_t*>(c) + p0 * w.nr * out_bytes;
        GemmIntKernel fns[256];  // by row count (mr <= 255); empty for counts no tile has
        for (size_t r = 0; r < kernels.size(); ++r) fns[r] = kernels[r].fn<GemmIntKernel>();
        for (int64_t t = t0; t < t1; ++t) {
          int64_t row0;
          const int rows = tile_rows(t, &row0);
          const int64_t slot = t - t0;
          const bool in_place = (direct_row && rows == 1) || (p.direct_a && a_in_place(row0, rows));
          args.a = (in_place ? static_cast<const uint8_t*>(a) + row0 * lda
                             : s.a_pack.data<uint8_t>() + slot * tile_bytes) + kg0 * rows * 4;
          args.c = c_block + row0 * ldc * out_bytes;
          args.row_sum = s.row_sum.data() + slot * groups * mr;
          args.row_scale = s.row_scale.data() + slot * mr;
          args.row_group_scale = s.rg_scale.data() + slot * scale_slots;
          if (kblocked) args.acc = reinterpret_cast<int32_t*>(s.acc.data<uint8_t>() + slot * acc_tile_bytes);
          if (rows == 1 && p.pair && !kblocked)  // (the pair form runs over the whole K)
            one_row_pairs(p, args, p1 - p0, n_tail != 0 && p1 == n_panels, out_bytes);
          else
            fns[rows - 1](&args);
        }
      }
    }
  }
  return QJ_OK;
}

qj_status int_run(const GemmPlan& p, int64_t m, const void* a, int64_t lda, void* c, int64_t ldc,
                  int32_t tid, int32_t nth, GemmScratch& s, bool reserve_only) {
  const PackedWeights& w = *p.w;
  const qj_gemm_desc& d = p.desc;
  // Dynamic quantization needs the scales of every row this thread touches (of all rows for a
  // per-tensor scale) before anything is written, so non-finite input fails cleanly. (MX A: the
  // block scales come with the data, no pass over A.)
  const AKind ak(d);
  const bool dynamic = ak.dynamic, mx_a = ak.mx, group_a = ak.group;
  if (group_a && !mx_a) {
    grow(s.amax, m * w.groups());
    grow(s.amax_col, 256);  // >= any tile's rows (mr <= 255)
  } else if (dynamic) {
    grow(s.amax, m);
  }
  auto scan_a = [&]() -> qj_status {
    if (group_a && !mx_a) {
      int64_t bad = row_group_amax(d.a_type, a, lda, m, w.k, w.k / w.groups(), s.amax.data());
      if (bad >= 0) return nonfinite_a(d, a, lda, bad, w.k);
    } else if (dynamic) {
      int64_t bad = row_amax(d.a_type, a, lda, m, w.k, s.amax.data());
      if (bad >= 0) return nonfinite_a(d, a, lda, bad, w.k);
      if (d.a_granularity == QJ_GRAN_TENSOR) {
        float t = 0.0f;
        for (int64_t i = 0; i < m; ++i) t = std::max(t, s.amax[i]);
        std::fill(s.amax.begin(), s.amax.begin() + m, t);
      }
    }
    return QJ_OK;
  };

  if (!p.jit) {
    if (reserve_only) return QJ_OK;
    QJ_TRY(scan_a());  // (every slice fails on bad A)
    if (tid != 0) return QJ_OK;  // the reference computes the whole problem on thread 0
    if (mx_a) {
      std::vector<int32_t> qa(m * w.k);
      std::vector<float> ags(m * w.groups());
      mx_act_decode_rows(d.a_type, *static_cast<const qj_mx_matrix*>(a), lda, m, w.k, qa.data(), ags.data(),
                         w.groups());
      ref::gemm_int_group_a(d, p.ref_w, m, qa.data(), ags.data(), c, ldc);
      return QJ_OK;
    }
    ref::gemm_int(d, p.ref_w, m, a, lda, c, ldc);
    return QJ_OK;
  }
  const int out_bytes = c_bytes(d.c_type);
  // Narrow N and tall (u8 A only): whole banks of narrow_mr rows in the narrow-N kernel or the
  // tall kernels (split over the threads by banks), the rows left over by the ordinary kernels
  // (exact either way).
  const bool narrow = p.narrow_mr > 0 && m >= p.narrow_mr &&
                      (!p.narrow_tall || w.n <= 16 || tall_row_bytes_ok(ldc * out_bytes)) &&
                      (p.tall_cols != 64 || banks_rows_ok(m, w.k));
  const int64_t m4 = narrow ? m / p.narrow_mr * p.narrow_mr : 0;
  const int64_t rest = m - m4;
  const void* const a_rest = static_cast<const uint8_t*>(a) + m4 * lda;
  void* const c_rest = static_cast<uint8_t*>(c) + m4 * ldc * out_bytes;
  // GEMV, u8 A in place (or u8 / s8 A widened to s16 pairs first, below VNNI; before, that went
  // through run_tiles, 60-70 ns more a call: 1 x 128 x 512 on the AVX2 Zen 3 58-84 -> 92 GOPS, 1 x
  // 128 x 2876 50-60 -> 74-77): one call over every panel with the plan's arguments, or two from
  // a rotating start (gemv_rotate_panels) (run_tiles makes the same kernel calls per N block, after
  // sizing scratch a GEMV does not use).
  const bool gemv = rest == 1 && nth == 1 && p.gemv_direct;
  // The leftover rows' scratch before the narrow kernels write (run_tiles sizes it itself when
  // it is the first to write).
  if (rest > 0 && !gemv && (m4 > 0 || reserve_only))
    QJ_TRY(run_tiles(p, rest, a_rest, lda, c_rest, ldc, tid, nth, s, true));
  if (reserve_only) return QJ_OK;
  QJ_TRY(scan_a());
  if (m4 > 0) run_narrow(p, m4, a, lda, c, ldc, out_bytes, tid, nth);
  if (rest == 0) return QJ_OK;
  if (gemv) {
    GemmIntArgs args;
    copy_args(&args, p.gemv_args);
    args.a = static_cast<const uint8_t*>(a_rest);
    if (p.gemv_widen_a) {
      const size_t bytes = static_cast<size_t>(w.kp) * 2;  // kp / 2 pairs of two s16
      if (!grow_buffer(s.a_pack, bytes))
        return fail(QJ_ERR_OUT_OF_MEMORY, "cannot allocate %zu bytes to pack A", bytes);
      const PackASpec spec{d.a_type, w.kg, w.k, w.kp, w.groups(), false};
      pack_a_tile(spec, a_rest, lda, 1, 1, nullptr, nullptr, s.a_pack.data<uint8_t>(), nullptr, s.pack);
      args.a = s.a_pack.data<uint8_t>();
    }
    args.c = static_cast<uint8_t*>(c_rest);
    args.ldc = ldc * out_bytes;
    const GemmIntKernel fn = p.kernels[0].fn<GemmIntKernel>();
    auto call = [&](const GemmIntArgs& x) {
      if (p.pair)
        one_row_pairs(p, x, x.n_panels, x.last_is_tail != 0, out_bytes);
      else
        fn(&x);
    };
    if (p.gemv_rotate_panels == 0) {
      call(args);
      return QJ_OK;
    }
    // Panels [st, np), then [0, st): st moves back by gemv_rotate_panels a call, so each call
    // starts on the panels the previous one read last (see gemv_rotate_panels' rule above).
    const int64_t np = args.n_panels, nr = w.nr;
    const uint64_t i = p.gemv_calls.fetch_add(1, std::memory_order_relaxed);
    const int64_t back = static_cast<int64_t>(i % static_cast<uint64_t>(np)) * p.gemv_rotate_panels % np;
    const int64_t st = back == 0 ? 0 : np - back;
    auto panels = [&](int64_t p0, int64_t p1) {
      GemmIntArgs ch;
      copy_args(&ch, args);
      ch.b = args.b + p0 * w.panel_bytes();
      ch.c = args.c + p0 * nr * out_bytes;
      ch.col_corr = args.col_corr + p0 * nr;
      ch.b_zp = args.b_zp + p0 * nr;
      ch.group_scale = args.group_scale + p0 * nr;
      ch.col_mult = args.col_mult + p0 * nr;
      ch.col_bias = args.col_bias + p0 * nr;
      ch.n_panels = p1 - p0;
      ch.last_is_tail = p1 == np ? args.last_is_tail : 0;
      call(ch);
    };
    panels(st, np);
    if (st > 0) panels(0, st);
    return QJ_OK;
  }
  return run_tiles(p, rest, a_rest, lda, c_rest, ldc, tid, nth, s, false);
}

qj_status run_slice(const GemmPlan& p, int64_t m, const void* a, int64_t lda, void* c, int64_t ldc, int32_t tid,
                    int32_t nth, GemmScratch& s, bool reserve_only) {
  return p.kind == GemmKind::kFloat ? float_run(p, m, a, lda, c, ldc, tid, nth, s, reserve_only)
                                    : int_run(p, m, a, lda, c, ldc, tid, nth, s, reserve_only);
}

// The scratch of the slices of a thread's parallel runs, kept for its next one. A run nested in
// one of them (a pool that runs other tasks on the waiting caller) takes scratch of its own.
struct SliceScratch {
  std::vector<std::unique_ptr<GemmScratch>> sets;
  bool busy = false;
};

}  // namespace

bool gemm_call_kblocked(const GemmPlan& p, int64_t tiles, int largest_rows) {
  return !p.kblock_kernels[2].empty() && largest_rows >= p.blk.kc_min_rows && tiles >= p.kblock_min_tiles;
}

qj_status gemm_run(const GemmPlan& p, int64_t m, const void* a, int64_t lda, void* c, int64_t ldc,
                   int32_t tid, int32_t nth) {
  return run_slice(p, m, a, lda, c, ldc, tid, nth, thread_scratch(), false);
}

qj_status gemm_run_parallel(const GemmPlan& p, int64_t m, const void* a, int64_t lda, void* c, int64_t ldc,
                            int32_t nth, int64_t work_ns) {
  static thread_local SliceScratch mine;
  SliceScratch nested;
  SliceScratch& ss = mine.busy ? nested : mine;
  struct Busy {
    SliceScratch& ss;
    explicit Busy(SliceScratch& x) : ss(x) { ss.busy = true; }
    ~Busy() { ss.busy = false; }
  } busy(ss);
  while (ss.sets.size() < static_cast<size_t>(nth)) ss.sets.push_back(std::make_unique<GemmScratch>());
  // A call that fails (out of memory sizing a slice, or threads that cannot start) releases the
  // slices' scratch: what it sized for nth threads is not kept for a call that cannot use it.
  auto released = [&](qj_status st) {
    if (st != QJ_OK) ss.sets.clear();
    return st;
  };
  for (int32_t t = 0; t < nth; ++t)
    if (qj_status st = run_slice(p, m, a, lda, c, ldc, t, nth, *ss.sets[t], true); st != QJ_OK) return released(st);
  // (A pool that runs the call on its caller alone passes {0, 1}: that slice sizes its own
  // scratch before it writes, as any single slice does.)
  return released(run_slices(
      nth, [&](int32_t t, int32_t n) { return run_slice(p, m, a, lda, c, ldc, t, n, *ss.sets[t], false); },
      work_ns));
}

}  // namespace qj
