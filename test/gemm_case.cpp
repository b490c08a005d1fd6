// See gemm_case.h. The reference side unpacks nothing from the library: it rebuilds the weights
// from the test's own int8 data and calls src/ref/gemm_ref directly.
#include "test/gemm_case.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
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
    << " seed=" << seed;
  if (a_zp_val != kAuto) o << " za=" << a_zp_val;
  if (b_zp_val != kAuto) o << " zb=" << b_zp_val;
  if (c_zp != kAuto) o << " zc=" << c_zp;
  if (c_scale != 0.0f) o << " c_scale=" << c_scale;
  if (a_type == QJ_F32 || a_type == QJ_BF16) o << " a_gran=" << a_gran << " a_range=" << a_range;
  if (values != kRandom) o << " values=" << values;
  if (zero_row) o << " zero_row";
  if (wld_pad >= 0) o << " wld_pad=" << wld_pad;
  if (parallel) o << " parallel";
  o << " isa=" << qj_isa_name(qj_max_isa());
  return o.str();
}

static size_t dt_size(qj_dtype t) {
  switch (t) {
    case QJ_U8: case QJ_S8: return 1;
    case QJ_BF16: case QJ_F16: return 2;
    default: return 4;
  }
}

namespace {

// Writes element i of A (as a float for dynamic types, an integer otherwise).
void put_a(std::vector<uint8_t>& a, qj_dtype t, int64_t i, double v) {
  switch (t) {
    case QJ_U8: a[i] = static_cast<uint8_t>(static_cast<int>(v)); break;
    case QJ_S8: a[i] = static_cast<uint8_t>(static_cast<int8_t>(static_cast<int>(v))); break;
    case QJ_F32: {
      float f = static_cast<float>(v);
      std::memcpy(&a[i * 4], &f, 4);
      break;
    }
    default: {
      uint16_t h = qj::f32_to_bf16(static_cast<float>(v));
      std::memcpy(&a[i * 2], &h, 2);
      break;
    }
  }
}

// Bytes of `buf` that differ from the byte `fill`, after running partition t alone.
std::string check_partitions_disjoint(qj_gemm_plan plan, const GemmCase& c, const void* a,
                                      int64_t lda, int64_t ldc, size_t bytes, size_t esz) {
  std::vector<int> writers(bytes, 0);
  for (int t = 0; t < c.threads; ++t) {
    std::vector<uint8_t> b0(bytes, 0x00), b1(bytes, 0xff);
    qj_partition part{t, c.threads};
    if (qj_gemm_run(plan, c.m, a, lda, b0.data(), ldc, &part) != QJ_OK ||
        qj_gemm_run(plan, c.m, a, lda, b1.data(), ldc, &part) != QJ_OK)
      return std::string("run (disjoint check): ") + qj_last_error();
    for (size_t i = 0; i < bytes; ++i) writers[i] += (b0[i] != 0x00 || b1[i] != 0xff) ? 1 : 0;
  }
  for (size_t i = 0; i < bytes; ++i) {
    int64_t elem = static_cast<int64_t>(i / esz);
    int64_t row = elem / ldc, col = elem % ldc;
    int want = (row < c.m && col < c.n) ? 1 : 0;
    if (writers[i] != want) {
      std::ostringstream o;
      o << "partitions: byte " << i << " (row " << row << ", col " << col << ") written by "
        << writers[i] << " of " << c.threads << " partitions, expected " << want;
      return o.str();
    }
  }
  return "";
}

}  // namespace

std::string run_gemm_case(const GemmCase& c) {
  std::mt19937 g(c.seed);
  const int64_t m = c.m, n = c.n, k = c.k;
  const bool dynamic = c.a_type == QJ_F32 || c.a_type == QJ_BF16;
  // Weights: full s8 range.
  const int64_t wpad = c.wld_pad >= 0 ? c.wld_pad : static_cast<int64_t>(c.seed % 3);
  int64_t wld = (c.layout == QJ_LAYOUT_KN ? n : k) + wpad;
  std::vector<int8_t> wq(c.layout == QJ_LAYOUT_KN ? k * wld : n * wld);
  std::uniform_int_distribution<int> coin(0, 1);
  switch (c.values) {
    case kExtremes:
      for (auto& x : wq) x = coin(g) ? 127 : -128;
      break;
    case kMaxPos:
    case kMaxNeg:
      for (auto& x : wq) x = 127;
      break;
    default:
      for (auto& x : wq) x = static_cast<int8_t>(std::uniform_int_distribution<int>(-128, 127)(g));
      // Extremes on purpose: first rows/cols at the limits.
      for (int64_t i = 0; i < std::min<int64_t>(wq.size(), 7); ++i) wq[i] = (i & 1) ? -128 : 127;
  }
  int64_t groups = c.gran == QJ_GRAN_GROUP ? k / c.group : 1;
  int64_t count = c.gran == QJ_GRAN_TENSOR ? 1 : c.gran == QJ_GRAN_CHANNEL ? n : groups * n;
  std::vector<float> scales(count);
  std::vector<int32_t> zps(count);
  for (auto& s : scales)
    s = c.b_scale != 0.0f ? c.b_scale : std::uniform_real_distribution<float>(0.001f, 0.02f)(g);
  for (auto& z : zps)
    z = !c.b_zp ? 0 : c.b_zp_val != GemmCase::kAuto ? c.b_zp_val
                                                   : std::uniform_int_distribution<int>(-128, 127)(g);

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
  {
    qj_status st;
    if (c.pack_isa >= 0) {
      IsaCap cap(static_cast<qj_isa>(c.pack_isa));
      st = qj_weights_pack(&wd, wq.data(), wld, &w);
    } else {
      st = qj_weights_pack(&wd, wq.data(), wld, &w);
    }
    if (st != QJ_OK) return std::string("pack: ") + qj_last_error();
  }
  // The weights object must own copies: scribble over the caller's arrays (the reference keeps
  // its own copies).
  const std::vector<int8_t> wq_ref = wq;
  const std::vector<float> scales_ref = scales;
  const std::vector<int32_t> zps_ref = zps;
  std::fill(wq.begin(), wq.end(), int8_t{0x5a});
  std::fill(scales.begin(), scales.end(), std::nanf(""));
  std::fill(zps.begin(), zps.end(), 1000);

  // A. Padding elements (beyond k in each row) hold garbage the library must not read.
  const int64_t lda = k + c.lda_pad;
  std::vector<uint8_t> a(m * lda * dt_size(c.a_type));
  const int a_lo = c.a_type == QJ_U8 ? 0 : -128, a_hi = c.a_type == QJ_U8 ? 255 : 127;
  for (int64_t i = 0; i < m * lda; ++i) {
    double v;
    if (dynamic) {
      float r = c.a_range;
      switch (c.values) {
        case kExtremes: v = coin(g) ? r : -r; break;
        case kMaxPos: v = r; break;
        case kMaxNeg: v = -r; break;
        default: v = std::uniform_real_distribution<float>(-r, r)(g);
      }
    } else {
      switch (c.values) {
        case kExtremes: v = coin(g) ? a_hi : a_lo; break;
        case kMaxPos: v = a_hi; break;
        case kMaxNeg: v = a_lo; break;
        default: v = std::uniform_int_distribution<int>(a_lo, a_hi)(g);
      }
    }
    put_a(a, c.a_type, i, v);
  }
  if (c.values == kRandom && !dynamic && m * k >= 2) {
    put_a(a, c.a_type, 0, a_hi);
    put_a(a, c.a_type, 1, a_lo);
    put_a(a, c.a_type, (m - 1) * lda + k - 1, a_lo);
  }
  if (c.zero_row)
    for (int64_t j = 0; j < k; ++j) put_a(a, c.a_type, (m - 1) * lda + j, 0);
  std::vector<float> bias(n);
  for (auto& b : bias) b = std::uniform_real_distribution<float>(-50.0f, 50.0f)(g);

  qj_gemm_desc d{};
  d.a_type = c.a_type;
  d.a_scale = c.a_scale;
  d.a_zero_point = c.a_zp_val != GemmCase::kAuto ? c.a_zp_val
                   : c.a_zp                      ? (c.a_type == QJ_U8 ? 131 : -7)
                                                 : 0;
  d.a_granularity = c.a_gran;
  d.c_type = c.c_type;
  d.c_scale = c.c_scale != 0.0f ? c.c_scale : (c.c_type == QJ_U8 || c.c_type == QJ_S8 ? 0.7f : 1.0f);
  d.c_zero_point = c.c_zp != GemmCase::kAuto ? c.c_zp
                   : c.c_type == QJ_U8       ? 100
                   : c.c_type == QJ_S8       ? -3
                                             : 0;
  d.bias = c.bias ? bias.data() : nullptr;
  d.activation = c.relu ? QJ_ACT_RELU : QJ_ACT_NONE;
  d.beta = c.beta;
  // At a JIT tier the plan must use generated kernels (qjt::create_jit_plan). (Concurrent callers
  // run at the same tier, so no other thread's plan falls back meanwhile.)
  qj_gemm_plan plan = nullptr;
  if (std::string e = qjt::create_jit_plan(d, w, &plan); !e.empty()) {
    qj_weights_destroy(w);
    return e;
  }
  // The plan copies the bias (header: "copied at plan creation") and keeps its own reference to
  // the weights: scribble over the first and drop the second before running.
  const std::vector<float> bias_ref = bias;
  std::fill(bias.begin(), bias.end(), std::nanf(""));
  qj_weights_destroy(w);
  w = nullptr;
  d.bias = c.bias ? bias_ref.data() : nullptr;

  const int64_t ldc = n + c.ldc_pad;
  const size_t esz = dt_size(c.c_type);
  std::string err;
  if (c.check_disjoint && c.beta == 0.0f && c.threads > 1)
    err = check_partitions_disjoint(plan, c, a.data(), lda, ldc, m * ldc * esz + 64, esz);

  std::vector<uint8_t> out(m * ldc * esz + 64), expect;
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<uint8_t>(i * 7 + 3);  // beta reads it
  if (c.c_type == QJ_F32)  // finite previous C for beta
    for (int64_t i = 0; i < m * ldc; ++i) {
      float v = std::uniform_real_distribution<float>(-4.0f, 4.0f)(g);
      std::memcpy(&out[i * 4], &v, 4);
    }
  expect = out;
  if (err.empty() && c.parallel) {
    if (qj_gemm_run_parallel(plan, m, a.data(), lda, out.data(), ldc, c.threads) != QJ_OK)
      err = std::string("run_parallel: ") + qj_last_error();
  } else {
    for (int t = 0; t < c.threads && err.empty(); ++t) {
      qj_partition part{t, c.threads};
      if (qj_gemm_run(plan, m, a.data(), lda, out.data(), ldc, &part) != QJ_OK)
        err = std::string("run: ") + qj_last_error();
    }
  }

  // Reference on unpacked weights.
  qj::ref::IntWeights rw;
  rw.k = k;
  rw.n = n;
  rw.gran = c.gran == QJ_GRAN_GROUP && c.group == k ? QJ_GRAN_CHANNEL : c.gran;
  rw.group_size = rw.gran == QJ_GRAN_GROUP ? c.group : 0;
  rw.scales = scales_ref;
  if (c.b_zp) rw.zero_points = zps_ref;
  rw.q.resize(k * n);
  for (int64_t kk = 0; kk < k; ++kk)
    for (int64_t j = 0; j < n; ++j)
      rw.q[kk * n + j] = c.layout == QJ_LAYOUT_KN ? wq_ref[kk * wld + j] : wq_ref[j * wld + kk];
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
