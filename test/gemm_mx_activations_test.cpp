// GEMM with MX ACTIVATIONS (MX x MX, MX.md section 5; src/ops/mx_act.h) through the C API at every
// ISA tier, against src/ref/gemm_mx_ref (gemm_mx_mx: both sides decoded with the scalar decoders,
// per-block sums exact in __int128, scaled in double), plus the A decoders on their own.
//
// Error bound, per output (G = k / 32 blocks), derived from what the library computes:
//   exact      Y = sum_g T_g + bias,  T_g = S_g * 2^(sA_g - 127 - shA) * w_g,   S_g the exact
//              int32 block sum of the integer forms, w_g = 2^(sB_g - 127) (MX weights; the weight
//              shift 2^-shB is in the column multiplier) or the fp32 group scale (S4 / U4).
//   computed   x_g = float(S_g) * 2^(sA_g - 127 - shA): EXACT (|S_g| < 2^24 and the factor is
//              >= 2^-133, so the product is a multiple of 2^-149 with at most 24 significant
//              bits); facc = fma(x_g, w_g, facc): one rounding per block; y = fma(facc, 2^-shB,
//              bias) (or facc * mult): one more (a power-of-two product is exact unless subnormal);
//              bf16 C one more to 8 bits.
//   So every T_g and the bias pass through at most G + 1 roundings of relative size u = 2^-24:
//   |y - Y| <= gamma_{G+1} * (sum_g |T_g| + |bias|),  gamma_j = j u / (1 - j u) (Higham 3.1),
//   plus (G + 1) * 2^-150 for roundings in the fp32 subnormal range (tiny scale bytes);
//   bf16 C adds 2^-8 * (|Y| + that bound). ReLU is 1-Lipschitz and applied to both sides.
//   There is no rounding in the block-scale products themselves (powers of two), so a single
//   block (G = 1) without bias is exact: the TV13 tests compare bit for bit.
// A 0xFF scale byte on either side must give NaN (tested without ReLU, which maps NaN to 0 in
// the reference and in the kernels alike).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "codegen/gemm_float.h"
#include "codegen/gemm_int.h"
#include "src/core/isa.h"
#include "src/core/kernel_key.h"
#include "src/formats/half.h"
#include "src/formats/mx.h"
#include "src/formats/mx_bdr.h"
#include "src/ops/int_weights.h"
#include "src/ops/mx_act.h"
#include "src/ref/gemm_mx_ref.h"
#include "src/ref/mx_ref.h"
#include "test/test_util.h"

namespace {

const qj_dtype kIntTypes[] = {QJ_MXFP4_E2M1, QJ_MXFP6_E2M3, QJ_MXINT8};

// MR of the decoded-weight kernels for these weights under the current cap (as gemm.cpp probes;
// split_a: E3M2 A in two s8 parts, key flags bit 7).
int plan_mr(qj_dtype wt, int64_t n, bool split_a = false) {
  const qj_isa isa = qj_max_isa();
  if (isa < QJ_ISA_AVX2) return 1;
  qj::KernelKey probe = qj::KernelKey::zeroed();
  probe.op = qj::KernelOp::kGemmInt;
  probe.isa = static_cast<uint8_t>(isa);
  probe.a_type = QJ_S8;
  probe.b_type = wt;
  probe.nr = static_cast<uint16_t>(qj::weights_nr(isa, n, wt));
  probe.granularity = QJ_GRAN_GROUP;
  if (qj::cpu_features().avx512vbmi) probe.flags = 32;
  if (split_a) probe.flags |= 128;
  return std::max(1, qj::gemm_int_max_mr(probe, 12));
}

// MX A in the API's form (qj_mx_matrix over SPLIT rows) built from codes and scales.
struct MxA {
  qj::ref::MxActivations ref;
  std::vector<uint8_t> elems, scales;
  int64_t lda = 0, sld = 0;
  qj_mx_matrix mat{};
  void build(int64_t lda_pad, int64_t sld_pad) {
    const qj::mx::ElemFormat& f = *qj::mx::format(ref.type);
    const int64_t blocks = ref.k / 32;
    lda = blocks * f.block_bytes + lda_pad;
    sld = blocks + sld_pad;
    elems.assign(ref.m * lda + 1, 0xCD);
    scales.assign(ref.m * sld + 1, 0xCD);
    for (int64_t i = 0; i < ref.m; ++i)
      for (int64_t b = 0; b < blocks; ++b) {
        qj::mx::pack_block(f, &ref.codes[i * ref.k + b * 32], &elems[i * lda + b * f.block_bytes]);
        scales[i * sld + b] = ref.scales[i * blocks + b];
      }
    mat = qj_mx_matrix{elems.data(), scales.data(), sld};
  }
};

struct Case {
  qj_dtype a = QJ_MXFP4_E2M1, w = QJ_MXFP4_E2M1;
  int64_t m = 1, n = 1, k = 32;
  qj_dtype c_type = QJ_F32;
  bool bias = false, relu = false;
  float beta = 0.0f;
  int scale_lo = 107, scale_hi = 147;  // E8M0 bytes drawn from [lo, hi] (A; and W unless below)
  int wscale_lo = -1, wscale_hi = -1;  // W's own range when >= 0
  int nan_a = 0, nan_w = 0;            // plant 0xFF scales
  bool zero_blocks = false;            // plant all-zero blocks (scale 0x00) on both sides
  bool all_codes = false;              // A rows walk through every code of the type
  int64_t lda_pad = 0, sld_pad = 0, ldc_pad = 0;
  int threads = 1;
  int pack_isa = -1;  // pack the weights under this cap (the plan repacks them for its own)
  uint32_t seed = 1;
  std::string str() const {
    std::ostringstream o;
    o << "a=" << qj_dtype_name(a) << " w=" << qj_dtype_name(w) << " m=" << m << " n=" << n << " k=" << k
      << " c=" << qj_dtype_name(c_type) << " bias=" << bias << " relu=" << relu << " beta=" << beta
      << " scales=[" << scale_lo << "," << scale_hi << "] w=[" << wscale_lo << "," << wscale_hi << "] nan_a=" << nan_a << " nan_w=" << nan_w
      << " zero=" << zero_blocks << " all_codes=" << all_codes << " threads=" << threads << " pack_isa=" << pack_isa
      << " seed=" << seed << " isa=" << qj_isa_name(qj_max_isa());
    return o.str();
  }
};

// S[i][c] = sum_k |a(i, k) * w(k, c)| + |bias[c]| with the scaled element values (double, exact
// products): the magnitude of the fp32-FMA route's bound (NaN blocks contribute 0: NaN outputs
// are compared as NaN).
std::vector<double> abs_products(const qj::ref::MxActivations& a, const qj::ref::MxWeights& w, const float* bias) {
  const int64_t m = a.m, k = a.k, n = w.n, g = k / 32;
  std::vector<double> s(m * n, 0.0);
  auto val = [](qj_dtype t, uint8_t code, uint8_t sc) {
    return sc == 0xFF ? 0.0 : std::fabs(qj::ref::mx_elem_value(t, code)) * std::ldexp(1.0, sc - 127);
  };
  // |w(j, c)|: OCP codes and scales, or BDR +-M * 2^(E - 127 - mu + 1 - m) (NaN block: 0).
  std::vector<double> wa(n * k);
  const qj::bdr::BdrFormat* bf = qj::bdr::format(w.type);
  for (int64_t c = 0; c < n; ++c)
    for (int64_t j = 0; j < k; ++j) {
      if (!bf) {
        wa[c * k + j] = val(w.type, w.codes[c * k + j], w.scales[c * g + j / 32]);
        continue;
      }
      qj::bdr::Fields f;
      qj::bdr::unpack(*bf, &w.bdr[(c * (k / 16) + j / 16) * bf->block_bytes], &f);
      wa[c * k + j] = f.e == 0xFF ? 0.0 : std::abs(qj::bdr::int_value(*bf, f.code[j % 16])) *
                                              std::ldexp(1.0, qj::bdr::step_exp(*bf, f, static_cast<int>(j % 16) / 2));
    }
  std::vector<double> aa(m * k);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < k; ++j) aa[i * k + j] = val(a.type, a.codes[i * k + j], a.scales[i * g + j / 32]);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t c = 0; c < n; ++c) {
      double acc = bias ? std::fabs(bias[c]) : 0.0;
      for (int64_t j = 0; j < k; ++j) acc += aa[i * k + j] * wa[c * k + j];
      s[i * n + c] = acc;
    }
  return s;
}

// Runs a prepared A and MX weights through the API and compares with gemm_mx_mx.
std::string run_and_check(const Case& t, MxA& A, const qj::ref::MxWeights& rw, const std::vector<float>& bias) {
  const int64_t blocks = t.k / 32;
  const qj::bdr::BdrFormat* bf = qj::bdr::format(t.w);  // BDR: 16-blocks, exponent inside
  const int64_t wblocks = bf ? t.k / 16 : blocks;
  const int64_t bb = bf ? bf->block_bytes : qj::mx::format(t.w)->block_bytes;
  const int64_t eld = wblocks * bb + 3, wsld = blocks + 1;
  std::vector<uint8_t> welems(t.n * eld, 0xAB), wsc(t.n * wsld, 0x7F);
  for (int64_t c = 0; c < t.n; ++c) {
    if (bf) {
      std::memcpy(&welems[c * eld], &rw.bdr[c * wblocks * bb], wblocks * bb);
      continue;
    }
    for (int64_t b = 0; b < blocks; ++b) {
      qj::mx::pack_block(*qj::mx::format(t.w), &rw.codes[c * t.k + b * 32], &welems[c * eld + b * bb]);
      wsc[c * wsld + b] = rw.scales[c * blocks + b];
    }
  }
  qj_weights_desc wd{};
  wd.dtype = t.w;
  wd.k = t.k;
  wd.n = t.n;
  wd.layout = QJ_LAYOUT_NK;
  qj_mx_weights_data md{welems.data(), bf ? nullptr : wsc.data(), bf ? 0 : wsld};
  qj_weights w = nullptr;
  const qj_isa run_isa = qj_max_isa();
  if (t.pack_isa >= 0) qj_set_max_isa(static_cast<qj_isa>(t.pack_isa));
  const qj_status pst = qj_weights_pack(&wd, &md, eld, &w);
  qj_set_max_isa(run_isa);
  if (pst != QJ_OK) return std::string("pack: ") + qj_last_error();
  qj_gemm_desc gd{};
  gd.a_type = t.a;
  gd.c_type = t.c_type;
  gd.bias = t.bias ? bias.data() : nullptr;
  gd.activation = t.relu ? QJ_ACT_RELU : QJ_ACT_NONE;
  gd.beta = t.beta;
  qj_gemm_plan plan = nullptr;
  const std::string plan_err = qjt::create_jit_plan(gd, w, &plan);
  qj_weights_destroy(w);
  if (!plan_err.empty()) return plan_err;
  const int64_t ldc = t.n + t.ldc_pad;
  const int eb = t.c_type == QJ_BF16 ? 2 : 4;
  std::vector<uint8_t> cbuf(t.m * ldc * eb, 0xEE);
  std::vector<float> c0(t.m * ldc);  // C before the call (beta)
  if (t.beta != 0.0f) {
    c0 = qjt::random_floats(t.m * ldc, -1.0f, 1.0f, t.seed + 99);
    std::memcpy(cbuf.data(), c0.data(), cbuf.size());
  }
  for (int th = 0; th < t.threads; ++th) {
    qj_partition part{th, t.threads};
    if (qj_gemm_run(plan, t.m, &A.mat, A.lda, cbuf.data(), ldc, &part) != QJ_OK) {
      qj_gemm_plan_destroy(plan);
      return std::string("run: ") + qj_last_error();
    }
  }
  qj_gemm_plan_destroy(plan);

  std::vector<double> y, mag;
  qj::ref::gemm_mx_mx(gd, A.ref, rw, &y, &mag);
  const double u = std::ldexp(1.0, -24);
  // The integer routes: one rounding per weight group (16 for BDR) and the epilogue's.
  int steps = static_cast<int>(wblocks) + 1;
  // The fp32 route (MXFP8 weights): A dequantized exactly to fp32 feeds the fp32-FMA kernel, so
  // the file comment's fp32 bound applies with S = sum_k |a_k w_k| in place of sum_g |T_g|.
  // MXFP8 A takes the same route with every weight type: element values (or integer forms)
  // times their block factor, applied to each block's sum as for MXFP8 weights (E3M2 decoded as
  // value * 2^-12 with the 2^12 applied at the end, as E4M3's 2^8).
  const bool f32_route = t.w == QJ_MXFP8_E4M3 || t.w == QJ_MXFP8_E5M2 || t.a == QJ_MXFP8_E4M3 || t.a == QJ_MXFP8_E5M2;
  // (E3M2 A x FP4 / E2M3 / INT8 weights: exact 32-block sums on both of its routes, A split or the
  // weights as MX6 / MX9 in blocks of 32, so the integer routes' bound.)
  std::vector<double> sabs;
  if (f32_route) {
    steps = static_cast<int>(t.k + blocks + 2);
    sabs = abs_products(A.ref, rw, gd.bias);
  }
  // Underflow: each fp32 rounding in the subnormal range errs by up to 2^-150, times the power
  // of two the kernel applies after the sums: the fp32 route decodes E4M3 weights as value * 2^-8
  // and E3M2 weights as value * 2^-12, the 2^8 / 2^12 applied in the output multiplier.
  const int fold = f32_route && t.w == QJ_MXFP6_E3M2 ? 12 : 8;
  const double tiny = f32_route ? steps * std::ldexp(1.0, -150 + fold) : steps * std::ldexp(1.0, -150);
  const double gamma = steps * u / (1.0 - steps * u);
  for (int64_t i = 0; i < t.m; ++i)
    for (int64_t c = 0; c < ldc; ++c) {
      const size_t idx = i * ldc + c;
      double got;
      if (t.c_type == QJ_BF16) {
        uint16_t h;
        std::memcpy(&h, &cbuf[idx * 2], 2);
        if (c >= t.n) {
          if (h != 0xEEEE) return "padding written at row " + std::to_string(i);
          continue;
        }
        got = qj::bf16_to_f32(h);
      } else {
        float v;
        std::memcpy(&v, &cbuf[idx * 4], 4);
        if (c >= t.n) {
          if (qj::f32_bits(v) != (t.beta != 0.0f ? qj::f32_bits(c0[idx]) : 0xEEEEEEEEu))
            return "padding written at row " + std::to_string(i);
          continue;
        }
        got = v;
      }
      double want = y[i * t.n + c];
      if (std::isnan(want) && !t.relu) {
        if (!std::isnan(got))
          return "C[" + std::to_string(i) + "][" + std::to_string(c) + "]=" + std::to_string(got) + " want NaN";
        continue;
      }
      if (std::isnan(want)) {  // with ReLU: NaN -> +0 exactly, then beta * C0 (one fp32 rounding)
        const float w0 = t.beta != 0.0f ? t.beta * c0[idx] : 0.0f;
        if (!(got == w0 && std::signbit(got) == std::signbit(w0)))
          return "C[" + std::to_string(i) + "][" + std::to_string(c) + "]=" + std::to_string(got) +
                 " want " + std::to_string(w0) + " (ReLU of NaN)";
        continue;
      }
      double bound = f32_route ? gamma * sabs[i * t.n + c] + t.k * std::ldexp(1.0, -53) * sabs[i * t.n + c] + tiny +
                                     u * (std::fabs(want) + gamma * sabs[i * t.n + c] + tiny)
                               : gamma * mag[i * t.n + c] + tiny;
      if (t.relu) want = want > 0 ? want : 0;  // NaN > 0 is false: NaN -> 0, as the library
      if (t.beta != 0.0f) {
        // y + beta * C0 in one fma: one more rounding of the sum.
        want += static_cast<double>(t.beta) * c0[idx];
        bound += u * (std::fabs(want) + bound) + std::ldexp(1.0, -150);
      }
      if (t.c_type == QJ_BF16) bound += qjt::bf16_rounding_slack(want, bound);
      if (!(std::fabs(got - want) <= bound)) {
        std::ostringstream o;
        o.precision(17);
        o << "C[" << i << "][" << c << "]=" << got << " want " << want << " (|diff| "
          << std::fabs(got - want) << " > bound " << bound << ")";
        return o.str();
      }
    }
  return "";
}

std::string run_case(const Case& t) {
  std::mt19937 rng(t.seed);
  const int64_t blocks = t.k / 32;
  MxA A;
  A.ref.type = t.a;
  A.ref.m = t.m;
  A.ref.k = t.k;
  A.ref.codes.resize(t.m * t.k);
  A.ref.scales.resize(t.m * blocks);
  const int abits = qj::mx::format(t.a)->bits;
  // A finite random code of type ty (FP8 NaN / Inf codes are not data of these sweeps).
  auto draw_code = [&](qj_dtype ty, int bits) {
    uint8_t c;
    do c = static_cast<uint8_t>(rng() % (1u << bits));
    while (!std::isfinite(qj::ref::mx_elem_value(ty, c)));
    return c;
  };
  for (int64_t i = 0; i < t.m; ++i)
    for (int64_t j = 0; j < t.k; ++j) {
      uint8_t& c = A.ref.codes[i * t.k + j];
      c = t.all_codes ? static_cast<uint8_t>((i * 7 + j) % (1 << abits)) : draw_code(t.a, abits);
      if (!std::isfinite(qj::ref::mx_elem_value(t.a, c))) c = 0;
    }
  auto draw_scale = [&] { return static_cast<uint8_t>(t.scale_lo + rng() % (t.scale_hi - t.scale_lo + 1)); };
  for (auto& s : A.ref.scales) s = draw_scale();
  qj::ref::MxWeights rw;
  rw.type = t.w;
  rw.k = t.k;
  rw.n = t.n;
  rw.codes.resize(t.n * t.k);
  rw.scales.resize(t.n * blocks);
  auto draw_wscale = [&] {
    return t.wscale_lo >= 0 ? static_cast<uint8_t>(t.wscale_lo + rng() % (t.wscale_hi - t.wscale_lo + 1)) : draw_scale();
  };
  if (const qj::bdr::BdrFormat* bf = qj::bdr::format(t.w)) {
    // BDR weights: random 16-blocks (exponent from the scale range, random microexponents).
    const int64_t gb = t.k / 16;
    std::vector<qj::bdr::Fields> fs(t.n * gb);
    for (auto& f : fs) {
      f.e = draw_wscale();
      f.mu = static_cast<uint8_t>(rng());
      for (int i = 0; i < 16; ++i) f.code[i] = static_cast<uint8_t>(rng() % (2u << bf->m));
    }
    for (int x = 0; x < t.nan_w; ++x) fs[rng() % fs.size()].e = 0xFF;
    if (t.zero_blocks)
      for (int64_t c = 1; c < t.n; c += 3) {
        qj::bdr::Fields& f = fs[c * gb + c % gb];
        f.e = 0, f.mu = 0;
        std::memset(f.code, 0, sizeof f.code);
      }
    rw.bdr.resize(fs.size() * bf->block_bytes);
    for (size_t b = 0; b < fs.size(); ++b) qj::bdr::pack(*bf, fs[b], &rw.bdr[b * bf->block_bytes]);
    rw.codes.clear();
    rw.scales.clear();
  } else {
    const int wbits = qj::mx::format(t.w)->bits;
    for (auto& c : rw.codes) c = draw_code(t.w, wbits);
    for (auto& s : rw.scales) s = draw_wscale();
    for (int x = 0; x < t.nan_w; ++x) rw.scales[rng() % rw.scales.size()] = 0xFF;
  }
  for (int x = 0; x < t.nan_a; ++x) A.ref.scales[rng() % A.ref.scales.size()] = 0xFF;
  if (t.zero_blocks) {
    for (int64_t i = 0; i < t.m; i += 2) {
      const int64_t b = (i / 2) % blocks;
      A.ref.scales[i * blocks + b] = 0x00;
      for (int j = 0; j < 32; ++j) A.ref.codes[i * t.k + b * 32 + j] = 0;
    }
    for (int64_t c = 1; c < t.n && rw.bdr.empty(); c += 3) {
      const int64_t b = c % blocks;
      rw.scales[c * blocks + b] = 0x00;
      for (int j = 0; j < 32; ++j) rw.codes[c * t.k + b * 32 + j] = 0;
    }
  }
  A.build(t.lda_pad, t.sld_pad);
  const std::vector<float> bias = qjt::random_floats(t.n, -2.0f, 2.0f, t.seed + 5);
  return run_and_check(t, A, rw, bias);
}

// ---- MX.md TV13 dot products as 1 x 1 GEMMs ----

MxA fp4_vector(const std::vector<uint8_t>& codes, uint8_t scale) {
  MxA A;
  A.ref.type = QJ_MXFP4_E2M1;
  A.ref.m = 1;
  A.ref.k = 32;
  A.ref.codes = codes;
  A.ref.scales = {scale};
  A.build(0, 0);
  return A;
}

// C = A (1 x 32, MX type ta) . B (32 x 1, MX type tb) through the API; NaN-safe bits.
qj_status gemm_dot(qj_dtype ta, const std::vector<uint8_t>& ca, uint8_t sa, qj_dtype tb,
                   const std::vector<uint8_t>& cb, uint8_t sb, float* out) {
  MxA A;
  A.ref.type = ta;
  A.ref.m = 1;
  A.ref.k = 32;
  A.ref.codes = ca;
  A.ref.scales = {sa};
  A.build(0, 0);
  const qj::mx::ElemFormat& fb = *qj::mx::format(tb);
  std::vector<uint8_t> eb(fb.block_bytes);
  qj::mx::pack_block(fb, cb.data(), eb.data());
  qj_weights_desc wd{};
  wd.dtype = tb;
  wd.k = 32;
  wd.n = 1;
  wd.layout = QJ_LAYOUT_NK;
  qj_mx_weights_data md{eb.data(), &sb, 1};
  qj_weights w = nullptr;
  qj_status st = qj_weights_pack(&wd, &md, fb.block_bytes, &w);
  if (st != QJ_OK) return st;
  qj_gemm_desc gd{};
  gd.a_type = ta;
  gd.c_type = QJ_F32;
  qj_gemm_plan p = nullptr;
  st = qj_gemm_plan_create(&gd, w, &p);
  qj_weights_destroy(w);
  if (st != QJ_OK) return st;
  st = qj_gemm_run(p, 1, &A.mat, A.lda, out, 1, nullptr);
  qj_gemm_plan_destroy(p);
  return st;
}

TEST(GemmMxAct, Tv13Fp4TimesFp4) {
  // codes i % 16 (scale 0x7F) . codes 15 - i % 16 (scale 0x80): exactly -128.0, both ways round.
  std::vector<uint8_t> a(32), b(32);
  for (int i = 0; i < 32; ++i) {
    a[i] = static_cast<uint8_t>(i % 16);
    b[i] = static_cast<uint8_t>(15 - i % 16);
  }
  for (qj_isa isa : qjt::supported_isas()) {
    qjt::IsaCap cap(isa);
    float c = 0;
    ASSERT_EQ(gemm_dot(QJ_MXFP4_E2M1, a, 0x7F, QJ_MXFP4_E2M1, b, 0x80, &c), QJ_OK) << qj_last_error();
    EXPECT_EQ(c, -128.0f) << qj_isa_name(isa);
    ASSERT_EQ(gemm_dot(QJ_MXFP4_E2M1, b, 0x80, QJ_MXFP4_E2M1, a, 0x7F, &c), QJ_OK) << qj_last_error();
    EXPECT_EQ(c, -128.0f) << qj_isa_name(isa);
  }
  // The reference agrees (and with the independent ref::mx_dot).
  MxA A = fp4_vector(a, 0x7F);
  qj::ref::MxWeights w{QJ_MXFP4_E2M1, 32, 1, b, {0x80}};
  std::vector<double> y, mag;
  qj_gemm_desc gd{};
  qj::ref::gemm_mx_mx(gd, A.ref, w, &y, &mag);
  EXPECT_EQ(y[0], -128.0);
}

// The integer-exact weights at their extremes against A's (MXINT8 -128 / 127, E3M2 -448 / 448 as
// 16v): every vpmaddubsw pair of the non-VNNI kernels at its largest magnitude (E2M3 one pair per
// s16 sum, MXINT8 split into nibbles), the VNNI ones at theirs (E3M2 A split into s8 parts); a
// saturated s16 sum would miss by thousands.
TEST(GemmMxAct, ExtremeCodesEveryTier) {
  struct Ends {
    qj_dtype t;
    uint8_t lo, hi;  // the most negative and the most positive code
  };
  const Ends ws[] = {{QJ_MXINT8, 0x80, 0x7F}, {QJ_MXFP6_E2M3, 0x3F, 0x1F}, {QJ_MXFP4_E2M1, 0x0F, 0x07}};
  const Ends as[] = {{QJ_MXINT8, 0x80, 0x7F}, {QJ_MXFP6_E3M2, 0x3F, 0x1F}};
  for (const Ends& at : as)
    for (const Ends& wt : ws)
      for (int pat = 0; pat < 4; ++pat) {
        std::vector<uint8_t> a(32), b(32);
        for (int i = 0; i < 32; ++i) {
          // A most negative (pattern 1: most positive; 3: most positive against the weights' most
          // negative and vice versa, in runs of two: every pair and every sum at the same sign)
          a[i] = pat == 1 || (pat == 3 && (i & 2)) ? at.hi : at.lo;
          b[i] = pat == 0 || (pat == 3 && (i & 2)) ? wt.lo : wt.hi;
        }
        MxA A;
        A.ref.type = at.t;
        A.ref.m = 1;
        A.ref.k = 32;
        A.ref.codes = a;
        A.ref.scales = {0x7F};
        A.build(0, 0);
        qj::ref::MxWeights w{wt.t, 32, 1, b, {0x7F}};
        std::vector<double> y, mag;
        qj_gemm_desc gd{};
        qj::ref::gemm_mx_mx(gd, A.ref, w, &y, &mag);
        ASSERT_NE(y[0], 0.0);
        for (qj_isa isa : qjt::supported_isas()) {
          qjt::IsaCap cap(isa);
          float c = 0;
          ASSERT_EQ(gemm_dot(at.t, a, 0x7F, wt.t, b, 0x7F, &c), QJ_OK) << qj_last_error();
          EXPECT_EQ(c, static_cast<float>(y[0])) << qj_dtype_name(at.t) << " x " << qj_dtype_name(wt.t)
                                                 << " pattern " << pat << " " << qj_isa_name(isa);
        }
      }
}

TEST(GemmMxAct, Tv13NanScaleEitherSide) {
  std::vector<uint8_t> a(32, 0x3), b(32, 0x3);
  for (qj_isa isa : qjt::supported_isas()) {
    qjt::IsaCap cap(isa);
    for (qj_dtype t : kIntTypes) {
      float c = 0;
      ASSERT_EQ(gemm_dot(t, a, 0xFF, QJ_MXFP4_E2M1, b, 0x7F, &c), QJ_OK) << qj_last_error();
      EXPECT_TRUE(std::isnan(c)) << qj_dtype_name(t) << " " << qj_isa_name(isa) << " got " << c;
      ASSERT_EQ(gemm_dot(t, a, 0x7F, QJ_MXFP4_E2M1, b, 0xFF, &c), QJ_OK) << qj_last_error();
      EXPECT_TRUE(std::isnan(c)) << qj_dtype_name(t) << " " << qj_isa_name(isa) << " got " << c;
      // Zero elements do not hide a NaN scale (NaN * 0 is NaN).
      ASSERT_EQ(gemm_dot(t, std::vector<uint8_t>(32, 0), 0xFF, QJ_MXFP4_E2M1, b, 0x7F, &c), QJ_OK);
      EXPECT_TRUE(std::isnan(c)) << qj_dtype_name(t) << " " << qj_isa_name(isa) << " got " << c;
    }
  }
}

TEST(GemmMxAct, Tv13Fp4TimesE4m3Reference) {
  // MXFP4 (0x82, all 1.5) . MXFP8 E4M3 (0x78, all 2.0) = 2^3 * 2^-7 * 32 * 3 = 6.0 exactly.
  std::vector<uint8_t> a(32, 0x3), b(32, 0x40);
  MxA A = fp4_vector(a, 0x82);
  qj::ref::MxWeights w{QJ_MXFP8_E4M3, 32, 1, b, {0x78}};
  std::vector<double> y, mag;
  qj_gemm_desc gd{};
  qj::ref::gemm_mx_mx(gd, A.ref, w, &y, &mag);
  EXPECT_EQ(y[0], 6.0);
  // (Both orders through the GEMM API: GemmMxPairs.Tv13Fp4TimesE4m3ThroughTheApi, Fp8ATimes...)
  qj::ref::MxActivations A8{QJ_MXFP8_E4M3, 1, 32, b, {0x78}};
  qj::ref::MxWeights w4{QJ_MXFP4_E2M1, 32, 1, a, {0x82}};
  qj::ref::gemm_mx_mx(gd, A8, w4, &y, &mag);
  EXPECT_EQ(y[0], 6.0);
}

TEST(GemmMxAct, Tv13PaddedTailUnchanged) {
  // K = 20 live elements padded with zero codes to one block: the GEMM equals ref::mx_dot(k = 20).
  std::mt19937 rng(5);
  for (qj_isa isa : qjt::supported_isas()) {
    qjt::IsaCap cap(isa);
    for (qj_dtype ta : kIntTypes)
      for (qj_dtype tb : kIntTypes) {
        const int abits = qj::mx::format(ta)->bits, bbits = qj::mx::format(tb)->bits;
        std::vector<uint8_t> a(32, 0), b(32, 0);
        for (int i = 0; i < 20; ++i) {
          a[i] = static_cast<uint8_t>(rng() % (1u << abits));
          b[i] = static_cast<uint8_t>(rng() % (1u << bbits));
        }
        float c = 0;
        ASSERT_EQ(gemm_dot(ta, a, 0x79, tb, b, 0x84, &c), QJ_OK) << qj_last_error();
        std::vector<uint8_t> ea(qj::mx::format(ta)->block_bytes), eb(qj::mx::format(tb)->block_bytes);
        qj::mx::pack_block(*qj::mx::format(ta), a.data(), ea.data());
        qj::mx::pack_block(*qj::mx::format(tb), b.data(), eb.data());
        const uint8_t sa = 0x79, sb = 0x84;
        const float want = qj::ref::mx_dot(ta, ea.data(), &sa, tb, eb.data(), &sb, 20);
        EXPECT_EQ(qj::f32_bits(c), qj::f32_bits(want))
            << qj_dtype_name(ta) << " x " << qj_dtype_name(tb) << " " << qj_isa_name(isa) << ": " << c << " vs " << want;
      }
  }
}

// ---- sweeps ----

TEST(GemmMxAct, ShapeSweep) {
  for (qj_isa isa : qjt::supported_isas()) {
    qjt::IsaCap cap(isa);
    uint32_t seed = 1;
    for (qj_dtype wt : kIntTypes) {
      const int mr = plan_mr(wt, 33);
      std::vector<int64_t> ms = {1, 2, 3, mr - 1, mr, mr + 1, 97};
      for (qj_dtype at : kIntTypes)
        for (int64_t m : ms) {
          if (m < 1) continue;
          for (int64_t n : {1, 15, 16, 17, 33})
            for (int64_t k : {32, 64, 512}) {
              if (m == 97 && k == 512 && n != 33) continue;  // keep the executable fast
              Case t;
              t.a = at;
              t.w = wt;
              t.m = m;
              t.n = n;
              t.k = k;
              t.seed = seed++;
              t.c_type = seed % 4 == 0 ? QJ_BF16 : QJ_F32;
              t.bias = seed % 2 == 0;
              t.relu = seed % 5 == 0;
              t.lda_pad = seed % 3;
              t.sld_pad = seed % 2;
              t.ldc_pad = seed % 3 == 1;
              EXPECT_EQ(run_case(t), "") << t.str();
            }
        }
    }
  }
}

// ---- the other MX x MX pairs: MXFP8 weights (fp32 route, any A) and int16-pair weights (E3M2,
// BDR; A in its integer form as s16 pairs, every type but FP8) ----

const qj_dtype kAllTypes[] = {QJ_MXFP4_E2M1, QJ_MXFP6_E2M3, QJ_MXFP6_E3M2, QJ_MXFP8_E4M3, QJ_MXFP8_E5M2, QJ_MXINT8};
const qj_dtype kInt16ATypes[] = {QJ_MXFP4_E2M1, QJ_MXFP6_E2M3, QJ_MXFP6_E3M2, QJ_MXINT8};
const qj_dtype kInt16WTypes[] = {QJ_MXFP6_E3M2, QJ_BDR_MX9, QJ_BDR_MX6, QJ_BDR_MX4};

struct Pair {
  qj_dtype a, w;
};
std::vector<Pair> new_pairs() {
  std::vector<Pair> v;
  for (qj_dtype a : kAllTypes)
    for (qj_dtype w : {QJ_MXFP8_E4M3, QJ_MXFP8_E5M2}) v.push_back({a, w});
  for (qj_dtype a : kInt16ATypes)
    for (qj_dtype w : kInt16WTypes) v.push_back({a, w});
  for (qj_dtype w : kIntTypes) v.push_back({QJ_MXFP6_E3M2, w});  // A split (VNNI) / weights as MX6 / MX9
  for (qj_dtype a : {QJ_MXFP8_E4M3, QJ_MXFP8_E5M2})  // weights read in place, fp32 route
    for (qj_dtype w : {QJ_MXFP4_E2M1, QJ_MXFP6_E2M3, QJ_MXFP6_E3M2, QJ_MXINT8, QJ_BDR_MX9, QJ_BDR_MX6, QJ_BDR_MX4})
      v.push_back({a, w});
  return v;
}

// MR of the plan for these weights (float kernel for MXFP8, the int16-pair kernel otherwise).
int pair_mr(const Pair& p, int64_t n) {
  const bool fp8_a = p.a == QJ_MXFP8_E4M3 || p.a == QJ_MXFP8_E5M2;
  if (p.w == QJ_MXFP8_E4M3 || p.w == QJ_MXFP8_E5M2 || fp8_a) {
    // The float kernel's tile (as gemm.cpp's float plan keys it): MXFP8 weights, or under FP8 A
    // every other MX / BDR type in place (their own panels). (E2M3 with VBMI needs fewer
    // registers than keyed here.)
    const qj_isa isa = qj_max_isa();
    if (isa < QJ_ISA_AVX2) return 1;
    const bool in_place = p.w != QJ_MXFP8_E4M3 && p.w != QJ_MXFP8_E5M2;
    qj::KernelKey key = qj::KernelKey::zeroed();
    key.op = qj::KernelOp::kGemmFloat;
    key.isa = static_cast<uint8_t>(isa);
    key.a_type = QJ_F32;
    key.b_type = p.w;
    key.c_type = QJ_F32;
    key.nr = static_cast<uint16_t>(qj::weights_nr(isa, n, in_place ? p.w : QJ_MXFP8_E5M2));
    key.param[0] = 1;
    key.flags = isa >= QJ_ISA_AVX512 ? 2 : 0;  // per-block accumulators (gemm.cpp)
    return std::max(1, qj::gemm_float_max_mr(key, 14));
  }
  // E3M2 A x int8-form weights: A split in two s8 parts at the VNNI tier; below it the weights
  // as MX6 / MX9 in the int16-pair kernel.
  const bool int8_w = p.w == QJ_MXFP4_E2M1 || p.w == QJ_MXFP6_E2M3 || p.w == QJ_MXINT8;
  if (p.a == QJ_MXFP6_E3M2 && int8_w && qj_max_isa() >= QJ_ISA_AVX512_VNNI) return plan_mr(p.w, n, true);
  if (p.a == QJ_MXFP6_E3M2 && (p.w == QJ_MXFP4_E2M1 || p.w == QJ_MXFP6_E2M3)) return plan_mr(QJ_BDR_MX6, n);
  if (p.a == QJ_MXFP6_E3M2 && p.w == QJ_MXINT8) return plan_mr(QJ_BDR_MX9, n);
  return plan_mr(p.w, n);
}

TEST(GemmMxPairs, ShapeSweep) {
  // Every M of the list with every N tail; K rotates through {32, 64, 512} so each pair sees all.
  for (qj_isa isa : qjt::supported_isas()) {
    qjt::IsaCap cap(isa);
    uint32_t seed = 3000;
    for (const Pair& pr : new_pairs()) {
      const int mr = pair_mr(pr, 33);
      int idx = 0;
      for (int64_t m : {int64_t(1), int64_t(2), int64_t(3), int64_t(mr - 1), int64_t(mr), int64_t(mr + 1), int64_t(97)}) {
        if (m < 1) continue;
        for (int64_t n : {1, 15, 16, 17, 33}) {
          const int64_t ks[] = {32, 64, 512};
          Case t;
          t.a = pr.a;
          t.w = pr.w;
          t.m = m;
          t.n = n;
          t.k = ks[idx++ % 3];
          if (m == 97 && t.k == 512) t.k = 64;  // keep the executable fast
          t.seed = seed++;
          t.c_type = seed % 4 == 0 ? QJ_BF16 : QJ_F32;
          t.bias = seed % 2 == 0;
          t.relu = seed % 5 == 0;
          t.beta = seed % 7 == 0 && t.c_type == QJ_F32 ? 0.5f : 0.0f;
          t.lda_pad = seed % 3;
          t.sld_pad = seed % 2;
          t.ldc_pad = seed % 3 == 1;
          EXPECT_EQ(run_case(t), "") << t.str();
        }
      }
      // K = 512 with many rows once per pair (several blocks in a tall tile).
      Case t;
      t.a = pr.a;
      t.w = pr.w;
      t.m = 2 * mr + 3;
      t.n = 33;
      t.k = 512;
      t.seed = seed++;
      EXPECT_EQ(run_case(t), "") << t.str();
    }
  }
}

TEST(GemmMxPairs, NanScalesZeroBlocksCodesAndThreads) {
  for (qj_isa isa : qjt::supported_isas()) {
    qjt::IsaCap cap(isa);
    uint32_t seed = 5000;
    for (const Pair& pr : new_pairs()) {
      Case t;
      t.a = pr.a;
      t.w = pr.w;
      t.m = 9;
      t.n = 37;
      t.k = 128;
      t.seed = seed++;
      t.nan_a = 3;  // NaN on the A side only
      EXPECT_EQ(run_case(t), "") << t.str();
      t.nan_a = 0;
      t.nan_w = 3;  // ... on the weight side only
      t.seed = seed++;
      EXPECT_EQ(run_case(t), "") << t.str();
      t.nan_w = 0;
      t.zero_blocks = true;  // scale-0 zero blocks on both sides
      t.seed = seed++;
      EXPECT_EQ(run_case(t), "") << t.str();
      t.zero_blocks = false;
      t.all_codes = true;  // every code of A (FP8: the finite ones)
      t.k = 256;
      t.seed = seed++;
      EXPECT_EQ(run_case(t), "") << t.str();
      t.all_codes = false;
      t.scale_lo = 1, t.scale_hi = 20;  // tiny scales (fp32 subnormal partial results)
      t.wscale_lo = 100, t.wscale_hi = 127;
      t.seed = seed++;
      EXPECT_EQ(run_case(t), "") << t.str();
      t.scale_lo = 107, t.scale_hi = 147, t.wscale_lo = t.wscale_hi = -1;
      t.m = 40;
      t.threads = 2;  // a partition: every element computed once, identically
      t.seed = seed++;
      EXPECT_EQ(run_case(t), "") << t.str();
    }
  }
}

// Seeded random sample of every pair and option (QJ_TEST_ITERATIONS / QJ_TEST_SEED scale it up
// for a long local run, test/test_util.h).
TEST(GemmMxPairs, RandomCombinations) {
  std::vector<Pair> pairs = new_pairs();
  for (qj_dtype a : kIntTypes)
    for (qj_dtype w : kIntTypes) pairs.push_back({a, w});
  qjt::for_each_random_case(33001u, 30, [&](qj_isa, qjt::Picker& pick, uint32_t seed) {
    const Pair& pr = pairs[pick(static_cast<int>(pairs.size()))];
    Case t;
    t.a = pr.a;
    t.w = pr.w;
    t.seed = seed;
    t.m = pick.rows(60, 60, 120);
    t.n = 1 + pick(pick(4) == 0 ? 200 : 50);
    t.k = 32 * (1 + pick(pick(4) == 0 ? 16 : 4));
    t.c_type = pick(3) == 0 ? QJ_BF16 : QJ_F32;
    t.bias = pick(2);
    t.relu = pick(3) == 0;
    t.beta = t.c_type == QJ_F32 && pick(4) == 0 ? 0.5f : 0.0f;
    switch (pick(8)) {
      case 0: t.nan_a = 1 + pick(3); break;
      case 1: t.nan_w = 1 + pick(3); break;
      case 2: t.zero_blocks = true; break;
      case 3: t.all_codes = true; break;
      case 4: t.scale_lo = 1, t.scale_hi = 20, t.wscale_lo = 100, t.wscale_hi = 127; break;
      default: break;
    }
    t.lda_pad = pick(3) == 0 ? pick(9) : 0;
    t.sld_pad = pick(3) == 0 ? pick(4) : 0;
    t.ldc_pad = pick(3) == 0 ? pick(9) : 0;
    t.threads = pick(4) == 0 ? 2 + pick(4) : 1;
    // One case in four as on a VNNI CPU without AVX512-VBMI (its decoders keep other state).
    std::optional<qjt::HideVbmi> hide;
    if (pick(4) == 0) hide.emplace();
    // One case in eight with the weights packed at a random tier (the plan repacks them).
    if (pick(8) == 0) t.pack_isa = qjt::supported_isas()[pick(static_cast<int>(qjt::supported_isas().size()))];
    EXPECT_EQ(run_case(t), "") << t.str() << (hide ? " (VBMI hidden)" : "");
  });
}

// E3M2 A x int8-form weights packed for one tier and planned at another: the plan repacks the
// weights for its tier first, and only then picks the route (A split at the VNNI tier, the weights
// as MX6 / MX9 below it).
TEST(GemmMxPairs, E3m2ATimesInt8FormWeightsAcrossTiers) {
  const std::vector<qj_isa> isas = qjt::supported_isas();
  uint32_t seed = 6100;
  for (qj_isa pack : isas)
    for (qj_isa run : isas) {
      if (pack == run || run < QJ_ISA_AVX2) continue;
      qjt::IsaCap cap(run);
      for (qj_dtype w : kIntTypes) {
        Case t;
        t.a = QJ_MXFP6_E3M2;
        t.w = w;
        t.m = 7;
        t.n = 19;
        t.k = 96;
        t.bias = true;
        t.pack_isa = pack;
        t.seed = seed++;
        EXPECT_EQ(run_case(t), "") << t.str();
      }
    }
}

// bf16 output from a call of several 32-column panels: the store's NaN test between panels must
// leave the mask registers the 6-bit unpack keeps across them (k6 / k7) alone. It once used k7,
// and every panel after the first then decoded its E2M3 codes wrong: at tile heights 5 and 6
// with VBMI (the shuffle form of the unpack), at every height without. Every tile height, both
// forms, each MX weight type with each MXFP8 A.
TEST(GemmMxPairs, Bf16OutputAcrossPanels) {
  qjt::each_tile_height_with_and_without_vbmi(QJ_ISA_AVX2, [](int64_t m, const char* note) {
    for (qj_dtype wt : {QJ_MXFP6_E2M3, QJ_MXFP6_E3M2, QJ_BDR_MX6, QJ_BDR_MX9, QJ_MXFP4_E2M1, QJ_MXINT8})
      for (qj_dtype at : {QJ_MXFP8_E4M3, QJ_MXFP8_E5M2}) {
        Case t;
        t.a = at, t.w = wt, t.c_type = QJ_BF16;
        t.m = m, t.n = 100, t.k = 64;
        t.seed = 7300 + static_cast<uint32_t>(m);
        EXPECT_EQ(run_case(t), "") << t.str() << note;
      }
  });
}

// MXFP8 A x E2M3 weights read in place: on a CPU without AVX512-VBMI the zmm kernels decode the
// codes with two vpshufb tables and byte masks instead of one vpermb (the AVX2 kernels always do,
// with vpblendvb / vpsignb; ShapeSweep covers them). Every code, NaN / zero blocks, tails. Also
// the 6-bit E3M2 / MX6 panels of the VNNI tier, unpacked by the shuffle form without VBMI.
TEST(GemmMxPairs, Fp8ATimesSixBitCodesWithoutVbmi) {
  qjt::HideVbmi hide;
  for (qj_isa isa : qjt::supported_isas()) {
    if (isa < QJ_ISA_AVX512) continue;
    qjt::IsaCap cap(isa);
    uint32_t seed = 7100;
    for (qj_dtype wt : {QJ_MXFP6_E2M3, QJ_MXFP6_E3M2, QJ_BDR_MX6})
    for (qj_dtype at : {QJ_MXFP8_E4M3, QJ_MXFP8_E5M2})
      for (int64_t m : {1, 3, 8, 17})
        for (int64_t n : {5, 16, 33}) {
          Case t;
          t.a = at;
          t.w = wt;
          t.m = m;
          t.n = n;
          t.k = 128;
          t.seed = seed++;
          t.nan_w = seed % 4 == 0 ? 2 : 0;
          t.zero_blocks = seed % 5 == 0;
          t.all_codes = seed % 3 == 0;
          EXPECT_EQ(run_case(t), "") << t.str();
        }
  }
}

TEST(GemmMxPairs, Tv13Fp4TimesE4m3ThroughTheApi) {
  // MX.md TV13: MXFP4 (0x82, all 1.5) . MXFP8 E4M3 (0x78, all 2.0) = 6.0 exactly (one block:
  // every product and partial sum is exact: 1.5 * 2^3 * 2.0 * 2^-7 = 0.1875 each, 32 of them).
  std::vector<uint8_t> a(32, 0x3), b(32, 0x40);
  for (qj_isa isa : qjt::supported_isas()) {
    qjt::IsaCap cap(isa);
    float c = 0;
    ASSERT_EQ(gemm_dot(QJ_MXFP4_E2M1, a, 0x82, QJ_MXFP8_E4M3, b, 0x78, &c), QJ_OK) << qj_last_error();
    EXPECT_EQ(c, 6.0f) << qj_isa_name(isa);
    // NaN scale on either side.
    ASSERT_EQ(gemm_dot(QJ_MXFP4_E2M1, a, 0xFF, QJ_MXFP8_E4M3, b, 0x78, &c), QJ_OK) << qj_last_error();
    EXPECT_TRUE(std::isnan(c)) << qj_isa_name(isa);
    ASSERT_EQ(gemm_dot(QJ_MXFP4_E2M1, a, 0x82, QJ_MXFP8_E4M3, b, 0xFF, &c), QJ_OK) << qj_last_error();
    EXPECT_TRUE(std::isnan(c)) << qj_isa_name(isa);
  }
}

TEST(GemmMxPairs, Fp8ATimesIntegerFormWeights) {
  // TV13 the other way round: E4M3 A (0x78, all 2.0) . MXFP4 weights (0x82, all 1.5) = 6.0.
  std::vector<uint8_t> a(32, 0x40), b(32, 0x3);
  for (qj_isa isa : qjt::supported_isas()) {
    qjt::IsaCap cap(isa);
    float c = 0;
    ASSERT_EQ(gemm_dot(QJ_MXFP8_E4M3, a, 0x78, QJ_MXFP4_E2M1, b, 0x82, &c), QJ_OK) << qj_last_error();
    EXPECT_EQ(c, 6.0f) << qj_isa_name(isa);
    // MXINT8 weights (integer forms): codes 64 = 1.0 at 0x80 (2.0): 32 * 2 * 2 = 128 exactly.
    ASSERT_EQ(gemm_dot(QJ_MXFP8_E5M2, std::vector<uint8_t>(32, 0x40), 0x7F, QJ_MXINT8, std::vector<uint8_t>(32, 64),
                       0x80, &c), QJ_OK) << qj_last_error();
    EXPECT_EQ(c, 128.0f) << qj_isa_name(isa);  // E5M2 0x40 = 2.0
    // A weight whose value alone is beyond fp32 (-128 * 2^-6 * 2^127 = -2^128; this once was
    // refused): the block scale multiplies the block's sum, 32 * 2^-6 * -128 = -64, so the dot is
    // -2^127 exactly (E4M3 0x40 = 2.0 at 0x78: 2^-6 per element).
    std::vector<uint8_t> big(32, 0x80);
    ASSERT_EQ(gemm_dot(QJ_MXFP8_E4M3, a, 0x78, QJ_MXINT8, big, 254, &c), QJ_OK) << qj_last_error();
    EXPECT_EQ(c, -std::ldexp(1.0f, 127)) << qj_isa_name(isa);
    // The smallest scale: codes 64 (1.0 * 2^-127 each) against E4M3 2.0 at 0x7F + 100: 32 * 2^-126
    // * 2^100 = 2^-21.
    ASSERT_EQ(gemm_dot(QJ_MXFP8_E4M3, a, 0x7F + 100, QJ_MXINT8, std::vector<uint8_t>(32, 64), 0, &c), QJ_OK)
        << qj_last_error();
    EXPECT_EQ(c, std::ldexp(1.0f, -21)) << qj_isa_name(isa);
  }
}

TEST(GemmMxAct, EveryCodeOfEachAType) {
  for (qj_isa isa : qjt::supported_isas()) {
    qjt::IsaCap cap(isa);
    for (qj_dtype at : kIntTypes)
      for (qj_dtype wt : kIntTypes) {
        Case t;
        t.a = at;
        t.w = wt;
        t.m = 5;
        t.n = 19;
        t.k = 256;  // every row holds every code (INT8: all 256, -128 included)
        t.all_codes = true;
        t.seed = 40;
        EXPECT_EQ(run_case(t), "") << t.str();
      }
  }
}

TEST(GemmMxAct, NanScalesZeroBlocksAndScaleExtremes) {
  for (qj_isa isa : qjt::supported_isas()) {
    qjt::IsaCap cap(isa);
    uint32_t seed = 500;
    for (qj_dtype at : kIntTypes)
      for (qj_dtype wt : kIntTypes) {
        Case t;
        t.a = at;
        t.w = wt;
        t.m = 9;
        t.n = 35;
        t.k = 128;
        t.seed = seed++;
        t.nan_a = 3;
        t.nan_w = 3;
        EXPECT_EQ(run_case(t), "") << t.str();
        t.c_type = QJ_BF16;  // NaN survives the bf16 rounding
        t.bias = true;
        EXPECT_EQ(run_case(t), "") << t.str();
        t.c_type = QJ_F32;
        t.bias = false;
        t.nan_a = t.nan_w = 0;
        t.zero_blocks = true;
        t.bias = true;
        EXPECT_EQ(run_case(t), "") << t.str();
        t.zero_blocks = false;
        // Tiny scales: products in the fp32 subnormal range (and 2^-133 A factors).
        t.scale_lo = 0;
        t.scale_hi = 12;
        t.bias = false;
        EXPECT_EQ(run_case(t), "") << t.str();
        // A factors 2^(sA - 127 - shift) deep in the fp32 subnormal range (down to 2^-133) times
        // huge weight scales: normal results through subnormal (exact) partials.
        t.scale_lo = 0;
        t.scale_hi = 6;
        t.wscale_lo = 230;
        t.wscale_hi = 254;
        EXPECT_EQ(run_case(t), "") << t.str();
        // The mirror image, as far as the partial float(sum) * 2^(sA - 127 - shift) stays finite
        // (quantjit.h: A scale bytes near 0xFE can overflow it; not tested as a feature).
        t.scale_lo = 200;
        t.scale_hi = 220;
        t.wscale_lo = 20;
        t.wscale_hi = 40;
        EXPECT_EQ(run_case(t), "") << t.str();
        t.wscale_lo = t.wscale_hi = -1;
        // The whole finite range the fp32 output can hold: large and small scales mixed.
        t.scale_lo = 127 - 58;
        t.scale_hi = 127 + 58;
        EXPECT_EQ(run_case(t), "") << t.str();
      }
  }
}

TEST(GemmMxAct, OutputStageThreadsAndStrides) {
  for (qj_isa isa : qjt::supported_isas()) {
    qjt::IsaCap cap(isa);
    uint32_t seed = 700;
    for (qj_dtype at : kIntTypes) {
      Case t;
      t.a = at;
      t.w = QJ_MXFP4_E2M1;
      t.m = 70;
      t.n = 100;
      t.k = 256;
      t.bias = true;
      t.relu = true;
      t.threads = 2;
      t.lda_pad = 7;
      t.sld_pad = 3;
      t.ldc_pad = 2;
      t.seed = seed++;
      EXPECT_EQ(run_case(t), "") << t.str();
      t.relu = false;
      t.c_type = QJ_BF16;
      t.threads = 3;
      EXPECT_EQ(run_case(t), "") << t.str();
      t.c_type = QJ_F32;
      t.beta = 0.5f;
      t.threads = 1;
      EXPECT_EQ(run_case(t), "") << t.str();
      // Few rows, two threads: the partition splits the N panels instead of the row tiles.
      t.beta = 0.0f;
      t.m = 3;
      t.threads = 2;
      EXPECT_EQ(run_case(t), "") << t.str();
    }
  }
}

TEST(GemmMxAct, RequantizedU8Output) {
  // u8 C: q = sat(rne(y / c_scale) + zp). y is within the fp32 bound of the exact value, so q may
  // differ from the exact rounding by one unit where y sits next to a .5 boundary, never more.
  for (qj_isa isa : qjt::supported_isas()) {
    qjt::IsaCap cap(isa);
    for (qj_dtype at : kIntTypes) {
      Case t;
      t.a = at;
      t.m = 6;
      t.n = 40;
      t.k = 128;
      t.scale_lo = 120;
      t.scale_hi = 126;
      std::mt19937 rng(77);
      MxA A;
      A.ref = {at, t.m, t.k, std::vector<uint8_t>(t.m * t.k), std::vector<uint8_t>(t.m * 4)};
      const int abits = qj::mx::format(at)->bits;
      for (auto& c : A.ref.codes) c = static_cast<uint8_t>(rng() % (1u << abits));
      for (auto& x : A.ref.scales) x = static_cast<uint8_t>(120 + rng() % 7);
      A.build(0, 0);
      qj::ref::MxWeights rw{QJ_MXFP4_E2M1, t.k, t.n, std::vector<uint8_t>(t.n * t.k), std::vector<uint8_t>(t.n * 4)};
      for (auto& c : rw.codes) c = static_cast<uint8_t>(rng() % 16);
      for (auto& x : rw.scales) x = static_cast<uint8_t>(120 + rng() % 7);
      std::vector<uint8_t> we(t.n * 64), ws(t.n * 4);
      for (int64_t c = 0; c < t.n; ++c)
        for (int b = 0; b < 4; ++b) {
          qj::mx::pack_block(*qj::mx::format(QJ_MXFP4_E2M1), &rw.codes[c * t.k + b * 32], &we[c * 64 + b * 16]);
          ws[c * 4 + b] = rw.scales[c * 4 + b];
        }
      qj_weights_desc wd{};
      wd.dtype = QJ_MXFP4_E2M1;
      wd.k = t.k;
      wd.n = t.n;
      wd.layout = QJ_LAYOUT_NK;
      qj_mx_weights_data md{we.data(), ws.data(), 4};
      qj_weights w = nullptr;
      ASSERT_EQ(qj_weights_pack(&wd, &md, 64, &w), QJ_OK);
      qj_gemm_desc gd{};
      gd.a_type = at;
      gd.c_type = QJ_U8;
      gd.c_scale = 0.03f;
      gd.c_zero_point = 100;
      qj_gemm_plan p = nullptr;
      ASSERT_EQ(qj_gemm_plan_create(&gd, w, &p), QJ_OK) << qj_last_error();
      qj_weights_destroy(w);
      std::vector<uint8_t> c(t.m * t.n, 0);
      ASSERT_EQ(qj_gemm_run(p, t.m, &A.mat, A.lda, c.data(), t.n, nullptr), QJ_OK) << qj_last_error();
      qj_gemm_plan_destroy(p);
      std::vector<double> y, mag;
      qj::ref::gemm_mx_mx(gd, A.ref, rw, &y, &mag);
      int spread = 0;
      for (int64_t i = 0; i < t.m * t.n; ++i) {
        const double q = std::min(255.0, std::max(0.0, std::nearbyint(y[i] / 0.03) + 100));
        EXPECT_LE(std::fabs(c[i] - q), 1.0) << qj_dtype_name(at) << " " << i << " y=" << y[i];
        spread += c[i] != 100;
      }
      EXPECT_GT(spread, t.m * t.n / 2);  // the data spans the output range (not all zero point)
    }
  }
}

// ---- S4 / U4 weights quantized per group of 32 ----

TEST(GemmMxAct, Int4WeightsGroup32) {
  for (qj_isa isa : qjt::supported_isas()) {
    qjt::IsaCap cap(isa);
    uint32_t seed = 900;
    for (qj_dtype at : kIntTypes)
      for (qj_dtype wt : {QJ_S4, QJ_U4})
        for (bool zps : {false, true}) {
          std::mt19937 rng(seed++);
          const int64_t m = 7, n = 21, k = 96, groups = k / 32;
          MxA A;
          A.ref.type = at;
          A.ref.m = m;
          A.ref.k = k;
          A.ref.codes.resize(m * k);
          A.ref.scales.resize(m * groups);
          const int abits = qj::mx::format(at)->bits;
          for (auto& c : A.ref.codes) c = static_cast<uint8_t>(rng() % (1u << abits));
          for (auto& s : A.ref.scales) s = static_cast<uint8_t>(115 + rng() % 20);
          A.ref.scales[3] = 0xFF;
          A.build(1, 1);
          // q(k, n) in the nibble range, NK layout, low nibble = even k.
          const int lo = wt == QJ_S4 ? -8 : 0;
          std::vector<int32_t> q(n * k), zp(groups * n, 0);
          std::vector<float> sc(groups * n);
          for (auto& x : q) x = lo + static_cast<int32_t>(rng() % 16);
          for (auto& x : sc) x = std::ldexp(1.0f + (rng() % 1000) / 1000.0f, -static_cast<int>(rng() % 6));
          if (zps)
            for (auto& z : zp) z = lo + static_cast<int32_t>(rng() % 16);
          const int64_t ld = k / 2;
          std::vector<uint8_t> data(n * ld, 0);
          for (int64_t c = 0; c < n; ++c)
            for (int64_t j = 0; j < k; ++j)
              data[c * ld + j / 2] |= static_cast<uint8_t>((q[c * k + j] & 15) << ((j & 1) * 4));
          qj_weights_desc wd{};
          wd.dtype = wt;
          wd.k = k;
          wd.n = n;
          wd.layout = QJ_LAYOUT_NK;
          wd.granularity = QJ_GRAN_GROUP;
          wd.group_size = 32;
          wd.scales = sc.data();
          wd.zero_points = zps ? zp.data() : nullptr;
          qj_weights w = nullptr;
          ASSERT_EQ(qj_weights_pack(&wd, data.data(), ld, &w), QJ_OK) << qj_last_error();
          const std::vector<float> bias = qjt::random_floats(n, -1.0f, 1.0f, seed);
          qj_gemm_desc gd{};
          gd.a_type = at;
          gd.c_type = QJ_F32;
          gd.bias = bias.data();
          qj_gemm_plan p = nullptr;
          ASSERT_EQ(qj_gemm_plan_create(&gd, w, &p), QJ_OK) << qj_last_error();
          qj_weights_destroy(w);
          std::vector<float> cbuf(m * n, -7.0f);
          ASSERT_EQ(qj_gemm_run(p, m, &A.mat, A.lda, cbuf.data(), n, nullptr), QJ_OK) << qj_last_error();
          qj_gemm_plan_destroy(p);
          // Reference: exact block sums of value(A) * (q - zp), times the scales (double).
          const double u = std::ldexp(1.0, -24), gamma = (groups + 1) * u / (1 - (groups + 1) * u);
          for (int64_t i = 0; i < m; ++i)
            for (int64_t c = 0; c < n; ++c) {
              double y = bias[c], mag = std::fabs(bias[c]);
              for (int64_t g = 0; g < groups; ++g) {
                const uint8_t s = A.ref.scales[i * groups + g];
                double S = 0;
                for (int64_t j = g * 32; j < g * 32 + 32; ++j)
                  S += qj::ref::mx_elem_value(at, A.ref.codes[i * k + j]) * (q[c * k + j] - zp[g * n + c]);
                const double tg = s == 0xFF ? NAN : S * std::ldexp(1.0, s - 127) * sc[g * n + c];
                y += tg;
                mag += std::fabs(tg);
              }
              const float got = cbuf[i * n + c];
              if (std::isnan(y)) {
                EXPECT_TRUE(std::isnan(got)) << i << "," << c;
                continue;
              }
              EXPECT_LE(std::fabs(got - y), gamma * mag + (groups + 1) * std::ldexp(1.0, -150))
                  << qj_dtype_name(at) << " x " << qj_dtype_name(wt) << " zp=" << zps << " C[" << i
                  << "][" << c << "] " << qj_isa_name(isa);
            }
        }
  }
}

// ---- F16 / BF16 weights: every MX A type dequantized exactly to fp32, then the float GEMM ----
// Bound (as test/gemm_f16_test.cpp derives it; u = 2^-24, S = sum_k |a_k w_k|): every a_k is the
// exact fp32 value(code) * X and w_k an fp32 value, the kernels' FMA sums of K terms in any order
// err by at most gamma_K S; the bias add by u (|Y| + e); bf16 output by 2^-8 (|Y| + e); the double
// reference by K 2^-53 S.

TEST(GemmMxAct, FloatWeightsEveryMxType) {
  const qj_dtype all[] = {QJ_MXFP8_E4M3, QJ_MXFP8_E5M2, QJ_MXFP6_E3M2, QJ_MXFP6_E2M3, QJ_MXFP4_E2M1, QJ_MXINT8};
  for (qj_isa isa : qjt::supported_isas()) {
    qjt::IsaCap cap(isa);
    uint32_t seed = 1200;
    for (qj_dtype at : all)
      for (qj_dtype wt : {QJ_F16, QJ_BF16})
        for (int64_t m : {1, 5, 33}) {
          std::mt19937 rng(seed++);
          const int64_t n = 37, k = 96, groups = k / 32;
          const qj::mx::ElemFormat& f = *qj::mx::format(at);
          MxA A;
          A.ref.type = at;
          A.ref.m = m;
          A.ref.k = k;
          A.ref.codes.resize(m * k);
          A.ref.scales.resize(m * groups);
          for (auto& c : A.ref.codes) {
            do c = static_cast<uint8_t>(rng() % (1u << f.bits));
            while (!std::isfinite(qj::ref::mx_elem_value(at, c)));
          }
          for (auto& x : A.ref.scales) x = static_cast<uint8_t>(117 + rng() % 20);
          const bool nan_case = m == 5;
          if (nan_case) A.ref.scales[groups + 1] = 0xFF;  // row 1 all NaN
          A.build(2, 1);
          std::vector<float> wf = qjt::random_floats(k * n, -1.0f, 1.0f, seed);
          qj_weights_desc wd{};
          wd.dtype = wt;
          wd.k = k;
          wd.n = n;
          wd.layout = QJ_LAYOUT_KN;
          qj_weights w = nullptr;
          ASSERT_EQ(qj_weights_quantize_pack(&wd, wf.data(), n, &w), QJ_OK) << qj_last_error();
          for (float& x : wf) x = wt == QJ_F16 ? qj::f16_to_f32(qj::f32_to_f16(x)) : qj::bf16_to_f32(qj::f32_to_bf16(x));
          const std::vector<float> bias = qjt::random_floats(n, -1.0f, 1.0f, seed + 1);
          qj_gemm_desc gd{};
          gd.a_type = at;
          gd.c_type = m == 33 ? QJ_BF16 : QJ_F32;
          gd.bias = bias.data();
          qj_gemm_plan p = nullptr;
          ASSERT_EQ(qj_gemm_plan_create(&gd, w, &p), QJ_OK) << qj_last_error();
          qj_weights_destroy(w);
          std::vector<uint8_t> cbuf(m * n * 4, 0);
          ASSERT_EQ(qj_gemm_run_parallel(p, m, &A.mat, A.lda, cbuf.data(), n, 2), QJ_OK) << qj_last_error();
          qj_gemm_plan_destroy(p);
          const double u = std::ldexp(1.0, -24), gamma = k * u / (1 - k * u);
          for (int64_t i = 0; i < m; ++i)
            for (int64_t c = 0; c < n; ++c) {
              double y = 0, S = 0;
              bool nan = false;
              for (int64_t j = 0; j < k; ++j) {
                const uint8_t sb = A.ref.scales[i * groups + j / 32];
                if (sb == 0xFF) nan = true;
                const double a = qj::ref::mx_elem_value(at, A.ref.codes[i * k + j]) * std::ldexp(1.0, sb - 127);
                y += a * wf[j * n + c];
                S += std::fabs(a * wf[j * n + c]);
              }
              y += bias[c];
              double got;
              if (gd.c_type == QJ_BF16) {
                uint16_t h;
                std::memcpy(&h, &cbuf[(i * n + c) * 2], 2);
                got = qj::bf16_to_f32(h);
              } else {
                float v;
                std::memcpy(&v, &cbuf[(i * n + c) * 4], 4);
                got = v;
              }
              if (nan) {
                EXPECT_TRUE(std::isnan(got)) << qj_dtype_name(at) << " C[" << i << "][" << c << "]";
                continue;
              }
              double e = gamma * S + k * std::ldexp(1.0, -53) * S;
              e += u * (std::fabs(y) + e);
              if (gd.c_type == QJ_BF16) e += std::ldexp(1.0, -8) * (std::fabs(y) + e);
              EXPECT_LE(std::fabs(got - y), e) << qj_dtype_name(at) << " x " << qj_dtype_name(wt) << " m=" << m
                                               << " C[" << i << "][" << c << "] " << qj_isa_name(isa);
            }
        }
  }
}

// ---- bad input: error code + message, nothing written ----

// fp32 route with weights whose value times block scale is beyond fp32 (scale bytes 0xF8 / 0xFE)
// and A so small (scale byte 0x00) that the result is an ordinary number: the weight still takes
// part exactly (quantjit.h), at every tier and tile height (the AVX2 kernels of 3 and more rows
// scaled each weight vector by its block scale, which overflowed to inf).
TEST(GemmMxAct, WeightsBeyondFp32TakePartExactly) {
  constexpr int64_t k = 32, n = 3;
  struct Case {
    qj_dtype at, wt;
    uint8_t a_code, w_code, w_scale;
    float want;  // 32 * a * w * 2^(w_scale - 127) * 2^-127, exact
  };
  const Case cases[] = {
      {QJ_MXFP4_E2M1, QJ_MXFP8_E5M2, 0x2, 0x7b, 0xf8, 32.0f * 57344.0f * 0x1p-6f},  // FP4 1.0; E5M2 57344
      {QJ_MXFP8_E4M3, QJ_MXFP4_E2M1, 0x38, 0x7, 0xfe, 32.0f * 6.0f},                 // E4M3 1.0; FP4 6.0
      {QJ_MXFP8_E4M3, QJ_MXFP8_E4M3, 0x38, 0x7e, 0xfe, 32.0f * 448.0f}};
  for (qj_isa isa : qjt::supported_isas()) {
    qjt::IsaCap cap(isa);
    for (const Case& c : cases) {
      const bool w4 = c.wt == QJ_MXFP4_E2M1, a4 = c.at == QJ_MXFP4_E2M1;
      const int64_t wrow = w4 ? k / 2 : k, arow = a4 ? k / 2 : k;
      std::vector<uint8_t> welems(wrow * n, w4 ? static_cast<uint8_t>(c.w_code | c.w_code << 4) : c.w_code);
      std::vector<uint8_t> wsc(n, c.w_scale);
      qj_mx_weights_data wd{welems.data(), wsc.data(), 1};
      qj_weights_desc d = qjt::nk_desc(c.wt, k, n);
      qj_weights w = nullptr;
      ASSERT_EQ(qj_weights_pack(&d, &wd, wrow, &w), QJ_OK) << qj_last_error();
      qj_gemm_desc gd{};
      gd.a_type = c.at;
      gd.c_type = QJ_F32;
      qj_gemm_plan p = nullptr;
      ASSERT_EQ(qjt::create_jit_plan(gd, w, &p), "");
      qj_weights_destroy(w);
      for (int64_t m : {1, 2, 3, 4, 7}) {
        std::vector<uint8_t> ae(arow * m, a4 ? static_cast<uint8_t>(c.a_code | c.a_code << 4) : c.a_code);
        std::vector<uint8_t> as(m, 0x00);  // 2^-127
        const qj_mx_matrix am{ae.data(), as.data(), 1};
        std::vector<float> out(m * n, -1.0f);
        ASSERT_EQ(qj_gemm_run(p, m, &am, arow, out.data(), n, nullptr), QJ_OK) << qj_last_error();
        for (float v : out)
          EXPECT_EQ(v, c.want) << qj_dtype_name(c.at) << " A x " << qj_dtype_name(c.wt) << " m=" << m << " "
                               << qj_isa_name(isa);
      }
      qj_gemm_plan_destroy(p);
    }
  }
}

TEST(GemmMxAct, Misuse) {
  MxA A;
  A.ref.type = QJ_MXFP4_E2M1;
  A.ref.m = 2;
  A.ref.k = 64;
  A.ref.codes.assign(2 * 64, 1);
  A.ref.scales.assign(2 * 2, 0x7F);
  A.build(0, 0);
  std::vector<uint8_t> welems(8 * 32, 0x11), wsc(8 * 2, 0x7F);
  qj_weights_desc wd{};
  wd.dtype = QJ_MXFP4_E2M1;
  wd.k = 64;
  wd.n = 8;
  wd.layout = QJ_LAYOUT_NK;
  qj_mx_weights_data md{welems.data(), wsc.data(), 2};
  qj_weights w = nullptr;
  ASSERT_EQ(qj_weights_pack(&wd, &md, 32, &w), QJ_OK);
  qj_gemm_desc gd{};
  gd.a_type = QJ_MXFP4_E2M1;
  gd.c_type = QJ_F32;
  // a_scale, a_zero_point and a_granularity are ignored for MX A (even out-of-range values).
  gd.a_scale = NAN;
  gd.a_zero_point = 1000;
  std::memset(&gd.a_granularity, 0x4d, sizeof gd.a_granularity);
  qj_gemm_plan p = nullptr;
  ASSERT_EQ(qj_gemm_plan_create(&gd, w, &p), QJ_OK) << qj_last_error();
  std::vector<float> c(2 * 8, 42.0f);
  auto untouched = [&] {
    for (float x : c)
      if (x != 42.0f) return false;
    return true;
  };
  auto expect_err = [&](qj_status want, const qj_mx_matrix* mat, int64_t lda, const char* needle) {
    EXPECT_EQ(qj_gemm_run(p, 2, mat, lda, c.data(), 8, nullptr), want) << needle;
    EXPECT_NE(std::string(qj_last_error()).find(needle), std::string::npos) << qj_last_error();
    EXPECT_TRUE(untouched()) << needle;
    EXPECT_EQ(qj_gemm_run_parallel(p, 2, mat, lda, c.data(), 8, 2), want) << needle;
    EXPECT_TRUE(untouched()) << needle;
  };
  qj_mx_matrix bad = A.mat;
  expect_err(QJ_ERR_INVALID_ARGUMENT, nullptr, A.lda, "a is NULL");
  bad.elems = nullptr;
  expect_err(QJ_ERR_INVALID_ARGUMENT, &bad, A.lda, "a->elems is NULL");
  bad = A.mat;
  bad.scales = nullptr;
  expect_err(QJ_ERR_INVALID_ARGUMENT, &bad, A.lda, "a->scales is NULL");
  expect_err(QJ_ERR_INVALID_ARGUMENT, &A.mat, 31, "lda=31");  // 2 FP4 blocks = 32 bytes
  bad = A.mat;
  bad.scales_ld = 1;
  expect_err(QJ_ERR_INVALID_ARGUMENT, &bad, A.lda, "a->scales_ld=1");
  bad.scales_ld = int64_t(1) << 62;
  expect_err(QJ_ERR_INVALID_ARGUMENT, &bad, A.lda, "address space");
  // m = 0: a no-op (a and c may be NULL), but lda is still checked (in bytes for MX A)
  EXPECT_EQ(qj_gemm_run(p, 0, nullptr, A.lda, nullptr, 8, nullptr), QJ_OK) << qj_last_error();
  EXPECT_EQ(qj_gemm_run(p, 0, nullptr, -5, nullptr, 8, nullptr), QJ_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(qj_last_error()).find("lda=-5"), std::string::npos) << qj_last_error();
  ASSERT_EQ(qj_gemm_run(p, 2, &A.mat, A.lda, c.data(), 8, nullptr), QJ_OK);  // the good call works
  EXPECT_FALSE(untouched());
  qj_gemm_plan_destroy(p);

  // Plans: every MX type runs with these FP4 weights (E3M2 A through BDR-repacked weights, FP8 A
  // through E4M3-converted weights); an S32 output is invalid for all of them.
  for (qj_dtype at : {QJ_MXFP6_E3M2, QJ_MXFP8_E4M3, QJ_MXFP8_E5M2}) {
    gd.a_type = at;
    gd.c_type = QJ_S32;
    p = nullptr;
    EXPECT_EQ(qj_gemm_plan_create(&gd, w, &p), QJ_ERR_INVALID_ARGUMENT) << qj_dtype_name(at);
    EXPECT_NE(std::string(qj_last_error()).find("c_type"), std::string::npos) << qj_last_error();
    EXPECT_EQ(p, nullptr);
    gd.c_type = QJ_F32;
    ASSERT_EQ(qj_gemm_plan_create(&gd, w, &p), QJ_OK) << qj_dtype_name(at) << ": " << qj_last_error();
    qj_gemm_plan_destroy(p);
    p = nullptr;
  }
  gd.a_type = QJ_MXINT8;
  gd.c_type = QJ_S32;
  EXPECT_EQ(qj_gemm_plan_create(&gd, w, &p), QJ_ERR_INVALID_ARGUMENT);
  gd.c_type = QJ_F32;
  gd.a_type = static_cast<qj_dtype>(22);  // between MXINT8 and the BDR types: not a type
  EXPECT_EQ(qj_gemm_plan_create(&gd, w, &p), QJ_ERR_INVALID_ARGUMENT);
  gd.a_type = QJ_BDR_MX6;
  EXPECT_EQ(qj_gemm_plan_create(&gd, w, &p), QJ_ERR_INVALID_ARGUMENT);
  qj_weights_destroy(w);

  gd.a_type = QJ_MXFP4_E2M1;
  std::vector<float> wf(64 * 8, 0.5f);
  qj_weights_desc fd{};
  fd.k = 64;
  fd.n = 8;
  fd.layout = QJ_LAYOUT_KN;
  // K not a multiple of 32 (F16 weights take any K, MX A does not).
  {
    std::vector<float> wk(40 * 8, 0.25f);
    qj_weights_desc hd{};
    hd.dtype = QJ_F16;
    hd.k = 40;
    hd.n = 8;
    hd.layout = QJ_LAYOUT_KN;
    ASSERT_EQ(qj_weights_quantize_pack(&hd, wk.data(), 8, &w), QJ_OK) << qj_last_error();
    EXPECT_EQ(qj_gemm_plan_create(&gd, w, &p), QJ_ERR_UNSUPPORTED);
    EXPECT_NE(std::string(qj_last_error()).find("k=40"), std::string::npos) << qj_last_error();
    qj_weights_destroy(w);
  }
  for (qj_dtype wt : {QJ_S8, QJ_S4}) {
    fd.dtype = wt;
    fd.granularity = wt == QJ_S4 ? QJ_GRAN_GROUP : QJ_GRAN_CHANNEL;
    fd.group_size = 64;  // S4: groups of 64 do not match the A blocks of 32
    ASSERT_EQ(qj_weights_quantize_pack(&fd, wf.data(), 8, &w), QJ_OK) << qj_last_error();
    EXPECT_EQ(qj_gemm_plan_create(&gd, w, &p), QJ_ERR_UNSUPPORTED) << qj_dtype_name(wt);
    EXPECT_NE(std::string(qj_last_error()).find(qj_dtype_name(wt)), std::string::npos) << qj_last_error();
    EXPECT_NE(std::string(qj_last_error()).find(qj_dtype_name(QJ_MXFP4_E2M1)), std::string::npos) << qj_last_error();
    qj_weights_destroy(w);
  }
}

// ---- the A decoders on their own, every tier ----

TEST(MxActDecode, Int8MatchesScalarTablesAtEveryTier) {
  std::mt19937 rng(11);
  for (qj_dtype t : kIntTypes) {
    const qj::mx::ElemFormat& f = *qj::mx::format(t);
    for (int64_t nb : {1, 2, 3, 4, 5, 8, 9}) {
      std::vector<uint8_t> elems(nb * f.block_bytes);
      for (auto& e : elems) e = static_cast<uint8_t>(rng());
      // Expected: codes through get_code, values through the exact value table times 2^shift.
      std::vector<int8_t> want(nb * 32);
      std::vector<int32_t> want_sum(nb, 0);
      for (int64_t i = 0; i < nb * 32; ++i) {
        const double v = qj::ref::mx_elem_value(t, qj::mx::get_code(f, elems.data(), i));
        want[i] = static_cast<int8_t>(std::ldexp(v, f.int_shift));
        want_sum[i / 32] += want[i];
      }
      for (qj_isa isa : qjt::supported_isas()) {
        qjt::IsaCap cap(isa);
        std::vector<int8_t> got(nb * 32 + 1, 0x55);
        std::vector<int32_t> sums(nb + 1, -1);
        ASSERT_TRUE(qj::mx_decode_int8(t, elems.data(), nb, got.data(), sums.data()));
        EXPECT_EQ(got[nb * 32], 0x55);  // nothing past the output
        got.pop_back();
        sums.pop_back();
        EXPECT_EQ(got, want) << qj_dtype_name(t) << " nb=" << nb << " " << qj_isa_name(isa);
        EXPECT_EQ(sums, want_sum) << qj_dtype_name(t) << " nb=" << nb << " " << qj_isa_name(isa);
        std::vector<int8_t> got2(nb * 32);
        ASSERT_TRUE(qj::mx_decode_int8(t, elems.data(), nb, got2.data(), nullptr));
        EXPECT_EQ(got2, want);
      }
    }
  }
  int8_t d[32];
  for (qj_dtype t : {QJ_MXFP6_E3M2, QJ_MXFP8_E4M3, QJ_MXFP8_E5M2}) {
    std::vector<uint8_t> e(32, 0);
    EXPECT_FALSE(qj::mx_decode_int8(t, e.data(), 1, d, nullptr)) << qj_dtype_name(t);
  }
}

TEST(MxActDecode, Int16AndF32) {
  std::mt19937 rng(12);
  for (qj_dtype t : {QJ_MXFP8_E4M3, QJ_MXFP8_E5M2, QJ_MXFP6_E3M2, QJ_MXFP6_E2M3, QJ_MXFP4_E2M1, QJ_MXINT8}) {
    const qj::mx::ElemFormat& f = *qj::mx::format(t);
    const int64_t nb = 5;
    std::vector<uint8_t> elems(nb * f.block_bytes), scales(nb);
    for (auto& e : elems) e = static_cast<uint8_t>(rng());
    scales = {0x00, 0x85, 0xFF, 0x7F, 0xFE};
   for (qj_isa isa : qjt::supported_isas()) {
    qjt::IsaCap cap(isa);
    std::vector<int16_t> i16(nb * 32);
    const bool has16 = qj::mx_decode_int16(t, elems.data(), nb, i16.data());
    EXPECT_EQ(has16, f.int_shift >= 0) << qj_dtype_name(t);
    std::vector<float> vals(nb * 32), deq(nb * 32), refdeq(nb * 32);
    qj::mx_decode_f32(t, elems.data(), nullptr, nb, vals.data());
    qj::mx_decode_f32(t, elems.data(), scales.data(), nb, deq.data());
    qj::ref::mx_dequantize(t, elems.data(), scales.data(), nb * 32, refdeq.data());
    for (int64_t i = 0; i < nb * 32; ++i) {
      const double v = qj::ref::mx_elem_value(t, qj::mx::get_code(f, elems.data(), i));
      if (std::isnan(v))
        EXPECT_TRUE(std::isnan(vals[i]));
      else
        EXPECT_EQ(static_cast<double>(vals[i]), v) << qj_dtype_name(t) << " " << i;
      if (has16) EXPECT_EQ(static_cast<double>(i16[i]), std::ldexp(v, f.int_shift)) << qj_dtype_name(t) << " " << i;
      if (std::isnan(refdeq[i]))
        EXPECT_TRUE(std::isnan(deq[i])) << qj_dtype_name(t) << " " << i;
      else
        EXPECT_EQ(qj::f32_bits(deq[i]), qj::f32_bits(refdeq[i])) << qj_dtype_name(t) << " " << i;
    }
   }
  }
  // E3M2's integer form spans [-448, 448].
  std::vector<uint8_t> codes(32), e(24);
  for (int i = 0; i < 32; ++i) codes[i] = static_cast<uint8_t>(i < 16 ? 0x1F : 0x3F);
  qj::mx::pack_block(*qj::mx::format(QJ_MXFP6_E3M2), codes.data(), e.data());
  int16_t d[32];
  ASSERT_TRUE(qj::mx_decode_int16(QJ_MXFP6_E3M2, e.data(), 1, d));
  EXPECT_EQ(d[0], 448);
  EXPECT_EQ(d[31], -448);
}

TEST(MxActDecode, BlockScale) {
  EXPECT_EQ(qj::mx_act_block_scale(QJ_MXFP4_E2M1, 0x7F), 0.5f);
  EXPECT_EQ(qj::mx_act_block_scale(QJ_MXINT8, 0x7F), 1.0f / 64);
  EXPECT_EQ(qj::mx_act_block_scale(QJ_MXFP6_E2M3, 0xFE), std::ldexp(1.0f, 124));
  EXPECT_EQ(qj::mx_act_block_scale(QJ_MXINT8, 0x00), std::ldexp(1.0f, -133));  // subnormal, exact
  EXPECT_TRUE(std::isnan(qj::mx_act_block_scale(QJ_MXFP4_E2M1, 0xFF)));
}

}  // namespace
