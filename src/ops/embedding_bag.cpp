// Embedding-bag driver (see embedding_bag.h): key and blocking choice, validation, partitioning.
#include "src/ops/embedding_bag.h"

#include <algorithm>
#include <cinttypes>
#include <cstdlib>
#include <cstring>

#include "codegen/embedding_bag.h"
#include "src/core/isa.h"
#include "src/core/log.h"
#include "src/core/status.h"
#include "src/core/threading.h"
#include "src/formats/fused_rowwise.h"
#include "src/ref/embedding_bag_ref.h"

namespace qj {
namespace {

int64_t load_int(const void* p, int bits, int64_t i) {
  if (bits == 32) return static_cast<const int32_t*>(p)[i];
  return static_cast<const int64_t*>(p)[i];
}

int64_t div_up(int64_t a, int64_t b) { return (a + b - 1) / b; }

// -1: the rule below; 0: never; 1: always (tests use it to cover both kernels at the AVX-512
// tier).
int g_prefer_ymm = -1;

// A zmm decode group holds 16 (8-bit), 32 (4-bit) or 64 (2-bit) elements; for rows at most half
// that long the ymm kernel (groups of 8 / 16 / 32) does half the work: measured here (bench
// embedding --mode warm), 2-bit dim 32 rows take 2.45 ns with ymm against 3.16 with zmm. For
// longer rows zmm wins everywhere on this machine (8-bit dim 32: 2.0 against 2.4 ns; dim 128: 4.9
// against 6.4 ns), so there is no vendor special case.
bool prefer_ymm(const qj_embedding_bag_desc& d) {
  if (g_prefer_ymm >= 0) return g_prefer_ymm != 0;
  static const int env = [] {  // QJ_EMB_PREFER_YMM=0/1 overrides the rule (A/B runs)
    const char* e = std::getenv("QJ_EMB_PREFER_YMM");
    return e && *e ? std::atoi(e) : -1;
  }();
  if (env >= 0) return env != 0;
  const int bits = fused::bits_of(d.row_type);
  return bits && d.dim <= 16 * (8 / bits) / 2;
}

KernelKey bag_key(const qj_embedding_bag_desc& d, qj_isa isa, int32_t pf) {
  KernelKey k = KernelKey::zeroed();
  k.op = KernelOp::kEmbeddingBag;
  k.isa = static_cast<uint8_t>(isa >= QJ_ISA_AVX512 ? (prefer_ymm(d) ? QJ_ISA_AVX2 : QJ_ISA_AVX512) : isa);
  k.a_type = static_cast<uint8_t>(d.row_type);
  k.b_type = static_cast<uint8_t>(d.index_bits);
  k.c_type = static_cast<uint8_t>(d.out_type);
  k.nr = static_cast<uint16_t>(d.dim & 0xffff);
  uint8_t f = 0;
  if (d.pooling != QJ_POOL_NONE) {
    if (d.use_lengths) f |= kEmbLengths;
    if (d.offset_bits == 64) f |= kEmbOffsets64;
    if (d.positional) f |= kEmbPositional;
  }
  if (d.weighted) f |= kEmbWeighted;
  if (d.remap) f |= kEmbRemap;
  if (d.scale_bias_first) f |= kEmbSbFirst;
  k.flags = f;
  k.param[0] = static_cast<uint32_t>(d.dim);
  k.param[1] = static_cast<uint32_t>(d.pooling);
  k.param[2] = static_cast<uint32_t>(pf);
  k.param[4] = static_cast<uint32_t>(
      (d.prefetch_hint == QJ_PREFETCH_HINT_AUTO ? embedding_default_hint(d.row_type, d.dim) : d.prefetch_hint) - 1);
  // Blocking: as few column blocks as the registers allow, balanced.
  const int lanes = emb_lanes(k), g = emb_group_vectors(k);
  const int64_t nvec = div_up(d.dim, static_cast<int64_t>(lanes) * g) * g;
  const int64_t maxv = emb_max_block_vectors(k);
  const int64_t nblocks = div_up(nvec, maxv);
  k.param[3] = static_cast<uint32_t>(g * div_up(nvec / g, nblocks));
  // Rows of several column blocks: the first block alone prefetches `pf` ahead, so the loads of
  // the next bag wait while the later blocks run from cache. With param[5] the blocks together
  // prefetch each row of the next bag once, one every P row steps (codegen/embedding_bag.h).
  // Zen 5, zmm kernels, i64 unweighted, 4M-row tables, ns per row in two alternating runs,
  // without -> with (2026-12-01): 4-bit cold dim 512 25.4-25.7 -> 18.2-18.4, dim 1024 33.7-33.8
  // -> 31.8-32.2, warm 8.2-10.1 -> 8.4-8.8 and 16.2-16.3 -> 16.6-16.9; MXFP4 cold 27.4-28.8 ->
  // 22.0-22.6 and 38.2-38.4 -> 34.2-34.6, warm 10.8 -> 11.3-11.7 and 20.8-21.1 -> 21.4-22.7; f16
  // cold 51.6-53.8 -> 42.9-44.3 and 103-106 -> 95-97, warm 12.1-13.1 -> 13.0-13.3 and 27.2-27.5
  // -> 29.6-29.7. Not for 8-bit rows: cold dim 1024 70 -> 50-52 but warm (FBGEMM's "hot" case)
  // 18.5-19.6 -> 20.6-21.6 and dim 512 8.3 -> 10.2-10.3; nor f32 rows (2-4 KiB a row: cold
  // slower in a first version); not measured below
  // AVX-512. SPLIT MX rows (with their scale bytes; two runs, ~15:44 UTC): MXINT8 cold dims 512 /
  // 1024 33.8-33.9 / 76.3-76.7 -> 24.7 / 55.1-58.6, fresh 27.1-27.6 / 74.0 -> 25.3-26.4 / 59.5,
  // warm 12.2-12.3 / 27.4-28.4 -> 13.6-13.7 / 29.4-30.9; E4M3 cold dim 1024 78.9-86.2 -> 69.7-70.8,
  // dim 512 and fresh unchanged, warm 0-8% slower (MX tables are the large ones, as above).
  // 2-bit rows since their decode of 2026-12-01 ~18:00 UTC (they had measured slower with it
  // before: cold dim 1024 26.6-28.6 -> 29.6-29.9), with half the default distance (the next-bag
  // prefetch carries the rows ahead; a distance the caller chose stays), i32 / i64 unweighted, two
  // runs, ns per row: cold dim 512 13.4-13.9 -> 12.6-13.3, dim 1024 29.9-31.7 -> 22.6-23.7; fresh
  // (1M rows, i32) 12.7-12.9 -> 11.8, 22.8-23.3 -> 20.9-21.4; warm within 3%. Fresh with this
  // prefetch, half against the whole default distance: dim 512 11.8 against 12.1-12.6 (32 / 64
  // ahead), dim 1024 20.9-21.4 against 22.0-22.1 (16 / 32).
  // 4-bit and MXFP4 rows of at most 512 bytes (those of the larger Zen 5 line budget of
  // embedding_default_prefetch) take half the default distance too since 2026-12-01 ~23:05 UTC,
  // measured with both distances' plans in one process, calls alternating (`quantjit-bench
  // embedding --interleave`, 1M-row tables, i32 unless stated, 1001 calls each, ns per row,
  // default -> half): 4-bit dim 512 (32 -> 16, three runs, the third i64) fresh 23.5 / 22.0 / 16.3
  // -> 22.1 / 20.8 / 15.0, rows flushed 23.6 / 23.1 / 19.2 -> 21.0 / 20.8 / 17.3, warm 12.2 / 12.5 /
  // 9.2 -> 11.5 / 11.8 / 9.0; MXFP4 dim 512 (32 -> 16) fresh 27.7 / 18.5 / 19.0 -> 25.7 / 17.2 /
  // 17.5, flushed 26.6 / 20.8 / 21.2 -> 23.5 / 18.3 / 18.4, warm 17.4 / 11.1 / 11.1 -> 17.0 / 10.7 /
  // 10.7; two runs: 4-bit dims 640 / 768 / 1000 (32 / 32 / 16 -> half) fresh 19.8-21.7 /
  // 26.3-28.1 / 35.8-40.2 -> 18.3-20.0 / 22.6-25.4 / 31.3-38.1, flushed 24.5-25.3 / 30.6-31.4 /
  // 36.7-37.4 -> 21.7-22.0 / 26.0-26.8 / 31.6-31.9, warm within 3%; MXFP4 dims 640 / 768 (16 -> 8)
  // fresh 21.1-21.5 / 27.7-28.7 -> 20.9-21.4 / 26.5-27.5, flushed 23.1-23.5 / 27.4-28.2 ->
  // 19.7-19.9 / 22.3-23.4, warm within 3%. Longer rows keep the whole distance (4-bit dim 1024, 8
  // -> 4: fresh 34.0 -> 36.1; MXFP4 dim 1000, 8 -> 4: fresh 34.2-34.6 -> 36.7-37.2).
  const qj_dtype rt = d.row_type;
  const bool nb_rows = rt == QJ_FUSED_4BIT || rt == QJ_FUSED_2BIT || rt == QJ_F16 || rt == QJ_BF16 ||
                       rt == QJ_MXFP4_E2M1 || emb_mx_split_rows(rt);
  const bool zen5_blocks =
      nblocks >= 2 && pf > 0 && d.pooling != QJ_POOL_NONE && k.isa >= QJ_ISA_AVX512 && amd_family() >= 0x1a;
  // And every later block prefetches its own bytes of the row `pf` ahead (bit 1; the measurements
  // are at codegen's emit_block_prefetch): all rows but fp32 ones (blocks of 1.4 KiB: no gain).
  if (zen5_blocks && rt != QJ_F32) k.param[5] |= 2;
  // The AVX2 tier's 8-bit rows of three column blocks or more (12 ymm accumulators a block since
  // 2026-12-07 ~16:45 UTC, 9 before: dims from 193, 145 before) take bit 1 too. Zen 3, AVX2 only
  // (2026-12-07 ~00:50 UTC, 4M-row tables, ns per row, the build without -> with, alternating,
  // three runs i32 unweighted then two i64 weighted): cold dim 256 52-73 -> 42-51, dim 512
  // 146-165 -> 93-113, dim 1024 321-382 -> 184-282; fresh dim 1024 315-375 -> 206-274; warm dim
  // 512 36-52 -> 28-46, dim 1024 76-110 -> 66-103, dim 256 within the noise. Two blocks (dim
  // 128) gained nothing clear (cold 26-33 against 28-34). There FBGEMM, prefetching 16 rows
  // ahead, had been faster at dims 256-1024.
  // Since 2026-12-07 ~17:55 UTC 4-bit, f16 and bf16 rows too (same machine, both plans in one
  // process, calls alternating, 4M-row tables, i32 unweighted, paired time ratio with / without):
  // 4-bit dims 256 / 512 / 1024 warm 0.95 / 0.93 / 0.89, flushed 0.96 / 0.73 / 0.72, fresh 0.94 /
  // 0.83 / 0.75 (in two more runs 0.90-0.92 / 0.85 / 0.75-0.77; weighted dim 512 warm 0.93, fresh
  // 0.80), dim 128 (two blocks) 0.98-1.00; f16 dims 256 / 1024 warm 0.97 / 0.95, flushed 0.86 /
  // 0.87, fresh 0.91 / 0.92; bf16 0.96 / 0.86, 0.86 / 0.82, 0.89 / 0.90. Not fp32 rows (0.94-0.97
  // at dim 256, 0.99-1.00 at dim 1024), nor with the next-bag prefetch of bit 0 as well (4-bit
  // fresh dims 256 / 512 / 1024 1.12-1.14 / 1.06-1.30 / 0.87-0.92; bit 0 alone 0.85-0.88 /
  // 1.12-1.20 / 1.00-1.06).
  const bool avx2_block_rows = rt == QJ_FUSED_8BIT || rt == QJ_FUSED_4BIT || rt == QJ_F16 || rt == QJ_BF16;
  if (nblocks >= 3 && pf > 0 && d.pooling != QJ_POOL_NONE && k.isa == QJ_ISA_AVX2 && avx2_block_rows)
    k.param[5] |= 2;
  if (nb_rows && zen5_blocks) {
    k.param[5] |= 1;
    const bool halve = rt == QJ_FUSED_2BIT || ((rt == QJ_FUSED_4BIT || rt == QJ_MXFP4_E2M1) &&
                                               ref::emb_row_bytes(rt, d.dim, d.scale_bias_first) <= 512);
    if (halve && d.prefetch_distance < 0) k.param[2] = static_cast<uint32_t>(pf / 2);
  }
  return k;
}

KernelKey check_key(int index_bits, qj_isa isa) {
  KernelKey k = KernelKey::zeroed();
  k.op = KernelOp::kEmbeddingBag;
  k.isa = static_cast<uint8_t>(isa >= QJ_ISA_AVX512 ? QJ_ISA_AVX512 : isa);
  k.b_type = static_cast<uint8_t>(index_bits);
  k.flags = kEmbCheck;
  return k;
}

std::string ref_name(const qj_embedding_bag_desc& d) {
  char buf[128];
  std::snprintf(buf, sizeof buf, "emb_ref_%s_i%d_%s_d%" PRId64, qj_dtype_name(d.row_type), d.index_bits,
                qj_dtype_name(d.out_type), d.dim);
  return buf;
}

// The bag that holds index position i (offsets / lengths already validated).
int64_t bag_of_index(int offset_bits, bool use_lengths, const void* ol, int64_t num_bags, bool gather,
                     int64_t i) {
  if (gather) return i;
  int64_t start = 0;
  for (int64_t b = 0; b < num_bags; ++b) {
    int64_t end = use_lengths ? start + load_int(ol, offset_bits, b) : load_int(ol, offset_bits, b + 1);
    if (i < end) return b;
    start = end;
  }
  return -1;
}

int64_t bag_of(const EmbeddingBagPlan& p, const EmbeddingBagCall& c, int64_t i) {
  return bag_of_index(p.d.offset_bits, p.d.use_lengths != 0, c.offsets_or_lengths, c.num_bags,
                      p.d.pooling == QJ_POOL_NONE, i);
}

qj_status check_bags(const EmbeddingBagPlan& p, const EmbeddingBagCall& c, int64_t bag_begin, int64_t* prefix) {
  return validate_bags("qj_embedding_bag_run", p.d.offset_bits, p.d.use_lengths != 0, c.offsets_or_lengths,
                       c.num_bags, c.num_indices, bag_begin, prefix);
}

qj_status check_indices(const EmbeddingBagPlan& p, const EmbeddingBagCall& c) {
  const auto& d = p.d;
  if (c.num_indices == 0) return QJ_OK;
  uint64_t limit = static_cast<uint64_t>(d.remap ? d.remap_size : c.num_rows);
  bool bad = limit == 0;
  if (!bad) {
    if (p.check) {
      uint64_t lim = limit;
      if (d.index_bits == 32 && lim > (uint64_t{1} << 31)) lim = uint64_t{1} << 31;
      EmbCheckArgs a{c.indices, c.num_indices, lim};
      bad = p.check.fn<EmbCheckKernel>()(&a) != 0;
    } else {
      for (int64_t i = 0; i < c.num_indices && !bad; ++i) {
        int64_t v = load_int(c.indices, d.index_bits, i);
        bad = v < 0 || static_cast<uint64_t>(v) >= limit;
      }
    }
  }
  if (bad) {
    for (int64_t i = 0; i < c.num_indices; ++i) {
      int64_t v = load_int(c.indices, d.index_bits, i);
      if (v < 0 || static_cast<uint64_t>(v) >= limit)
        return fail(QJ_ERR_OUT_OF_RANGE,
                    "qj_embedding_bag_run: bag %" PRId64 ": indices[%" PRId64 "] = %" PRId64 " is outside the %s [0, %" PRIu64 ")",
                    bag_of(p, c, i), i, v, d.remap ? "remap table" : "table", limit);
    }
  }
  if (d.remap && p.remap_max >= c.num_rows)
    return fail(QJ_ERR_OUT_OF_RANGE,
                "qj_embedding_bag_run: the remap table maps to row %" PRId64 ", outside the table [0, num_rows = %" PRId64 ")",
                p.remap_max, c.num_rows);
  return QJ_OK;
}

}  // namespace

void embedding_set_prefer_ymm(int v) { g_prefer_ymm = v; }

void bag_slice(int ob, bool use_lengths, const void* o, int64_t num_bags, int64_t num_indices, int32_t t, int32_t n,
               int64_t* begin, int64_t* end, int64_t* prefix) {
  // Bag b costs len(b) + 1 and spans [start(b) + b, start(b + 1) + b + 1) of the total cost; the
  // slice takes the bags whose middle (doubled: 2 (start(b) + b) + len(b) + 1) falls in
  // [t * total / n, (t + 1) * total / n), so that a long bag goes to the side that holds most of it.
  const int64_t total2 = 2 * (num_indices + num_bags);
  const int64_t lo = static_cast<int64_t>(static_cast<__int128>(total2) * t / n);
  const int64_t hi = static_cast<int64_t>(static_cast<__int128>(total2) * (t + 1) / n);
  *begin = *end = num_bags;
  *prefix = num_indices;
  int64_t start = 0;  // first index of bag b
  for (int64_t b = 0; b < num_bags; ++b) {
    const int64_t next = use_lengths ? start + load_int(o, ob, b) : load_int(o, ob, b + 1);
    const int64_t mid2 = 2 * (start + b) + (next - start) + 1;
    if (mid2 >= lo && *begin == num_bags) *begin = b, *prefix = start;
    if (mid2 >= hi) {
      *end = b;
      break;
    }
    start = next;
  }
  if (*end < *begin) *end = *begin;
}

int64_t embedding_row_bytes(qj_dtype row_type, int64_t dim, bool scale_bias_first) {
  return ref::emb_row_bytes(row_type, dim, scale_bias_first);
}

qj_status validate_bags(const char* fn, int ob, bool use_lengths, const void* o, int64_t num_bags,
                        int64_t num_indices, int64_t bag_begin, int64_t* prefix) {
  *prefix = 0;
  if (use_lengths) {
    int64_t sum = 0;
    for (int64_t b = 0; b < num_bags; ++b) {
      if (b == bag_begin) *prefix = sum;
      const int64_t len = load_int(o, ob, b);
      if (len < 0)
        return fail(QJ_ERR_INVALID_ARGUMENT, "%s: bag %" PRId64 ": lengths[%" PRId64 "] = %" PRId64 " is negative", fn,
                    b, b, len);
      if (len > num_indices - sum)
        return fail(QJ_ERR_INVALID_ARGUMENT,
                    "%s: bag %" PRId64 ": lengths[%" PRId64 "] = %" PRId64 " overruns the index array (bag starts at index %" PRId64 ", num_indices = %" PRId64 ")",
                    fn, b, b, len, sum, num_indices);
      sum += len;
    }
    if (bag_begin >= num_bags) *prefix = sum;
    if (sum != num_indices) {
      if (num_bags == 0)
        return fail(QJ_ERR_INVALID_ARGUMENT, "%s: num_bags = 0 but num_indices = %" PRId64 " (no bag holds them)", fn,
                    num_indices);
      return fail(QJ_ERR_INVALID_ARGUMENT,
                  "%s: bag %" PRId64 ": the lengths sum to %" PRId64 ", not num_indices = %" PRId64 " (the last bag, %" PRId64 ", ends early)",
                  fn, num_bags - 1, sum, num_indices, num_bags - 1);
    }
    return QJ_OK;
  }
  const int64_t first = load_int(o, ob, 0);
  if (first != 0) return fail(QJ_ERR_INVALID_ARGUMENT, "%s: bag 0: offsets[0] = %" PRId64 " must be 0", fn, first);
  int64_t prev = first;
  for (int64_t b = 0; b < num_bags; ++b) {
    const int64_t next = load_int(o, ob, b + 1);
    if (next < prev)
      return fail(QJ_ERR_INVALID_ARGUMENT,
                  "%s: bag %" PRId64 ": offsets[%" PRId64 "] = %" PRId64 " is less than offsets[%" PRId64 "] = %" PRId64 " (offsets must not decrease)",
                  fn, b, b + 1, next, b, prev);
    if (next > num_indices)
      return fail(QJ_ERR_INVALID_ARGUMENT,
                  "%s: bag %" PRId64 ": offsets[%" PRId64 "] = %" PRId64 " overruns the index array (num_indices = %" PRId64 ")",
                  fn, b, b + 1, next, num_indices);
    prev = next;
  }
  if (prev != num_indices) {
    if (num_bags == 0)
      return fail(QJ_ERR_INVALID_ARGUMENT, "%s: num_bags = 0 but num_indices = %" PRId64 " (no bag holds them)", fn,
                  num_indices);
    return fail(QJ_ERR_INVALID_ARGUMENT,
                "%s: bag %" PRId64 ": offsets[num_bags = %" PRId64 "] = %" PRId64 " must equal num_indices = %" PRId64
                " (the last bag ends early)",
                fn, num_bags - 1, num_bags, prev, num_indices);
  }
  return QJ_OK;
}

qj_status validate_indices_scalar(const char* fn, int index_bits, const void* indices, int64_t num_indices,
                                  uint64_t limit, const char* what, int offset_bits, bool use_lengths,
                                  const void* ol, int64_t num_bags, bool gather) {
  for (int64_t i = 0; i < num_indices; ++i) {
    int64_t v = load_int(indices, index_bits, i);
    if (v < 0 || static_cast<uint64_t>(v) >= limit)
      return fail(QJ_ERR_OUT_OF_RANGE, "%s: bag %" PRId64 ": indices[%" PRId64 "] = %" PRId64 " is outside the %s [0, %" PRIu64 ")",
                  fn, bag_of_index(offset_bits, use_lengths, ol, num_bags, gather, i), i, v, what, limit);
  }
  return QJ_OK;
}

int32_t embedding_default_prefetch(qj_dtype row_type, int64_t dim) {
  // Keep about 128 cache lines in flight: a row of R bytes touches about R/64 + 1 lines (rows are
  // not line-aligned), but at most 16 rows ahead except for 4/2-bit rows. Measured on this
  // machine with prefetcht2: DRAM rows (bench embedding --mode fresh) gain from longer distances
  // (8-bit dim 32: 7.9 ns at 16 rows ahead, 6.7 at 32, 5.5 at 64; FBGEMM: 14.1), but every
  // prefetcht2 of a line that is already in L2 costs, and more so the farther ahead it is (the
  // same rows warm: 1.80 / 1.88 / 2.2 ns; FBGEMM: 2.03). 16 keeps both ahead of FBGEMM. 4/2-bit
  // rows lose only 2-6% warm at 64 (4-bit dim 32: 1.66 -> 1.71 ns; FBGEMM 4.4) and gain much from
  // DRAM (7.5 -> 4.9 ns), so they keep the longer distances.
  // MX rows (tables kept compressed because they are large) take the long distances too, and a
  // SPLIT row's scale bytes are one more line (2026-11-30, fresh / warm ns per row, 16 -> 32
  // ahead: E4M3 dim 64 10.5 -> 8.3 / 4.72 -> 5.0, dim 128 14.2 -> 13.5 / 8.72 -> 9.09, MXINT8
  // dim 128 11.8 -> 9.3-10.6 / 5.24 -> 5.59; MXFP4 dim 128 10.7 -> 7.9-8.3 / 5.40 -> 5.41).
  const int64_t rb = ref::emb_row_bytes(row_type, dim, false);
  const bool split = emb_mx_split_rows(row_type), mx = split || row_type == QJ_MXFP4_E2M1;
  const int64_t lines = (rb + 63) / 64 + 1 + (split ? 1 : 0);
  const int bits = fused::bits_of(row_type);
  // On Zen 5 (AMD family 0x1A, where these rows take prefetcht0, see embedding_default_hint)
  // 8-bit rows go up to 32 ahead (2026-12-01, i32 unweighted, ns per row, 16 -> 32 ahead, best of
  // two runs): cold dims 32 / 64 / 128 7.18 / 8.57 / 10.58 -> 5.46 / 6.41 / 7.44, fresh 7.72 /
  // 11.4 / 14.5 -> 5.96 / 9.07 / 12.1, warm within 2%; dim 256 stays at 16 by the line budget
  // (32 ahead: cold 14.2 -> 16.3).
  // Float rows (fp32 / fp16 / bf16) take the same 32 and, up to 512 bytes, the 4/2-bit budget
  // below on Zen 5 (2026-12-01, 1M-row tables, i32 unweighted, ns per row, two runs, 16 / 32 rows
  // ahead): fresh f16 and bf16 dims 32 / 64 5.8-6.0 / 8.0-8.2 -> 4.7-4.9 / 6.0-6.3, dim 128 (8
  // ahead before) 10.9-11.1 -> 9.7-9.9, dim 256 (8 -> 16) 21.9-22.3 -> 20.4-21.1; f32 dims 32 / 64
  // 6.6-6.8 / 7.7-7.8 -> 5.3-5.4 / 6.4-6.6; warm within 3% (bf16 dim 64 1.36 -> 1.23, f16 dim
  // 128 2.40 -> 2.46). 64 ahead was faster still from DRAM at dims 32 / 64 (f16 3.7 / 4.7) but up
  // to 20% slower warm (f32 dim 64 1.44 -> 1.78).
  const bool float_rows = row_type == QJ_F32 || row_type == QJ_F16 || row_type == QJ_BF16;
  const bool zen5_32 = (bits == 8 || float_rows) && amd_family() >= 0x1a;
  // 4/2-bit rows on CPUs without AVX-512 keep 16 rows ahead: on Zen 3 (2026-12-07 ~00:55 UTC,
  // AVX2 only, 4M-row tables, i32 unweighted, both distances' plans in one process, calls
  // alternating, ns per row, default -> 16) 4-bit dims 32 / 64 (64 ahead) rows flushed 14.8 / 19.1
  // -> 13.0 / 17.0, warm 4.37 / 4.42 -> 4.08 / 4.04, fresh 11.0 / 19.0 -> 10.9 / 17.7;
  // 2-bit dims 32 / 64 flushed 14.3 / 17.0 -> 12.2 / 13.7, warm 4.55 / 6.24 -> 4.29 / 5.74; dims
  // 128 (32 ahead) 0.95-0.99 of the time; longer rows already take 16 or less.
  const bool far_bits = (bits == 4 || bits == 2) && cpu_isa() >= QJ_ISA_AVX512;
  const int32_t cap = far_bits || mx ? 64 : zen5_32 ? 32 : 16;
  // Zen 5 also keeps twice the lines in flight for 4/2-bit and MX rows of at most 512 bytes
  // (2026-12-01, 1M-row tables, i32 unweighted, ns per row, default -> twice its distance, three
  // runs each): from DRAM 4-bit dims 128 / 256 / 512 7.2 / 9.7-10.2 / 18.7-18.8 -> 5.2-5.3 /
  // 8.8-9.0 / 16.9-17.6, 2-bit dims 256 / 512 / 1024 9.1-9.5 / 13.7-13.8 / 26.4-26.6 -> 8.0-8.6 /
  // 13.1-13.3 / 23.0-23.2, MXFP4 dims 128 / 512 7.6-7.7 / 20.6-21.7 -> 5.7-5.9 / 18.6-19.4,
  // MXINT8 dims 128 / 256 8.2 / 15.3-16.2 -> 6.2-6.4 / 11.7-12.0; slower MXFP4 dim 256 11.2-11.4
  // -> 12.3-12.6. Warm the 4/2-bit rows within 2%, MX rows up to 20% slower (MXFP4 dim 128 2.5
  // -> 3.0, MXINT8 dim 256 5.1-5.2 -> 5.9-6.2): tables are kept in MX because they are large.
  // Longer rows keep the budget (4-bit dim 1024, 516 bytes: 35.5-35.9 -> 40.5-40.8). MXFP4 rows,
  // which take longer to decode than 4-bit ones, get 192 lines (2026-12-01 ~15:38 UTC, two runs,
  // fresh / warm ns per row, 32 / 64 ahead: dim 256 11.5-11.7 / 5.1 against 12.6-13.0 / 5.8, where
  // 4-bit and 2-bit rows of the same 4 lines gain from 64 (10.0-10.1 -> 9.0-9.5, 9.5-9.6 ->
  // 8.2-8.4); dims 64 / 128 keep 64 ahead: 5.6-6.3 / 7.7 at 32 against 4.1-4.3 / 5.6 at 64).
  // On CPUs without AVX-512, 8-bit and 4-bit rows keep up to 320 lines in flight, so that rows of
  // 0.5-1 KiB go 16 ahead instead of 8. Zen 3 (2026-12-07 ~17:57 UTC, 4M-row tables, both
  // distances' plans in one process, calls alternating, ns per row, 8 -> 16 ahead): i32
  // unweighted rows flushed 8-bit dims 512 / 1024 80.8 / 185.9 -> 71.0 / 152.9, 4-bit 81.6 / 130.8
  // -> 77.4 / 111.0; fresh, i64 weighted, 8-bit 96.0 / 182.7 -> 85.4 / 155.7, 4-bit 69.5 / 141.7 ->
  // 64.4 / 123.3 (i32 unweighted: 8-bit 94.5 / 180.1 -> 84.5 / 155.7); warm within 2.5%.
  const bool avx2_cpu_bits = (bits == 8 || bits == 4) && cpu_isa() < QJ_ISA_AVX512;
  const int64_t budget = (bits == 4 || bits == 2 || mx || float_rows) && rb <= 512 && amd_family() >= 0x1a
                             ? (row_type == QJ_MXFP4_E2M1 ? 192 : 256)
                             : avx2_cpu_bits ? 320 : 128;
  // 8-bit rows of at least 1 KiB and SPLIT MX rows of at least 512 bytes keep about 4 KiB of rows
  // ahead on Zen 5 (1 KiB rows 4, 512-byte rows 8; the budget gave 8 and 16), where more rows in
  // flight measured slower from DRAM (2026-12-01, 1M-row tables, i32 unweighted, ns per row,
  // alternating): fresh dim 1024, 4 / 8 ahead (six pairs for 8-bit, two for MX), 8-bit 49-53 /
  // 61-66 (limit 46-47), MXINT8 53-57 / 61, E4M3 62 / 67-68, E5M2 57-58 / 62-69; cold 8-bit 52-55
  // / 73, MXINT8 54-55 / 57-58, E5M2 60-61 / 65; warm within 3%. Fresh dim 512, 8 / 16 ahead (two
  // runs): E4M3 26.3-26.5 / 28.0-28.5, E5M2 25.5-26.2 / 27.1-27.7. Shorter 8-bit rows keep the
  // rule: dim 768 fresh 38-39 at 8 against 45-46 at 4, dim 512 24 at 12 against 26-27 at 8.
  if (amd_family() >= 0x1a && ((bits == 8 && rb >= 1024) || (split && rb >= 512)))
    return static_cast<int32_t>(std::max<int64_t>(4, 4096 / rb));
  int32_t pf = 4;
  while (pf < cap && pf * 2 * lines <= budget + lines) pf *= 2;
  return pf;  // (2-bit rows, and 4-bit / MXFP4 rows up to 512 bytes, with the next-bag prefetch
             // take half of it: bag_key)
}

qj_prefetch_hint embedding_default_hint(qj_dtype row_type, int64_t dim) {
  // prefetcht2 as a rule: rows come from DRAM in the cases prefetching is for, and bringing them
  // to L2 lets far more misses be in flight than the L1 miss buffers allow (8-bit dim 32 fresh:
  // 9 against 12 ns per row with prefetcht0), while a prefetcht2 of a row already in L2 costs a
  // little. Float rows of at most 64 elements measured otherwise on this machine (2026-11-30,
  // 16 ahead, ns per row, prefetcht0 / prefetcht2, three runs): warm f32 dim 32 1.35 / 1.57,
  // dim 64 2.55 / 3.10, f16 dim 32 1.23 / 1.31; fresh (DRAM) f32 dim 64 29-30 / 33-34, f16 /
  // bf16 dim 64 15.3 / 18.5, f32 dim 32 15.8-18.3 / 18.0-18.5. From dim 128 on prefetcht2 is
  // ahead from DRAM again (fresh f16 26-27 / 30-32, f32 45-47 / 58-61), so those keep it.
  // All of the above was measured on Zen 4. On Zen 5 (AMD family 0x1A, a 48 KiB L1) prefetcht0
  // is as fast as prefetcht2 from DRAM and faster from L2 for the quantized and MX rows, so it is
  // their rule there (2026-12-01, EPYC family 0x1A, default distances, i32 unweighted, ns per
  // row, prefetcht0 / prefetcht2, best of two runs): warm 8-bit dims 32-1024 1.09 / 1.21, 1.49 /
  // 1.69, 2.23 / 2.49, 3.75 / 4.33, 8.48 / 9.10, 19.2 / 19.6, 4/2-bit 1.0-1.1x, MXFP4 / MXINT8 /
  // MXFP8 1.03-1.23x; cold within 1-5% (4-bit dim 32 4.49 / 12.2); fresh (DRAM) 0.95-1.10x either
  // way, within the runs' noise. Float rows first kept the rule above (from DRAM prefetcht0 had
  // lost at f32 dims 32 / 64 / 256, 11.2 / 10.3, 19.3 / 16.8, 79 / 66, and f16 dim 256, 42 / 33,
  // in separate processes), but with both hints' plans in one process, calls interleaved
  // (2026-12-01 ~22:15 UTC, 1M-row tables, default distances, medians of 2700 calls each, ns per
  // row, prefetcht2 / prefetcht0) it is as fast or faster for them too: fresh f32 dims 128 / 256
  // / 512 / 1024 19.4 / 18.4, 45.5 / 42.8, 110.5 / 108.4, 275 / 273; f16 dims 128 / 256 / 1024
  // 11.4 / 10.0, 26.8 / 23.4, 137 / 139; bf16 dims 128 / 256 / 512 / 1024 11.5 / 10.1, 21.8 /
  // 19.0, 59.5 / 58.3, 166 / 162; rows flushed before each call within 1% (f32) or 2-10% faster
  // (f16, bf16); the same rows every call f32 dims 128 / 256 / 512 3.87 / 2.97, 9.71 / 7.22, 23.1
  // / 21.1, f16 / bf16 3-9% faster, dim 1024 within 1%.
  if (amd_family() >= 0x1a) return QJ_PREFETCH_HINT_T0;
  const bool float_rows = row_type == QJ_F32 || row_type == QJ_F16 || row_type == QJ_BF16;
  return float_rows && dim <= 64 ? QJ_PREFETCH_HINT_T0 : QJ_PREFETCH_HINT_T2;
}

qj_status embedding_bag_plan_init(const qj_embedding_bag_desc& desc, EmbeddingBagPlan* p) {
  p->d = desc;
  auto& d = p->d;
  if (d.pooling == QJ_POOL_NONE) {
    d.use_lengths = 0;
    d.positional = 0;
  }
  if (!d.weighted) d.positional = 0;
  const int64_t natural = ref::emb_row_bytes(d.row_type, d.dim, d.scale_bias_first != 0);
  p->row_stride = d.row_stride ? d.row_stride : natural;
  p->out_stride = d.out_stride ? d.out_stride : d.dim;
  p->out_bytes = d.out_type == QJ_F32 ? 4 : 2;
  p->prefetch = d.prefetch_distance < 0 ? embedding_default_prefetch(d.row_type, d.dim) : d.prefetch_distance;
  if (d.remap) {
    int64_t mx = -1;
    for (int64_t i = 0; i < d.remap_size; ++i) {
      int32_t r = d.remap[i];
      if (r < -1)
        return fail(QJ_ERR_INVALID_ARGUMENT,
                    "qj_embedding_bag_plan_create: remap[%" PRId64 "] = %d (entries are a row >= 0 or -1 for pruned)", i, r);
      if (r > mx) mx = r;
    }
    p->remap_max = mx;
  }
  const qj_isa isa = max_isa();
  if (isa >= QJ_ISA_AVX2) {
    KernelKey k = bag_key(d, isa, p->prefetch);
    p->prefetch = static_cast<int32_t>(k.param[2]);  // (the kernel's distance bounds its index reads)
    qj_status s = acquire_kernel(k, embedding_bag_family(), &p->kernel);
    if (s == QJ_OK) s = acquire_kernel(check_key(d.index_bits, isa), embedding_bag_family(), &p->check);
    if (s == QJ_OK) {
      p->isa = isa;
      p->name = p->kernel.name();
      return QJ_OK;
    }
    if (s == QJ_ERR_OUT_OF_MEMORY) return s;
    QJ_LOG(1, "embedding_bag: fallback to the reference: %s", last_error());
    clear_error();
    p->kernel = KernelRef();
    p->check = KernelRef();
  } else {
    QJ_LOG(1, "embedding_bag: fallback to the reference: ISA cap %s has no JIT kernel", isa_name(isa));
  }
  cache_note_fallback();
  p->isa = QJ_ISA_SCALAR;
  p->name = ref_name(d);
  return QJ_OK;
}

qj_status embedding_bag_run(const EmbeddingBagPlan& p, const EmbeddingBagCall& c, int32_t thread_id,
                            int32_t num_threads) {
  const auto& d = p.d;
  const bool gather = d.pooling == QJ_POOL_NONE;
  // Gather: a slice of the indices. Pooled: a slice of the bags, balanced by their indices
  // (bag_slice), not by their count: a call's bags vary in length. FBGEMM's grid (10 bags of 1 to
  // 201 indices), two threads, warm: fp32 rows dim 256 6.5-7.0 -> 5.2 us, where the bag count had
  // split 1000 indices unevenly; the other cases as before.
  Range r = split_range(gather ? c.num_indices : c.num_bags, thread_id, num_threads);
  int64_t prefix = 0;
  if (!gather) QJ_TRY(check_bags(p, c, 0, &prefix));
  QJ_TRY(check_indices(p, c));
  if (!gather && num_threads > 1)
    bag_slice(d.offset_bits, d.use_lengths != 0, c.offsets_or_lengths, c.num_bags, c.num_indices, thread_id,
              num_threads, &r.begin, &r.end, &prefix);
  if (r.end <= r.begin) return QJ_OK;

  if (!p.kernel) {
    ref::EmbTable t{d.row_type, d.dim, d.scale_bias_first != 0, p.row_stride, c.table, c.num_rows, c.scales};
    qj_embedding_bag_desc rd = d;
    rd.out_stride = p.out_stride;
    if (!ref::embedding_bag(rd, t, c.num_bags, c.indices, c.num_indices, c.offsets_or_lengths, c.weights,
                            c.out, r.begin, r.end))
      return fail(QJ_ERR_INTERNAL, "qj_embedding_bag_run: reference rejected validated inputs");
    return QJ_OK;
  }
  EmbArgs a;
  a.table = static_cast<const uint8_t*>(c.table);
  a.indices = c.indices;
  a.offsets = gather ? nullptr
                     : static_cast<const uint8_t*>(c.offsets_or_lengths) + r.begin * (d.offset_bits / 8);
  a.weights = c.weights;
  a.remap = d.remap;
  a.out = static_cast<uint8_t*>(c.out) + r.begin * p.out_stride * p.out_bytes;
  a.row_stride = p.row_stride;
  a.out_stride = p.out_stride * p.out_bytes;
  a.count = r.end - r.begin;
  a.index_begin = gather ? r.begin : prefix;
  a.prefetch_limit = c.num_indices - p.prefetch;
  a.scales = c.scales;
  p.kernel.fn<EmbKernel>()(&a);
  return QJ_OK;
}

}  // namespace qj
