// Random arguments through the whole C API (GEMM, serialization, embedding-bag, row-wise AdaGrad,
// MX and row-wise conversions), valid and invalid mixed, at every supported ISA tier, with fixed
// seeds (QJ_TEST_ITERATIONS / QJ_TEST_SEED scale and vary them, test/test_util.h). Every buffer is
// exactly as large as the documented extents, so the ASan + UBSan build of CI turns any read or
// write outside them (or undefined behaviour) into a failure. The test also
// checks the failure contract: a failed call returns a message, leaves its outputs (C, the output
// rows, the table and momentum, *out handles) untouched. Correctness is the other tests' job.
#include <quantjit/quantjit.h>

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <random>
#include <string>
#include <vector>

#include "test/test_util.h"

namespace {

class Rng {
 public:
  explicit Rng(uint64_t seed) : g_(seed) {}
  int64_t in(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(g_); }
  bool one_in(int64_t n) { return in(0, n - 1) == 0; }
  template <class T>
  T pick(std::initializer_list<T> l) {
    return *(l.begin() + in(0, static_cast<int64_t>(l.size()) - 1));
  }
  // Mostly ordinary values, sometimes NaN, Inf, huge, zero or subnormal.
  float value() {
    switch (in(0, 40)) {
      case 0: return NAN;
      case 1: return INFINITY;
      case 2: return -1e30f;
      case 3: return 0.0f;
      case 4: return 1e-40f;
      default: return std::uniform_real_distribution<float>(-4, 4)(g_);
    }
  }

 private:
  std::mt19937_64 g_;
};

// Stores an int into a C enum field through memory (no C++ conversion to the enum type).
template <class E>
void set_raw(E& field, int v) {
  static_assert(sizeof(E) == sizeof(int));
  std::memcpy(&field, &v, sizeof v);
}

template <class E>
int raw_enum_value(const E& field) {
  int v;
  std::memcpy(&v, &field, sizeof v);
  return v;
}

// A valid value of an enum field most of the time, else one of `bad`.
template <class E>
void set_enum(Rng& r, E& field, std::initializer_list<int> good, std::initializer_list<int> bad) {
  set_raw(field, r.one_in(20) ? r.pick(bad) : r.pick(good));
}

bool has_message() { return qj_last_error() != nullptr && qj_last_error()[0] != '\0'; }

qj_isa random_isa(Rng& r) {
  const std::vector<qj_isa> isas = qjt::supported_isas();
  return isas[static_cast<size_t>(r.in(0, static_cast<int64_t>(isas.size()) - 1))];
}

// Random bags of an embedding-bag or AdaGrad call: nb bag lengths in [0, max_len], indices in
// [0, lim) (one in bad_one_in outside it), and offsets (num_bags + 1) or lengths as the desc says,
// stored at the desc's integer widths; one in 40 offsets / lengths off by -1, 1 or 1000.
struct Bags {
  std::vector<int64_t> lens;
  int64_t ni = 0;
  std::vector<uint8_t> indices, offsets;
  Bags(Rng& r, int64_t nb, int64_t max_len, int64_t lim, int64_t bad_one_in, int index_bits, int offset_bits,
       bool use_lengths)
      : lens(static_cast<size_t>(nb)) {
    for (auto& l : lens) ni += (l = r.in(0, max_len));
    const int ib = index_bits == 64 ? 8 : 4, ob = offset_bits == 64 ? 8 : 4;
    indices.resize(static_cast<size_t>(ni * ib));
    offsets.resize(static_cast<size_t>((nb + 1) * ob));
    for (int64_t i = 0; i < ni; ++i) {
      const int64_t v = r.one_in(bad_one_in) ? r.pick<int64_t>({-1, lim}) : r.in(0, lim - 1);
      put(indices.data() + i * ib, v, ib);
    }
    int64_t acc = 0;
    for (int64_t b = 0; b < (use_lengths ? nb : nb + 1); ++b) {
      int64_t v = use_lengths ? lens[b] : acc;
      if (!use_lengths && b < nb) acc += lens[b];
      if (r.one_in(40)) v += r.pick<int64_t>({-1, 1, 1000});
      put(offsets.data() + b * ob, v, ob);
    }
  }
  static void put(uint8_t* p, int64_t v, int bytes) {
    const int32_t v32 = static_cast<int32_t>(v);
    std::memcpy(p, bytes == 8 ? static_cast<const void*>(&v) : &v32, static_cast<size_t>(bytes));
  }
};

TEST(RandomArgs, Gemm) {
  Rng r(qjt::random_seed(20261130u));
  const int wtypes[] = {QJ_S8, QJ_S4, QJ_U4, QJ_F16, QJ_BF16, QJ_MXFP8_E4M3, QJ_MXFP8_E5M2, QJ_MXFP6_E3M2,
                        QJ_MXFP6_E2M3, QJ_MXFP4_E2M1, QJ_MXINT8, QJ_BDR_MX9, QJ_BDR_MX6, QJ_BDR_MX4};
  int plans = 0, runs_ok = 0;
  for (int it = 0, iters = qjt::random_iterations(1500); it < iters; ++it) {
    qjt::IsaCap cap(random_isa(r));
    qj_weights_desc d{};
    set_raw(d.dtype, r.one_in(20) ? r.pick<int>({0, QJ_U8, QJ_F32, 99}) : wtypes[r.in(0, 13)]);
    d.k = r.one_in(10) ? r.pick<int64_t>({1, 3, 16, 31, 33, 48, 100, 257, 0, -1})
                       : r.pick<int64_t>({32, 64, 96, 128, 160, 256});
    d.n = r.pick<int64_t>({1, 2, 4, 7, 8, 15, 16, 17, 33, 40, 0, -3});
    set_enum(r, d.layout, {QJ_LAYOUT_KN, QJ_LAYOUT_NK}, {5, -1});
    set_enum(r, d.granularity, {QJ_GRAN_TENSOR, QJ_GRAN_CHANNEL, QJ_GRAN_GROUP}, {QJ_GRAN_ROW, 9});
    d.group_size = r.one_in(10) ? r.pick<int64_t>({0, 16, 7, -32}) : r.pick<int64_t>({32, 64, 128});
    const int64_t kk = std::max<int64_t>(d.k, 1), nn = std::max<int64_t>(d.n, 1);
    const bool nk = raw_enum_value(d.layout) == QJ_LAYOUT_NK;
    const int64_t ld = (nk ? kk : nn) + (r.one_in(20) ? -1 : r.pick<int64_t>({0, 0, 3}));
    std::vector<float> wf(static_cast<size_t>((nk ? nn : kk) * std::max<int64_t>(ld, 1)));
    for (float& v : wf) v = r.value();
    qj_weights w = reinterpret_cast<qj_weights>(uintptr_t{0x5a5a});
    if (qj_weights_quantize_pack(&d, wf.data(), ld, &w) != QJ_OK) {
      EXPECT_EQ(w, reinterpret_cast<qj_weights>(uintptr_t{0x5a5a})) << "iteration " << it;
      EXPECT_TRUE(has_message()) << "iteration " << it;
      continue;
    }
    // Serialization with a random truncation or bit flip: rejected, or weights that work.
    if (r.one_in(4)) {
      const size_t sz = qj_weights_serialized_size(w);
      std::vector<uint8_t> buf(sz);
      ASSERT_EQ(qj_weights_serialize(w, buf.data(), sz), QJ_OK) << qj_last_error();
      const size_t cut = r.one_in(3) ? static_cast<size_t>(r.in(1, static_cast<int64_t>(sz))) : sz;
      std::vector<uint8_t> b2(buf.begin(), buf.begin() + static_cast<int64_t>(cut));
      if (r.one_in(2)) b2[static_cast<size_t>(r.in(0, static_cast<int64_t>(cut) - 1))] ^= static_cast<uint8_t>(1 << r.in(0, 7));
      qj_weights w2 = nullptr;
      if (qj_weights_deserialize(b2.data(), cut, &w2) == QJ_OK) {
        qj_weights_destroy(w);
        w = w2;
      } else {
        EXPECT_EQ(w2, nullptr);
        EXPECT_TRUE(has_message());
      }
    }
    qj_dtype wt;
    int64_t wk = 0, wn = 0;
    qj_isa wisa;
    ASSERT_EQ(qj_weights_info(w, &wt, &wk, &wn, &wisa), QJ_OK);
    for (int p = 0; p < 3; ++p) {
      qjt::IsaCap cap2(random_isa(r));
      qj_gemm_desc g{};
      set_enum(r, g.a_type,
               {QJ_U8, QJ_S8, QJ_F32, QJ_BF16, QJ_MXFP8_E4M3, QJ_MXFP8_E5M2, QJ_MXFP6_E3M2, QJ_MXFP6_E2M3,
                QJ_MXFP4_E2M1, QJ_MXINT8},
               {QJ_S32, QJ_F16, 77, -1});
      g.a_scale = r.one_in(15) ? r.pick({0.0f, -1.0f, NAN}) : r.pick({0.05f, 1.0f});
      g.a_zero_point = r.one_in(15) ? r.pick({128, -5, 300}) : r.pick({0, 3, 100});
      set_enum(r, g.a_granularity, {QJ_GRAN_TENSOR, QJ_GRAN_GROUP, QJ_GRAN_ROW}, {QJ_GRAN_CHANNEL, 7});
      set_enum(r, g.c_type, {QJ_U8, QJ_S8, QJ_S32, QJ_F32, QJ_BF16}, {QJ_F16, 55});
      g.c_scale = r.one_in(15) ? r.pick({0.0f, INFINITY}) : r.pick({0.5f, 10.0f});
      g.c_zero_point = r.one_in(15) ? 400 : r.pick({0, 5, -3});
      std::vector<float> bias(static_cast<size_t>(wn));
      for (float& v : bias) v = r.one_in(200) ? NAN : 0.1f * static_cast<float>(r.in(-20, 20));
      g.bias = r.one_in(2) ? bias.data() : nullptr;
      set_enum(r, g.activation, {QJ_ACT_NONE, QJ_ACT_RELU}, {3});
      g.beta = r.one_in(20) ? NAN : r.pick({0.0f, 0.0f, 0.5f});
      qj_gemm_plan plan = reinterpret_cast<qj_gemm_plan>(uintptr_t{0x5a5a});
      if (qj_gemm_plan_create(&g, w, &plan) != QJ_OK) {
        EXPECT_EQ(plan, reinterpret_cast<qj_gemm_plan>(uintptr_t{0x5a5a})) << "iteration " << it;
        EXPECT_TRUE(has_message()) << "iteration " << it;
        continue;
      }
      ++plans;
      const int at = raw_enum_value(g.a_type), ct = raw_enum_value(g.c_type);
      for (int run = 0; run < 3; ++run) {
        const int64_t m = r.one_in(15) ? r.pick<int64_t>({0, -1}) : r.pick<int64_t>({1, 2, 3, 7, 13, 16, 33});
        const int64_t mm = std::max<int64_t>(m, 1);
        const bool mx_a = at >= QJ_MXFP8_E4M3 && at <= QJ_MXINT8;
        int64_t lda = wk + (r.one_in(15) ? -1 : r.pick<int64_t>({0, 0, 5}));
        const int64_t ldc = wn + (r.one_in(15) ? -1 : r.pick<int64_t>({0, 0, 2}));
        const size_t csz = ct == QJ_F32 || ct == QJ_S32 ? 4 : ct == QJ_BF16 ? 2 : 1;
        std::vector<uint8_t> cbuf(static_cast<size_t>((mm - 1) * std::max<int64_t>(ldc, wn) + wn) * csz, 0xa5);
        std::vector<uint8_t> abuf, sbuf;
        qj_mx_matrix mxm{};
        const void* aptr = nullptr;
        if (mx_a) {
          const int bits = at == QJ_MXFP4_E2M1 ? 4 : (at == QJ_MXFP6_E2M3 || at == QJ_MXFP6_E3M2) ? 6 : 8;
          const int64_t rowb = (wk * bits + 7) / 8, blocks = std::max<int64_t>(wk / 32, 1);
          lda = rowb + (r.one_in(15) ? -1 : r.pick<int64_t>({0, 0, 7}));
          const int64_t sld = blocks + r.pick<int64_t>({0, 1});
          abuf.resize(static_cast<size_t>((mm - 1) * std::max<int64_t>(lda, rowb) + rowb));
          sbuf.resize(static_cast<size_t>((mm - 1) * sld + blocks));
          for (auto& b : abuf) b = static_cast<uint8_t>(r.in(0, 255));
          for (auto& b : sbuf) b = static_cast<uint8_t>(r.pick({127, 120, 0, 255, 254, 130}));
          mxm.elems = abuf.data();
          mxm.scales = sbuf.data();
          mxm.scales_ld = sld;
          aptr = &mxm;
        } else {
          const size_t esz = at == QJ_F32 ? 4 : at == QJ_BF16 ? 2 : 1;
          const int64_t n_el = (mm - 1) * std::max<int64_t>(lda, wk) + wk;
          abuf.resize(static_cast<size_t>(n_el) * esz);
          if (esz == 4) {
            for (int64_t i = 0; i < n_el; ++i) {
              const float f = r.one_in(300) ? NAN : r.value();
              std::memcpy(abuf.data() + 4 * i, &f, 4);
            }
          } else {
            for (auto& b : abuf) b = static_cast<uint8_t>(r.in(0, 255));
          }
          aptr = abuf.data();
        }
        const std::vector<uint8_t> before = cbuf;
        const qj_status st = r.one_in(5) ? qj_gemm_run_parallel(plan, m, aptr, lda, cbuf.data(), ldc, 2)
                                         : qj_gemm_run(plan, m, aptr, lda, cbuf.data(), ldc, nullptr);
        if (st != QJ_OK) {
          EXPECT_TRUE(cbuf == before) << "iteration " << it << ": a failed run (" << qj_last_error()
                                      << ") wrote C";
          EXPECT_TRUE(has_message()) << "iteration " << it;
        } else {
          ++runs_ok;
        }
      }
      qj_gemm_plan_destroy(plan);
    }
    qj_weights_destroy(w);
  }
  // The mix reaches the kernels often enough to mean something.
  EXPECT_GT(plans, 300);
  EXPECT_GT(runs_ok, 600);
}

TEST(RandomArgs, EmbeddingBag) {
  Rng r(qjt::random_seed(771130u));
  const int rts[] = {QJ_F32, QJ_F16, QJ_BF16, QJ_FUSED_8BIT, QJ_FUSED_4BIT, QJ_FUSED_2BIT, QJ_MXFP4_E2M1,
                     QJ_MXINT8, QJ_MXFP8_E4M3, QJ_MXFP8_E5M2};
  int runs_ok = 0;
  for (int it = 0, iters = qjt::random_iterations(800); it < iters; ++it) {
    qjt::IsaCap cap(random_isa(r));
    qj_embedding_bag_desc d{};
    set_raw(d.row_type, r.one_in(30) ? r.pick<int>({0, QJ_S8, 99}) : rts[r.in(0, 9)]);
    d.dim = r.one_in(20) ? r.pick<int64_t>({0, -4})
                         : r.pick<int64_t>({1, 4, 7, 8, 15, 16, 17, 31, 32, 33, 64, 96, 100, 163, 256});
    d.index_bits = r.one_in(20) ? 16 : r.pick({32, 64});
    d.offset_bits = r.one_in(20) ? 8 : r.pick({32, 64});
    d.use_lengths = static_cast<int32_t>(r.in(0, 1));
    d.weighted = static_cast<int32_t>(r.in(0, 1));
    d.positional = r.one_in(30) || (d.weighted && r.one_in(3));
    set_enum(r, d.pooling, {QJ_POOL_SUM, QJ_POOL_MEAN, QJ_POOL_NONE}, {5});
    set_enum(r, d.out_type, {QJ_F32, QJ_F16, QJ_BF16}, {QJ_U8});
    d.out_stride = r.one_in(4) ? d.dim + r.pick<int64_t>({0, 3, -1}) : 0;
    d.prefetch_distance = r.pick({-1, 0, 1, 8, 64});
    d.scale_bias_first = r.one_in(6);
    d.row_stride = r.one_in(6) ? r.pick<int64_t>({256, 1024, 3}) : 0;
    set_enum(r, d.prefetch_hint, {0, 1, 2, 3, 4}, {9});
    const int64_t num_rows = r.pick<int64_t>({1, 5, 50, 1000});
    std::vector<int32_t> remap;
    if (r.one_in(6)) {
      d.remap_size = num_rows + r.pick<int64_t>({0, 3});
      remap.resize(static_cast<size_t>(d.remap_size));
      for (auto& m : remap)
        m = r.one_in(7) ? (r.one_in(10) ? static_cast<int32_t>(num_rows) : -1) : static_cast<int32_t>(r.in(0, num_rows - 1));
      d.remap = remap.data();
    }
    qj_embedding_bag_plan p = nullptr;
    if (qj_embedding_bag_plan_create(&d, &p) != QJ_OK) {
      EXPECT_EQ(p, nullptr) << "iteration " << it;
      EXPECT_TRUE(has_message()) << "iteration " << it;
      continue;
    }
    const int rt = raw_enum_value(d.row_type), ot = raw_enum_value(d.out_type);
    const bool split = rt == QJ_MXINT8 || rt == QJ_MXFP8_E4M3 || rt == QJ_MXFP8_E5M2;
    const int64_t blocks = (d.dim + 31) / 32;
    int64_t natural = 32 * blocks;
    if (rt == QJ_F32) natural = 4 * d.dim;
    if (rt == QJ_F16 || rt == QJ_BF16) natural = 2 * d.dim;
    if (rt == QJ_FUSED_8BIT) natural = d.dim + 8;
    if (rt == QJ_FUSED_4BIT) natural = (d.dim + 1) / 2 + 4;
    if (rt == QJ_FUSED_2BIT) natural = (d.dim + 3) / 4 + 4;
    if (rt == QJ_MXFP4_E2M1) natural = 17 * blocks;
    const int64_t stride = d.row_stride ? d.row_stride : natural;
    std::vector<uint8_t> table(static_cast<size_t>((num_rows - 1) * stride + natural));
    for (auto& b : table) b = static_cast<uint8_t>(r.in(0, 255));
    std::vector<uint8_t> scales(split ? static_cast<size_t>(num_rows * blocks) : 1);
    for (auto& s : scales) s = static_cast<uint8_t>(r.pick({127, 120, 130, 0, 255}));
    for (int run = 0; run < 4; ++run) {
      const int64_t nb = r.pick<int64_t>({0, 1, 3, 10});
      const int64_t avg = r.pick<int64_t>({0, 1, 5, 40});
      const int64_t lim = d.remap ? d.remap_size : num_rows;
      const Bags bags(r, nb, 2 * avg, lim, 50, d.index_bits, d.offset_bits, d.use_lengths != 0);
      const int64_t ni = bags.ni;
      std::vector<float> wts(static_cast<size_t>(std::max<int64_t>(ni, 1)));
      for (float& w : wts) w = static_cast<float>(r.in(-100, 100)) / 37.0f;
      const int64_t out_rows = raw_enum_value(d.pooling) == QJ_POOL_NONE ? ni : nb;
      const int64_t ost = d.out_stride ? d.out_stride : d.dim;
      const size_t osz = ot == QJ_F32 ? 4 : 2;
      std::vector<uint8_t> out(static_cast<size_t>(std::max<int64_t>(out_rows - 1, 0) * std::max<int64_t>(ost, 1) + d.dim) * osz,
                               0x5a);
      const std::vector<uint8_t> before = out;
      qj_embedding_bag_args a{};
      a.table = table.data();
      a.table_scales = split ? scales.data() : nullptr;
      a.num_rows = num_rows;
      a.num_bags = nb;
      a.indices = bags.indices.data();
      a.num_indices = ni;
      a.offsets_or_lengths = bags.offsets.data();
      a.weights = d.weighted ? wts.data() : nullptr;
      a.out = out.data();
      qj_status st;
      if (r.one_in(3)) {
        st = qj_embedding_bag_run_parallel_ex(p, &a, 2);
      } else if (split || r.one_in(2)) {
        const qj_partition part{static_cast<int32_t>(r.in(0, 1)), 2};
        st = qj_embedding_bag_run_ex(p, &a, r.one_in(2) ? &part : nullptr);
      } else {
        st = qj_embedding_bag_run_parallel(p, a.table, num_rows, nb, a.indices, ni, a.offsets_or_lengths, a.weights,
                                           out.data(), 2);
      }
      if (st != QJ_OK) {
        EXPECT_TRUE(out == before) << "iteration " << it << ": a failed run (" << qj_last_error()
                                   << ") wrote the output";
        EXPECT_TRUE(has_message()) << "iteration " << it;
      } else {
        ++runs_ok;
      }
    }
    qj_embedding_bag_plan_destroy(p);
  }
  EXPECT_GT(runs_ok, 500);
}

TEST(RandomArgs, RowwiseAdagrad) {
  Rng r(qjt::random_seed(3141130u));
  int ok = 0;
  for (int it = 0, iters = qjt::random_iterations(600); it < iters; ++it) {
    qjt::IsaCap cap(random_isa(r));
    qj_rowwise_adagrad_desc d{};
    set_raw(d.table_type, r.one_in(20) ? r.pick<int>({QJ_BF16, 0}) : r.pick<int>({QJ_F32, QJ_F16}));
    d.dim = r.one_in(20) ? r.pick<int64_t>({0, -1}) : r.pick<int64_t>({1, 7, 8, 16, 17, 33, 64, 100, 256});
    d.index_bits = r.one_in(20) ? 16 : r.pick({32, 64});
    d.offset_bits = r.one_in(20) ? 8 : r.pick({32, 64});
    d.use_lengths = static_cast<int32_t>(r.in(0, 1));
    d.weighted = static_cast<int32_t>(r.in(0, 1));
    d.positional = d.weighted && r.one_in(3);
    set_enum(r, d.pooling, {QJ_POOL_SUM, QJ_POOL_MEAN}, {QJ_POOL_NONE, 7});
    set_enum(r, d.optimizer, {QJ_OPT_ROWWISE_ADAGRAD, QJ_OPT_SGD}, {5});
    set_enum(r, d.mode, {QJ_UPDATE_COALESCED, QJ_UPDATE_PER_OCCURRENCE_RACY}, {4});
    d.learning_rate = r.one_in(20) ? NAN : 0.01f;
    d.epsilon = r.one_in(20) ? -1.0f : 1e-8f;
    d.stochastic_rounding = r.one_in(3);
    d.grad_stride = r.one_in(4) ? d.dim + r.pick<int64_t>({0, 5, -1}) : 0;
    const int64_t num_rows = r.pick<int64_t>({1, 10, 300});
    const int64_t nb = r.pick<int64_t>({0, 1, 4, 12});
    const Bags bags(r, nb, 30, num_rows, 500, d.index_bits, d.offset_bits, d.use_lengths != 0);
    const int64_t ni = bags.ni;
    const int64_t dim = std::max<int64_t>(d.dim, 1);
    const int64_t gst = d.grad_stride ? std::max<int64_t>(d.grad_stride, dim) : dim;
    std::vector<float> grad(static_cast<size_t>(std::max<int64_t>(nb - 1, 0) * gst + dim));
    for (float& g : grad) g = r.one_in(500) ? NAN : 0.01f * static_cast<float>(r.in(-50, 50));
    std::vector<float> wts(static_cast<size_t>(std::max<int64_t>(ni, 1)), 0.5f);
    const size_t esz = raw_enum_value(d.table_type) == QJ_F32 ? 4 : 2;
    std::vector<uint8_t> table(static_cast<size_t>(num_rows * dim) * esz);
    for (size_t i = 0; i + esz <= table.size(); i += esz) {
      if (esz == 4) {
        const float f = 0.1f * static_cast<float>(r.in(-9, 9));
        std::memcpy(&table[i], &f, 4);
      } else {
        table[i] = 0;
        table[i + 1] = 0x3c;  // fp16 1.0
      }
    }
    std::vector<float> mom(static_cast<size_t>(num_rows), 0.1f);
    const std::vector<uint8_t> t0 = table;
    const std::vector<float> m0 = mom;
    const qj_status st = qj_rowwise_adagrad_fused(&d, table.data(), mom.data(), num_rows, nb, bags.indices.data(), ni,
                                                  bags.offsets.data(), d.weighted ? wts.data() : nullptr, grad.data(),
                                                  0x1234, static_cast<int32_t>(r.pick({1, 2, 3})));
    if (st != QJ_OK) {
      EXPECT_TRUE(table == t0 && mom == m0) << "iteration " << it << ": a failed call (" << qj_last_error()
                                            << ") wrote the table or the momentum";
      EXPECT_TRUE(has_message()) << "iteration " << it;
    } else {
      ++ok;
    }
  }
  EXPECT_GT(ok, 120);
}

TEST(RandomArgs, MxAndRowwiseConversions) {
  Rng r(qjt::random_seed(271130u));
  const int mtypes[] = {QJ_MXFP8_E4M3, QJ_MXFP8_E5M2, QJ_MXFP6_E3M2, QJ_MXFP6_E2M3, QJ_MXFP4_E2M1, QJ_MXINT8,
                        QJ_BDR_MX9,    QJ_BDR_MX6,    QJ_BDR_MX4};
  int ok = 0;
  for (int it = 0, iters = qjt::random_iterations(1500); it < iters; ++it) {
    qjt::IsaCap cap(random_isa(r));
    // By-value enum arguments: the int is converted at the call (as a C caller passes it), never
    // stored in an enum-typed variable.
    const int ti = r.one_in(20) ? r.pick<int>({0, QJ_S8, 99}) : mtypes[r.in(0, 8)];
    const int rdi = r.one_in(20) ? 3 : r.pick<int>({QJ_ROUND_FLOOR, QJ_ROUND_RCEIL});
    const auto t = [ti] { return static_cast<qj_dtype>(ti); };
    const auto rd = [rdi] { return static_cast<qj_rounding>(rdi); };
    const int64_t n = r.one_in(20) ? r.pick<int64_t>({0, -5}) : r.pick<int64_t>({1, 7, 16, 31, 32, 33, 100, 257});
    size_t eb = 0, sb = 0;
    if (qj_mx_storage_size(QJ_MX_LAYOUT_SPLIT, t(), n, &eb, &sb) != QJ_OK) {
      EXPECT_TRUE(has_message());
      continue;
    }
    const bool bf16_src = r.one_in(3);
    std::vector<float> src(static_cast<size_t>(n));
    for (float& v : src) v = r.value();
    std::vector<uint16_t> src16(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      uint32_t u;
      std::memcpy(&u, &src[i], 4);
      src16[i] = static_cast<uint16_t>(u >> 16);
    }
    std::vector<uint8_t> el(eb), sc(sb);
    const qj_status sq = qj_mx_quantize_ex(t(), rd(), bf16_src ? QJ_BF16 : QJ_F32,
                                           bf16_src ? static_cast<const void*>(src16.data()) : src.data(), n,
                                           el.data(), sb ? sc.data() : nullptr);
    if (sq != QJ_OK) {
      EXPECT_TRUE(has_message());
      continue;
    }
    ++ok;
    if (r.one_in(2))  // foreign bytes decode too
      for (auto& b : el) b = static_cast<uint8_t>(r.in(0, 255));
    const bool bf16_dst = r.one_in(3);
    std::vector<uint8_t> dst(static_cast<size_t>(n) * (bf16_dst ? 2 : 4));
    EXPECT_EQ(qj_mx_dequantize_ex(t(), el.data(), sb ? sc.data() : nullptr, n, bf16_dst ? QJ_BF16 : QJ_F32,
                                  dst.data()),
              QJ_OK)
        << qj_last_error();
    if (ti == QJ_MXFP4_E2M1) {
      for (qj_mx_layout lay : {QJ_MX_LAYOUT_GGML_MXFP4, QJ_MX_LAYOUT_FBGEMM_MX4}) {
        size_t fb = 0;
        ASSERT_EQ(qj_mx_storage_size(lay, t(), n, &fb, nullptr), QJ_OK);
        std::vector<uint8_t> f(fb);
        EXPECT_EQ(qj_mx_export(lay, t(), el.data(), sc.data(), n, f.data()), QJ_OK) << qj_last_error();
        for (auto& b : f)
          if (r.one_in(4)) b = static_cast<uint8_t>(r.in(0, 255));
        std::vector<uint8_t> el2(eb), sc2(sb);
        EXPECT_EQ(qj_mx_import(lay, t(), f.data(), n, el2.data(), sc2.data()), QJ_OK) << qj_last_error();
      }
    }
  }
  EXPECT_GT(ok, 600);
  // Row-wise fused rows (8 / 4 / 2 bit, from fp32 with specials) and back.
  for (int it = 0, iters = qjt::random_iterations(600); it < iters; ++it) {
    qjt::IsaCap cap(random_isa(r));
    const int ti = r.one_in(20) ? r.pick<int>({QJ_S8, 0}) : r.pick<int>({QJ_FUSED_8BIT, QJ_FUSED_4BIT, QJ_FUSED_2BIT});
    const auto t = [ti] { return static_cast<qj_dtype>(ti); };
    const int64_t rows = r.pick<int64_t>({0, 1, 3, 17}), dim = r.one_in(20) ? -1 : r.pick<int64_t>({1, 3, 8, 17, 64, 163});
    const int64_t rb = qj_rowwise_row_bytes(t(), std::max<int64_t>(dim, 1), 0);
    if (rb <= 0) continue;
    std::vector<float> src(static_cast<size_t>(rows * std::max<int64_t>(dim, 1)));
    for (float& v : src) v = r.one_in(50) ? r.value() : 0.25f * static_cast<float>(r.in(-40, 40));
    std::vector<uint8_t> q(static_cast<size_t>(rows * rb), 0x77);
    const std::vector<uint8_t> q0 = q;
    if (qj_quantize_rowwise(t(), src.data(), rows, dim, q.data()) != QJ_OK) {
      EXPECT_TRUE(q == q0) << "iteration " << it << ": a failed quantization wrote its output";
      EXPECT_TRUE(has_message());
      continue;
    }
    std::vector<float> back(src.size());
    EXPECT_EQ(qj_dequantize_rowwise(t(), q.data(), rows, dim, back.data()), QJ_OK) << qj_last_error();
  }
}

}  // namespace
