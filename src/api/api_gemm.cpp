// C API: packed weights and GEMM plans. Argument checks and handles only; the work is in
// src/ops (int_weights, serialize, gemm).
#include <quantjit/quantjit.h>

#include <algorithm>
#include <memory>
#include <new>

#include "src/core/isa.h"
#include "src/core/status.h"
#include "src/core/threading.h"
#include "src/ops/gemm.h"
#include "src/ops/int_weights.h"
#include "src/ops/mx_act.h"
#include "src/ops/mx_weights.h"

struct qj_weights_s {
  std::shared_ptr<qj::PackedWeights> w;
};

struct qj_gemm_plan_s {
  std::unique_ptr<qj::GemmPlan> p;
};

namespace {

// Elements (bytes for S4 / U4, which hold two values per byte) of one stored row of `data`.
int64_t stored_row_length(const qj_weights_desc* d, bool quantized) {
  const int64_t row = d->layout == QJ_LAYOUT_KN ? d->n : d->k;
  if (quantized && qj::mx_weights_type(d->dtype)) return 0;  // checked by the MX packer
  if (quantized && (d->dtype == QJ_S4 || d->dtype == QJ_U4))
    return d->layout == QJ_LAYOUT_KN ? d->n : (d->k + 1) / 2;
  return row;
}

// rows x ld elements of up to 8 bytes each must be addressable (2^53 elements is far past any
// real buffer and keeps every offset computed from them inside int64).
bool extent_fits(int64_t rows, int64_t ld) {
  const int64_t limit = int64_t(1) << 53;
  return ld <= limit && (rows <= 1 || ld <= limit / rows);
}

// The stored rows of the weights (K rows of N for KN, N rows of K for NK) at stride ld.
qj_status check_weights_ld(const qj_weights_desc* desc, bool quantized, int64_t ld) {
  const int64_t row = stored_row_length(desc, quantized);
  const int64_t rows = desc->layout == QJ_LAYOUT_KN ? desc->k : desc->n;
  if (ld < row)
    return qj::fail(QJ_ERR_INVALID_ARGUMENT, "ld=%lld is smaller than the row length %lld",
                    (long long)ld, (long long)row);
  if (!extent_fits(rows, ld))
    return qj::fail(QJ_ERR_INVALID_ARGUMENT, "ld=%lld exceeds the address space for %lld rows",
                    (long long)ld, (long long)rows);
  return QJ_OK;
}

using qj::guarded;

qj_status wrap_weights(std::shared_ptr<qj::PackedWeights> w, qj_weights* out) {
  auto* h = new (std::nothrow) qj_weights_s;
  if (!h) return qj::fail(QJ_ERR_OUT_OF_MEMORY, "out of memory");
  h->w = std::move(w);
  *out = h;
  return QJ_OK;
}

}  // namespace

extern "C" {

qj_status qj_weights_pack(const qj_weights_desc* desc, const void* data, int64_t ld, qj_weights* out) {
  return guarded([&] {
    if (!out) return qj::fail(QJ_ERR_INVALID_ARGUMENT, "out is NULL");
    QJ_TRY(qj::check_int_weights_desc(desc, true));
    if (!data) return qj::fail(QJ_ERR_INVALID_ARGUMENT, "data is NULL");
    QJ_TRY(check_weights_ld(desc, true, ld));
    std::shared_ptr<qj::PackedWeights> w;
    QJ_TRY(qj::pack_int_weights(*desc, data, ld, qj::max_isa(), &w));
    return wrap_weights(std::move(w), out);
  });
}

qj_status qj_weights_quantize_pack(const qj_weights_desc* desc, const float* data, int64_t ld,
                                   qj_weights* out) {
  return guarded([&] {
    if (!out) return qj::fail(QJ_ERR_INVALID_ARGUMENT, "out is NULL");
    QJ_TRY(qj::check_int_weights_desc(desc, false));
    if (!data) return qj::fail(QJ_ERR_INVALID_ARGUMENT, "w is NULL");
    QJ_TRY(check_weights_ld(desc, false, ld));
    std::shared_ptr<qj::PackedWeights> w;
    QJ_TRY(qj::quantize_int_weights(*desc, data, ld, qj::max_isa(), &w));
    return wrap_weights(std::move(w), out);
  });
}

size_t qj_weights_serialized_size(qj_weights w) {
  return w ? qj::weights_serialized_size(*w->w) : 0;
}

qj_status qj_weights_serialize(qj_weights w, void* buf, size_t size) {
  return guarded([&] {
    if (!w) return qj::fail(QJ_ERR_INVALID_ARGUMENT, "w is NULL");
    if (!buf) return qj::fail(QJ_ERR_INVALID_ARGUMENT, "buf is NULL");
    return qj::weights_serialize(*w->w, buf, size);
  });
}

qj_status qj_weights_deserialize(const void* buf, size_t size, qj_weights* out) {
  return guarded([&] {
    if (!out) return qj::fail(QJ_ERR_INVALID_ARGUMENT, "out is NULL");
    if (!buf) return qj::fail(QJ_ERR_INVALID_ARGUMENT, "buf is NULL");
    std::shared_ptr<qj::PackedWeights> w;
    QJ_TRY(qj::weights_deserialize(buf, size, qj::max_isa(), &w));
    return wrap_weights(std::move(w), out);
  });
}

qj_status qj_weights_info(qj_weights w, qj_dtype* dtype, int64_t* k, int64_t* n, qj_isa* isa) {
  if (!w) return qj::fail(QJ_ERR_INVALID_ARGUMENT, "w is NULL");
  if (dtype) *dtype = w->w->dtype;
  if (k) *k = w->w->k;
  if (n) *n = w->w->n;
  if (isa) *isa = w->w->isa;
  return QJ_OK;
}

qj_status qj_weights_clamped(qj_weights w, int64_t* count) {
  if (!w) return qj::fail(QJ_ERR_INVALID_ARGUMENT, "w is NULL");
  if (!count) return qj::fail(QJ_ERR_INVALID_ARGUMENT, "count is NULL");
  *count = w->w->clamped;
  return QJ_OK;
}

void qj_weights_destroy(qj_weights w) { delete w; }

qj_status qj_gemm_plan_create(const qj_gemm_desc* desc, qj_weights b, qj_gemm_plan* out) {
  return guarded([&] {
    if (!out) return qj::fail(QJ_ERR_INVALID_ARGUMENT, "out is NULL");
    if (!desc) return qj::fail(QJ_ERR_INVALID_ARGUMENT, "desc is NULL");
    if (!b) return qj::fail(QJ_ERR_INVALID_ARGUMENT, "b is NULL");
    std::unique_ptr<qj::GemmPlan> p;
    QJ_TRY(qj::gemm_plan_create(*desc, b->w, &p));
    auto* h = new qj_gemm_plan_s;
    h->p = std::move(p);
    *out = h;
    return QJ_OK;
  });
}

static qj_status check_run(qj_gemm_plan p, int64_t m, const void* a, int64_t lda, void* c, int64_t ldc) {
  if (!p) return qj::fail(QJ_ERR_INVALID_ARGUMENT, "p is NULL");
  if (m < 0) return qj::fail(QJ_ERR_INVALID_ARGUMENT, "m=%lld is negative", (long long)m);
  if (m > (int64_t(1) << 40)) return qj::fail(QJ_ERR_INVALID_ARGUMENT, "m=%lld is too large", (long long)m);
  const qj::PackedWeights& w = *p->p->w;
  const qj_dtype at = p->p->desc.a_type;
  // (m = 0: a no-op, but the leading dimensions are still checked, as BLAS does; a and c may be
  // NULL.)
  if (qj::mx_act_type(at))
    QJ_TRY(qj::check_mx_a_lda(at, w.k, lda));  // (lda in bytes)
  else if (lda < w.k)
    return qj::fail(QJ_ERR_INVALID_ARGUMENT, "lda=%lld is smaller than k=%lld", (long long)lda, (long long)w.k);
  if (ldc < w.n)
    return qj::fail(QJ_ERR_INVALID_ARGUMENT, "ldc=%lld is smaller than n=%lld", (long long)ldc, (long long)w.n);
  if (m == 0) return QJ_OK;
  if (!a) return qj::fail(QJ_ERR_INVALID_ARGUMENT, "a is NULL");
  if (!c) return qj::fail(QJ_ERR_INVALID_ARGUMENT, "c is NULL");
  if (qj::mx_act_type(at)) QJ_TRY(qj::check_mx_a_run(at, w.k, m, a, lda));  // a is a qj_mx_matrix
  if (!extent_fits(m, lda))
    return qj::fail(QJ_ERR_INVALID_ARGUMENT, "lda=%lld with m=%lld exceeds the address space",
                    (long long)lda, (long long)m);
  if (!extent_fits(m, ldc))
    return qj::fail(QJ_ERR_INVALID_ARGUMENT, "ldc=%lld with m=%lld exceeds the address space",
                    (long long)ldc, (long long)m);
  return QJ_OK;
}

qj_status qj_gemm_run(qj_gemm_plan p, int64_t m, const void* a, int64_t lda, void* c, int64_t ldc,
                      const qj_partition* part) {
  return guarded([&] {
    QJ_TRY(check_run(p, m, a, lda, c, ldc));
    int32_t tid = 0, nth = 1;
    if (part) {
      if (part->num_threads < 1 || part->thread_id < 0 || part->thread_id >= part->num_threads)
        return qj::fail(QJ_ERR_INVALID_ARGUMENT, "part={thread_id=%d, num_threads=%d} is not a valid partition",
                        part->thread_id, part->num_threads);
      tid = part->thread_id;
      nth = part->num_threads;
    }
    if (m == 0) return QJ_OK;
    return qj::gemm_run(*p->p, m, a, lda, c, ldc, tid, nth);
  });
}

qj_status qj_gemm_run_parallel(qj_gemm_plan p, int64_t m, const void* a, int64_t lda, void* c,
                               int64_t ldc, int32_t num_threads) {
  return guarded([&] {
    QJ_TRY(check_run(p, m, a, lda, c, ldc));
    if (num_threads < 1 || num_threads > 1024)
      return qj::fail(QJ_ERR_INVALID_ARGUMENT, "num_threads=%d must be in [1, 1024]", num_threads);
    if (m == 0) return QJ_OK;
    const qj::GemmPlan& plan = *p->p;
    // Rough single-thread time for the pool (threading.h): ~400 GOPS integer, ~110 GFLOPS float.
    const double ops = 2.0 * static_cast<double>(m) * static_cast<double>(plan.w->n) * static_cast<double>(plan.w->k);
    const int64_t work_ns = static_cast<int64_t>(std::min(ops / (plan.kind == qj::GemmKind::kFloat ? 110.0 : 400.0), 1e15));
    return qj::gemm_run_parallel(plan, m, a, lda, c, ldc, num_threads, work_ns);
  });
}

void qj_gemm_plan_destroy(qj_gemm_plan p) { delete p; }

}  // extern "C"
