// C API: embedding-bag plans and runs, fused-rowwise table conversion, row-wise AdaGrad.
// Argument checks and error text only (DESIGN.md layering); the work is in src/ops.
#include <quantjit/quantjit.h>

#include <sys/mman.h>

#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <string>

#include "src/core/status.h"
#include "src/core/threading.h"
#include "src/formats/fused_rowwise.h"
#include "src/ops/embedding_bag.h"
#include "src/ops/rowwise_adagrad.h"
#include "src/ops/rowwise_quantize.h"


struct qj_embedding_bag_plan_s {
  qj::EmbeddingBagPlan p;
};

namespace {

using qj::fail;

// The raw value of an enum field a C caller filled: C enums are plain ints, and loading an
// out-of-range value through the enum type is undefined in C++ (UBSan's -fsanitize=enum).
template <class E>
int raw(const E& e) {
  static_assert(sizeof(E) == sizeof(int), "C enums are int-sized");
  int v;
  std::memcpy(&v, &e, sizeof v);
  return v;
}

bool is_fused(qj_dtype t) { return qj::fused::bits_of(t) != 0; }

// Natural row bytes, or -1 (unknown type, dim < 1, overflow).
int64_t row_bytes(qj_dtype t, int64_t dim, uint32_t flags) {
  if (dim < 1 || dim > (INT64_C(1) << 40)) return -1;
  switch (t) {
    case QJ_F32: return dim * 4;
    case QJ_F16:
    case QJ_BF16: return dim * 2;
    default: break;
  }
  int bits = qj::fused::bits_of(t);
  if (!bits) return -1;
  return qj::fused::row_bytes(bits, dim, (flags & QJ_ROWWISE_SCALE_BIAS_FIRST) != 0);
}

// `quantize` says which side is the source (only for naming pointers in messages).
qj_status check_rowwise(const char* fn, bool quantize, qj_dtype fused_type, uint32_t flags,
                        qj_dtype plain_type, const void* fused, int64_t fused_stride,
                        const void* plain, int64_t rows, int64_t dim, qj::RowwiseConvert* c) {
  if (!is_fused(fused_type))
    return fail(QJ_ERR_INVALID_ARGUMENT, "%s: type=%d (%s) is not QJ_FUSED_8BIT, QJ_FUSED_4BIT or QJ_FUSED_2BIT",
                fn, static_cast<int>(fused_type), qj_dtype_name(fused_type));
  if (plain_type != QJ_F32 && plain_type != QJ_F16)
    return fail(QJ_ERR_INVALID_ARGUMENT, "%s: plain type=%d (%s) is not QJ_F32 or QJ_F16", fn,
                static_cast<int>(plain_type), qj_dtype_name(plain_type));
  if (flags & ~QJ_ROWWISE_SCALE_BIAS_FIRST)
    return fail(QJ_ERR_INVALID_ARGUMENT, "%s: flags=0x%x has unknown bits", fn, flags);
  if (rows < 0) return fail(QJ_ERR_INVALID_ARGUMENT, "%s: rows=%lld is negative", fn, static_cast<long long>(rows));
  if (dim < 1 || dim > (INT64_C(1) << 40))
    return fail(QJ_ERR_INVALID_ARGUMENT, "%s: dim=%lld is not in [1, 2^40]", fn, static_cast<long long>(dim));
  const int64_t natural = row_bytes(fused_type, dim, flags);
  if (fused_stride != 0 && fused_stride < natural)
    return fail(QJ_ERR_INVALID_ARGUMENT, "%s: row stride=%lld is smaller than the row (%lld bytes)", fn,
                static_cast<long long>(fused_stride), static_cast<long long>(natural));
  const int64_t stride = fused_stride ? fused_stride : natural;
  if (rows > 0 && (stride > INT64_MAX / rows || dim * 4 > INT64_MAX / rows))
    return fail(QJ_ERR_INVALID_ARGUMENT, "%s: rows=%lld x dim=%lld overflows", fn,
                static_cast<long long>(rows), static_cast<long long>(dim));
  if (rows > 0 && (!fused || !plain))
    return fail(QJ_ERR_INVALID_ARGUMENT, "%s: %s is NULL", fn,
                (fused == nullptr) == quantize ? "dst" : "src");
  c->fused_type = fused_type;
  c->sb_first = (flags & QJ_ROWWISE_SCALE_BIAS_FIRST) != 0;
  c->plain_type = plain_type;
  c->rows = rows;
  c->dim = dim;
  c->fused_stride = stride;
  return QJ_OK;
}

qj_status check_desc(const qj_embedding_bag_desc* d) {
  const char* fn = "qj_embedding_bag_plan_create";
  if (!d) return fail(QJ_ERR_INVALID_ARGUMENT, "%s: desc is NULL", fn);
  const int rt = raw(d->row_type), pool = raw(d->pooling), ot = raw(d->out_type), hint = raw(d->prefetch_hint);
  switch (rt) {
    case QJ_F32:
    case QJ_F16:
    case QJ_BF16:
    case QJ_FUSED_8BIT:
    case QJ_FUSED_4BIT:
    case QJ_FUSED_2BIT:
    case QJ_MXFP4_E2M1:
    case QJ_MXINT8:
    case QJ_MXFP8_E4M3:
    case QJ_MXFP8_E5M2: break;
    default:
      return fail(QJ_ERR_INVALID_ARGUMENT,
                  "%s: row_type=%d (%s) is not F32, F16, BF16, FUSED_8BIT/4BIT/2BIT, MXFP4_E2M1, MXINT8 or MXFP8", fn,
                  rt, qj_dtype_name(static_cast<qj_dtype>(rt)));
  }
  if (d->dim < 1 || d->dim > (INT64_C(1) << 24))
    return fail(QJ_ERR_INVALID_ARGUMENT, "%s: dim=%" PRId64 " is not in [1, 2^24]", fn, d->dim);
  if (d->index_bits != 32 && d->index_bits != 64)
    return fail(QJ_ERR_INVALID_ARGUMENT, "%s: index_bits=%d is not 32 or 64", fn, d->index_bits);
  if (d->offset_bits != 32 && d->offset_bits != 64)
    return fail(QJ_ERR_INVALID_ARGUMENT, "%s: offset_bits=%d is not 32 or 64", fn, d->offset_bits);
  if (pool != QJ_POOL_SUM && pool != QJ_POOL_MEAN && pool != QJ_POOL_NONE)
    return fail(QJ_ERR_INVALID_ARGUMENT, "%s: pooling=%d is not a qj_pooling value", fn, pool);
  if (ot != QJ_F32 && ot != QJ_F16 && ot != QJ_BF16)
    return fail(QJ_ERR_INVALID_ARGUMENT, "%s: out_type=%d (%s) is not F32, F16 or BF16", fn, ot,
                qj_dtype_name(static_cast<qj_dtype>(ot)));
  if (hint < QJ_PREFETCH_HINT_AUTO || hint > QJ_PREFETCH_HINT_NTA)
    return fail(QJ_ERR_INVALID_ARGUMENT, "%s: prefetch_hint=%d is not a qj_prefetch_hint value", fn, hint);
  const int32_t flags[4] = {d->use_lengths, d->weighted, d->positional, d->scale_bias_first};
  const char* names[4] = {"use_lengths", "weighted", "positional", "scale_bias_first"};
  for (int i = 0; i < 4; ++i)
    if (flags[i] != 0 && flags[i] != 1)
      return fail(QJ_ERR_INVALID_ARGUMENT, "%s: %s=%d is not 0 or 1", fn, names[i], flags[i]);
  if (d->positional && !d->weighted)
    return fail(QJ_ERR_INVALID_ARGUMENT, "%s: positional=1 needs weighted=1", fn);
  if (d->positional && d->pooling == QJ_POOL_NONE)
    return fail(QJ_ERR_INVALID_ARGUMENT, "%s: positional weights need bags (pooling is QJ_POOL_NONE)", fn);
  if (d->scale_bias_first && !is_fused(d->row_type))
    return fail(QJ_ERR_INVALID_ARGUMENT, "%s: scale_bias_first=1 applies to fused rows, not %s", fn,
                qj_dtype_name(d->row_type));
  if (d->out_stride != 0 && d->out_stride < d->dim)
    return fail(QJ_ERR_INVALID_ARGUMENT, "%s: out_stride=%" PRId64 " is smaller than dim=%" PRId64, fn,
                d->out_stride, d->dim);
  if (d->out_stride > (INT64_C(1) << 40))
    return fail(QJ_ERR_INVALID_ARGUMENT, "%s: out_stride=%" PRId64 " is too large", fn, d->out_stride);
  if (d->prefetch_distance < QJ_PREFETCH_AUTO || d->prefetch_distance > 4096)
    return fail(QJ_ERR_INVALID_ARGUMENT, "%s: prefetch_distance=%d is not in [-1, 4096]", fn, d->prefetch_distance);
  const int64_t natural = qj::embedding_row_bytes(d->row_type, d->dim, d->scale_bias_first != 0);
  if (d->row_stride != 0 && (d->row_stride < natural || d->row_stride > (INT64_C(1) << 40)))
    return fail(QJ_ERR_INVALID_ARGUMENT, "%s: row_stride=%" PRId64 " is not in [%" PRId64 " (the row), 2^40]", fn,
                d->row_stride, natural);
  if (d->remap_size < 0 || (d->remap && d->remap_size == 0) || (!d->remap && d->remap_size != 0))
    return fail(QJ_ERR_INVALID_ARGUMENT, "%s: remap_size=%" PRId64 " does not match remap=%s", fn, d->remap_size,
                d->remap ? "non-NULL" : "NULL");
  return QJ_OK;
}

qj_status check_run(qj_embedding_bag_plan p, const qj::EmbeddingBagCall& c, bool* noop) {
  const char* fn = "qj_embedding_bag_run";
  *noop = false;
  if (!p) return fail(QJ_ERR_INVALID_ARGUMENT, "%s: plan is NULL", fn);
  const auto& d = p->p.d;
  if (c.num_rows < 0) return fail(QJ_ERR_INVALID_ARGUMENT, "%s: num_rows=%" PRId64 " is negative", fn, c.num_rows);
  if (c.num_bags < 0) return fail(QJ_ERR_INVALID_ARGUMENT, "%s: num_bags=%" PRId64 " is negative", fn, c.num_bags);
  if (c.num_indices < 0)
    return fail(QJ_ERR_INVALID_ARGUMENT, "%s: num_indices=%" PRId64 " is negative", fn, c.num_indices);
  const bool gather = d.pooling == QJ_POOL_NONE;
  const int64_t out_rows = gather ? c.num_indices : c.num_bags;
  if (!gather && !c.offsets_or_lengths) {
    if (c.num_bags == 0 && c.num_indices == 0) {
      *noop = true;
      return QJ_OK;
    }
    return fail(QJ_ERR_INVALID_ARGUMENT, "%s: offsets_or_lengths is NULL", fn);
  }
  if (c.num_indices > 0 && !c.indices) return fail(QJ_ERR_INVALID_ARGUMENT, "%s: indices is NULL", fn);
  if (c.num_indices > 0 && d.weighted && !c.weights)
    return fail(QJ_ERR_INVALID_ARGUMENT, "%s: weights is NULL but the plan is weighted", fn);
  if (c.num_rows > 0 && !c.table) return fail(QJ_ERR_INVALID_ARGUMENT, "%s: table is NULL", fn);
  if (c.num_rows > 0 && qj::emb_mx_split_rows(d.row_type) && !c.scales)
    return fail(QJ_ERR_INVALID_ARGUMENT,
                "%s: %s rows (SPLIT layout) need table_scales: use qj_embedding_bag_run_ex or "
                "qj_embedding_bag_run_parallel_ex", fn,
                qj_dtype_name(d.row_type));
  if (out_rows > 0 && !c.out) return fail(QJ_ERR_INVALID_ARGUMENT, "%s: out is NULL", fn);
  return QJ_OK;
}

qj::EmbeddingBagCall call_of(const qj_embedding_bag_args& a) {
  return qj::EmbeddingBagCall{a.table,   a.num_rows, a.num_bags, a.indices,     a.num_indices,
                              a.offsets_or_lengths, a.weights, a.out, a.table_scales};
}

qj_status run_call(qj_embedding_bag_plan p, const qj::EmbeddingBagCall& c, const qj_partition* part);
qj_status run_parallel(qj_embedding_bag_plan p, const qj::EmbeddingBagCall& c, int32_t num_threads);

}  // namespace

extern "C" {

qj_status qj_embedding_bag_plan_create(const qj_embedding_bag_desc* desc, qj_embedding_bag_plan* out) {
  if (!out) return fail(QJ_ERR_INVALID_ARGUMENT, "qj_embedding_bag_plan_create: out is NULL");
  return qj::guarded([&] {
    QJ_TRY(check_desc(desc));
    std::unique_ptr<qj_embedding_bag_plan_s> p(new (std::nothrow) qj_embedding_bag_plan_s);
    if (!p) return fail(QJ_ERR_OUT_OF_MEMORY, "qj_embedding_bag_plan_create: out of memory");
    QJ_TRY(qj::embedding_bag_plan_init(*desc, &p->p));
    *out = p.release();  // written on success only
    return QJ_OK;
  });
}

qj_status qj_embedding_bag_run(qj_embedding_bag_plan p, const void* table, int64_t num_rows, int64_t num_bags,
                               const void* indices, int64_t num_indices, const void* offsets_or_lengths,
                               const float* weights, void* out, const qj_partition* part) {
  qj::EmbeddingBagCall c{table, num_rows, num_bags, indices, num_indices, offsets_or_lengths, weights, out, nullptr};
  return qj::guarded([&] { return run_call(p, c, part); });
}

qj_status qj_embedding_bag_run_ex(qj_embedding_bag_plan p, const qj_embedding_bag_args* a, const qj_partition* part) {
  if (!a) return fail(QJ_ERR_INVALID_ARGUMENT, "qj_embedding_bag_run_ex: args is NULL");
  const qj::EmbeddingBagCall c = call_of(*a);
  return qj::guarded([&] { return run_call(p, c, part); });
}

}  // extern "C"

namespace {
qj_status run_call(qj_embedding_bag_plan p, const qj::EmbeddingBagCall& c, const qj_partition* part) {
  bool noop;
  QJ_TRY(check_run(p, c, &noop));
  int32_t t = 0, n = 1;
  if (part) {
    t = part->thread_id;
    n = part->num_threads;
    if (n < 1 || t < 0 || t >= n)
      return fail(QJ_ERR_INVALID_ARGUMENT, "qj_embedding_bag_run: partition {thread_id=%d, num_threads=%d} is invalid",
                  t, n);
  }
  if (noop) return QJ_OK;
  return qj::embedding_bag_run(p->p, c, t, n);
}
}  // namespace

extern "C" {

qj_status qj_embedding_bag_run_parallel(qj_embedding_bag_plan p, const void* table, int64_t num_rows,
                                        int64_t num_bags, const void* indices, int64_t num_indices,
                                        const void* offsets_or_lengths, const float* weights, void* out,
                                        int32_t num_threads) {
  qj::EmbeddingBagCall c{table, num_rows, num_bags, indices, num_indices, offsets_or_lengths, weights, out, nullptr};
  return qj::guarded([&] { return run_parallel(p, c, num_threads); });
}

qj_status qj_embedding_bag_run_parallel_ex(qj_embedding_bag_plan p, const qj_embedding_bag_args* a,
                                           int32_t num_threads) {
  if (!a) return fail(QJ_ERR_INVALID_ARGUMENT, "qj_embedding_bag_run_parallel_ex: args is NULL");
  const qj::EmbeddingBagCall c = call_of(*a);
  return qj::guarded([&] { return run_parallel(p, c, num_threads); });
}

}  // extern "C"

namespace {
qj_status run_parallel(qj_embedding_bag_plan p, const qj::EmbeddingBagCall& c, int32_t num_threads) {
  bool noop;
  QJ_TRY(check_run(p, c, &noop));
  if (num_threads < 1 || num_threads > 1024)
    return fail(QJ_ERR_INVALID_ARGUMENT, "qj_embedding_bag_run_parallel: num_threads=%d must be in [1, 1024]",
                num_threads);
  if (noop) return QJ_OK;
  // Slices are ranges of bags (gather: of indices): more threads than those would only idle (the
  // output is the same for any count).
  const int64_t items = p->p.d.pooling == QJ_POOL_NONE ? c.num_indices : c.num_bags;
  if (num_threads > items) num_threads = static_cast<int32_t>(std::max<int64_t>(items, 1));
  if (num_threads == 1) return qj::embedding_bag_run(p->p, c, 0, 1);
  // Every slice validates the whole call first, so a bad input fails all of them before anything
  // is written; the first failure's message is reported.
  // Rough single-thread time for the pool (threading.h): a few ns per row plus its bytes at L2 speed.
  const int64_t work_ns = c.num_indices * (2 + p->p.row_stride / 32);
  return qj::run_slices(
      num_threads, [&](int32_t t, int32_t n) { return qj::embedding_bag_run(p->p, c, t, n); }, work_ns);
}
}  // namespace

extern "C" {

const char* qj_embedding_bag_plan_kernel_name(qj_embedding_bag_plan p) { return p ? p->p.name.c_str() : ""; }

void qj_embedding_bag_plan_destroy(qj_embedding_bag_plan p) { delete p; }

qj_status qj_rowwise_adagrad_fused(const qj_rowwise_adagrad_desc* d, void* table, float* momentum, int64_t num_rows,
                                   int64_t num_bags, const void* indices, int64_t num_indices,
                                   const void* offsets_or_lengths, const float* weights, const float* grad,
                                   uint64_t seed, int32_t num_threads) {
  const char* fn = "qj_rowwise_adagrad_fused";
  if (!d) return fail(QJ_ERR_INVALID_ARGUMENT, "%s: desc is NULL", fn);
  const int tt = raw(d->table_type), apool = raw(d->pooling), opt = raw(d->optimizer), mode = raw(d->mode);
  if (tt != QJ_F32 && tt != QJ_F16)
    return fail(QJ_ERR_INVALID_ARGUMENT, "%s: table_type=%d (%s) is not F32 or F16", fn, tt,
                qj_dtype_name(static_cast<qj_dtype>(tt)));
  if (d->dim < 1 || d->dim > (INT64_C(1) << 24))
    return fail(QJ_ERR_INVALID_ARGUMENT, "%s: dim=%" PRId64 " is not in [1, 2^24]", fn, d->dim);
  if (d->index_bits != 32 && d->index_bits != 64)
    return fail(QJ_ERR_INVALID_ARGUMENT, "%s: index_bits=%d is not 32 or 64", fn, d->index_bits);
  if (d->offset_bits != 32 && d->offset_bits != 64)
    return fail(QJ_ERR_INVALID_ARGUMENT, "%s: offset_bits=%d is not 32 or 64", fn, d->offset_bits);
  const int32_t flags[4] = {d->use_lengths, d->weighted, d->positional, d->stochastic_rounding};
  const char* names[4] = {"use_lengths", "weighted", "positional", "stochastic_rounding"};
  for (int i = 0; i < 4; ++i)
    if (flags[i] != 0 && flags[i] != 1)
      return fail(QJ_ERR_INVALID_ARGUMENT, "%s: %s=%d is not 0 or 1", fn, names[i], flags[i]);
  if (d->positional && !d->weighted) return fail(QJ_ERR_INVALID_ARGUMENT, "%s: positional=1 needs weighted=1", fn);
  if (d->stochastic_rounding && tt != QJ_F16)
    return fail(QJ_ERR_INVALID_ARGUMENT, "%s: stochastic_rounding=1 applies to F16 tables", fn);
  if (apool != QJ_POOL_SUM && apool != QJ_POOL_MEAN)
    return fail(QJ_ERR_INVALID_ARGUMENT, "%s: pooling=%d is not QJ_POOL_SUM or QJ_POOL_MEAN", fn, apool);
  if (opt != QJ_OPT_ROWWISE_ADAGRAD && opt != QJ_OPT_SGD)
    return fail(QJ_ERR_INVALID_ARGUMENT, "%s: optimizer=%d is not a qj_sparse_optimizer value", fn, opt);
  if (mode != QJ_UPDATE_COALESCED && mode != QJ_UPDATE_PER_OCCURRENCE_RACY)
    return fail(QJ_ERR_INVALID_ARGUMENT, "%s: mode=%d is not a qj_update_mode value", fn, mode);
  if (!(d->learning_rate == d->learning_rate) || std::isinf(d->learning_rate))
    return fail(QJ_ERR_INVALID_ARGUMENT, "%s: learning_rate=%g is not finite", fn, static_cast<double>(d->learning_rate));
  if (!(d->epsilon >= 0) || std::isinf(d->epsilon))
    return fail(QJ_ERR_INVALID_ARGUMENT, "%s: epsilon=%g is not finite and >= 0", fn, static_cast<double>(d->epsilon));
  if (d->grad_stride != 0 && (d->grad_stride < d->dim || d->grad_stride > (INT64_C(1) << 40)))
    return fail(QJ_ERR_INVALID_ARGUMENT, "%s: grad_stride=%" PRId64 " is smaller than dim=%" PRId64, fn, d->grad_stride, d->dim);
  if (num_rows < 0) return fail(QJ_ERR_INVALID_ARGUMENT, "%s: num_rows=%" PRId64 " is negative", fn, num_rows);
  if (num_bags < 0) return fail(QJ_ERR_INVALID_ARGUMENT, "%s: num_bags=%" PRId64 " is negative", fn, num_bags);
  if (num_indices < 0) return fail(QJ_ERR_INVALID_ARGUMENT, "%s: num_indices=%" PRId64 " is negative", fn, num_indices);
  if (num_threads < 1 || num_threads > 1024)
    return fail(QJ_ERR_INVALID_ARGUMENT, "%s: num_threads=%d must be in [1, 1024]", fn, num_threads);
  if (num_bags == 0 && num_indices == 0) return QJ_OK;
  if (!offsets_or_lengths) return fail(QJ_ERR_INVALID_ARGUMENT, "%s: offsets_or_lengths is NULL", fn);
  if (num_indices > 0) {
    if (!indices) return fail(QJ_ERR_INVALID_ARGUMENT, "%s: indices is NULL", fn);
    if (!table) return fail(QJ_ERR_INVALID_ARGUMENT, "%s: table is NULL", fn);
    if (!grad) return fail(QJ_ERR_INVALID_ARGUMENT, "%s: grad is NULL", fn);
    if (d->weighted && !weights) return fail(QJ_ERR_INVALID_ARGUMENT, "%s: weights is NULL but desc is weighted", fn);
    if (opt == QJ_OPT_ROWWISE_ADAGRAD && !momentum)
      return fail(QJ_ERR_INVALID_ARGUMENT, "%s: momentum is NULL (row-wise AdaGrad needs one float per row)", fn);
  }
  qj::AdagradCall c{table, momentum, num_rows, num_bags, indices, num_indices, offsets_or_lengths, weights, grad, seed};
  // The scratch (grouping tables, per-row lists) grows with num_indices; all of it is allocated
  // before anything is written.
  return qj::guarded([&] { return qj::rowwise_adagrad_fused(*d, c, num_threads); });
}

void* qj_embedding_table_alloc(size_t bytes) {
  if (bytes == 0) {
    fail(QJ_ERR_INVALID_ARGUMENT, "qj_embedding_table_alloc: bytes=0");
    return nullptr;
  }
  const size_t huge = size_t{2} << 20;
  if (bytes > SIZE_MAX - 2 * huge) {  // (the rounding up and the extra huge page would wrap)
    fail(QJ_ERR_OUT_OF_MEMORY, "qj_embedding_table_alloc: bytes=%zu is more than an address space holds", bytes);
    return nullptr;
  }
  const size_t len = (bytes + huge - 1) / huge * huge;
  // Over-map by one huge page to align the start, then trim.
  void* raw = mmap(nullptr, len + huge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) {
    fail(QJ_ERR_OUT_OF_MEMORY, "qj_embedding_table_alloc: cannot map %zu bytes", len + huge);
    return nullptr;
  }
  uintptr_t a = reinterpret_cast<uintptr_t>(raw);
  uintptr_t aligned = (a + huge - 1) / huge * huge;
  if (aligned > a) munmap(raw, aligned - a);
  uintptr_t end = a + len + huge;
  if (end > aligned + len) munmap(reinterpret_cast<void*>(aligned + len), end - (aligned + len));
  void* p = reinterpret_cast<void*>(aligned);
#ifdef MADV_HUGEPAGE
  madvise(p, len, MADV_HUGEPAGE);  // a hint: ignored where THP is off
#endif
  return p;
}

void qj_embedding_table_free(void* ptr, size_t bytes) {
  const size_t huge = size_t{2} << 20;
  if (!ptr || bytes == 0 || bytes > SIZE_MAX - 2 * huge) return;  // (no such allocation)
  munmap(ptr, (bytes + huge - 1) / huge * huge);
}

int64_t qj_rowwise_row_bytes(qj_dtype type, int64_t dim, uint32_t flags) {
  if (flags & ~QJ_ROWWISE_SCALE_BIAS_FIRST) {
    fail(QJ_ERR_INVALID_ARGUMENT, "qj_rowwise_row_bytes: flags=0x%x holds unknown bits", flags);
    return -1;
  }
  const int64_t b = row_bytes(type, dim, flags);
  if (b < 0)
    fail(QJ_ERR_INVALID_ARGUMENT, "qj_rowwise_row_bytes: type=%d (%s) with dim=%lld has no row size",
         static_cast<int>(type), qj_dtype_name(type), (long long)dim);
  return b;
}

qj_status qj_quantize_rowwise_ex(qj_dtype dst_type, uint32_t flags, qj_dtype src_type, const void* src,
                                 int64_t rows, int64_t dim, void* dst, int64_t dst_stride) {
  qj::RowwiseConvert c;
  QJ_TRY(check_rowwise("qj_quantize_rowwise", true, dst_type, flags, src_type, dst, dst_stride, src, rows, dim, &c));
  if (rows == 0) return QJ_OK;
  return qj::guarded([&] { return qj::quantize_rowwise(c, src, dst); });
}

qj_status qj_dequantize_rowwise_ex(qj_dtype src_type, uint32_t flags, const void* src, int64_t src_stride,
                                   int64_t rows, int64_t dim, qj_dtype dst_type, void* dst) {
  qj::RowwiseConvert c;
  QJ_TRY(check_rowwise("qj_dequantize_rowwise", false, src_type, flags, dst_type, src, src_stride, dst, rows, dim, &c));
  if (rows == 0) return QJ_OK;
  return qj::guarded([&] { return qj::dequantize_rowwise(c, src, dst); });
}

qj_status qj_quantize_rowwise(qj_dtype dst_type, const float* src, int64_t rows, int64_t dim, void* dst) {
  return qj_quantize_rowwise_ex(dst_type, 0, QJ_F32, src, rows, dim, dst, 0);
}

qj_status qj_quantize_rowwise_f16(qj_dtype dst_type, const uint16_t* src, int64_t rows, int64_t dim,
                                  void* dst) {
  return qj_quantize_rowwise_ex(dst_type, 0, QJ_F16, src, rows, dim, dst, 0);
}

qj_status qj_dequantize_rowwise(qj_dtype src_type, const void* src, int64_t rows, int64_t dim, float* dst) {
  return qj_dequantize_rowwise_ex(src_type, 0, src, 0, rows, dim, QJ_F32, dst);
}

qj_status qj_dequantize_rowwise_f16(qj_dtype src_type, const void* src, int64_t rows, int64_t dim,
                                    uint16_t* dst) {
  return qj_dequantize_rowwise_ex(src_type, 0, src, 0, rows, dim, QJ_F16, dst);
}

}  // extern "C"
