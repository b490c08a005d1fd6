// `quantjit-bench gemm`: GEMM sweeps over shape lists, side by side with oneDNN.
//
// One code path for every weight type: a WeightKind row says how the weights are prepared
// (qj_weights_pack of random s8, or qj_weights_quantize_pack of random fp32), what A and C are,
// which peak the GOPS are divided by, how many bytes a weight costs (the M = 1 bandwidth roof),
// and which peer (if any) computes the same thing. Adding a type means adding a row (and, if the
// peer or the exact check needs it, a case in make_peer / check_reference).
//
// Per shape: plan creation right after qj_cache_clear() (gen_us = the generation_ns delta of
// qj_cache_stats: first-call kernel generation, reported apart from run time as STYLE.md asks;
// the fastest of three fresh creations),
// the median run time (warm: same buffers; --cold: 512 MiB flushed through the caches before
// every call), GOPS = 2*M*N*K / time, the fraction of the measured peak, for M = 1 the fraction
// of the bandwidth roof of the level the weights sit in (weight bytes / time against a streaming
// read of that many bytes when warm, of DRAM when cold), and with --vs onednn the peer's time on
// the same data in the same process, timed interleaved with ours (noise from other processes hits
// both alike), and the ratio peer_seconds / seconds (> 1: we are faster).
// Outputs are checked: against an exact double-precision reference on sampled rows, and against
// the peer's output on every element (both may differ from ours by one unit where the float
// scale path rounds a value that sits on a .5 boundary).
#include <quantjit/quantjit.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "driver/cli.h"
#include "driver/commands.h"
#include "driver/onednn_peer.h"
#include "driver/peak.h"
#include "driver/report.h"
#include "driver/shapes.h"
#include "driver/timing.h"
#include "src/formats/half.h"

namespace {

using namespace bench;

enum class PeerKind { kNone, kInt8, kF32 };

struct WeightKind {
  const char* name;       // --weights value
  qj_dtype w;             // packed weight type
  qj_dtype a;             // A as fed to qj_gemm_run
  qj_dtype c;             // output type
  bool quantize_pack;     // weights from random fp32 through qj_weights_quantize_pack
  qj_granularity gran;    // weight scale granularity
  int64_t group;          // K group for QJ_GRAN_GROUP (a --group option overrides it)
  double bits;            // bits per weight moved from memory, scales included (bandwidth roof)
  bool float_peak;        // divide by the FMA peak (float math) instead of the integer multiply peak
  PeerKind peer;          // what --vs runs for this type
};

// The setting of PERF.md's side-by-side for s8. Rows other than s8 are provisional: the helpers
// who land each weight type own their row (A/C types, group size, peer).
const WeightKind kKinds[] = {
    {"s8", QJ_S8, QJ_U8, QJ_U8, false, QJ_GRAN_CHANNEL, 0, 8.0, false, PeerKind::kInt8},
    // INT4 (owned by the INT4/FP16 helper): the LLM setting, fp32 A quantized per row on the fly
    // (W4A8 dynamic), fp32 C; u4 carries a zero point per group (inline int32), hence 64 bits per
    // group. The a8 rows are W4A8 with u8 A (zero point 3) and requantized u8 C; their A zero
    // point adds an int32 column correction per group read from the plan (32 more bits per group).
    {"s4", QJ_S4, QJ_F32, QJ_F32, true, QJ_GRAN_GROUP, 128, 4.0 + 32.0 / 128, false, PeerKind::kNone},
    {"u4", QJ_U4, QJ_F32, QJ_F32, true, QJ_GRAN_GROUP, 128, 4.0 + 64.0 / 128, false, PeerKind::kNone},
    {"s4a8", QJ_S4, QJ_U8, QJ_U8, true, QJ_GRAN_GROUP, 128, 4.0 + 64.0 / 128, false, PeerKind::kNone},
    {"u4a8", QJ_U4, QJ_U8, QJ_U8, true, QJ_GRAN_GROUP, 128, 4.0 + 96.0 / 128, false, PeerKind::kNone},
    {"f16", QJ_F16, QJ_F32, QJ_F32, true, QJ_GRAN_CHANNEL, 0, 16.0, true, PeerKind::kF32},
    {"bf16", QJ_BF16, QJ_F32, QJ_F32, true, QJ_GRAN_CHANNEL, 0, 16.0, true, PeerKind::kF32},
    {"mxfp4", QJ_MXFP4_E2M1, QJ_F32, QJ_F32, true, QJ_GRAN_GROUP, 32, 4.25, false, PeerKind::kF32},
    // E2M3: 6 bits per code plus the E8M0 byte per 32 on the VNNI tier (6.25 bits, the format's
    // own size); the AVX-512 / AVX2 panels keep one byte per code (8.25 bits, see weight_bits).
    {"mxfp6_e2m3", QJ_MXFP6_E2M3, QJ_F32, QJ_F32, true, QJ_GRAN_GROUP, 32, 8.25, false, PeerKind::kF32},
    // E3M2 and BDR run as int16 pairs (src/ops/mx16_weights.h): one byte per value in the panels,
    // plus the scale byte per block (BDR: the exponent; MX9 also one "double" bit per value);
    // E3M2 and MX6 6 bits per value on the VNNI tier (6.25 / 6.5 bits, see weight_bits).
    {"mxfp6_e3m2", QJ_MXFP6_E3M2, QJ_F32, QJ_F32, true, QJ_GRAN_GROUP, 32, 8.25, false, PeerKind::kF32},
    // MXFP8: fp32 A (not quantized) times codes decoded to fp32 in registers, fp32 FMAs: the FMA
    // peak is the roof. One code byte per weight plus one E8M0 byte per 32: 8.25 bits.
    {"mxfp8_e4m3", QJ_MXFP8_E4M3, QJ_F32, QJ_F32, true, QJ_GRAN_GROUP, 32, 8.25, true, PeerKind::kF32},
    {"mxfp8_e5m2", QJ_MXFP8_E5M2, QJ_F32, QJ_F32, true, QJ_GRAN_GROUP, 32, 8.25, true, PeerKind::kF32},
    {"mxint8", QJ_MXINT8, QJ_F32, QJ_F32, true, QJ_GRAN_GROUP, 32, 8.25, false, PeerKind::kF32},
    {"mx9", QJ_BDR_MX9, QJ_F32, QJ_F32, true, QJ_GRAN_GROUP, 16, 9.5, false, PeerKind::kF32},
    {"mx6", QJ_BDR_MX6, QJ_F32, QJ_F32, true, QJ_GRAN_GROUP, 16, 8.5, false, PeerKind::kF32},
    {"mx4", QJ_BDR_MX4, QJ_F32, QJ_F32, true, QJ_GRAN_GROUP, 16, 4.5, false, PeerKind::kF32},
};

// Bits per weight that a GEMV streams: the type's row, except the 6-bit types MXFP6 E2M3 / E3M2
// and BDR MX6, dense (6 bits a code) only in the panels of the VNNI tier, and s8 weights, s16
// pairs at the AVX-512 tier without VNNI (kPair16, src/ops/int_weights.h; the AVX2 tier's kPair8
// pairs are bytes).
double weight_bits(const WeightKind& kind) {
  if (qj_max_isa() >= QJ_ISA_AVX512_VNNI) {
    if (kind.w == QJ_MXFP6_E2M3 || kind.w == QJ_MXFP6_E3M2) return 6.25;
    if (kind.w == QJ_BDR_MX6) return 6.5;
  } else if (kind.w == QJ_S8 && qj_max_isa() == QJ_ISA_AVX512) {
    return 16;
  }
  return kind.bits;
}

// The single-core measured peak a kind's GOPS are divided by at the ISA cap in force: the FMA
// peak for float weights, the integer multiply peak otherwise (peak.h's tier_peak: vpdpbusd zmm
// at the VNNI tier; measured once per process).
TierPeak kind_peak(const WeightKind& kind) { return tier_peak(qj_max_isa(), kind.float_peak); }

const WeightKind* find_kind(const std::string& name) {
  for (const WeightKind& k : kKinds)
    if (name == k.name) return &k;
  return nullptr;
}

const std::vector<NamedShapeList>& gemm_lists() {
  static const std::vector<NamedShapeList> v = {
      {"fbgemm", {"gemm-fbgemm-acc32.csv", "gemm-fbgemm-gemms.csv"}},
      {"acc32", {"gemm-fbgemm-acc32.csv"}},
      {"gemms", {"gemm-fbgemm-gemms.csv"}},
      {"llm", {"gemm-llm.csv"}},
      {"fp16", {"gemm-fbgemm-fp16.csv"}},
  };
  return v;
}

struct Options {
  std::string shapes = "gemms";
  std::vector<const WeightKind*> kinds{&kKinds[0]};  // --weights: one or a comma list
  int64_t group = -1;  // -1: the kind's default
  int threads = 1;
  Format fmt = Format::kTable;
  bool vs_onednn = false;
  bool cold = false;
  int reps = 0;
  std::string plot;
  int isa = -1;  // -1: leave the cap alone
  qj_dtype a_mx = QJ_DT_UNDEFINED;  // --a-type: MX activations (fp32 A quantized to it, FLOOR)
};

int usage(int status = 2) {  // --help (status 0): on stdout
  std::string kinds;
  for (const WeightKind& k : kKinds) kinds += std::string(kinds.empty() ? "" : "|") + k.name;
  std::fprintf(
      status ? stderr : stdout,
      "usage: quantjit-bench gemm [options]   (pin it: taskset -c 1)\n"
      "  --shapes S      fbgemm (= acc32 + gemms) | acc32 | gemms | llm | fp16 | FILE.csv |\n"
      "                  inline \"M,N,K[;M,N,K...]\"   (default gemms; files in bench/shapes/)\n"
      "  --weights W     %s (default s8);\n"
      "                  a comma list compares formats: each shape runs with each, in turn\n"
      "  --group G       K group of the weight scales for grouped types\n"
      "  --a-type T      MX activations: mxfp4 | mxfp6_e2m3 | mxint8 | mxfp6_e3m2 | mxfp8_e4m3 |\n"
      "                  mxfp8_e5m2, with any MX / BDR weights (mxfp4 .. mx4), f16 / bf16, or (the\n"
      "                  first three) group-32 s4 / u4; the fp32 A quantized to it (FLOOR) before\n"
      "                  timing; k a multiple of 32\n"
      "  --threads N     threads (default 1); N > 1 uses qj_gemm_run_parallel\n"
      "  --format F      table | csv | json (JSON Lines, one object per shape)\n"
      "  --vs onednn     also run oneDNN matmul on the same data, same output stage\n"
      "  --cold          stream 512 MiB through the caches before every timed call\n"
      "  --reps R        timed calls per shape (default: enough for ~0.25 s, at least 5)\n"
      "  --isa I         cap quantjit's ISA: scalar | avx2 | avx512 | avx512_vnni\n"
      "  --plot F.png    draw GOPS per shape against the measured peak and the peer\n"
      "s8 (default): u8 A (zero point 3), s8 B full range, per-channel scales, fp32 bias,\n"
      "u8 C (zero point 5): the setting of PERF.md's FBGEMM/oneDNN side-by-side.\n",
      kinds.c_str());
  return status;
}

// False after a message (cli.h) on a bad argument; *help for --help.
bool parse_options(int argc, char** argv, Options* o, bool* help) {
  const char* cmd = "gemm";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    const char* v = nullptr;
    int64_t x = 0;
    if (is_help(a)) {
      *help = true;
      return true;
    } else if (a == "--shapes") {
      if (!(v = next())) return bad_value(cmd, a, v, "");
      o->shapes = v;
    } else if (a == "--weights") {
      if (!(v = next())) return bad_value(cmd, a, v, "");
      o->kinds.clear();
      for (const std::string& w : split_list(v)) {
        const WeightKind* kd = find_kind(w);
        if (!kd) return bad_value(cmd, a, v, "a weight type or a comma list of them");
        o->kinds.push_back(kd);
      }
    } else if (a == "--a-type") {
      v = next();
      const std::string t = v ? v : "";
      const struct { const char* name; qj_dtype t; } names[] = {
          {"mxfp4", QJ_MXFP4_E2M1}, {"mxfp6_e2m3", QJ_MXFP6_E2M3}, {"mxint8", QJ_MXINT8},
          {"mxfp6_e3m2", QJ_MXFP6_E3M2}, {"mxfp8_e4m3", QJ_MXFP8_E4M3}, {"mxfp8_e5m2", QJ_MXFP8_E5M2}};
      o->a_mx = QJ_DT_UNDEFINED;
      for (const auto& nm : names)
        if (t == nm.name) o->a_mx = nm.t;
      if (o->a_mx == QJ_DT_UNDEFINED) return bad_value(cmd, a, v, "an MX activation type");
    } else if (a == "--group") {
      if (!(v = next()) || !parse_int(v, 1, int64_t{1} << 30, &x)) return bad_value(cmd, a, v, "a positive group size");
      o->group = x;
    } else if (a == "--threads") {
      if (!(v = next()) || !parse_int(v, 1, 1024, &x)) return bad_value(cmd, a, v, "a thread count from 1 to 1024");
      o->threads = static_cast<int>(x);
    } else if (a == "--format") {
      if (!parse_format(v = next(), &o->fmt)) return bad_value(cmd, a, v, "table, csv or json");
    } else if (a == "--vs") {
      if (!(v = next()) || std::string(v) != "onednn") return bad_value(cmd, a, v, "a known peer (onednn)");
      o->vs_onednn = true;
    } else if (a == "--cold") {
      o->cold = true;
    } else if (a == "--warm") {
      o->cold = false;
    } else if (a == "--reps") {
      if (!(v = next()) || !parse_int(v, 1, 100000000, &x)) return bad_value(cmd, a, v, "a positive count");
      o->reps = static_cast<int>(x);
    } else if (a == "--plot") {
      if (!(v = next())) return bad_value(cmd, a, v, "");
      o->plot = v;
    } else if (a == "--isa") {
      const char* names[] = {"scalar", "avx2", "avx512", "avx512_vnni"};
      o->isa = -1;
      if ((v = next()))
        for (int t = 0; t < 4; ++t)
          if (!std::strcmp(v, names[t])) o->isa = t;
      if (o->isa < 0) return bad_value(cmd, a, v, "scalar, avx2, avx512 or avx512_vnni");
    } else {
      return arg_error(cmd, "unknown option '%s'", a.c_str());
    }
  }
  return true;
}

// xorshift64*: fast, reproducible data (the same shape always gets the same numbers).
struct Rng {
  uint64_t s;
  explicit Rng(uint64_t seed) : s(seed * 0x9e3779b97f4a7c15ull + 0x632be59bd9b4e019ull) {}
  uint64_t next() {
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    return s * 0x2545f4914f6cdd1dull;
  }
  float uniform(float lo, float hi) {
    return lo + (hi - lo) * static_cast<float>((next() >> 40) * (1.0 / 16777216.0));
  }
};

// Everything one shape needs; vectors are 64-byte aligned through AlignedVec.
template <class T>
struct AlignedVec {
  T* p = nullptr;
  size_t n = 0;
  // False (and empty) when count elements cannot be allocated.
  [[nodiscard]] bool resize(size_t count) {
    std::free(p);
    p = nullptr;
    n = 0;
    if (count > (SIZE_MAX - 128) / sizeof(T)) return false;
    p = static_cast<T*>(std::aligned_alloc(64, (count * sizeof(T) + 63) / 64 * 64 + 64));
    if (!p) return false;
    n = count;
    std::memset(static_cast<void*>(p), 0, count * sizeof(T));
    return true;
  }
  T& operator[](size_t i) { return p[i]; }
  const T& operator[](size_t i) const { return p[i]; }
  T* data() { return p; }
  const T* data() const { return p; }
  ~AlignedVec() { std::free(p); }
};

struct CaseData {
  int64_t m, n, k;
  // A
  AlignedVec<uint8_t> a_u8;
  AlignedVec<float> a_f32;
  float a_scale = 1;
  int32_t a_zp = 0;
  // B
  AlignedVec<int8_t> b_s8;   // s8 kinds: K x N
  AlignedVec<float> b_f32;   // quantize_pack kinds: K x N
  std::vector<float> b_scale;
  // output stage
  std::vector<float> bias;
  float c_scale = 1;
  int32_t c_zp = 0;
  AlignedVec<uint8_t> c_u8, peer_u8;
  AlignedVec<float> c_f32, peer_f32;
};

// False when the buffers cannot be allocated (*bytes: what was asked).
bool make_data(const WeightKind& kind, CaseData* d, double* bytes) {
  const int64_t m = d->m, n = d->n, k = d->k;
  const double dm = static_cast<double>(m), dn = static_cast<double>(n), dk = static_cast<double>(k);
  *bytes = 4 * (dm * dk + dk * dn + 2 * dm * dn);
  if (*bytes > 1e15) return false;  // (no product below can overflow 64 bits after this)
  Rng r(static_cast<uint64_t>(m * 1000003 + n * 1009 + k));
  if (kind.a == QJ_U8) {
    if (!d->a_u8.resize(m * k)) return false;
    for (int64_t i = 0; i < m * k; ++i) d->a_u8[i] = static_cast<uint8_t>(r.next() >> 56);
    d->a_scale = 0.02f;
    d->a_zp = 3;
  } else {
    if (!d->a_f32.resize(m * k)) return false;
    for (int64_t i = 0; i < m * k; ++i) d->a_f32[i] = r.uniform(-1, 1);
  }
  if (kind.quantize_pack) {
    if (!d->b_f32.resize(k * n)) return false;
    for (int64_t i = 0; i < k * n; ++i) d->b_f32[i] = r.uniform(-1, 1);
  } else {
    if (!d->b_s8.resize(k * n)) return false;
    for (int64_t i = 0; i < k * n; ++i) d->b_s8[i] = static_cast<int8_t>(r.next() >> 56);
    d->b_scale.resize(n);
    for (auto& s : d->b_scale) s = r.uniform(0.004f, 0.012f);
  }
  d->bias.resize(n);
  if (kind.c == QJ_U8 || kind.c == QJ_S8) {
    // Put most outputs inside [0, 255] so the check sees real values, not saturated ones: the
    // accumulator's spread is about sqrt(K) * 147 * 74 (u8 - 3 against full-range s8), scaled to
    // ~40 output units around 100.
    const double spread = std::sqrt(static_cast<double>(k)) * 147.0 * 74.0;
    d->c_scale = static_cast<float>(d->a_scale * 0.008 * spread / 40.0);
    d->c_zp = 5;
    for (auto& b : d->bias) b = d->c_scale * r.uniform(80, 120);
    if (!d->c_u8.resize(m * n)) return false;
  } else {
    for (auto& b : d->bias) b = r.uniform(-1, 1);
    if (!d->c_f32.resize(m * n)) return false;
  }
  return true;
}

// Exact output of the s8 setting for row i, column j (double precision, ties to even).
uint8_t reference_u8(const CaseData& d, int64_t i, int64_t j) {
  int64_t sum = 0;
  for (int64_t p = 0; p < d.k; ++p)
    sum += (static_cast<int64_t>(d.a_u8[i * d.k + p]) - d.a_zp) * d.b_s8[p * d.n + j];
  double y = static_cast<double>(d.a_scale) * d.b_scale[j] * static_cast<double>(sum) + d.bias[j];
  double q = std::nearbyint(y / d.c_scale) + d.c_zp;
  return static_cast<uint8_t>(std::min(255.0, std::max(0.0, q)));
}

struct Diff {
  int64_t off_by_one = 0;  // elements differing by exactly one unit (float rounding of a tie)
  int64_t worse = 0;       // elements differing by more
  int max = 0;
};

// A u8 output (ours, or the peer's) against the exact reference on up to 8 rows spread over M.
Diff check_reference(const CaseData& d, const AlignedVec<uint8_t>& c) {
  Diff r;
  const int64_t rows = std::min<int64_t>(d.m, 8);
  for (int64_t s = 0; s < rows; ++s) {
    int64_t i = rows == 1 ? 0 : s * (d.m - 1) / (rows - 1);
    for (int64_t j = 0; j < d.n; ++j) {
      int diff = std::abs(static_cast<int>(c[i * d.n + j]) - reference_u8(d, i, j));
      r.max = std::max(r.max, diff);
      if (diff == 1) ++r.off_by_one;
      else if (diff > 1) ++r.worse;
    }
  }
  return r;
}

Diff compare_u8(const AlignedVec<uint8_t>& x, const AlignedVec<uint8_t>& y, size_t n) {
  Diff r;
  for (size_t i = 0; i < n; ++i) {
    int diff = std::abs(static_cast<int>(x[i]) - static_cast<int>(y[i]));
    r.max = std::max(r.max, diff);
    if (diff == 1) ++r.off_by_one;
    else if (diff > 1) ++r.worse;
  }
  return r;
}

// Largest |x - y| relative to the largest |y| (float outputs: the peer sums in another order).
double compare_f32(const AlignedVec<float>& x, const AlignedVec<float>& y, size_t n) {
  double amax = 0, dmax = 0;
  for (size_t i = 0; i < n; ++i) {
    amax = std::max(amax, std::fabs(static_cast<double>(y[i])));
    dmax = std::max(dmax, std::fabs(static_cast<double>(x[i]) - y[i]));
  }
  return amax > 0 ? dmax / amax : dmax;
}

// The fp32 weights the float peer multiplies by: the type's own rounding where the bench can
// reproduce it exactly (f16, bf16), else the unquantized values (then only the timing compares).
std::vector<float> peer_weights(const WeightKind& kind, const CaseData& d) {
  std::vector<float> w(d.b_f32.data(), d.b_f32.data() + d.k * d.n);
  if (kind.w == QJ_F16)
    for (float& x : w) x = qj::f16_to_f32(qj::f32_to_f16(x));
  else if (kind.w == QJ_BF16)
    for (float& x : w) x = qj::bf16_to_f32(qj::f32_to_bf16(x));
  return w;
}

std::string status_text(qj_status s, const char* what) {
  std::string msg = std::string(what) + ": " + qj_status_name(s);
  const char* e = qj_last_error();
  return e && *e ? msg + ": " + e : msg;
}

struct CaseResult {
  bool ok = false;        // quantjit ran
  bool mismatch = false;  // an output differed by more than one unit
  bool peer_inexact = false;  // ours exact, the peer's off the exact reference by more than one
  double gops = 0, peer_gops = 0, ratio = 0;
};

// quantjit's side of one shape: packed weights, a plan created right after qj_cache_clear().
struct Ours {
  qj_gemm_plan plan = nullptr;
  double gen_us = 0, plan_us = 0, pack_ms = 0;
  int64_t fallbacks = 0;
  int64_t kernels = 0;  // kernels the plan generated (cache misses)
  ~Ours() { qj_gemm_plan_destroy(plan); }
};

// Packs the weights and creates the plan; false with *err on failure.
bool prepare_ours(const Options& o, const WeightKind& kind, CaseData& d, Ours* q,
                  std::string* err) {
  qj_weights_desc wd{};
  wd.dtype = kind.w;
  wd.k = d.k;
  wd.n = d.n;
  wd.layout = QJ_LAYOUT_KN;
  wd.granularity = kind.gran;
  wd.group_size = kind.gran == QJ_GRAN_GROUP ? (o.group > 0 ? o.group : kind.group) : 0;
  qj_weights w = nullptr;
  qj_status st;
  double t0 = now_seconds();
  if (kind.quantize_pack) {
    st = qj_weights_quantize_pack(&wd, d.b_f32.data(), d.n, &w);
  } else {
    wd.scales = d.b_scale.data();
    st = qj_weights_pack(&wd, d.b_s8.data(), d.n, &w);
  }
  q->pack_ms = (now_seconds() - t0) * 1e3;
  if (st != QJ_OK) {
    *err = status_text(st, kind.quantize_pack ? "qj_weights_quantize_pack" : "qj_weights_pack");
    return false;
  }
  qj_gemm_desc gd{};
  gd.a_type = o.a_mx != QJ_DT_UNDEFINED ? o.a_mx : kind.a;
  gd.a_scale = d.a_scale;
  gd.a_zero_point = d.a_zp;
  gd.a_granularity = kind.a == QJ_F32 ? QJ_GRAN_ROW : QJ_GRAN_TENSOR;
  if (kind.a == QJ_F32 && kind.w >= QJ_MXFP8_E4M3 && kind.w <= QJ_BDR_MX4)
    gd.a_granularity = QJ_GRAN_GROUP;  // MX: A quantized per (row, 32-block), exact block dots
  gd.c_type = kind.c;
  gd.c_scale = d.c_scale;
  gd.c_zero_point = d.c_zp;
  gd.bias = d.bias.data();
  gd.activation = QJ_ACT_NONE;
  gd.beta = 0;
  // First-call cost: the plan is created right after qj_cache_clear(), so it generates every
  // kernel it needs. Three fresh creations, the fastest kept: one sample is easily preempted on a
  // shared machine, and generation time is a property of the code, not of the neighbours.
  st = QJ_OK;
  for (int rep = 0; rep < 3 && st == QJ_OK; ++rep) {
    qj_gemm_plan_destroy(q->plan);
    q->plan = nullptr;
    qj_cache_clear();  // earlier plans are destroyed: this plan generates its kernels afresh
    qj_cache_stats_t s0, s1;
    qj_cache_stats(&s0);
    t0 = now_seconds();
    st = qj_gemm_plan_create(&gd, w, &q->plan);
    const double plan_us = (now_seconds() - t0) * 1e6;
    qj_cache_stats(&s1);
    if (st != QJ_OK) break;
    const double gen_us = (s1.generation_ns - s0.generation_ns) * 1e-3;
    if (rep == 0 || gen_us < q->gen_us) q->gen_us = gen_us;
    if (rep == 0 || plan_us < q->plan_us) q->plan_us = plan_us;
    q->fallbacks = static_cast<int64_t>(s1.fallbacks - s0.fallbacks);
    q->kernels = static_cast<int64_t>(s1.misses - s0.misses);
  }
  qj_weights_destroy(w);  // the plan holds its own reference
  if (st != QJ_OK) {
    q->plan = nullptr;
    *err = status_text(st, "qj_gemm_plan_create");
    return false;
  }
  return true;
}

// The peer for this weight type on the same data (creation and weight reorder happen here).
std::unique_ptr<GemmPeer> prepare_peer(const WeightKind& kind, CaseData& d,
                                       std::vector<float>* keep, std::string* err) {
  const int64_t m = d.m, n = d.n, k = d.k;
  if (kind.peer == PeerKind::kInt8) {
    // oneDNN 2.x adds the bias before the output scale: give it in accumulator units.
    keep->resize(2 * n);
    float* out_scale = keep->data();
    float* bias_acc = keep->data() + n;
    for (int64_t j = 0; j < n; ++j) {
      const double ab = static_cast<double>(d.a_scale) * d.b_scale[j];
      out_scale[j] = static_cast<float>(ab / d.c_scale);
      bias_acc[j] = static_cast<float>(d.bias[j] / ab);
    }
    if (!d.peer_u8.resize(m * n)) {
      *err = "cannot allocate the peer's C";
      return nullptr;
    }
    PeerInt8Problem p;
    p.m = m, p.n = n, p.k = k;
    p.a = d.a_u8.data(), p.a_zp = d.a_zp, p.b = d.b_s8.data();
    p.out_scale = out_scale, p.bias_acc = bias_acc;
    p.c = d.peer_u8.data(), p.c_zp = d.c_zp;
    return make_onednn_int8(p, err);
  }
  if (kind.peer == PeerKind::kF32) {
    *keep = peer_weights(kind, d);
    if (!d.peer_f32.resize(m * n)) {
      *err = "cannot allocate the peer's C";
      return nullptr;
    }
    PeerF32Problem p;
    p.m = m, p.n = n, p.k = k;
    p.a = d.a_f32.data(), p.b = keep->data(), p.bias = d.bias.data(), p.c = d.peer_f32.data();
    return make_onednn_f32(p, err);
  }
  *err = std::string("no oneDNN peer for ") + kind.name + " weights";
  return nullptr;
}

CaseResult run_case(const Options& o, const WeightKind& kind, int64_t m, int64_t n, int64_t k,
                    Report& rep) {
  CaseResult res;
  CaseData d;
  d.m = m;
  d.n = n;
  d.k = k;
  Record& rec = rep.add();
  rec.set("m", m).set("n", n).set("k", k);
  const qj_dtype a_type = o.a_mx != QJ_DT_UNDEFINED ? o.a_mx : kind.a;
  rec.set("a_type", qj_dtype_name(a_type)).set("w_type", qj_dtype_name(kind.w));
  rec.set("c_type", qj_dtype_name(kind.c));
  rec.set("isa", qj_isa_name(qj_max_isa())).set("threads", o.threads);
  rec.set("mode", o.cold ? "cold" : "warm");
  const TierPeak tp = kind_peak(kind);
  const double peak = tp.gops * o.threads;
  rec.set("peak_gops", peak, 1).set("peak_instr", tp.instr);
  if (kind.w == QJ_S4 || kind.w == QJ_U4) rec.set("group", o.group > 0 ? o.group : kind.group);
  double bytes = 0;
  if (!make_data(kind, &d, &bytes)) {
    char msg[160];
    std::snprintf(msg, sizeof msg, "cannot allocate the shape's buffers (%.3g bytes)", bytes);
    rec.set("error", msg);
    return res;  // (res.ok is false)
  }

  // ---- quantjit: plan (gen_us), one checked run ----
  Ours q;
  std::string err;
  const void* a_ptr = kind.a == QJ_U8 ? static_cast<const void*>(d.a_u8.data())
                                      : static_cast<const void*>(d.a_f32.data());
  int64_t lda = k;
  // MX activations: the fp32 A quantized per row (SPLIT rows, untimed), passed as a qj_mx_matrix.
  std::vector<uint8_t> mx_elems, mx_scales;
  qj_mx_matrix mx_a{};
  if (o.a_mx != QJ_DT_UNDEFINED) {
    size_t eb = 0, sb = 0;
    qj_mx_storage_size(QJ_MX_LAYOUT_SPLIT, o.a_mx, k, &eb, &sb);
    mx_elems.resize(eb * m);
    mx_scales.resize(sb * m);
    for (int64_t i = 0; i < m; ++i)
      qj_mx_quantize(o.a_mx, QJ_ROUND_FLOOR, d.a_f32.data() + i * k, k, mx_elems.data() + i * eb,
                     mx_scales.data() + i * sb);
    mx_a = qj_mx_matrix{mx_elems.data(), mx_scales.data(), static_cast<int64_t>(sb)};
    a_ptr = &mx_a;
    lda = static_cast<int64_t>(eb);
  }
  void* c_ptr = kind.c == QJ_U8 ? static_cast<void*>(d.c_u8.data())
                                : static_cast<void*>(d.c_f32.data());
  qj_status run_st = QJ_OK;
  auto ours = [&] {
    qj_status s = o.threads == 1 ? qj_gemm_run(q.plan, m, a_ptr, lda, c_ptr, n, nullptr)
                                 : qj_gemm_run_parallel(q.plan, m, a_ptr, lda, c_ptr, n, o.threads);
    if (s != QJ_OK && run_st == QJ_OK) run_st = s;
  };
  res.ok = prepare_ours(o, kind, d, &q, &err);
  if (res.ok) {
    ours();
    if (run_st != QJ_OK) {
      err = status_text(run_st, "qj_gemm_run");
      res.ok = false;
    }
  }
  if (!res.ok) rec.set("error", err);

  // ---- peer: created here (untimed), one run for the comparison ----
  std::unique_ptr<GemmPeer> peer;
  std::vector<float> peer_keep;
  std::string peer_err;
  if (o.vs_onednn) {
    peer = prepare_peer(kind, d, &peer_keep, &peer_err);
    if (peer && !peer->run()) {
      peer_err = "oneDNN matmul execute failed";
      peer.reset();
    }
  }

  // ---- checks, before timing (the timed calls overwrite the same outputs identically) ----
  Diff ref_diff, peer_diff, peer_ref_diff;
  const bool exact = !kind.quantize_pack && kind.c == QJ_U8;
  if (res.ok && exact) ref_diff = check_reference(d, d.c_u8);
  if (res.ok && peer && kind.peer == PeerKind::kInt8) {
    peer_diff = compare_u8(d.c_u8, d.peer_u8, static_cast<size_t>(m * n));
    if (exact) peer_ref_diff = check_reference(d, d.peer_u8);
  }
  double peer_rel = -1;
  if (res.ok && peer && (kind.w == QJ_F16 || kind.w == QJ_BF16))
    peer_rel = compare_f32(d.c_f32, d.peer_f32, static_cast<size_t>(m * n));

  // ---- timing: ours and the peer interleaved, so noise hits both alike ----
  TimingOptions topt;
  topt.cold = o.cold;
  topt.reps = o.reps;
  std::vector<std::function<void()>> fns;
  if (res.ok) fns.push_back(ours);
  const size_t peer_index = fns.size();
  if (peer) fns.push_back([&] { peer->run(); });
  // Cold M = 1: the roof is a plain read of the weights' byte count right after the same flush,
  // timed in the same rounds (DRAM bandwidth on this shared machine moves with the neighbours,
  // and a small read after a flush is latency-bound: both hit the kernel just the same).
  const double wbytes = weight_bits(kind) / 8.0 * static_cast<double>(k) * n;
  // (On 2 MiB pages, as the library's packed weights ask for.)
  PageBuffer roof_buf;
  const bool cold_roof = o.cold && m == 1 && res.ok;
  if (cold_roof) {
    roof_buf = PageBuffer(static_cast<size_t>(wbytes) + 512, true);
    fns.push_back([&] { read_once(roof_buf.data(), static_cast<size_t>(wbytes)); });
  }
  std::vector<Timing> times = fns.empty() ? std::vector<Timing>{} : time_median_multi(fns, topt);
  if (res.ok && run_st != QJ_OK) {  // a timed call failed
    rec.set("error", status_text(run_st, "qj_gemm_run"));
    res.ok = false;
  }

  const double ops = 2.0 * m * n * k;
  if (res.ok) {
    const Timing& t = times[0];
    res.gops = ops / t.median * 1e-9;
    rec.set("seconds", t.median, 9).set("time_us", t.median * 1e6, 2);
    rec.set("gops", res.gops, 1).set("peak_fraction", res.gops / peak, 3);
    if (m == 1) {
      // The bandwidth roof: weight bytes per second against a plain streaming read (peak.h) of
      // the level the weights sit in. Warm: a read of a working set of exactly the weights' size,
      // which is that level's bandwidth and also counts the share of a slightly-too-big matrix
      // that stays in L3 between calls (measured per size, cached). Cold: the median of the
      // flushed reads timed alongside (above).
      MemLevel lvl = o.cold ? MemLevel::kDram : level_of(static_cast<size_t>(wbytes));
      const double read_bytes = static_cast<double>(static_cast<size_t>(wbytes) / 512 * 512);
      const double roof = cold_roof ? read_bytes / times.back().median * 1e-9
                                    : measure_bandwidth(static_cast<size_t>(wbytes));
      rec.set("level", level_name(lvl));
      rec.set("weight_gbs", wbytes / t.median * 1e-9, 1);
      rec.set("roof_gbs", roof, 1);
      rec.set("roof_fraction", wbytes / t.median * 1e-9 / roof, 3);
    }
    rec.set("gen_us", q.gen_us, 1).set("kernels", q.kernels).set("plan_us", q.plan_us, 1);
    rec.set("pack_ms", q.pack_ms, 2);
    rec.set("fallbacks", q.fallbacks).set("reps", t.reps);
    if (exact) {
      rec.set("ref_max_diff", ref_diff.max);
      if (ref_diff.worse) res.mismatch = true;
    }
  }
  if (o.vs_onednn) {
    rec.set("peer", "onednn");
    if (!peer) {
      rec.set("peer_error", peer_err);
    } else {
      const Timing& pt = times[peer_index];
      res.peer_gops = ops / pt.median * 1e-9;
      rec.set("peer_impl", peer->impl());
      rec.set("peer_seconds", pt.median, 9).set("peer_us", pt.median * 1e6, 2);
      rec.set("peer_gops", res.peer_gops, 1);
      if (res.ok) {
        res.ratio = pt.median / times[0].median;
        rec.set("ratio", res.ratio, 3);
      }
      rec.set("peer_create_us", peer->create_us, 1);
      if (res.ok && kind.peer == PeerKind::kInt8) {
        rec.set("peer_max_diff", peer_diff.max).set("peer_off_by_one", peer_diff.off_by_one);
        // A disagreement is ours unless ours is the exact result and the peer's is not (oneDNN
        // documents that its int8 GEMM without VNNI may saturate its s16 intermediates).
        if (exact) rec.set("peer_ref_max_diff", peer_ref_diff.max);
        res.peer_inexact = exact && ref_diff.worse == 0 && peer_ref_diff.worse > 0;
        if (peer_diff.worse && !res.peer_inexact) res.mismatch = true;
      }
      if (peer_rel >= 0) rec.set("peer_rel_diff", peer_rel, 6);
    }
  }
  if (rec.find("ref_max_diff") || rec.find("peer_max_diff"))
    rec.set("check", res.mismatch ? "MISMATCH" : "ok");
  return res;
}

double geomean(const std::vector<double>& v) {
  if (v.empty()) return 0;
  double s = 0;
  for (double x : v) s += std::log(x);
  return std::exp(s / v.size());
}

// Writes the records as JSON Lines to a temporary file and runs bench/plot.py on it.
bool draw_plot(const Report& rep, const std::string& png) {
  char tmp[] = "/tmp/quantjit-bench-XXXXXX";
  int fd = mkstemp(tmp);
  if (fd < 0) return false;
  FILE* f = fdopen(fd, "w");
  rep.write_json(f);
  std::fclose(f);
  // matplotlib comes from Debian's python3-matplotlib: prefer the system interpreter over
  // whatever python3 is first on PATH (a pyenv or venv python usually lacks it). QJ_PYTHON wins.
  std::string py = "python3";
  if (const char* e = std::getenv("QJ_PYTHON")) py = e;
  else if (access("/usr/bin/python3", X_OK) == 0) py = "/usr/bin/python3";
  std::string cmd = py + " '" + plot_script() + "' '" + tmp + "' '" + png + "'";
  int rc = std::system(cmd.c_str());
  unlink(tmp);
  return rc == 0;
}

}  // namespace

int cmd_gemm(int argc, char** argv) {
  Options o;
  bool help = false;
  if (!parse_options(argc, argv, &o, &help)) return 2;
  if (help) return usage(0);
  if (o.a_mx != QJ_DT_UNDEFINED)
    for (const WeightKind* kd : o.kinds)
      if (kd->a == QJ_U8) {
        arg_error("gemm", "--a-type: %s weights take u8 A; MX activations go with mxfp4 .. mx4, f16, bf16, s4 or u4",
                  kd->name);
        return 2;
      }
  if (o.group > 0 &&
      std::none_of(o.kinds.begin(), o.kinds.end(), [](const WeightKind* kd) { return kd->w == QJ_S4 || kd->w == QJ_U4; })) {
    arg_error("gemm", "--group: only the s4 / u4 weight types take a group size (MX blocks are 32)");
    return 2;
  }
  CsvTable shapes;
  std::string err;
  if (!resolve_shapes(o.shapes, gemm_lists(), {"M", "N", "K"}, &shapes, &err)) {
    std::fprintf(stderr, "quantjit-bench gemm: %s\n", err.c_str());
    return 2;
  }
  const int cm = shapes.column("M"), cn = shapes.column("N"), ck = shapes.column("K");
  if (cm < 0 || cn < 0 || ck < 0) {
    std::fprintf(stderr, "quantjit-bench gemm: shape list needs columns M,N,K\n");
    return 2;
  }
  if (o.isa >= 0) {
    qj_status s = qj_set_max_isa(static_cast<qj_isa>(o.isa));
    if (s != QJ_OK) {
      std::fprintf(stderr, "quantjit-bench gemm: --isa: %s\n", qj_last_error());
      return 2;
    }
  }
  if (o.vs_onednn) onednn_set_threads(o.threads);
  const bool several = o.kinds.size() > 1;

  Report rep(o.fmt);
  rep.declare({"m", "n", "k", "a_type", "w_type", "group", "c_type", "isa", "threads", "mode", "seconds",
               "time_us", "gops", "peak_gops", "peak_instr", "peak_fraction", "level", "weight_gbs", "roof_gbs",
               "roof_fraction", "gen_us", "kernels", "plan_us", "pack_ms", "fallbacks", "reps",
               "ref_max_diff", "peer", "peer_impl", "peer_seconds", "peer_us", "peer_gops",
               "ratio", "peer_create_us", "peer_max_diff", "peer_off_by_one", "peer_ref_max_diff",
               "peer_rel_diff", "check", "error", "peer_error"});
  // The table shows microseconds; JSON/CSV carry seconds (the documented field). Comparing
  // formats, the table keeps the A and weight types.
  std::vector<std::string> table_hidden = {"c_type", "isa", "threads", "mode", "seconds",
                                           "peer_seconds", "peak_gops", "peak_instr", "pack_ms", "reps", "peer_impl",
                                           "weight_gbs", "roof_gbs", "peer_create_us", "plan_us"};
  if (!several) table_hidden.insert(table_hidden.begin(), {"a_type", "w_type", "group"});
  rep.hide(Format::kTable, table_hidden);
  rep.hide(Format::kCsv, {"time_us", "peer_us"});
  rep.hide(Format::kJson, {"time_us", "peer_us"});

  // Per weight kind: the results for its summary lines.
  struct Summary {
    std::vector<double> gops, peer_gops, ratios;
  };
  std::vector<Summary> sums(o.kinds.size());
  int failed = 0, mismatched = 0, peer_inexact = 0;
  if (shapes.rows.empty()) {
    std::fprintf(stderr, "quantjit-bench gemm: nothing to measure: '%s' holds no shape\n", o.shapes.c_str());
    return 2;
  }
  for (const auto& row : shapes.rows)
    if (row[cm] <= 0 || row[cn] <= 0 || row[ck] <= 0) {
      std::fprintf(stderr, "quantjit-bench gemm: shape %lld,%lld,%lld (%s): M, N and K must be positive\n",
                   static_cast<long long>(row[cm]), static_cast<long long>(row[cn]), static_cast<long long>(row[ck]),
                   o.shapes.c_str());
      return 2;
    }
  for (const auto& row : shapes.rows) {
    const int64_t m = row[cm], n = row[cn], k = row[ck];
    for (size_t i = 0; i < o.kinds.size(); ++i) {
      CaseResult r = run_case(o, *o.kinds[i], m, n, k, rep);
      Summary& sm = sums[i];
      if (!r.ok) ++failed;
      if (r.mismatch) ++mismatched;
      if (r.peer_inexact) ++peer_inexact;
      if (r.ok) sm.gops.push_back(r.gops);
      if (r.peer_gops > 0) sm.peer_gops.push_back(r.peer_gops);
      if (r.ok && r.peer_gops > 0) sm.ratios.push_back(r.ratio);
    }
  }
  for (size_t i = 0; i < o.kinds.size(); ++i) {
    const WeightKind& kind = *o.kinds[i];
    const Summary& sm = sums[i];
    const TierPeak tp = kind_peak(kind);
    const double peak = tp.gops;
    char line[512];
    std::snprintf(line, sizeof line,
                  "%s weights, %s A, %s C, isa %s, %d thread(s), %s; measured peak %.1f %s (%s) per core",
                  kind.name, qj_dtype_name(o.a_mx != QJ_DT_UNDEFINED ? o.a_mx : kind.a), qj_dtype_name(kind.c), qj_isa_name(qj_max_isa()),
                  o.threads, o.cold ? "cold (512 MiB flushed before each call)" : "warm", peak,
                  kind.float_peak ? "GFLOPS" : "GOPS", tp.instr);
    rep.note(line);
    std::snprintf(line, sizeof line, "%sgeomean over %zu shapes: %.1f GOPS (%.1f%% of peak)",
                  several ? "  " : "", sm.gops.size(), geomean(sm.gops),
                  peak > 0 ? 100 * geomean(sm.gops) / (peak * o.threads) : 0);
    rep.note(line);
    if (!sm.peer_gops.empty()) {
      std::snprintf(line, sizeof line, "%soneDNN geomean over %zu shapes: %.1f GOPS (%.1f%% of peak)",
                    several ? "  " : "", sm.peer_gops.size(), geomean(sm.peer_gops),
                    peak > 0 ? 100 * geomean(sm.peer_gops) / (peak * o.threads) : 0);
      rep.note(line);
    }
    if (!sm.ratios.empty()) {
      std::snprintf(line, sizeof line,
                    "%sgeomean ratio over %zu shapes (oneDNN time / ours; > 1: quantjit faster): %.3f",
                    several ? "  " : "", sm.ratios.size(), geomean(sm.ratios));
      rep.note(line);
    }
  }
  if (failed) rep.note("FAILED cases: " + std::to_string(failed) + " (see the error column)");
  if (mismatched) rep.note("MISMATCHED cases: " + std::to_string(mismatched));
  if (peer_inexact)
    rep.note("oneDNN off the exact reference by more than one unit (peer_ref_max_diff) in " +
             std::to_string(peer_inexact) + " case(s), ours exact: not counted as mismatches");
  rep.finish();
  bool plot_failed = false;
  if (!o.plot.empty()) {
    if (draw_plot(rep, o.plot)) {
      std::fprintf(stderr, "wrote %s\n", o.plot.c_str());
    } else {
      std::fprintf(stderr, "quantjit-bench gemm: plotting %s failed (above)\n", o.plot.c_str());
      plot_failed = true;
    }
  }
  return failed || mismatched || plot_failed ? 1 : 0;
}
