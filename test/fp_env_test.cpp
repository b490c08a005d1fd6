// Results do not depend on the caller's floating-point environment (src/core/fp_env.h): under
// each non-default rounding mode, and with flush-to-zero + denormals-are-zero set, every family
// gives the bytes it gives in the default environment, at every ISA tier (the scalar tier's
// requantization rounds with nearbyint, the JIT tiers with an explicit round-to-nearest-even), on
// the caller's thread, on the built-in pool's and on a caller's pool whose threads run in that
// environment; and the caller's MXCSR is back after each call.
#include <gtest/gtest.h>
#include <quantjit/quantjit.h>
#include <xmmintrin.h>

#include <cfenv>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "test/test_util.h"

namespace {

struct Env {
  const char* name;
  int round;
  bool ftz_daz;
};
const Env kEnvs[] = {{"upward", FE_UPWARD, false},
                     {"downward", FE_DOWNWARD, false},
                     {"toward zero", FE_TOWARDZERO, false},
                     {"ftz + daz", FE_TONEAREST, true},
                     {"upward, ftz + daz", FE_UPWARD, true}};

// Sets the environment on this thread for the guard's lifetime.
class InEnv {
 public:
  explicit InEnv(const Env& e) : saved_(_mm_getcsr()) {
    std::fesetround(e.round);
    if (e.ftz_daz) _mm_setcsr(_mm_getcsr() | 0x8040u);
    set_ = _mm_getcsr();
  }
  ~InEnv() { _mm_setcsr(saved_); }
  unsigned set() const { return set_; }

 private:
  unsigned saved_, set_;
};

// MXCSR without the exception flags (bits 0-5).
unsigned control(unsigned csr) { return csr & ~0x3fu; }

// fp32 values with exact ties and subnormals among them.
std::vector<float> tricky_floats(size_t n, uint32_t seed) {
  std::vector<float> v = qjt::random_floats(n, -4.0f, 4.0f, seed);
  for (size_t i = 0; i < n; ++i) {
    if (i % 5 == 1) v[i] = static_cast<float>(static_cast<int>(i % 17) - 8) + 0.5f;
    if (i % 7 == 3) v[i] = 1e-39f * static_cast<float>(static_cast<int>(i % 9) - 4);  // subnormal
  }
  return v;
}

// The problems' data, made once in the default environment (the test's own float arithmetic,
// random_floats included, follows the rounding mode).
struct Inputs {
  static constexpr int64_t m = 37, n = 19, k = 33;       // u8 GEMM
  static constexpr int64_t fm = 9, fn = 21, fk = 40;     // float GEMMs
  static constexpr int64_t rows = 50, dim = 19;          // embedding-bag
  std::vector<int8_t> b = qjt::random_ints<int8_t>(k * n, -4, 4, 5);
  std::vector<uint8_t> a = qjt::random_ints<uint8_t>(m * k, 0, 6, 6);
  std::vector<float> fa = tricky_floats(fm * fk, 7), fw = qjt::random_floats(fk * fn, -1.0f, 1.0f, 8);
  std::vector<float> table = tricky_floats(rows * dim, 9);
  std::vector<int32_t> idx = qjt::random_ints<int32_t>(30, 0, rows - 1, 10);
  std::vector<float> src = qjt::random_floats(rows * 64, -3.0f, 3.0f, 11);
  std::vector<float> mx = tricky_floats(256, 12);
  Inputs() {
    for (int64_t j = 0; j < fk; ++j) fa[2 * fk + j] = 1e-39f * static_cast<float>(j % 5 + 1);  // a subnormal row
  }
};
const Inputs& inputs() {
  static const Inputs in;
  return in;
}

// u8 x s8 -> u8 with ties: y = (acc - 3 colsum) / 2 (c_scale 2), so every odd sum is a tie.
std::vector<uint8_t> gemm_u8_ties(int32_t threads) {
  const Inputs& in = inputs();
  const int64_t m = in.m, n = in.n, k = in.k;
  const std::vector<int8_t>& b = in.b;
  const std::vector<uint8_t>& a = in.a;
  const float one = 1.0f;
  qj_weights_desc wd = qjt::nk_desc(QJ_S8, k, n);
  wd.granularity = QJ_GRAN_TENSOR;
  wd.scales = &one;
  qj_weights w = nullptr;
  EXPECT_EQ(qj_weights_pack(&wd, b.data(), k, &w), QJ_OK) << qj_last_error();
  qj_gemm_desc gd{};
  gd.a_type = QJ_U8;
  gd.a_scale = 1.0f;
  gd.a_zero_point = 3;
  gd.c_type = QJ_U8;
  gd.c_scale = 2.0f;
  gd.c_zero_point = 128;
  qj_gemm_plan p = nullptr;
  EXPECT_EQ(qj_gemm_plan_create(&gd, w, &p), QJ_OK) << qj_last_error();
  qj_weights_destroy(w);
  std::vector<uint8_t> c(m * n, 0);
  if (p) EXPECT_EQ(qj_gemm_run_parallel(p, m, a.data(), k, c.data(), n, threads), QJ_OK) << qj_last_error();
  qj_gemm_plan_destroy(p);
  return c;
}

// fp32 A (quantized per row inside the call) x s8, and fp32 A x f16 weights; f32 output.
std::vector<uint8_t> gemm_float_outputs(int32_t threads) {
  const Inputs& in = inputs();
  const int64_t m = in.fm, n = in.fn, k = in.fk;
  const std::vector<float>& a = in.fa;
  const std::vector<float>& wf = in.fw;
  std::vector<uint8_t> out;
  for (qj_dtype wt : {QJ_S8, QJ_F16}) {
    qj_weights_desc wd = qjt::nk_desc(wt, k, n);
    wd.granularity = QJ_GRAN_CHANNEL;
    qj_weights w = nullptr;
    EXPECT_EQ(qj_weights_quantize_pack(&wd, wf.data(), k, &w), QJ_OK) << qj_last_error();
    qj_gemm_desc gd{};
    gd.a_type = QJ_F32;
    gd.a_granularity = QJ_GRAN_ROW;
    gd.c_type = QJ_F32;
    qj_gemm_plan p = nullptr;
    EXPECT_EQ(qj_gemm_plan_create(&gd, w, &p), QJ_OK) << qj_last_error();
    qj_weights_destroy(w);
    std::vector<float> c(m * n, 0.0f);
    if (p) EXPECT_EQ(qj_gemm_run_parallel(p, m, a.data(), k, c.data(), n, threads), QJ_OK) << qj_last_error();
    qj_gemm_plan_destroy(p);
    const uint8_t* bytes = reinterpret_cast<const uint8_t*>(c.data());
    out.insert(out.end(), bytes, bytes + c.size() * 4);
  }
  return out;
}

// Embedding-bag over fp32 rows with subnormals (sum, f32 out); 8-bit row-wise quantization; MXFP4
// quantization (its elements round half to even).
std::vector<uint8_t> embedding_and_conversions() {
  const Inputs& in = inputs();
  const int64_t rows = in.rows, dim = in.dim, bags = 4;
  const std::vector<float>& table = in.table;
  const std::vector<int32_t>& idx = in.idx;
  std::vector<int32_t> off = {0, 7, 7, 20, 30};
  qj_embedding_bag_desc d{};
  d.row_type = QJ_F32;
  d.dim = dim;
  d.index_bits = 32;
  d.offset_bits = 32;
  d.pooling = QJ_POOL_SUM;
  d.out_type = QJ_F32;
  qj_embedding_bag_plan p = nullptr;
  EXPECT_EQ(qj_embedding_bag_plan_create(&d, &p), QJ_OK) << qj_last_error();
  std::vector<float> out(bags * dim, 0.0f);
  if (p)
    EXPECT_EQ(qj_embedding_bag_run(p, table.data(), rows, bags, idx.data(), 30, off.data(), nullptr, out.data(), nullptr),
              QJ_OK)
        << qj_last_error();
  qj_embedding_bag_plan_destroy(p);
  std::vector<uint8_t> res(reinterpret_cast<const uint8_t*>(out.data()),
                           reinterpret_cast<const uint8_t*>(out.data()) + out.size() * 4);
  const std::vector<float>& src = in.src;
  std::vector<uint8_t> q(static_cast<size_t>(qj_rowwise_row_bytes(QJ_FUSED_8BIT, 64, 0)) * rows);
  EXPECT_EQ(qj_quantize_rowwise(QJ_FUSED_8BIT, src.data(), rows, 64, q.data()), QJ_OK) << qj_last_error();
  res.insert(res.end(), q.begin(), q.end());
  const std::vector<float>& mx = in.mx;
  std::vector<uint8_t> elems(128), scales(8);
  EXPECT_EQ(qj_mx_quantize(QJ_MXFP4_E2M1, QJ_ROUND_FLOOR, mx.data(), 256, elems.data(), scales.data()), QJ_OK)
      << qj_last_error();
  res.insert(res.end(), elems.begin(), elems.end());
  res.insert(res.end(), scales.begin(), scales.end());
  return res;
}

std::vector<uint8_t> everything(int32_t threads) {
  std::vector<uint8_t> r = gemm_u8_ties(threads), f = gemm_float_outputs(threads), e = embedding_and_conversions();
  r.insert(r.end(), f.begin(), f.end());
  r.insert(r.end(), e.begin(), e.end());
  return r;
}

TEST(FpEnv, CallersEnvironmentChangesNoResult) {
  inputs();
  for (qj_isa isa : qjt::supported_isas()) {
    qjt::IsaCap cap(isa);
    for (int32_t threads : {1, 3}) {
      const std::vector<uint8_t> want = everything(threads);
      for (const Env& e : kEnvs) {
        InEnv env(e);
        const std::vector<uint8_t> got = everything(threads);
        size_t first = 0;
        while (first < got.size() && first < want.size() && got[first] == want[first]) ++first;
        EXPECT_EQ(got, want) << "first difference at byte " << first << ": " << e.name << ", " << threads << " thread(s), " << qj_isa_name(isa);
        EXPECT_EQ(control(_mm_getcsr()), control(env.set())) << "the caller's MXCSR was not restored: " << e.name;
        EXPECT_EQ(std::fegetround(), e.round) << e.name;
      }
    }
  }
}

// A caller's pool whose threads compute with FTZ + DAZ and rounding upward.
void env_pool(void*, qj_task_fn fn, void* ctx, int32_t n) {
  std::vector<std::thread> ts;
  for (int32_t t = 0; t < n; ++t)
    ts.emplace_back([=] {
      InEnv env(kEnvs[4]);
      fn(ctx, t, n);
    });
  for (auto& t : ts) t.join();
}

TEST(FpEnv, CallersPoolThreadsEnvironmentChangesNoResult) {
  inputs();
  for (qj_isa isa : qjt::supported_isas()) {
    qjt::IsaCap cap(isa);
    const std::vector<uint8_t> want = everything(3);
    qj_set_parallel_for(env_pool, nullptr);
    const std::vector<uint8_t> got = everything(3);
    qj_set_parallel_for(nullptr, nullptr);
    EXPECT_EQ(got, want) << qj_isa_name(isa);
  }
}

}  // namespace
