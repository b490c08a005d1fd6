#include "test/gemm_case.h"

#include <cmath>
#include <cstring>
#include <sstream>
#include <vector>

#include "src/formats/half.h"
#include "src/ref/gemm_ref.h"
#include "test/test_util.h"

namespace qjt {

std::string GemmCase::str() const {
  std::ostringstream o;
  o << "m=" << m << " n=" << n << " k=" << k << " a=" << qj_dtype_name(a_type)
    << " c=" << qj_dtype_name(c_type) << " gran=" << gran << " group=" << group << " a_zp=" << a_zp
    << " b_zp=" << b_zp << " bias=" << bias << " relu=" << relu << " layout=" << layout
    << " lda_pad=" << lda_pad << " ldc_pad=" << ldc_pad << " beta=" << beta << " threads=" << threads
    << " isa=" << qj_isa_name(qj_max_isa());
  return o.str();
}

static size_t dt_size(qj_dtype t) {
  switch (t) {
    case QJ_U8: case QJ_S8: return 1;
    case QJ_BF16: case QJ_F16: return 2;
    default: return 4;
  }
}

std::string run_gemm_case(const GemmCase& c) {
  std::mt19937 g(c.seed);
  const int64_t m = c.m, n = c.n, k = c.k;
  // Weights: full s8 range.
  int64_t wld = (c.layout == QJ_LAYOUT_KN ? n : k) + (c.seed % 3);
  std::vector<int8_t> wq(c.layout == QJ_LAYOUT_KN ? k * wld : n * wld);
  for (auto& x : wq) x = static_cast<int8_t>(std::uniform_int_distribution<int>(-128, 127)(g));
  // Extremes on purpose: first rows/cols at the limits.
  for (int64_t i = 0; i < std::min<int64_t>(wq.size(), 7); ++i) wq[i] = (i & 1) ? -128 : 127;
  int64_t groups = c.gran == QJ_GRAN_GROUP ? k / c.group : 1;
  int64_t count = c.gran == QJ_GRAN_TENSOR ? 1 : c.gran == QJ_GRAN_CHANNEL ? n : groups * n;
  std::vector<float> scales(count);
  std::vector<int32_t> zps(count);
  for (auto& s : scales) s = std::uniform_real_distribution<float>(0.001f, 0.02f)(g);
  for (auto& z : zps) z = c.b_zp ? std::uniform_int_distribution<int>(-128, 127)(g) : 0;

  qj_weights_desc wd{};
  wd.dtype = QJ_S8;
  wd.k = k;
  wd.n = n;
  wd.layout = c.layout;
  wd.granularity = c.gran;
  wd.group_size = c.group;
  wd.scales = scales.data();
  wd.zero_points = c.b_zp ? zps.data() : nullptr;
  qj_weights w = nullptr;
  if (qj_weights_pack(&wd, wq.data(), wld, &w) != QJ_OK) return std::string("pack: ") + qj_last_error();

  // A
  const int64_t lda = k + c.lda_pad;
  std::vector<uint8_t> a(m * lda * dt_size(c.a_type));
  if (c.a_type == QJ_U8 || c.a_type == QJ_S8) {
    for (auto& x : a) x = static_cast<uint8_t>(std::uniform_int_distribution<int>(0, 255)(g));
    if (!a.empty()) a[0] = c.a_type == QJ_U8 ? 255 : 0x80;
  } else {
    for (int64_t i = 0; i < m * lda; ++i) {
      float v = std::uniform_real_distribution<float>(-3.0f, 3.0f)(g);
      if (c.a_type == QJ_F32)
        std::memcpy(&a[i * 4], &v, 4);
      else {
        uint16_t h = qj::f32_to_bf16(v);
        std::memcpy(&a[i * 2], &h, 2);
      }
    }
  }
  std::vector<float> bias(n);
  for (auto& b : bias) b = std::uniform_real_distribution<float>(-50.0f, 50.0f)(g);

  qj_gemm_desc d{};
  d.a_type = c.a_type;
  d.a_scale = 0.05f;
  d.a_zero_point = c.a_zp ? (c.a_type == QJ_U8 ? 131 : -7) : 0;
  d.a_granularity = c.a_gran;
  d.c_type = c.c_type;
  d.c_scale = c.c_type == QJ_U8 || c.c_type == QJ_S8 ? 0.7f : 1.0f;
  d.c_zero_point = c.c_type == QJ_U8 ? 100 : (c.c_type == QJ_S8 ? -3 : 0);
  d.bias = c.bias ? bias.data() : nullptr;
  d.activation = c.relu ? QJ_ACT_RELU : QJ_ACT_NONE;
  d.beta = c.beta;
  qj_gemm_plan plan = nullptr;
  if (qj_gemm_plan_create(&d, w, &plan) != QJ_OK) {
    qj_weights_destroy(w);
    return std::string("plan: ") + qj_last_error();
  }

  const int64_t ldc = n + c.ldc_pad;
  const size_t esz = dt_size(c.c_type);
  std::vector<uint8_t> out(m * ldc * esz + 64), expect;
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<uint8_t>(i * 7 + 3);  // beta reads it
  if (c.c_type == QJ_F32)  // finite previous C for beta
    for (int64_t i = 0; i < m * ldc; ++i) {
      float v = std::uniform_real_distribution<float>(-4.0f, 4.0f)(g);
      std::memcpy(&out[i * 4], &v, 4);
    }
  expect = out;
  std::string err;
  for (int t = 0; t < c.threads && err.empty(); ++t) {
    qj_partition part{t, c.threads};
    if (qj_gemm_run(plan, m, a.data(), lda, out.data(), ldc, &part) != QJ_OK)
      err = std::string("run: ") + qj_last_error();
  }

  // Reference on unpacked weights.
  qj::ref::IntWeights rw;
  rw.k = k;
  rw.n = n;
  rw.gran = c.gran == QJ_GRAN_GROUP && c.group == k ? QJ_GRAN_CHANNEL : c.gran;
  rw.group_size = rw.gran == QJ_GRAN_GROUP ? c.group : 0;
  rw.scales = scales;
  if (c.b_zp) rw.zero_points = zps;
  rw.q.resize(k * n);
  for (int64_t kk = 0; kk < k; ++kk)
    for (int64_t j = 0; j < n; ++j)
      rw.q[kk * n + j] = c.layout == QJ_LAYOUT_KN ? wq[kk * wld + j] : wq[j * wld + kk];
  qj::ref::gemm_int(d, rw, m, a.data(), lda, expect.data(), ldc);

  if (err.empty() && out != expect) {
    for (size_t i = 0; i < out.size(); ++i)
      if (out[i] != expect[i]) {
        int64_t elem = static_cast<int64_t>(i / esz);
        std::ostringstream o;
        o << "mismatch at byte " << i << " (row " << elem / ldc << ", col " << elem % ldc
          << "): got " << int(out[i]) << " want " << int(expect[i]);
        if (c.c_type == QJ_F32 || c.c_type == QJ_S32) {
          int32_t gi, wi;
          std::memcpy(&gi, &out[elem * 4], 4);
          std::memcpy(&wi, &expect[elem * 4], 4);
          float gf, wf;
          std::memcpy(&gf, &gi, 4);
          std::memcpy(&wf, &wi, 4);
          o << " (as s32 " << gi << " vs " << wi << ", as f32 " << gf << " vs " << wf << ")";
        }
        err = o.str();
        break;
      }
  }
  qj_gemm_plan_destroy(plan);
  qj_weights_destroy(w);
  return err;
}

}  // namespace qjt
