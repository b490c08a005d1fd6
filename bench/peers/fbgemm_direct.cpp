// FBGEMM's embedding kernels called directly from C++, without Python: the no-overhead
// complement of fbgemm_peer.py. It links against the fbgemm.so that PyPI's fbgemm-gpu-cpu ships
// (FBGEMM itself, built by its maintainers) and calls its public generator functions, declared
// below from their exported signatures (the mangled names carry the template arguments and
// parameter types, so a wrong declaration fails to link). This reaches what torch's ops do not:
// prefetch off, and RowWiseSparseAdaGradFused, and FP16 GEMM timed without Python (whose cold
// cost after a 512 MiB flush is ~140 us per call). scripts/bench-fbgemm.sh builds and runs it.
//
// Data, modes and timing follow `quantjit-bench embedding` (bench/driver/embedding.cpp): the same
// table bytes (xorshift fill, scale 0.01, bias -0.5) on 2 MiB-aligned THP memory, the same
// lookups (batch 10, lengths 1 + x % (2 avg + 1), the same index and weight streams), warm /
// cold (clflushopt of the touched rows and the index, offset, weight and output arrays before
// each timed call) / fresh (new random indices per call), bench/driver/timing.h's medians.
// Output: JSON Lines with quantjit-bench's field names plus peer "fbgemm", overhead_ns 0.
//
//   fbgemm_direct emb --rows fused8,fused4,fused2,f32,f16 --dims 32,64 --index 32,64 --weighted 0,1
//                     --prefetch 0,16 --mode warm,cold,fresh [--max-rows N] [--reps N] [--with-quantjit]
//   fbgemm_direct adagrad --rows f32,f16 --dims ... --index 32,64 --mode warm,cold,fresh [--max-rows N]
//                     [--with-quantjit]
//   fbgemm_direct gemm --shapes "M,N,K;..." --mode warm|cold [--with-quantjit]
//                     (FP16 GEMM, cblas_gemm_compute)
//   fbgemm_direct int8 --shapes "M,N,K;..." --mode warm|cold [--with-quantjit]
//                     (INT8 GEMM, fbgemmPacked: bench/peers/fbgemm_int8.cpp)
#include <immintrin.h>
#include <sys/mman.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include <quantjit/quantjit.h>

#include "bench/peers/fbgemm_int8.h"
#include "driver/table_util.h"
#include "driver/timing.h"
#include "src/formats/half.h"

// ---- FBGEMM's public API, as exported by fbgemm_gpu/fbgemm.so (FBGEMM 1.9 era) -------------
namespace fbgemm {
struct float16 {
  uint16_t x;
};
template <typename InType, typename IndexType, typename OffsetType, typename OutType>
struct EmbeddingSpMDMKernelSignature {
  // (output_size = bags, index_size, data_size = table rows, input, indices, offsets, weights, out)
  using Type = std::function<bool(int64_t, int64_t, int64_t, const InType*, const IndexType*, const OffsetType*,
                                  const float*, OutType*)>;
};
template <typename InType, typename IndexType, typename OffsetType, typename OutType, bool THREAD_LOCAL>
typename EmbeddingSpMDMKernelSignature<InType, IndexType, OffsetType, OutType>::Type GenerateEmbeddingSpMDM(
    int64_t block_size, bool has_weight, bool normalize_by_lengths, int prefetch, bool is_weight_positional,
    bool use_offsets, bool is_bf16_out, bool is_bf16_in);
template <typename IndexType, typename OffsetType, typename OutType>
typename EmbeddingSpMDMKernelSignature<uint8_t, IndexType, OffsetType, OutType>::Type GenerateEmbeddingSpMDMNBit(
    int bit_rate, int64_t block_size, bool has_weight, bool normalize_by_lengths, int prefetch,
    bool is_weight_positional, bool use_offsets);
template <typename IndexType, typename OffsetType, typename DataType>
struct RowWiseSparseAdaGradFusedSignature {
  // (output_size = bags, index_size, data_size = rows, w, g, h, indices, offsets, epsilon, lr)
  using Type = std::function<bool(int64_t, int64_t, int64_t, DataType*, const float*, float*, const IndexType*,
                                  const OffsetType*, float, float)>;
};
template <typename IndexType, typename OffsetType, typename DataType>
typename RowWiseSparseAdaGradFusedSignature<IndexType, OffsetType, DataType>::Type GenerateRowWiseSparseAdaGradFused(
    int block_size, int prefetch, bool use_offsets, bool use_stochastic_rounding, int grad_stride);
// FP16 GEMM (fp32 A x fp16-packed B): these two come from torch's own FBGEMM copy (libtorch_cpu),
// where fbgemm's float16 is uint16_t; fbgemm-gpu-cpu's fbgemm.so does not export them.
enum class matrix_op_t { NoTranspose, Transpose };
template <typename T>
struct TypeConverter {};
template <typename T, typename C>
class PackedGemmMatrixB {
 public:
  // B is nrow x ncol (K x N), row-major when trans is NoTranspose; brow is the K block (512)
  PackedGemmMatrixB(matrix_op_t trans, int nrow, int ncol, float alpha, const float* smat, int brow);

 private:
  alignas(64) unsigned char opaque_[1024];  // larger than the real object; never copied
};
template <typename T>
void cblas_gemm_compute(matrix_op_t transa, int m, const float* A, const PackedGemmMatrixB<T, TypeConverter<T>>& Bp,
                        float beta, float* C, int thread_id, int num_threads);
}  // namespace fbgemm

namespace {

using qjb::settle_table;
using qjb::flush_bytes;
using qjb::flush_rows;
using qjb::time_mode;
using qjb::thp_share;
using qjb::xorshift;


uint16_t to_f16(float f) { return qj::f32_to_f16(f); }

// qj_embedding_table_alloc's rule: 2 MiB-aligned anonymous memory, MADV_HUGEPAGE.
struct Table {
  uint8_t* p = nullptr;
  size_t bytes = 0;
  explicit Table(size_t b) : bytes(b) {
    const size_t huge = size_t{2} << 20, len = (b + huge - 1) / huge * huge;
    void* raw = mmap(nullptr, len + huge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) return;
    uintptr_t a = reinterpret_cast<uintptr_t>(raw), al = (a + huge - 1) / huge * huge, end = a + len + huge;
    if (al > a) munmap(raw, al - a);
    if (end > al + len) munmap(reinterpret_cast<void*>(al + len), end - (al + len));
    p = reinterpret_cast<uint8_t*>(al);
    madvise(p, len, MADV_HUGEPAGE);
  }
  ~Table() {
    const size_t huge = size_t{2} << 20;
    if (p) munmap(p, (bytes + huge - 1) / huge * huge);
  }
};


int64_t row_bytes(const std::string& fmt, int64_t dim) {
  if (fmt == "fused8") return dim + 8;
  if (fmt == "fused4") return (dim + 1) / 2 + 4;
  if (fmt == "fused2") return (dim + 3) / 4 + 4;
  if (fmt == "f32") return dim * 4;
  return dim * 2;  // f16
}

// quantjit-bench embedding's fill_table (fused and float rows).
void fill_table(uint8_t* t, const std::string& fmt, int64_t dim, int64_t rows, uint64_t seed) {
  const int64_t rb = row_bytes(fmt, dim);
  uint64_t x = seed | 1;
  uint64_t* w = reinterpret_cast<uint64_t*>(t);
  const size_t words = static_cast<size_t>(rows * rb) / 8;
  for (size_t i = 0; i < words; ++i) {
    uint64_t r = xorshift(x);
    if (fmt == "f32") r = (r & 0x807fffff807fffffull) | 0x3f8000003f800000ull;
    else if (fmt == "f16") r = (r & 0x83ff83ff83ff83ffull) | 0x3c003c003c003c00ull;
    w[i] = r;
  }
  if (fmt == "f32" || fmt == "f16") return;
  const float s = 0.01f, b = -0.5f;
  const uint16_t s16 = to_f16(s), b16 = to_f16(b);
  for (int64_t r = 0; r < rows; ++r) {
    uint8_t* row = t + r * rb;
    if (fmt == "fused8") {
      std::memcpy(row + dim, &s, 4);
      std::memcpy(row + dim + 4, &b, 4);
    } else {
      std::memcpy(row + rb - 4, &s16, 2);
      std::memcpy(row + rb - 2, &b16, 2);
    }
  }
}

struct Lookups {
  std::vector<int64_t> idx, offsets;
  std::vector<float> weights;
  int64_t n = 0;
};

// quantjit-bench embedding's make_lookups(bags, rows, avg, false, 1, seed).
Lookups make_lookups(int64_t bags, int64_t rows, int64_t avg_len, uint64_t seed) {
  Lookups l;
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  l.offsets.push_back(0);
  for (int64_t b = 0; b < bags; ++b)
    l.offsets.push_back(l.offsets.back() + 1 + static_cast<int64_t>(xorshift(x) % static_cast<uint64_t>(2 * avg_len + 1)));
  l.n = l.offsets.back();
  l.idx.resize(static_cast<size_t>(l.n));
  for (auto& v : l.idx) v = static_cast<int64_t>(xorshift(x) % static_cast<uint64_t>(rows));
  l.weights.resize(static_cast<size_t>(l.n));
  for (auto& w : l.weights) w = 0.5f + static_cast<float>(xorshift(x) % 1000) / 1000.0f;
  return l;
}


uint64_t g_fresh = 0x5851f42d4c957f2dull;

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> v;
  size_t a = 0;
  while (true) {
    size_t b = s.find(',', a);
    v.push_back(s.substr(a, b == std::string::npos ? std::string::npos : b - a));
    if (b == std::string::npos) break;
    a = b + 1;
  }
  return v;
}

std::vector<int64_t> ints(const std::string& s) {
  std::vector<int64_t> v;
  for (const std::string& x : split(s)) v.push_back(std::atoll(x.c_str()));
  return v;
}

struct Options {
  std::string cmd;
  std::vector<std::string> rows, modes = {"warm", "cold"};
  std::vector<int64_t> dims = {32, 64, 128, 256, 512, 1024}, index = {64}, weighted = {0}, prefetch = {16};
  int64_t max_rows = 0, bags = 10, shape_rows = 4000000, avg_len = 100;
  std::string shapes;  // gemm
  int reps = 0;
  bool with_qj = false;  // emb: quantjit's kernel on the same table, its calls interleaved with FBGEMM's
};

// Reference sum of one bag (fp64), for the one-time check.
void ref_bag(const uint8_t* t, const std::string& fmt, int64_t dim, const int64_t* idx, int64_t len, const float* w,
             std::vector<double>& out) {
  const int64_t rb = row_bytes(fmt, dim);
  std::fill(out.begin(), out.end(), 0.0);
  for (int64_t i = 0; i < len; ++i) {
    const uint8_t* row = t + idx[i] * rb;
    const double wi = w ? w[i] : 1.0;
    if (fmt == "f32" || fmt == "f16") {
      for (int64_t j = 0; j < dim; ++j) {
        float v;
        if (fmt == "f32") {
          std::memcpy(&v, row + 4 * j, 4);
        } else {
          uint16_t h;
          std::memcpy(&h, row + 2 * j, 2);
          v = qj::f16_to_f32(h);
        }
        out[j] += wi * v;
      }
      continue;
    }
    float sc, bi;
    if (fmt == "fused8") {
      std::memcpy(&sc, row + dim, 4);
      std::memcpy(&bi, row + dim + 4, 4);
    } else {
      uint16_t s16, b16;
      std::memcpy(&s16, row + rb - 4, 2);
      std::memcpy(&b16, row + rb - 2, 2);
      sc = qj::f16_to_f32(s16);
      bi = qj::f16_to_f32(b16);
    }
    const int bits = fmt == "fused8" ? 8 : fmt == "fused4" ? 4 : 2, per_byte = 8 / bits;
    for (int64_t j = 0; j < dim; ++j) {
      const int q = (row[j / per_byte] >> (bits * (j % per_byte))) & ((1 << bits) - 1);
      out[j] += wi * (static_cast<double>(q) * sc + bi);
    }
  }
}

// FBGEMM's kernel of the row format (its own std::function, called directly in the timed loop).
template <class In, class Idx>
typename fbgemm::EmbeddingSpMDMKernelSignature<In, Idx, int64_t, float>::Type make_emb_kernel(
    const std::string& fmt, int64_t dim, bool weighted, int pf) {
  if constexpr (std::is_same_v<In, uint8_t>)
    if (fmt != "fused8")
      return fbgemm::GenerateEmbeddingSpMDMNBit<Idx, int64_t, float>(fmt == "fused4" ? 4 : 2, dim, weighted, false,
                                                                      pf, false, true);
  return fbgemm::GenerateEmbeddingSpMDM<In, Idx, int64_t, float, false>(dim, weighted, false, pf, false, true, false,
                                                                        false);
}

const char* emb_kernel_name(const std::string& fmt) {
  if (fmt == "fused8") return "GenerateEmbeddingSpMDM<uint8_t>";
  if (fmt == "f32") return "GenerateEmbeddingSpMDM<float>";
  if (fmt == "f16") return "GenerateEmbeddingSpMDM<float16>";
  return fmt == "fused4" ? "GenerateEmbeddingSpMDMNBit(4)" : "GenerateEmbeddingSpMDMNBit(2)";
}

qj_dtype qj_row_type(const std::string& fmt) {
  if (fmt == "fused8") return QJ_FUSED_8BIT;
  if (fmt == "fused4") return QJ_FUSED_4BIT;
  if (fmt == "fused2") return QJ_FUSED_2BIT;
  return fmt == "f32" ? QJ_F32 : QJ_F16;
}

// The largest difference of out (bags x dim) from a double-precision sum of each bag, relative to
// the sums' largest magnitude (the one-time check of each kernel).
double rel_diff(const uint8_t* table, const std::string& fmt, int64_t dim, const Options& o, const Lookups& lk,
                const std::vector<int64_t>& cur, bool w, const std::vector<float>& out) {
  double rel = 0, amax = 0;
  std::vector<double> want(static_cast<size_t>(dim));
  for (int64_t b = 0; b < o.bags; ++b) {
    ref_bag(table, fmt, dim, cur.data() + lk.offsets[b], lk.offsets[b + 1] - lk.offsets[b],
            w ? lk.weights.data() + lk.offsets[b] : nullptr, want);
    for (int64_t j = 0; j < dim; ++j) {
      amax = std::max(amax, std::fabs(want[j]));
      rel = std::max(rel, std::fabs(want[j] - out[b * dim + j]));
    }
  }
  return rel / std::max(amax, 1e-30);
}

// With --with-quantjit, quantjit's plan (default distance and hint) on the same table and
// lookups; its calls and FBGEMM's alternate within one series of rounds (qjb::time_rounds), so
// each record's ratio comes from one process and one stretch of time: between processes this
// shared machine moves a kernel's median by 10-40%. Its median goes into every FBGEMM record of
// the series as qj_seconds / qj_ns_per_row, and vs_fbgemm is the median of the per-round ratios
// FBGEMM / quantjit (qjb::paired_ratio).
template <class In, class Idx>
void run_emb_case(const Options& o, const std::string& fmt, int64_t dim, int64_t rows, uint8_t* table, double thp,
                  Lookups& lk) {
  const int64_t rb = row_bytes(fmt, dim);
  std::vector<int64_t> cur = lk.idx;
  std::vector<Idx> idx(cur.begin(), cur.end());
  for (int64_t w : o.weighted) {
    struct Fb {
      int64_t pf;
      typename fbgemm::EmbeddingSpMDMKernelSignature<In, Idx, int64_t, float>::Type k;
      std::vector<float> out;
      bool ok = true;
      double rel = 0;
    };
    std::vector<Fb> fbs;
    for (int64_t pf : o.prefetch) {
      fbs.push_back({pf, make_emb_kernel<In, Idx>(fmt, dim, w != 0, static_cast<int>(pf)),
                     std::vector<float>(static_cast<size_t>(o.bags * dim))});
    }
    const In* input = reinterpret_cast<const In*>(table);
    std::vector<std::function<void()>> runs;
    for (Fb& f : fbs) {
      runs.push_back([&, fp = &f] {
        fp->ok &= fp->k(o.bags, lk.n, rows, input, idx.data(), lk.offsets.data(), w ? lk.weights.data() : nullptr,
                        fp->out.data());
      });
      runs.back()();
      f.rel = rel_diff(table, fmt, dim, o, lk, cur, w != 0, f.out);
    }
    qj_embedding_bag_plan plan = nullptr;
    std::vector<float> qj_out(static_cast<size_t>(o.bags * dim));
    double qj_rel = 0;
    if (o.with_qj) {
      qj_embedding_bag_desc d;
      std::memset(&d, 0, sizeof d);
      d.row_type = qj_row_type(fmt);
      d.dim = dim;
      d.index_bits = 8 * sizeof(Idx);
      d.offset_bits = 64;
      d.weighted = w != 0;
      d.pooling = QJ_POOL_SUM;
      d.out_type = QJ_F32;
      d.prefetch_distance = QJ_PREFETCH_AUTO;
      d.prefetch_hint = QJ_PREFETCH_HINT_AUTO;
      if (qj_embedding_bag_plan_create(&d, &plan) != QJ_OK) {
        std::fprintf(stderr, "fbgemm_direct: quantjit: %s\n", qj_last_error());
        std::exit(1);
      }
      runs.push_back([&] {
        qj_embedding_bag_args args{table, nullptr, rows, o.bags, idx.data(), lk.n, lk.offsets.data(),
                                   w ? lk.weights.data() : nullptr, qj_out.data()};
        if (qj_embedding_bag_run_ex(plan, &args, nullptr) != QJ_OK) {
          std::fprintf(stderr, "fbgemm_direct: quantjit: %s\n", qj_last_error());
          std::exit(1);
        }
      });
      runs.back()();
      qj_rel = rel_diff(table, fmt, dim, o, lk, cur, w != 0, qj_out);
    }
    for (const std::string& mode : o.modes) {
      auto prep = [&](int) {
        if (mode == "cold") {
          flush_rows(table, rb, cur);
          flush_bytes(idx.data(), idx.size() * sizeof(Idx));
          flush_bytes(lk.offsets.data(), lk.offsets.size() * 8);
          if (w) flush_bytes(lk.weights.data(), lk.weights.size() * 4);
          for (const Fb& f : fbs) flush_bytes(f.out.data(), f.out.size() * 4);
          flush_bytes(qj_out.data(), qj_out.size() * 4);
        } else if (mode == "fresh") {
          for (auto& v : idx) v = static_cast<Idx>(xorshift(g_fresh) % static_cast<uint64_t>(rows));
        }
      };
      std::vector<double> sec(runs.size());
      std::vector<std::vector<double>> by_round;
      if (o.with_qj) {
        std::vector<qjb::Participant> ps;
        for (const auto& r : runs) ps.push_back({r, prep});
        const auto s = qjb::time_rounds(ps, o.reps > 0 ? o.reps : 201, &by_round);
        for (size_t i = 0; i < runs.size(); ++i) sec[i] = qjb::quantile(s[i], 0.5);
      } else {
        for (size_t i = 0; i < runs.size(); ++i) sec[i] = time_mode(mode, runs[i], prep, o.reps);
      }
      if (mode == "fresh") std::copy(cur.begin(), cur.end(), idx.begin());
      for (size_t i = 0; i < fbs.size(); ++i) {
        std::printf(
            "{\"op\": \"emb\", \"rows_fmt\": \"%s\", \"dim\": %lld, \"rows\": %lld, \"bags\": %lld, \"lookups\": %lld, "
            "\"index_bits\": %d, \"prefetch\": \"%lld\", \"weighted\": %lld, \"mode\": \"%s\", \"pages\": \"thp\", "
            "\"thp_share\": %.2f, \"seconds\": %.9g, \"us_per_call\": %.3f, \"ns_per_row\": %.3f, \"rows_per_s\": %.0f, "
            "\"gbps\": %.3f, \"peer\": \"fbgemm\", \"overhead_ns\": 0, \"ref_rel_diff\": %.3g, \"ok\": %d, "
            "\"kernel\": \"fbgemm::%s (direct, fbgemm-gpu-cpu fbgemm.so)\"",
            fmt.c_str(), (long long)dim, (long long)rows, (long long)o.bags, (long long)lk.n, (int)(8 * sizeof(Idx)),
            (long long)fbs[i].pf, (long long)w, mode.c_str(), thp, sec[i], sec[i] * 1e6, sec[i] / lk.n * 1e9,
            lk.n / sec[i], lk.n * static_cast<double>(rb) / sec[i] * 1e-9, fbs[i].rel, fbs[i].ok ? 1 : 0,
            emb_kernel_name(fmt));
        if (o.with_qj) {
          const double q = sec.back();
          std::printf(", \"qj_seconds\": %.9g, \"qj_ns_per_row\": %.3f, \"qj_ref_rel_diff\": %.3g, \"qj_kernel\": \"%s\", "
                      "\"vs_fbgemm\": %.3f",
                      q, q / lk.n * 1e9, qj_rel, qj_embedding_bag_plan_kernel_name(plan),
                      qjb::paired_ratio(by_round[i], by_round.back()));
        }
        std::printf("}\n");
        std::fflush(stdout);
      }
    }
    qj_embedding_bag_plan_destroy(plan);
  }
}

int cmd_emb(const Options& o) {
  for (const std::string& fmt : o.rows) {
    if (fmt != "fused8" && fmt != "fused4" && fmt != "fused2" && fmt != "f32" && fmt != "f16") {
      std::fprintf(stderr, "fbgemm_direct emb: rows %s not supported (fused8, fused4, fused2, f32, f16)\n",
                   fmt.c_str());
      return 2;
    }
    for (int64_t dim : o.dims) {
      const int64_t rows = o.max_rows > 0 ? std::min(o.shape_rows, o.max_rows) : o.shape_rows;
      const int64_t rb = row_bytes(fmt, dim);
      Table tb(static_cast<size_t>(rows * rb));
      if (!tb.p) {
        std::fprintf(stderr, "fbgemm_direct: cannot allocate\n");
        return 1;
      }
      fill_table(tb.p, fmt, dim, rows, 0x1234 + dim);
      settle_table(tb.p, rb, rows);
      const double thp = thp_share(tb.p, tb.bytes);
      Lookups lk = make_lookups(o.bags, rows, o.avg_len, 7 + dim);
      for (int64_t ib : o.index) {
        auto run_case = [&](auto in_tag) {
          using In = decltype(in_tag);
          if (ib == 32) run_emb_case<In, int32_t>(o, fmt, dim, rows, tb.p, thp, lk);
          else run_emb_case<In, int64_t>(o, fmt, dim, rows, tb.p, thp, lk);
        };
        if (fmt == "f32") run_case(float{});
        else if (fmt == "f16") run_case(fbgemm::float16{});
        else run_case(uint8_t{});  // fused rows
      }
    }
  }
  return 0;
}

// RowWiseSparseAdaGradFused: per bag, the bag's gradient applied to every row it looked up, one
// row-wise AdaGrad step per occurrence (FBGEMM has no coalesced variant; quantjit-bench's
// default --update is coalesced, so compare against its per-occurrence mode).
template <class Idx, class Data>
void run_adagrad_case(const Options& o, const std::string& fmt, int64_t dim, int64_t rows, uint8_t* table,
                      Lookups& lk) {
  std::vector<Idx> idx(lk.idx.begin(), lk.idx.end());
  std::vector<float> h(static_cast<size_t>(rows), 0.1f);
  std::vector<float> g(static_cast<size_t>(o.bags * dim));
  uint64_t x = 5;
  for (auto& v : g) v = static_cast<float>(xorshift(x) % 2001) * 1e-6f - 1e-3f;
  auto k = fbgemm::GenerateRowWiseSparseAdaGradFused<Idx, int64_t, Data>(static_cast<int>(dim), 16, true,
                                                                     std::is_same_v<Data, fbgemm::float16>,
                                                                     static_cast<int>(dim));
  bool ok = true;
  auto run = [&] {
    ok &= k(o.bags, lk.n, rows, reinterpret_cast<Data*>(table), g.data(), h.data(), idx.data(), lk.offsets.data(), 1e-8f,
            1e-4f);
  };
  const int64_t eb = sizeof(Data);
  // One checked call (fp32 tables): FBGEMM's documented step per occurrence, bag by bag:
  // h[r] += mean(g^2); w[r] += lr / (sqrt(h[r]) + eps) * g (its sign convention), in float.
  double err = -1;
  if constexpr (std::is_same_v<Data, float>) {
    std::vector<int64_t> uniq(lk.idx);
    std::sort(uniq.begin(), uniq.end());
    uniq.erase(std::unique(uniq.begin(), uniq.end()), uniq.end());
    std::vector<float> w0, h0;
    for (int64_t r : uniq) {
      const float* wr = reinterpret_cast<const float*>(table) + r * dim;
      w0.insert(w0.end(), wr, wr + dim);
      h0.push_back(h[static_cast<size_t>(r)]);
    }
    run();
    auto slot = [&](int64_t r) { return std::lower_bound(uniq.begin(), uniq.end(), r) - uniq.begin(); };
    for (int64_t b = 0; b < o.bags; ++b) {
      const float* gb = g.data() + b * dim;
      float sq = 0;
      for (int64_t j = 0; j < dim; ++j) sq += gb[j] * gb[j];
      for (int64_t i = lk.offsets[b]; i < lk.offsets[b + 1]; ++i) {
        const int64_t u = slot(lk.idx[static_cast<size_t>(i)]);
        h0[static_cast<size_t>(u)] += sq / static_cast<float>(dim);
        const float step = 1e-4f / (std::sqrt(h0[static_cast<size_t>(u)]) + 1e-8f);
        for (int64_t j = 0; j < dim; ++j) w0[static_cast<size_t>(u * dim + j)] += step * gb[j];
      }
    }
    err = 0;
    for (size_t u = 0; u < uniq.size(); ++u) {
      const float* wr = reinterpret_cast<const float*>(table) + uniq[u] * dim;
      err = std::max(err, static_cast<double>(std::fabs(h[static_cast<size_t>(uniq[u])] - h0[u]) / h0[u]));
      for (int64_t j = 0; j < dim; ++j)
        err = std::max(err, static_cast<double>(std::fabs(wr[j] - w0[u * dim + j]) / std::max(std::fabs(w0[u * dim + j]), 1e-6f)));
    }
  }
  // --with-quantjit: quantjit's deterministic coalesced update (quantjit-bench's default) on the
  // same table, momentum and lookups, its calls alternating with FBGEMM's (the two step in
  // opposite directions by their sign conventions, which keeps the table where it is).
  qj_rowwise_adagrad_desc qd;
  std::memset(&qd, 0, sizeof qd);
  qd.table_type = std::is_same_v<Data, float> ? QJ_F32 : QJ_F16;
  qd.dim = dim;
  qd.index_bits = 8 * sizeof(Idx);
  qd.offset_bits = 64;
  qd.pooling = QJ_POOL_SUM;
  qd.optimizer = QJ_OPT_ROWWISE_ADAGRAD;
  qd.mode = QJ_UPDATE_COALESCED;
  qd.learning_rate = 1e-4f;
  qd.epsilon = 1e-8f;
  qd.stochastic_rounding = !std::is_same_v<Data, float>;
  auto run_qj = [&] {
    if (qj_rowwise_adagrad_fused(&qd, table, h.data(), rows, o.bags, idx.data(), lk.n, lk.offsets.data(), nullptr,
                                 g.data(), 1, 1) != QJ_OK) {
      std::fprintf(stderr, "fbgemm_direct: quantjit: %s\n", qj_last_error());
      std::exit(1);
    }
  };
  for (const std::string& mode : o.modes) {
    // cold: rows flushed before each call; fresh: new random indices before each call; warm:
    // nothing (time_rounds calls prepare in every mode).
    auto prep = [&](int) {
      if (mode == "fresh")
        for (auto& v : idx) v = static_cast<Idx>(xorshift(g_fresh) % static_cast<uint64_t>(rows));
      else if (mode == "cold")
        flush_rows(table, dim * eb, lk.idx);
    };
    double sec = 0, qsec = 0, vs = 0;
    std::vector<std::vector<double>> by_round;
    if (o.with_qj) {
      const auto t = qjb::time_rounds({{run, prep}, {run_qj, prep}}, o.reps > 0 ? o.reps : 201, &by_round);
      sec = qjb::quantile(t[0], 0.5);
      qsec = qjb::quantile(t[1], 0.5);
      vs = qjb::paired_ratio(by_round[0], by_round[1]);
    } else {
      sec = time_mode(mode, run, prep, o.reps);
    }
    if (mode == "fresh") std::copy(lk.idx.begin(), lk.idx.end(), idx.begin());
    std::printf(
        "{\"op\": \"adagrad\", \"rows_fmt\": \"%s\", \"dim\": %lld, \"rows\": %lld, \"bags\": %lld, \"lookups\": %lld, "
        "\"index_bits\": %d, \"mode\": \"%s\", \"pages\": \"thp\", \"seconds\": %.9g, \"us_per_call\": %.3f, "
        "\"ns_per_row\": %.3f, \"rows_per_s\": %.0f, \"peer\": \"fbgemm\", \"overhead_ns\": 0, \"ok\": %d, "
        "\"update\": \"per-occurrence\", \"ref_rel_diff\": %.3g, \"kernel\": \"fbgemm::GenerateRowWiseSparseAdaGradFused (direct, 64-bit offsets, "
        "prefetch 16)\"",
        fmt.c_str(), (long long)dim, (long long)rows, (long long)o.bags, (long long)lk.n, (int)(8 * sizeof(Idx)),
        mode.c_str(), sec, sec * 1e6, sec / lk.n * 1e9, lk.n / sec, ok ? 1 : 0, err);
    if (o.with_qj)
      std::printf(", \"qj_seconds\": %.9g, \"qj_ns_per_row\": %.3f, \"qj_update\": \"coalesced\", \"vs_fbgemm\": %.3f", qsec,
                  qsec / lk.n * 1e9, vs);
    std::printf("}\n");
    std::fflush(stdout);
  }
}

int cmd_adagrad(const Options& o) {
  for (const std::string& fmt : o.rows) {
    if (fmt != "f32" && fmt != "f16") {
      std::fprintf(stderr, "fbgemm_direct adagrad: rows %s not supported (f32, f16)\n", fmt.c_str());
      return 2;
    }
    for (int64_t dim : o.dims) {
      // quantjit-bench embedding --adagrad caps rows at 1,000,000 by default
      const int64_t rows = std::min(o.shape_rows, o.max_rows > 0 ? o.max_rows : 1000000);
      Table tb(static_cast<size_t>(rows * row_bytes(fmt, dim)));
      if (!tb.p) return 1;
      fill_table(tb.p, fmt, dim, rows, 99);
      settle_table(tb.p, row_bytes(fmt, dim), rows);  // as quantjit-bench's --adagrad
      Lookups lk = make_lookups(o.bags, rows, o.avg_len, 3 + dim);
      for (int64_t ib : o.index) {
        if (fmt == "f32") {
          if (ib == 32) run_adagrad_case<int32_t, float>(o, fmt, dim, rows, tb.p, lk);
          else run_adagrad_case<int64_t, float>(o, fmt, dim, rows, tb.p, lk);
        } else {
          if (ib == 32) run_adagrad_case<int32_t, fbgemm::float16>(o, fmt, dim, rows, tb.p, lk);
          else run_adagrad_case<int64_t, fbgemm::float16>(o, fmt, dim, rows, tb.p, lk);
        }
      }
    }
  }
  return 0;
}

// One quantjit GEMM call of the comparison (an error ends the program: nothing to compare).
void run_plan(qj_gemm_plan qp, int64_t m, const void* a, int64_t lda, void* c, int64_t ldc) {
  if (qj_gemm_run(qp, m, a, lda, c, ldc, nullptr) != QJ_OK) {
    std::fprintf(stderr, "fbgemm_direct: quantjit: %s\n", qj_last_error());
    std::exit(1);
  }
}

std::vector<std::array<int64_t, 3>> shape_list(const std::string& shapes) {
  std::vector<std::array<int64_t, 3>> list;
  size_t a = 0;
  while (a < shapes.size()) {
    size_t b = shapes.find(';', a);
    std::string one = shapes.substr(a, b == std::string::npos ? std::string::npos : b - a);
    std::vector<int64_t> v = ints(one);
    if (v.size() == 3) list.push_back({v[0], v[1], v[2]});
    if (b == std::string::npos) break;
    a = b + 1;
  }
  return list;
}

// Times FBGEMM's call `run` (and, if run_qj, quantjit's in the same rounds): *tm FBGEMM's median,
// *qj_sec quantjit's, *vs the median of the per-round ratios FBGEMM / quantjit. Before each timed
// call: cold, the flush; warm, an untimed call of the same participant, so that its packed B is
// back in L2 after the other's call (the two B of 512 x 512 alone fill this L2; interleaved
// without it, each call found its B in L3).
void time_gemm_pair(const Options& o, bool cold, const std::function<void()>& run, const std::function<void()>* run_qj,
                    bench::Timing* tm, double* qj_sec, double* vs) {
  if (!run_qj) {
    bench::TimingOptions t;
    t.cold = cold;
    t.reps = o.reps;
    *tm = bench::time_median(run, t);
    return;
  }
  auto prep_for = [cold](const std::function<void()>& f) -> std::function<void(int)> {
    return [cold, f](int) {
      if (cold)
        bench::flush_caches();
      else
        f();
    };
  };
  std::vector<std::vector<double>> by_round;
  const auto s = qjb::time_rounds({{run, prep_for(run)}, {*run_qj, prep_for(*run_qj)}},
                                  o.reps > 0 ? o.reps : (cold ? 21 : 201), &by_round);
  tm->median = qjb::quantile(s[0], 0.5);
  tm->reps = static_cast<int>(s[0].size());
  *qj_sec = qjb::quantile(s[1], 0.5);
  *vs = qjb::paired_ratio(by_round[0], by_round[1]);
}

// FP16 GEMM over "M,N,K;..." shapes, as `quantjit-bench gemm --weights f16` (warm, or --cold:
// 512 MiB read through the caches before each call, timing.h). C = A B with beta 0 (FBGEMM has
// no bias; quantjit's f16 case adds one, fused). With --with-quantjit, quantjit's plan over the
// same B (qj_weights_quantize_pack to F16, no bias, so both do the same work) runs in the same
// process, its calls and FBGEMM's alternating (qjb::time_rounds: 201 rounds warm, each timed
// call after an untimed one of its own; 21 cold; or --reps), and each record gets qj_seconds,
// qj_ref_rel_diff and vs_fbgemm (the median of the per-round ratios FBGEMM / quantjit), as the
// emb records.
int cmd_gemm(const Options& o, const std::string& shapes, bool cold) {
  for (auto [m, n, k] : shape_list(shapes)) {
    uint64_t x = static_cast<uint64_t>(m * 1000003 + n * 1009 + k) | 1;
    auto uni = [&] { return static_cast<float>((xorshift(x) >> 40) * (2.0 / 16777216.0) - 1.0); };
    std::vector<float> A(static_cast<size_t>(m * k)), B(static_cast<size_t>(k * n)), C(static_cast<size_t>(m * n));
    for (auto& v : A) v = uni();
    for (auto& v : B) v = uni();
    auto bp = std::make_unique<fbgemm::PackedGemmMatrixB<uint16_t, fbgemm::TypeConverter<uint16_t>>>(
        fbgemm::matrix_op_t::NoTranspose, static_cast<int>(k), static_cast<int>(n), 1.0f, B.data(), 512);
    auto run = [&] {
      fbgemm::cblas_gemm_compute<uint16_t>(fbgemm::matrix_op_t::NoTranspose, static_cast<int>(m), A.data(), *bp, 0.0f,
                                           C.data(), 0, 1);
    };
    qj_weights qw = nullptr;
    qj_gemm_plan qp = nullptr;
    std::vector<float> Cq(C.size());
    if (o.with_qj) {
      qj_weights_desc wd{};
      wd.dtype = QJ_F16;
      wd.k = k;
      wd.n = n;
      wd.layout = QJ_LAYOUT_KN;
      wd.granularity = QJ_GRAN_CHANNEL;
      qj_gemm_desc gd{};
      gd.a_type = QJ_F32;
      gd.c_type = QJ_F32;
      if (qj_weights_quantize_pack(&wd, B.data(), n, &qw) != QJ_OK || qj_gemm_plan_create(&gd, qw, &qp) != QJ_OK) {
        std::fprintf(stderr, "fbgemm_direct: quantjit f16 plan: %s\n", qj_last_error());
        qj_weights_destroy(qw);
        return 1;
      }
    }
    auto run_qj = [&] { run_plan(qp, m, A.data(), k, Cq.data(), n); };
    run();
    if (qp) run_qj();
    // check: against fp64 products of fp16-rounded B
    double amax = 0, dmax = 0, qmax = 0;
    for (int64_t i = 0; i < std::min<int64_t>(m, 8); ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t p = 0; p < k; ++p)
          s += static_cast<double>(A[i * k + p]) * qj::f16_to_f32(qj::f32_to_f16(B[p * n + j]));
        amax = std::max(amax, std::fabs(s));
        dmax = std::max(dmax, std::fabs(s - C[i * n + j]));
        if (qp) qmax = std::max(qmax, std::fabs(s - Cq[i * n + j]));
      }
    bench::Timing tm;
    double qj_sec = 0, vs = 0;
    const std::function<void()> fb_fn = run, qj_fn = run_qj;
    time_gemm_pair(o, cold, fb_fn, qp ? &qj_fn : nullptr, &tm, &qj_sec, &vs);
    std::printf(
        "{\"m\": %lld, \"n\": %lld, \"k\": %lld, \"a_type\": \"f32\", \"w_type\": \"f16\", \"c_type\": \"f32\", "
        "\"threads\": 1, \"mode\": \"%s\", \"seconds\": %.9g, \"gops\": %.2f, \"reps\": %d, \"peer\": \"fbgemm\", "
        "\"overhead_ns\": 0, \"peer_rel_diff\": %.3g, \"kernel\": \"fbgemm::cblas_gemm_compute<float16> (direct, "
        "torch's libtorch_cpu copy, beta 0, no bias)\"",
        (long long)m, (long long)n, (long long)k, cold ? "cold" : "warm", tm.median, 2.0 * m * n * k / tm.median * 1e-9,
        tm.reps, dmax / std::max(amax, 1e-30));
    if (qp)
      std::printf(", \"qj_seconds\": %.9g, \"qj_ref_rel_diff\": %.3g, \"qj_kernel\": \"qj_gemm_run (f16 weights, no bias)\", "
                  "\"vs_fbgemm\": %.3f",
                  qj_sec, qmax / std::max(amax, 1e-30), vs);
    std::printf("}\n");
    std::fflush(stdout);
    qj_gemm_plan_destroy(qp);
    qj_weights_destroy(qw);
  }
  return 0;
}

// INT8 GEMM over "M,N,K;..." shapes in quantjit-bench gemm's s8 setting (bench/driver/gemm.cpp:
// u8 A with zero point 3, full-range s8 B with per-column scales, fp32 bias, u8 C with zero point
// 5, scales putting most outputs inside [0, 255]), FBGEMM as torch's quantized linear runs it
// (A packed with its row offsets in every call). With --with-quantjit, quantjit's plan over the
// same B runs in the same rounds (time_gemm_pair). Both outputs are checked against the exact
// result (fp64, ties to even) on the first rows: peer_max_diff / qj_max_diff in output units
// (FBGEMM's AVX2 path saturates int16 pair sums, so its may be > 0 there; quantjit's must be 0).
int cmd_int8(const Options& o, const std::string& shapes, bool cold) {
  for (auto [m, n, k] : shape_list(shapes)) {
    uint64_t x = static_cast<uint64_t>(m * 1000003 + n * 1009 + k) | 1;
    auto uni = [&](double lo, double hi) { return lo + (hi - lo) * ((xorshift(x) >> 40) / 16777216.0); };
    std::vector<uint8_t> A(static_cast<size_t>(m * k)), C(static_cast<size_t>(m * n)), Cq(C.size());
    std::vector<int8_t> B(static_cast<size_t>(k * n));
    std::vector<float> b_scale(n), bias(n);
    for (auto& v : A) v = static_cast<uint8_t>(xorshift(x) >> 56);
    for (auto& v : B) v = static_cast<int8_t>(xorshift(x) >> 56);
    for (auto& v : b_scale) v = static_cast<float>(uni(0.004, 0.012));
    fbgemm_peer::Int8Problem p{};
    p.m = static_cast<int>(m);
    p.n = static_cast<int>(n);
    p.k = static_cast<int>(k);
    p.a_scale = 0.02f;
    p.a_zp = 3;
    p.c_zp = 5;
    p.c_scale = static_cast<float>(p.a_scale * 0.008 * std::sqrt(static_cast<double>(k)) * 147.0 * 74.0 / 40.0);
    for (auto& v : bias) v = static_cast<float>(p.c_scale * uni(80, 120));
    p.b = B.data();
    p.b_scale = b_scale.data();
    p.bias = bias.data();
    fbgemm_peer::Int8Gemm* fg = fbgemm_peer::int8_create(p);
    if (!fg) {
      std::fprintf(stderr, "fbgemm_direct: FBGEMM could not pack B of %lldx%lld\n", (long long)k, (long long)n);
      return 1;
    }
    auto run = [&] { fbgemm_peer::int8_run(fg, A.data(), C.data()); };
    qj_weights qw = nullptr;
    qj_gemm_plan qp = nullptr;
    if (o.with_qj) {
      qj_weights_desc wd{};
      wd.dtype = QJ_S8;
      wd.k = k;
      wd.n = n;
      wd.layout = QJ_LAYOUT_KN;
      wd.granularity = QJ_GRAN_CHANNEL;
      wd.scales = b_scale.data();
      qj_gemm_desc gd{};
      gd.a_type = QJ_U8;
      gd.a_scale = p.a_scale;
      gd.a_zero_point = p.a_zp;
      gd.c_type = QJ_U8;
      gd.c_scale = p.c_scale;
      gd.c_zero_point = p.c_zp;
      gd.bias = bias.data();
      if (qj_weights_pack(&wd, B.data(), n, &qw) != QJ_OK || qj_gemm_plan_create(&gd, qw, &qp) != QJ_OK) {
        std::fprintf(stderr, "fbgemm_direct: quantjit s8 plan: %s\n", qj_last_error());
        qj_weights_destroy(qw);
        fbgemm_peer::int8_destroy(fg);
        return 1;
      }
    }
    auto run_qj = [&] { run_plan(qp, m, A.data(), k, Cq.data(), n); };
    run();
    if (qp) run_qj();
    int peer_diff = 0, qj_diff = 0;
    for (int64_t i = 0; i < std::min<int64_t>(m, 8); ++i)
      for (int64_t j = 0; j < n; ++j) {
        int64_t acc = 0;
        for (int64_t q = 0; q < k; ++q) acc += (static_cast<int64_t>(A[i * k + q]) - p.a_zp) * B[q * n + j];
        const double y = static_cast<double>(p.a_scale) * b_scale[j] * static_cast<double>(acc) + bias[j];
        const int want = static_cast<int>(std::min(255.0, std::max(0.0, std::nearbyint(y / p.c_scale) + p.c_zp)));
        peer_diff = std::max(peer_diff, std::abs(want - C[i * n + j]));
        if (qp) qj_diff = std::max(qj_diff, std::abs(want - Cq[i * n + j]));
      }
    bench::Timing tm;
    double qj_sec = 0, vs = 0;
    const std::function<void()> fb_fn = run, qj_fn = run_qj;
    time_gemm_pair(o, cold, fb_fn, qp ? &qj_fn : nullptr, &tm, &qj_sec, &vs);
    std::printf(
        "{\"m\": %lld, \"n\": %lld, \"k\": %lld, \"a_type\": \"u8\", \"w_type\": \"s8\", \"c_type\": \"u8\", "
        "\"threads\": 1, \"mode\": \"%s\", \"seconds\": %.9g, \"gops\": %.2f, \"reps\": %d, \"peer\": \"fbgemm\", "
        "\"overhead_ns\": 0, \"peer_max_diff\": %d, \"kernel\": \"fbgemm::fbgemmPacked (direct, torch's libtorch_cpu copy, "
        "PackAWithRowOffset + ReQuantizeOutput per channel, fp32 bias)\"",
        (long long)m, (long long)n, (long long)k, cold ? "cold" : "warm", tm.median, 2.0 * m * n * k / tm.median * 1e-9,
        tm.reps, peer_diff);
    if (qp)
      std::printf(", \"qj_seconds\": %.9g, \"qj_gops\": %.2f, \"qj_max_diff\": %d, \"qj_kernel\": \"qj_gemm_run (s8 weights)\", "
                  "\"vs_fbgemm\": %.3f",
                  qj_sec, 2.0 * m * n * k / qj_sec * 1e-9, qj_diff, vs);
    std::printf("}\n");
    std::fflush(stdout);
    qj_gemm_plan_destroy(qp);
    qj_weights_destroy(qw);
    fbgemm_peer::int8_destroy(fg);
  }
  return 0;
}

int usage() {
  std::fprintf(stderr,
               "usage: fbgemm_direct emb|adagrad [--rows LIST] [--dims LIST] [--index 32,64] [--weighted 0,1]\n"
               "       [--prefetch 0,16] [--mode warm,cold,fresh] [--max-rows N] [--reps N]\n"
               "       [--with-quantjit]   (quantjit's kernel / update timed in the same rounds, 201 by default)\n"
               "       fbgemm_direct gemm --shapes \"M,N,K;...\" [--mode warm|cold] [--reps N]   (FP16 weights)\n"
               "       fbgemm_direct int8 --shapes \"M,N,K;...\" [--mode warm|cold] [--reps N]   (INT8, s8 weights)\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage();
  Options o;
  o.cmd = argv[1];
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--with-quantjit") {
      o.with_qj = true;
      continue;
    }
    if (i + 1 >= argc) return usage();
    const std::string v = argv[++i];
    if (a == "--rows") o.rows = split(v);
    else if (a == "--dims") o.dims = ints(v);
    else if (a == "--index") o.index = ints(v);
    else if (a == "--weighted") o.weighted = ints(v);
    else if (a == "--prefetch") o.prefetch = ints(v);
    else if (a == "--mode") o.modes = split(v);
    else if (a == "--max-rows") o.max_rows = std::atoll(v.c_str());
    else if (a == "--reps") o.reps = std::atoi(v.c_str());
    else if (a == "--shapes") o.shapes = v;
    else return usage();
  }
  if (o.cmd == "gemm") return cmd_gemm(o, o.shapes, o.modes.size() == 1 && o.modes[0] == "cold");
  if (o.cmd == "int8") return cmd_int8(o, o.shapes, o.modes.size() == 1 && o.modes[0] == "cold");
  if (o.cmd == "emb") {
    if (o.rows.empty()) o.rows = {"fused8", "fused4"};
    return cmd_emb(o);
  }
  if (o.cmd == "adagrad") {
    if (o.rows.empty()) o.rows = {"f32", "f16"};
    return cmd_adagrad(o);
  }
  return usage();
}
