// Bad input through the C API of weights packing, GEMM plans and runs, and the ISA cap.
//
// Every case asserts the status code, that qj_last_error() names the argument (as a whole word:
// "lda", "desc->a_scale", "scales[5]") and shows the offending value, and that nothing was written:
// output handles keep their sentinel and C buffers keep their fill pattern. Cases that could make
// a careless implementation read wild memory (overflowing strides and sizes) run in a forked
// child, so a crash is observed instead of ending the executable.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <quantjit/quantjit.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "src/formats/half.h"
#include "test/test_util.h"

namespace {

const float kNaN = std::numeric_limits<float>::quiet_NaN();
const float kInf = std::numeric_limits<float>::infinity();

bool ident_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// `arg` occurs in `msg` as a whole identifier ("k" matches "desc->k=0", not "lda=...k").
bool names_arg(const std::string& msg, const std::string& arg) {
  for (size_t p = msg.find(arg); p != std::string::npos; p = msg.find(arg, p + 1)) {
    bool left = p == 0 || !ident_char(msg[p - 1]);
    bool right = p + arg.size() >= msg.size() || !ident_char(msg[p + arg.size()]);
    if (left && right) return true;
  }
  return false;
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

::testing::AssertionResult failed_with(const char* call, qj_status got, qj_status want,
                                       const std::string& arg, const std::string& value) {
  std::string msg = qj_last_error();
  if (got != want)
    return ::testing::AssertionFailure() << call << " returned " << qj_status_name(got) << ", want "
                                         << qj_status_name(want) << " (message: \"" << msg << "\")";
  if (!names_arg(msg, arg))
    return ::testing::AssertionFailure() << call << ": message \"" << msg << "\" does not name " << arg;
  if (lower(msg).find(lower(value)) == std::string::npos)
    return ::testing::AssertionFailure() << call << ": message \"" << msg << "\" does not show the value "
                                         << value;
  return ::testing::AssertionSuccess();
}

#define EXPECT_FAIL(call, code, arg, value) EXPECT_TRUE(failed_with(#call, (call), (code), (arg), (value)))

template <class T>
std::string str(T v) {
  return std::to_string(v);
}

// Stores an arbitrary int in a C enum field, as a C caller may: through memory, so that no C++
// conversion to the enum type (undefined outside the enumerators' range) happens in the test.
template <class E>
void set_raw(E& field, int v) {
  static_assert(sizeof(E) == sizeof(int), "C enums here are int-sized");
  std::memcpy(&field, &v, sizeof v);
}

// Runs fn in a forked child; returns the child's exit code (or -signal) and what it wrote to
// stderr. Used to observe a call that may crash (or trip a sanitizer) without ending this
// executable.
struct ChildOutcome {
  int code = -1;
  std::string err;
};

ChildOutcome run_in_child(const std::function<void()>& fn) {
  ChildOutcome r;
  char path[] = "/tmp/qjt_misuse_XXXXXX";
  const int fd = mkstemp(path);
  if (fd < 0) return r;
  std::fflush(nullptr);
  pid_t pid = fork();
  if (pid == 0) {
    alarm(60);  // a wild loop counts as a crash
    dup2(fd, 2);
    int null = open("/dev/null", O_WRONLY);
    if (null >= 0) dup2(null, 1);
    fn();
    _exit(0);
  }
  int st = 0;
  if (pid > 0 && waitpid(pid, &st, 0) == pid) r.code = WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st);
  std::string err(4096, '\0');
  const ssize_t got = pread(fd, err.data(), err.size(), 0);
  r.err = got > 0 ? err.substr(0, static_cast<size_t>(got)) : "";
  close(fd);
  unlink(path);
  return r;
}

// A valid problem every case breaks in one place.
class Misuse : public ::testing::Test {
 protected:
  static constexpr int64_t k = 64, n = 37, m = 5;
  void SetUp() override {
    wq = qjt::random_ints<int8_t>(k * n, -128, 127, 1);
    scales.assign(n, 0.01f);
    zps.assign(n, 3);
    wd = qj_weights_desc{};
    wd.dtype = QJ_S8;
    wd.k = k;
    wd.n = n;
    wd.layout = QJ_LAYOUT_KN;
    wd.granularity = QJ_GRAN_CHANNEL;
    wd.scales = scales.data();
    wd.zero_points = zps.data();
    ASSERT_EQ(qj_weights_pack(&wd, wq.data(), n, &w), QJ_OK) << qj_last_error();
    gd = qj_gemm_desc{};
    gd.a_type = QJ_U8;
    gd.a_scale = 0.05f;
    gd.a_zero_point = 10;
    gd.a_granularity = QJ_GRAN_ROW;
    gd.c_type = QJ_U8;
    gd.c_scale = 0.5f;
    gd.c_zero_point = 3;
    ASSERT_EQ(qj_gemm_plan_create(&gd, w, &plan), QJ_OK) << qj_last_error();
    a = qjt::random_ints<uint8_t>(m * k * 4, 0, 255, 2);  // room for fp32 A too
    c.assign(m * n * 4 + 64, 0xa5);
    c0 = c;
  }
  void TearDown() override {
    qj_gemm_plan_destroy(plan);
    qj_weights_destroy(w);
  }
  bool c_untouched() const { return c == c0; }
  // A plan of the same weights for fp32 A (quantized on the fly) and fp32 C, and an A whose row 3
  // holds `bad` at column 17 (rows 0-2 are fine: a row-by-row writer would write them).
  qj_gemm_plan f32_plan() {
    qj_gemm_desc d = gd;
    d.a_type = QJ_F32;
    d.c_type = QJ_F32;
    qj_gemm_plan p = nullptr;
    EXPECT_EQ(qj_gemm_plan_create(&d, w, &p), QJ_OK) << qj_last_error();
    return p;
  }
  static std::vector<float> f32_a_with(float bad) {
    std::vector<float> af(m * k, 0.5f);
    af[3 * k + 17] = bad;
    return af;
  }
  // Sentinel handles: a failed create must leave *out as it was.
  static qj_weights sentinel_w() { return reinterpret_cast<qj_weights>(uintptr_t{0x5a5a}); }
  static qj_gemm_plan sentinel_p() { return reinterpret_cast<qj_gemm_plan>(uintptr_t{0x5a5a}); }

  // Pack with one change; returns the status and checks *out is untouched on failure.
  qj_status pack(const qj_weights_desc& d, const void* data, int64_t ld) {
    qj_weights out = sentinel_w();
    qj_status st = qj_weights_pack(&d, data, ld, &out);
    if (st == QJ_OK) {
      qj_weights_destroy(out);
    } else {
      EXPECT_EQ(out, sentinel_w()) << "qj_weights_pack wrote *out on failure";
    }
    return st;
  }
  qj_status plan_with(const qj_gemm_desc& d, qj_weights b = nullptr) {
    qj_gemm_plan out = sentinel_p();
    qj_status st = qj_gemm_plan_create(&d, b ? b : w, &out);
    if (st == QJ_OK) {
      qj_gemm_plan_destroy(out);
    } else {
      EXPECT_EQ(out, sentinel_p()) << "qj_gemm_plan_create wrote *out on failure";
    }
    return st;
  }

  std::vector<int8_t> wq;
  std::vector<float> scales;
  std::vector<int32_t> zps;
  qj_weights_desc wd{};
  qj_weights w = nullptr;
  qj_gemm_desc gd{};
  qj_gemm_plan plan = nullptr;
  std::vector<uint8_t> a, c, c0;
};

// --- qj_weights_pack -----------------------------------------------------------------------------

TEST_F(Misuse, WeightsPackNullPointers) {
  qj_weights out = sentinel_w();
  EXPECT_FAIL(qj_weights_pack(nullptr, wq.data(), n, &out), QJ_ERR_INVALID_ARGUMENT, "desc", "NULL");
  EXPECT_EQ(out, sentinel_w());
  EXPECT_FAIL(qj_weights_pack(&wd, nullptr, n, &out), QJ_ERR_INVALID_ARGUMENT, "data", "NULL");
  EXPECT_EQ(out, sentinel_w());
  EXPECT_FAIL(qj_weights_pack(&wd, wq.data(), n, nullptr), QJ_ERR_INVALID_ARGUMENT, "out", "NULL");
  qj_weights_desc d = wd;
  d.scales = nullptr;
  EXPECT_FAIL(pack(d, wq.data(), n), QJ_ERR_INVALID_ARGUMENT, "scales", "NULL");
}

TEST_F(Misuse, WeightsPackBadSizes) {
  const int64_t bad[] = {0, -1, -64, std::numeric_limits<int64_t>::min(), (int64_t{1} << 31) + 1,
                         std::numeric_limits<int64_t>::max()};
  for (int64_t v : bad) {
    qj_weights_desc d = wd;
    d.k = v;
    EXPECT_FAIL(pack(d, wq.data(), n), QJ_ERR_INVALID_ARGUMENT, "k", str(v));
    d = wd;
    d.n = v;
    d.layout = QJ_LAYOUT_NK;  // ld >= k is fine: only n is wrong
    EXPECT_FAIL(pack(d, wq.data(), k), QJ_ERR_INVALID_ARGUMENT, "n", str(v));
  }
  // Each fits on its own, the product does not.
  qj_weights_desc d = wd;
  d.k = int64_t{1} << 31;
  d.n = int64_t{1} << 31;
  d.granularity = QJ_GRAN_TENSOR;
  EXPECT_FAIL(pack(d, wq.data(), d.n), QJ_ERR_INVALID_ARGUMENT, "k", str(d.k * d.n));
}

TEST_F(Misuse, WeightsPackLeadingDimension) {
  for (int64_t ld : {n - 1, int64_t{0}, int64_t{-1}, std::numeric_limits<int64_t>::min()})
    EXPECT_FAIL(pack(wd, wq.data(), ld), QJ_ERR_INVALID_ARGUMENT, "ld", str(ld));
  qj_weights_desc d = wd;
  d.layout = QJ_LAYOUT_NK;  // rows are K long
  for (int64_t ld : {k - 1, int64_t{1}, int64_t{-7}})
    EXPECT_FAIL(pack(d, wq.data(), ld), QJ_ERR_INVALID_ARGUMENT, "ld", str(ld));
  EXPECT_EQ(pack(d, wq.data(), k), QJ_OK) << qj_last_error();  // (the buffer holds k*n bytes)
}

TEST_F(Misuse, WeightsPackUnknownEnums) {
  for (int v : {0, -1, 99, static_cast<int>(QJ_S32), static_cast<int>(QJ_FUSED_8BIT)}) {
    qj_weights_desc d = wd;
    set_raw(d.dtype, v);
    EXPECT_FAIL(pack(d, wq.data(), n), QJ_ERR_INVALID_ARGUMENT, "dtype", str(v));
  }
  for (int v : {2, -1, 1000}) {
    qj_weights_desc d = wd;
    set_raw(d.layout, v);
    EXPECT_FAIL(pack(d, wq.data(), n), QJ_ERR_INVALID_ARGUMENT, "layout", str(v));
  }
  for (int v : {static_cast<int>(QJ_GRAN_ROW), 4, -1}) {  // ROW is for activations only
    qj_weights_desc d = wd;
    set_raw(d.granularity, v);
    EXPECT_FAIL(pack(d, wq.data(), n), QJ_ERR_INVALID_ARGUMENT, "granularity", str(v));
  }
}

TEST_F(Misuse, WeightsPackGroupSize) {
  std::vector<float> gs((k / 4) * n, 0.01f);  // enough scales for any group size tried
  for (int64_t g : {int64_t{0}, int64_t{-32}, int64_t{48}, int64_t{65}, int64_t{128}, int64_t{3}}) {
    qj_weights_desc d = wd;
    d.granularity = QJ_GRAN_GROUP;
    d.group_size = g;
    d.scales = gs.data();
    d.zero_points = nullptr;
    EXPECT_FAIL(pack(d, wq.data(), n), QJ_ERR_INVALID_ARGUMENT, "group_size", str(g));
  }
}

TEST_F(Misuse, WeightsPackBadScales) {
  for (float s : {kNaN, kInf, -kInf, 0.0f, -0.0f, -1.0f}) {
    std::vector<float> sc = scales;
    sc[5] = s;
    qj_weights_desc d = wd;
    d.scales = sc.data();
    char v[32];
    std::snprintf(v, sizeof v, "%g", static_cast<double>(s));
    EXPECT_FAIL(pack(d, wq.data(), n), QJ_ERR_INVALID_ARGUMENT, "scales", std::string("scales[5]=") + v);
  }
  // Per tensor: one scale; per group: index into [K/G][N].
  float one = kNaN;
  qj_weights_desc d = wd;
  d.granularity = QJ_GRAN_TENSOR;
  d.scales = &one;
  d.zero_points = nullptr;
  EXPECT_FAIL(pack(d, wq.data(), n), QJ_ERR_INVALID_ARGUMENT, "scales", "scales[0]=nan");
  std::vector<float> gs(2 * n, 0.5f);
  gs[n + 4] = -2.0f;
  d = wd;
  d.granularity = QJ_GRAN_GROUP;
  d.group_size = 32;
  d.scales = gs.data();
  d.zero_points = nullptr;
  EXPECT_FAIL(pack(d, wq.data(), n), QJ_ERR_INVALID_ARGUMENT, "scales", "scales[" + str(n + 4) + "]=-2");
}

TEST_F(Misuse, WeightsPackZeroPointsOutOfRange) {
  for (int32_t z : {128, -129, 1000, std::numeric_limits<int32_t>::min()}) {
    std::vector<int32_t> zp = zps;
    zp[3] = z;
    qj_weights_desc d = wd;
    d.zero_points = zp.data();
    EXPECT_FAIL(pack(d, wq.data(), n), QJ_ERR_INVALID_ARGUMENT, "zero_points", "zero_points[3]=" + str(z));
  }
}

// --- qj_weights_quantize_pack ----------------------------------------------------------------------

TEST_F(Misuse, QuantizePack) {
  std::vector<float> wf = qjt::random_floats(k * n, -1.0f, 1.0f, 3);
  qj_weights_desc d = wd;
  d.scales = nullptr;
  d.zero_points = nullptr;
  qj_weights out = sentinel_w();
  EXPECT_FAIL(qj_weights_quantize_pack(nullptr, wf.data(), n, &out), QJ_ERR_INVALID_ARGUMENT, "desc", "NULL");
  EXPECT_FAIL(qj_weights_quantize_pack(&d, nullptr, n, &out), QJ_ERR_INVALID_ARGUMENT, "w", "NULL");
  EXPECT_FAIL(qj_weights_quantize_pack(&d, wf.data(), n, nullptr), QJ_ERR_INVALID_ARGUMENT, "out", "NULL");
  EXPECT_FAIL(qj_weights_quantize_pack(&d, wf.data(), n - 1, &out), QJ_ERR_INVALID_ARGUMENT, "ld", str(n - 1));
  qj_weights_desc e = d;
  e.scales = scales.data();  // computed, so must be NULL
  EXPECT_FAIL(qj_weights_quantize_pack(&e, wf.data(), n, &out), QJ_ERR_INVALID_ARGUMENT, "scales", "NULL");
  e = d;
  e.zero_points = zps.data();
  EXPECT_FAIL(qj_weights_quantize_pack(&e, wf.data(), n, &out), QJ_ERR_INVALID_ARGUMENT, "zero_points", "NULL");
  e = d;
  e.granularity = QJ_GRAN_GROUP;
  e.group_size = 24;
  EXPECT_FAIL(qj_weights_quantize_pack(&e, wf.data(), n, &out), QJ_ERR_INVALID_ARGUMENT, "group_size", "24");
  e = d;
  e.k = -3;
  EXPECT_FAIL(qj_weights_quantize_pack(&e, wf.data(), n, &out), QJ_ERR_INVALID_ARGUMENT, "k", "-3");
  for (float bad : {kNaN, kInf, -kInf}) {
    std::vector<float> wb = wf;
    wb[3 * n + 5] = bad;  // K index 3, column 5
    char v[32];
    std::snprintf(v, sizeof v, "%g", static_cast<double>(bad));
    EXPECT_FAIL(qj_weights_quantize_pack(&d, wb.data(), n, &out), QJ_ERR_INVALID_ARGUMENT, "w",
                std::string("w[k=3][n=5]=") + v);
  }
  EXPECT_EQ(out, sentinel_w());
}

// --- qj_gemm_plan_create ---------------------------------------------------------------------------

TEST_F(Misuse, PlanNullPointers) {
  qj_gemm_plan out = sentinel_p();
  EXPECT_FAIL(qj_gemm_plan_create(nullptr, w, &out), QJ_ERR_INVALID_ARGUMENT, "desc", "NULL");
  EXPECT_FAIL(qj_gemm_plan_create(&gd, nullptr, &out), QJ_ERR_INVALID_ARGUMENT, "b", "NULL");
  EXPECT_FAIL(qj_gemm_plan_create(&gd, w, nullptr), QJ_ERR_INVALID_ARGUMENT, "out", "NULL");
  EXPECT_EQ(out, sentinel_p());
}

TEST_F(Misuse, PlanUnknownEnums) {
  for (int v : {0, -1, 99, static_cast<int>(QJ_S32), static_cast<int>(QJ_F16), static_cast<int>(QJ_S4)}) {
    qj_gemm_desc d = gd;
    set_raw(d.a_type, v);
    EXPECT_FAIL(plan_with(d), QJ_ERR_INVALID_ARGUMENT, "a_type", str(v));
  }
  for (int v : {0, -1, 99, static_cast<int>(QJ_F16), static_cast<int>(QJ_S4)}) {
    qj_gemm_desc d = gd;
    set_raw(d.c_type, v);
    EXPECT_FAIL(plan_with(d), QJ_ERR_INVALID_ARGUMENT, "c_type", str(v));
  }
  // The same with weights that take other routes (MX weights are looked at before the common
  // checks: an unknown enum must be read as a raw integer there too; the UBSan build checks it).
  std::vector<float> wf(k * n, 0.25f);
  for (qj_dtype wt : {QJ_MXFP4_E2M1, QJ_MXINT8, QJ_MXFP6_E2M3, QJ_BDR_MX6, QJ_MXFP8_E4M3, QJ_F16}) {
    qj_weights_desc q{};
    q.dtype = wt;
    q.k = k;
    q.n = n;
    q.layout = QJ_LAYOUT_KN;
    q.granularity = QJ_GRAN_CHANNEL;
    qj_weights w2 = nullptr;
    ASSERT_EQ(qj_weights_quantize_pack(&q, wf.data(), n, &w2), QJ_OK) << qj_last_error();
    for (int v : {0, -1, 99, 1000}) {
      qj_gemm_desc d = gd;
      set_raw(d.a_type, v);
      EXPECT_FAIL(plan_with(d, w2), QJ_ERR_INVALID_ARGUMENT, "a_type", str(v));
      d = gd;
      d.a_type = QJ_F32;
      set_raw(d.c_type, v);
      EXPECT_FAIL(plan_with(d, w2), QJ_ERR_INVALID_ARGUMENT, "c_type", str(v));
    }
    qj_weights_destroy(w2);
  }
  for (int v : {2, -1, 1000}) {
    qj_gemm_desc d = gd;
    set_raw(d.activation, v);
    EXPECT_FAIL(plan_with(d), QJ_ERR_INVALID_ARGUMENT, "activation", str(v));
  }
  for (qj_dtype at : {QJ_F32, QJ_BF16})
    for (int v : {static_cast<int>(QJ_GRAN_CHANNEL), 9, -1}) {
      qj_gemm_desc d = gd;
      d.a_type = at;
      d.c_type = QJ_F32;
      set_raw(d.a_granularity, v);
      EXPECT_FAIL(plan_with(d), QJ_ERR_INVALID_ARGUMENT, "a_granularity", str(v));
    }
}

// Per-group dynamic A is defined for grouped S4 / U4 weights only (header): with per-channel S8
// weights it is a bad argument, with grouped S8 weights not implemented.
// Per-(row, group) A: with per-channel weights (one group along K) it is per row; with grouped
// S8 weights it is not implemented.
TEST_F(Misuse, PlanGroupDynamicANeedsGroupedInt4Weights) {
  qj_gemm_desc d = gd;
  d.a_type = QJ_F32;
  d.c_type = QJ_F32;
  d.a_granularity = QJ_GRAN_GROUP;
  EXPECT_EQ(plan_with(d), QJ_OK) << qj_last_error();
  std::vector<float> gs(2 * n, 0.01f);
  qj_weights_desc wg = wd;
  wg.granularity = QJ_GRAN_GROUP;
  wg.group_size = 32;
  wg.scales = gs.data();
  wg.zero_points = nullptr;
  qj_weights wgrp = nullptr;
  ASSERT_EQ(qj_weights_pack(&wg, wq.data(), n, &wgrp), QJ_OK) << qj_last_error();
  EXPECT_FAIL(plan_with(d, wgrp), QJ_ERR_UNSUPPORTED, "a_granularity", "QJ_GRAN_GROUP");
  qj_weights_destroy(wgrp);
}

TEST_F(Misuse, PlanBadScales) {
  for (float s : {kNaN, kInf, -kInf, 0.0f, -0.0f, -0.5f}) {
    char v[32];
    std::snprintf(v, sizeof v, "%g", static_cast<double>(s));
    for (qj_dtype at : {QJ_U8, QJ_S8}) {
      qj_gemm_desc d = gd;
      d.a_type = at;
      d.a_zero_point = 0;
      d.a_scale = s;
      EXPECT_FAIL(plan_with(d), QJ_ERR_INVALID_ARGUMENT, "a_scale", std::string("a_scale=") + v);
    }
    for (qj_dtype ct : {QJ_U8, QJ_S8}) {
      qj_gemm_desc d = gd;
      d.c_type = ct;
      d.c_zero_point = 0;
      d.c_scale = s;
      EXPECT_FAIL(plan_with(d), QJ_ERR_INVALID_ARGUMENT, "c_scale", std::string("c_scale=") + v);
    }
  }
  // Finite scales whose product (over c_scale) overflows fp32: the multiplier would make NaN of a
  // zero sum.
  {
    qj_gemm_desc d = gd;
    d.a_scale = 1e30f;
    d.c_type = QJ_U8;
    d.c_scale = 1e-30f;
    EXPECT_FAIL(plan_with(d), QJ_ERR_INVALID_ARGUMENT, "multiplier", "column 0");
    d.c_scale = 1e-45f;  // a subnormal c_scale alone
    d.a_scale = 1.0f;
    EXPECT_FAIL(plan_with(d), QJ_ERR_INVALID_ARGUMENT, "multiplier", "c_scale=1.4013e-45");
    d.c_type = QJ_F32;  // (c_scale unused) a_scale times a weight scale of 1e30
    d.a_scale = 1e30f;
    qj_weights_desc big = wd;
    std::vector<float> big_scales(n, 1e30f);
    big.scales = big_scales.data();
    qj_weights wb = nullptr;
    ASSERT_EQ(qj_weights_pack(&big, wq.data(), wd.layout == QJ_LAYOUT_KN ? n : k, &wb), QJ_OK) << qj_last_error();
    EXPECT_FAIL(plan_with(d, wb), QJ_ERR_INVALID_ARGUMENT, "multiplier", "a_scale=1e+30");
    d.a_scale = 1e-10f;
    EXPECT_EQ(plan_with(d, wb), QJ_OK) << qj_last_error();
    qj_weights_destroy(wb);
  }
  // A scale that is not used is not checked: dynamic A ignores a_scale, float output c_scale.
  qj_gemm_desc d = gd;
  d.a_type = QJ_F32;
  d.a_scale = kNaN;
  d.c_type = QJ_F32;
  d.c_scale = 0.0f;
  EXPECT_EQ(plan_with(d), QJ_OK) << qj_last_error();
}

TEST_F(Misuse, PlanZeroPointsOutOfRange) {
  struct Z {
    qj_dtype t;
    int32_t v;
  };
  for (Z z : {Z{QJ_U8, -1}, Z{QJ_U8, 256}, Z{QJ_S8, -129}, Z{QJ_S8, 128}, Z{QJ_U8, 1 << 30}}) {
    qj_gemm_desc d = gd;
    d.a_type = z.t;
    d.a_zero_point = z.v;
    EXPECT_FAIL(plan_with(d), QJ_ERR_INVALID_ARGUMENT, "a_zero_point", "a_zero_point=" + str(z.v));
    d = gd;
    d.c_type = z.t;
    d.c_zero_point = z.v;
    EXPECT_FAIL(plan_with(d), QJ_ERR_INVALID_ARGUMENT, "c_zero_point", "c_zero_point=" + str(z.v));
  }
}

TEST_F(Misuse, PlanOutputStageRules) {
  for (qj_dtype ct : {QJ_U8, QJ_S8, QJ_BF16, QJ_S32}) {
    qj_gemm_desc d = gd;
    d.c_type = ct;
    d.beta = 0.5f;
    EXPECT_FAIL(plan_with(d), QJ_ERR_INVALID_ARGUMENT, "beta", "beta=0.5");
  }
  for (float b : {kNaN, kInf, -kInf}) {
    qj_gemm_desc d = gd;
    d.c_type = QJ_F32;
    d.beta = b;
    char v[32];
    std::snprintf(v, sizeof v, "%g", static_cast<double>(b));
    EXPECT_FAIL(plan_with(d), QJ_ERR_INVALID_ARGUMENT, "beta", std::string("beta=") + v);
  }
  std::vector<float> bias(n, 1.0f);
  qj_gemm_desc d = gd;
  d.c_type = QJ_S32;
  d.bias = bias.data();
  EXPECT_FAIL(plan_with(d), QJ_ERR_INVALID_ARGUMENT, "c_type", "QJ_S32");
  EXPECT_NE(std::string(qj_last_error()).find("bias"), std::string::npos) << qj_last_error();
  d = gd;
  d.c_type = QJ_S32;
  d.activation = QJ_ACT_RELU;
  EXPECT_FAIL(plan_with(d), QJ_ERR_INVALID_ARGUMENT, "c_type", "QJ_S32");
  d = gd;
  d.c_type = QJ_S32;
  d.a_type = QJ_F32;
  EXPECT_FAIL(plan_with(d), QJ_ERR_INVALID_ARGUMENT, "c_type", "QJ_S32");
  // S32 with group scales: the group scales are applied in fp32.
  std::vector<float> gs(2 * n, 0.01f);
  qj_weights_desc wg = wd;
  wg.granularity = QJ_GRAN_GROUP;
  wg.group_size = 32;
  wg.scales = gs.data();
  wg.zero_points = nullptr;
  qj_weights wgrp = nullptr;
  ASSERT_EQ(qj_weights_pack(&wg, wq.data(), n, &wgrp), QJ_OK) << qj_last_error();
  d = gd;
  d.c_type = QJ_S32;
  EXPECT_FAIL(plan_with(d, wgrp), QJ_ERR_INVALID_ARGUMENT, "c_type", "QJ_S32");
  qj_weights_destroy(wgrp);
  // A non-finite bias value, named by its index.
  for (float b : {kNaN, kInf}) {
    bias.assign(n, 1.0f);
    bias[7] = b;
    d = gd;
    d.bias = bias.data();
    char v[32];
    std::snprintf(v, sizeof v, "%g", static_cast<double>(b));
    EXPECT_FAIL(plan_with(d), QJ_ERR_INVALID_ARGUMENT, "bias", std::string("bias[7]=") + v);
  }
}

TEST_F(Misuse, PlanKTooLargeForExactInt32) {
  // K = 33026: 255 * 255 * K no longer fits int32 (33025 still does; gemm_int8_test runs it).
  const int64_t kk = 33026, nn = 3;
  std::vector<int8_t> big(kk * nn, 1);
  std::vector<float> s(nn, 1.0f);
  qj_weights_desc d = wd;
  d.k = kk;
  d.n = nn;
  d.scales = s.data();
  d.zero_points = nullptr;
  qj_weights wb = nullptr;
  ASSERT_EQ(qj_weights_pack(&d, big.data(), nn, &wb), QJ_OK) << qj_last_error();
  EXPECT_FAIL(plan_with(gd, wb), QJ_ERR_UNSUPPORTED, "k", "33026");
  qj_weights_destroy(wb);
}

// --- qj_gemm_run / qj_gemm_run_parallel ----------------------------------------------------------

TEST_F(Misuse, RunNullPointers) {
  EXPECT_FAIL(qj_gemm_run(nullptr, m, a.data(), k, c.data(), n, nullptr), QJ_ERR_INVALID_ARGUMENT, "p", "NULL");
  EXPECT_FAIL(qj_gemm_run(plan, m, nullptr, k, c.data(), n, nullptr), QJ_ERR_INVALID_ARGUMENT, "a", "NULL");
  EXPECT_FAIL(qj_gemm_run(plan, m, a.data(), k, nullptr, n, nullptr), QJ_ERR_INVALID_ARGUMENT, "c", "NULL");
  EXPECT_FAIL(qj_gemm_run_parallel(nullptr, m, a.data(), k, c.data(), n, 2), QJ_ERR_INVALID_ARGUMENT, "p", "NULL");
  EXPECT_FAIL(qj_gemm_run_parallel(plan, m, nullptr, k, c.data(), n, 2), QJ_ERR_INVALID_ARGUMENT, "a", "NULL");
  EXPECT_FAIL(qj_gemm_run_parallel(plan, m, a.data(), k, nullptr, n, 2), QJ_ERR_INVALID_ARGUMENT, "c", "NULL");
  EXPECT_TRUE(c_untouched());
}

TEST_F(Misuse, RunBadSizesAndStrides) {
  for (int64_t mm : {int64_t{-1}, std::numeric_limits<int64_t>::min(), (int64_t{1} << 40) + 1,
                     std::numeric_limits<int64_t>::max()}) {
    EXPECT_FAIL(qj_gemm_run(plan, mm, a.data(), k, c.data(), n, nullptr), QJ_ERR_INVALID_ARGUMENT, "m", str(mm));
    EXPECT_FAIL(qj_gemm_run_parallel(plan, mm, a.data(), k, c.data(), n, 2), QJ_ERR_INVALID_ARGUMENT, "m", str(mm));
  }
  for (int64_t lda : {k - 1, int64_t{0}, int64_t{-k}, std::numeric_limits<int64_t>::min()}) {
    EXPECT_FAIL(qj_gemm_run(plan, m, a.data(), lda, c.data(), n, nullptr), QJ_ERR_INVALID_ARGUMENT, "lda", str(lda));
    EXPECT_FAIL(qj_gemm_run_parallel(plan, m, a.data(), lda, c.data(), n, 3), QJ_ERR_INVALID_ARGUMENT, "lda", str(lda));
  }
  for (int64_t ldc : {n - 1, int64_t{0}, int64_t{-1}}) {
    EXPECT_FAIL(qj_gemm_run(plan, m, a.data(), k, c.data(), ldc, nullptr), QJ_ERR_INVALID_ARGUMENT, "ldc", str(ldc));
    EXPECT_FAIL(qj_gemm_run_parallel(plan, m, a.data(), k, c.data(), ldc, 3), QJ_ERR_INVALID_ARGUMENT, "ldc", str(ldc));
  }
  EXPECT_TRUE(c_untouched());
  // m = 0 is a valid no-op (a and c may be NULL), but its other arguments are still checked.
  EXPECT_EQ(qj_gemm_run(plan, 0, a.data(), k, c.data(), n, nullptr), QJ_OK) << qj_last_error();
  EXPECT_EQ(qj_gemm_run_parallel(plan, 0, a.data(), k, c.data(), n, 4), QJ_OK) << qj_last_error();
  EXPECT_EQ(qj_gemm_run(plan, 0, nullptr, k, nullptr, n, nullptr), QJ_OK) << qj_last_error();
  EXPECT_FAIL(qj_gemm_run(plan, 0, a.data(), -1, c.data(), n, nullptr), QJ_ERR_INVALID_ARGUMENT, "lda", "-1");
  EXPECT_FAIL(qj_gemm_run(plan, 0, a.data(), k, c.data(), -5, nullptr), QJ_ERR_INVALID_ARGUMENT, "ldc", "-5");
  EXPECT_FAIL(qj_gemm_run_parallel(plan, 0, a.data(), k, c.data(), -5, 2), QJ_ERR_INVALID_ARGUMENT, "ldc", "-5");
  EXPECT_FAIL(qj_gemm_run_parallel(plan, 0, a.data(), k, c.data(), n, 0), QJ_ERR_INVALID_ARGUMENT, "num_threads", "0");
  for (qj_partition part : {qj_partition{0, 0}, qj_partition{5, 2}}) {
    EXPECT_FAIL(qj_gemm_run(plan, 0, a.data(), k, c.data(), n, &part), QJ_ERR_INVALID_ARGUMENT, "part", "");
  }
  EXPECT_TRUE(c_untouched());
}

TEST_F(Misuse, RunBadPartitions) {
  struct P {
    int32_t t, nt;
  };
  for (P p : {P{-1, 2}, P{2, 2}, P{0, 0}, P{0, -3}, P{5, 3}, P{std::numeric_limits<int32_t>::min(), 1},
              P{0, std::numeric_limits<int32_t>::min()}}) {
    qj_partition part{p.t, p.nt};
    qj_status st = qj_gemm_run(plan, m, a.data(), k, c.data(), n, &part);
    // Named as the partition with both of its fields.
    EXPECT_TRUE(failed_with("qj_gemm_run(part)", st, QJ_ERR_INVALID_ARGUMENT, "part", "thread_id=" + str(p.t)));
    EXPECT_NE(std::string(qj_last_error()).find("num_threads=" + str(p.nt)), std::string::npos) << qj_last_error();
  }
  for (int32_t nt : {0, -1, 1025, std::numeric_limits<int32_t>::max()})
    EXPECT_FAIL(qj_gemm_run_parallel(plan, m, a.data(), k, c.data(), n, nt), QJ_ERR_INVALID_ARGUMENT,
                "num_threads", str(nt));
  EXPECT_TRUE(c_untouched());
  // Valid partitions with huge thread counts: a slice of nothing (or a little), no int overflow in
  // the split (the sanitizer build aborts on one).
  for (P p : {P{0, 536870912}, P{1, 536870912}, P{std::numeric_limits<int32_t>::max() - 1, std::numeric_limits<int32_t>::max()}}) {
    qj_partition part{p.t, p.nt};
    EXPECT_EQ(qj_gemm_run(plan, m, a.data(), k, c.data(), n, &part), QJ_OK) << qj_last_error();
  }
  // The same through the fp32-FMA kernels' driver (F16 weights).
  std::vector<uint16_t> wh(static_cast<size_t>(k * n), 0x3c00);  // 1.0
  qj_weights_desc fd{};
  fd.dtype = QJ_F16;
  fd.k = k;
  fd.n = n;
  fd.layout = QJ_LAYOUT_KN;
  qj_weights fw = nullptr;
  ASSERT_EQ(qj_weights_pack(&fd, wh.data(), n, &fw), QJ_OK) << qj_last_error();
  qj_gemm_desc g{};
  g.a_type = QJ_F32;
  g.c_type = QJ_F32;
  qj_gemm_plan fp = nullptr;
  ASSERT_EQ(qj_gemm_plan_create(&g, fw, &fp), QJ_OK) << qj_last_error();
  std::vector<float> af(static_cast<size_t>(m * k), 1.0f), cf(static_cast<size_t>(m * n), 0.0f);
  for (P p : {P{0, 536870912}, P{std::numeric_limits<int32_t>::max() - 1, std::numeric_limits<int32_t>::max()}}) {
    qj_partition part{p.t, p.nt};
    EXPECT_EQ(qj_gemm_run(fp, m, af.data(), k, cf.data(), n, &part), QJ_OK) << qj_last_error();
  }
  qj_gemm_plan_destroy(fp);
  qj_weights_destroy(fw);
}

// Non-finite fp32 / bf16 A fails the call before anything is written, on every partition.
TEST_F(Misuse, RunNonFiniteDynamicA) {
  for (qj_isa isa : qjt::supported_isas()) {
    qjt::IsaCap cap(isa);
    for (qj_dtype at : {QJ_F32, QJ_BF16}) {
      for (qj_granularity ag : {QJ_GRAN_ROW, QJ_GRAN_TENSOR}) {
        qj_gemm_desc d = gd;
        d.a_type = at;
        d.a_granularity = ag;
        d.c_type = QJ_F32;
        d.beta = 1.0f;  // C is read and written: an early write would show
        qj_gemm_plan p = nullptr;
        ASSERT_EQ(qj_gemm_plan_create(&d, w, &p), QJ_OK) << qj_last_error();
        for (float bad : {kNaN, kInf, -kInf}) {
          std::vector<float> af = qjt::random_floats(m * k, -1.0f, 1.0f, 4);
          af[3 * k + 17] = bad;  // row 3: rows 0-2 are fine, so a row-by-row writer would write
          std::vector<uint16_t> ab(m * k);
          for (int64_t i = 0; i < m * k; ++i) ab[i] = qj::f32_to_bf16(af[i]);
          const void* ap = at == QJ_F32 ? static_cast<const void*>(af.data()) : ab.data();
          EXPECT_FAIL(qj_gemm_run(p, m, ap, k, c.data(), n, nullptr), QJ_ERR_INVALID_ARGUMENT, "a", "row 3");
          for (int t = 0; t < 3; ++t) {
            qj_partition part{t, 3};
            EXPECT_FAIL(qj_gemm_run(p, m, ap, k, c.data(), n, &part), QJ_ERR_INVALID_ARGUMENT, "a", "row 3");
          }
          EXPECT_FAIL(qj_gemm_run_parallel(p, m, ap, k, c.data(), n, 2), QJ_ERR_INVALID_ARGUMENT, "a", "row 3");
          EXPECT_TRUE(c_untouched()) << qj_isa_name(isa) << " " << qj_dtype_name(at);
        }
        qj_gemm_plan_destroy(p);
      }
    }
  }
}

// A user pool that runs every slice on a thread of its own: a failing slice's message is
// thread-local there, and must still reach the caller.
void thread_per_slice_pool(void*, qj_task_fn fn, void* ctx, int32_t n) {
  std::vector<std::thread> ts;
  for (int32_t t = 0; t < n; ++t) ts.emplace_back([=] { fn(ctx, t, n); });
  for (auto& th : ts) th.join();
}

TEST_F(Misuse, RunParallelErrorMessageFromAPoolThread) {
  qj_gemm_plan p = f32_plan();
  ASSERT_NE(p, nullptr);
  const std::vector<float> af = f32_a_with(kNaN);
  qj_set_parallel_for(thread_per_slice_pool, nullptr);
  for (int threads : {2, 3}) {
    ASSERT_EQ(qj_set_max_isa(static_cast<qj_isa>(42)), QJ_ERR_INVALID_ARGUMENT);  // an unrelated message first
    EXPECT_FAIL(qj_gemm_run_parallel(p, m, af.data(), k, c.data(), n, threads), QJ_ERR_INVALID_ARGUMENT, "a", "row 3");
  }
  qj_set_parallel_for(nullptr, nullptr);
  EXPECT_TRUE(c_untouched());
  qj_gemm_plan_destroy(p);
}

// The non-finite value at every column (vector bodies and tails of the amax scan) and in every row.
TEST(MisuseDynamicA, NonFiniteAtEveryPosition) {
  const int64_t k = 37, n = 5, m = 3, lda = 40;
  std::vector<int8_t> wq = qjt::random_ints<int8_t>(k * n, -128, 127, 8);
  std::vector<float> scales(n, 0.02f);
  qj_weights_desc wd{};
  wd.dtype = QJ_S8;
  wd.k = k;
  wd.n = n;
  wd.granularity = QJ_GRAN_CHANNEL;
  wd.scales = scales.data();
  for (qj_isa isa : qjt::supported_isas()) {
    qjt::IsaCap cap(isa);
    qj_weights w = nullptr;
    ASSERT_EQ(qj_weights_pack(&wd, wq.data(), n, &w), QJ_OK) << qj_last_error();
    for (qj_dtype at : {QJ_F32, QJ_BF16}) {
      qj_gemm_desc d{};
      d.a_type = at;
      d.a_granularity = QJ_GRAN_ROW;
      d.c_type = QJ_F32;
      qj_gemm_plan p = nullptr;
      ASSERT_EQ(qj_gemm_plan_create(&d, w, &p), QJ_OK) << qj_last_error();
      std::vector<float> c(m * n + 8, 7.0f);
      const std::vector<float> c0 = c;
      for (int64_t row = 0; row < m; ++row)
        for (int64_t col = 0; col < k; ++col)
          for (float bad : {kNaN, kInf, -kInf}) {
            std::vector<float> af = qjt::random_floats(m * lda, -1.0f, 1.0f, 9);
            af[row * lda + col] = bad;
            std::vector<uint16_t> ab(m * lda);
            for (int64_t i = 0; i < m * lda; ++i) ab[i] = qj::f32_to_bf16(af[i]);
            const void* ap = at == QJ_F32 ? static_cast<const void*>(af.data()) : ab.data();
            const qj_status st = qj_gemm_run(p, m, ap, lda, c.data(), n, nullptr);
            ASSERT_TRUE(failed_with("qj_gemm_run", st, QJ_ERR_INVALID_ARGUMENT, "a", "row " + str(row)))
                << qj_isa_name(isa) << " " << qj_dtype_name(at) << " col " << col << " value " << bad;
            ASSERT_EQ(c, c0) << "C written on failure: " << qj_isa_name(isa) << " col " << col;
          }
      qj_gemm_plan_destroy(p);
    }
    qj_weights_destroy(w);
  }
}

// The message should also show the offending value and its column (DESIGN.md: "names the
// argument and the value that was wrong").
TEST_F(Misuse, RunNonFiniteDynamicAMessageShowsValue) {
  qj_gemm_plan p = f32_plan();
  ASSERT_NE(p, nullptr);
  const std::vector<float> af = f32_a_with(kInf);
  EXPECT_FAIL(qj_gemm_run(p, m, af.data(), k, c.data(), n, nullptr), QJ_ERR_INVALID_ARGUMENT, "a", "inf");
  EXPECT_NE(std::string(qj_last_error()).find("17"), std::string::npos)
      << "the column is not named: " << qj_last_error();
  qj_gemm_plan_destroy(p);
}

// --- Overflowing strides and sizes: must be rejected, never dereferenced -------------------------
// Each call runs in a forked child that prints the message and exits with 100 + the status (ASan
// exits with 1 on a fault, which must not read as a status), so a crash is observed instead of
// ending this executable.
[[noreturn]] void exit_with(qj_status st) {
  std::fprintf(stderr, "status=%s message=%s\n", qj_status_name(st), qj_last_error());
  std::fflush(stderr);
  std::_Exit(100 + static_cast<int>(st));
}

TEST_F(Misuse, OverflowingStrides) {
  const int64_t huge = std::numeric_limits<int64_t>::max() / 2;
  auto check = [&](const std::string& what, const std::function<qj_status()>& call, const char* arg) {
    const ChildOutcome o = run_in_child([&] { exit_with(call()); });
    const std::string msg = o.err.substr(0, o.err.find('\n'));
    EXPECT_EQ(o.code, 100 + QJ_ERR_INVALID_ARGUMENT)
        << what << (o.code < 100 ? ": crashed (the stride was used)" : ": " + msg);
    EXPECT_TRUE(names_arg(msg, arg)) << what << ": " << msg;
  };
  check("qj_gemm_run with lda=INT64_MAX/2, m=5", [&] { return qj_gemm_run(plan, m, a.data(), huge, c.data(), n, nullptr); }, "lda");
  check("qj_gemm_run with ldc=INT64_MAX/2, m=5", [&] { return qj_gemm_run(plan, m, a.data(), k, c.data(), huge, nullptr); }, "ldc");
  check("qj_gemm_run with m=2^40, lda=2^30",
        [&] { return qj_gemm_run(plan, int64_t{1} << 40, a.data(), int64_t{1} << 30, c.data(), n, nullptr); }, "lda");
  check("qj_gemm_run_parallel with lda=INT64_MAX/2, m=5",
        [&] { return qj_gemm_run_parallel(plan, m, a.data(), huge, c.data(), n, 2); }, "lda");
  check("qj_weights_pack (KN) with ld=INT64_MAX/2", [&] { return pack(wd, wq.data(), huge); }, "ld");
  qj_weights_desc d = wd;
  d.layout = QJ_LAYOUT_NK;
  check("qj_weights_pack (NK) with ld=INT64_MAX/2", [&] { return pack(d, wq.data(), huge); }, "ld");
  std::vector<float> wf(k * n, 0.5f);
  qj_weights_desc q = wd;
  q.scales = nullptr;
  q.zero_points = nullptr;
  check("qj_weights_quantize_pack with ld=INT64_MAX/2", [&] {
    qj_weights out = nullptr;
    qj_status st = qj_weights_quantize_pack(&q, wf.data(), huge, &out);
    qj_weights_destroy(out);
    return st;
  }, "ld");
}

// --- Serialization entry points (the image checks are in weights_serialize_test) -----------------

TEST_F(Misuse, SerializeNullAndShortBuffers) {
  EXPECT_EQ(qj_weights_serialized_size(nullptr), 0u);
  const size_t need = qj_weights_serialized_size(w);
  ASSERT_GT(need, 0u);
  std::vector<uint8_t> buf(need, 0x77);
  const std::vector<uint8_t> buf0 = buf;
  EXPECT_FAIL(qj_weights_serialize(nullptr, buf.data(), need), QJ_ERR_INVALID_ARGUMENT, "w", "NULL");
  EXPECT_FAIL(qj_weights_serialize(w, nullptr, need), QJ_ERR_INVALID_ARGUMENT, "buf", "NULL");
  for (size_t sz : {size_t{0}, size_t{1}, need - 1})
    EXPECT_FAIL(qj_weights_serialize(w, buf.data(), sz), QJ_ERR_INVALID_ARGUMENT, "size", "size=" + str(sz));
  EXPECT_EQ(buf, buf0) << "a failed serialize wrote into buf";
  qj_weights out = sentinel_w();
  EXPECT_FAIL(qj_weights_deserialize(nullptr, need, &out), QJ_ERR_INVALID_ARGUMENT, "buf", "NULL");
  EXPECT_FAIL(qj_weights_deserialize(buf.data(), need, nullptr), QJ_ERR_INVALID_ARGUMENT, "out", "NULL");
  EXPECT_EQ(out, sentinel_w());
  EXPECT_FAIL(qj_weights_info(nullptr, nullptr, nullptr, nullptr, nullptr), QJ_ERR_INVALID_ARGUMENT, "w", "NULL");
}

// --- The ISA cap --------------------------------------------------------------------------------

TEST(MisuseIsa, AboveCpuAndUnknown) {
  const qj_isa cpu = qj_cpu_isa();
  const qj_isa before = qj_max_isa();
  if (cpu < QJ_ISA_AVX512_VNNI) {
    const qj_isa above = static_cast<qj_isa>(cpu + 1);
    EXPECT_FAIL(qj_set_max_isa(above), QJ_ERR_ISA_UNAVAILABLE, "isa", qj_isa_name(above));
  }
  // On a CPU at the top tier the only ISA "above" it is past the enum: an unknown value.
  for (int v : {4, 5, -1, 1000})
    EXPECT_FAIL(qj_set_max_isa(static_cast<qj_isa>(v)), QJ_ERR_INVALID_ARGUMENT, "isa", "isa=" + str(v));
  EXPECT_EQ(qj_max_isa(), before) << "a rejected cap changed the cap";
}

// Plans made under each cap report the tier they were packed for; the cap never silently rises.
TEST(MisuseIsa, CapIsHonouredByPacking) {
  for (qj_isa isa : qjt::supported_isas()) {
    qjt::IsaCap cap(isa);
    std::vector<int8_t> q(8 * 3, 1);
    float s = 1.0f;
    qj_weights_desc d{};
    d.dtype = QJ_S8;
    d.k = 8;
    d.n = 3;
    d.granularity = QJ_GRAN_TENSOR;
    d.scales = &s;
    qj_weights w = nullptr;
    ASSERT_EQ(qj_weights_pack(&d, q.data(), 3, &w), QJ_OK);
    qj_isa got = QJ_ISA_SCALAR;
    EXPECT_EQ(qj_weights_info(w, nullptr, nullptr, nullptr, &got), QJ_OK);
    EXPECT_EQ(got, isa);
    qj_weights_destroy(w);
  }
}

}  // namespace
