// Serialized packed weights (qj_weights_serialize / qj_weights_deserialize).
//
// The image format is part of the ABI (src/ops/serialize.cpp): a 128-byte header (magic
// "QJWEIGHT", u32 version, u32 header bytes, u64 total bytes, ...), the payload, and a trailing
// FNV-1a-64 of every preceding byte. This test has its own FNV-1a and header offsets so it can
// forge images that differ from a valid one in exactly one respect (the version, a field) with a
// correct checksum. Checked: round trips give the same GEMM output as the original weights and as
// src/ref; every truncation, padding and sampled bit flip is rejected with QJ_ERR_CORRUPT_DATA
// (a flip in the version field with QJ_ERR_VERSION_MISMATCH) and leaves *out untouched; a wrong
// version with a valid checksum is QJ_ERR_VERSION_MISMATCH (versions 1 and 2, before the MX
// panels got their scale lines and E2M3 its 6-bit codes, are still read for the weight types
// they did not change; S8 images before version 5 are read in their s16-pair layout below the
// AVX-512 tiers and repacked); an image packed at another ISA tier is
// repacked for the current one and computes the same results.
#include <gtest/gtest.h>
#include <quantjit/quantjit.h>

#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "src/ops/int_weights.h"
#include "src/ref/gemm_ref.h"
#include "test/test_util.h"

namespace {

// Header offsets (src/ops/serialize.cpp, struct Header; little-endian, no padding).
constexpr size_t kOffVersion = 8, kOffHeaderBytes = 12, kOffTotalBytes = 16, kOffDtype = 24,
                 kOffGran = 28, kOffIsa = 32, kOffNr = 36, kOffKg = 40, kOffK = 48, kOffN = 56,
                 kOffGroup = 64, kOffKp = 72, kOffPanels = 80, kOffNScales = 88, kOffNZps = 96,
                 kOffPackedBytes = 104, kOffNColsum = 112, kHeaderBytes = 128;

// FNV-1a-64: offset basis 14695981039346656037 (0xcbf29ce484222325), prime 0x100000001b3.
uint64_t fnv1a64(const uint8_t* p, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

void reseal(std::vector<uint8_t>& img) {
  uint64_t h = fnv1a64(img.data(), img.size() - 8);
  std::memcpy(img.data() + img.size() - 8, &h, 8);
}

template <class T>
T get(const std::vector<uint8_t>& img, size_t off) {
  T v;
  std::memcpy(&v, img.data() + off, sizeof v);
  return v;
}
template <class T>
void put(std::vector<uint8_t>& img, size_t off, T v) {
  std::memcpy(img.data() + off, &v, sizeof v);
}

struct Config {
  int64_t k, n;
  qj_granularity gran;
  int64_t group;
  bool zps;
  qj_layout layout;
};

// Raw weights plus the reference view of them.
struct Raw {
  Config cfg;
  std::vector<int8_t> q;  // K x N
  std::vector<float> scales;
  std::vector<int32_t> zps;
  qj::ref::IntWeights ref() const {
    qj::ref::IntWeights r;
    r.k = cfg.k;
    r.n = cfg.n;
    r.gran = cfg.gran == QJ_GRAN_GROUP && cfg.group == cfg.k ? QJ_GRAN_CHANNEL : cfg.gran;
    r.group_size = r.gran == QJ_GRAN_GROUP ? cfg.group : 0;
    r.scales = scales;
    if (cfg.zps) r.zero_points = zps;
    r.q.assign(q.begin(), q.end());
    return r;
  }
};

Raw make_raw(const Config& c, uint32_t seed) {
  Raw r;
  r.cfg = c;
  r.q = qjt::random_ints<int8_t>(c.k * c.n, -128, 127, seed);
  const int64_t count = c.gran == QJ_GRAN_TENSOR ? 1 : c.gran == QJ_GRAN_CHANNEL ? c.n : (c.k / c.group) * c.n;
  r.scales = qjt::random_floats(count, 0.001f, 0.03f, seed + 1);
  r.zps = qjt::random_ints<int32_t>(count, -128, 127, seed + 2);
  return r;
}

qj_weights pack(const Raw& r) {
  const Config& c = r.cfg;
  qj_weights_desc d{};
  d.dtype = QJ_S8;
  d.k = c.k;
  d.n = c.n;
  d.layout = c.layout;
  d.granularity = c.gran;
  d.group_size = c.group;
  d.scales = r.scales.data();
  d.zero_points = c.zps ? r.zps.data() : nullptr;
  std::vector<int8_t> data(c.k * c.n);
  for (int64_t kk = 0; kk < c.k; ++kk)
    for (int64_t j = 0; j < c.n; ++j)
      (c.layout == QJ_LAYOUT_KN ? data[kk * c.n + j] : data[j * c.k + kk]) = r.q[kk * c.n + j];
  qj_weights w = nullptr;
  EXPECT_EQ(qj_weights_pack(&d, data.data(), c.layout == QJ_LAYOUT_KN ? c.n : c.k, &w), QJ_OK) << qj_last_error();
  return w;
}

std::vector<uint8_t> serialize(qj_weights w) {
  std::vector<uint8_t> img(qj_weights_serialized_size(w));
  EXPECT_EQ(qj_weights_serialize(w, img.data(), img.size()), QJ_OK) << qj_last_error();
  return img;
}

// One GEMM with the weights: s8 A with a zero point, f32 output with bias (exercises the scales,
// zero points and column sums of the image). Returns the output bytes, or an empty vector.
struct Problem {
  int64_t m = 7;
  std::vector<int8_t> a;
  std::vector<float> bias;
  qj_gemm_desc desc(int64_t) const {
    qj_gemm_desc d{};
    d.a_type = QJ_S8;
    d.a_scale = 0.07f;
    d.a_zero_point = -5;
    d.c_type = QJ_F32;
    d.bias = bias.data();
    return d;
  }
};

Problem make_problem(int64_t k, int64_t n, uint32_t seed) {
  Problem p;
  p.a = qjt::random_ints<int8_t>(p.m * k, -128, 127, seed);
  p.bias = qjt::random_floats(n, -3.0f, 3.0f, seed + 1);
  return p;
}

std::vector<uint8_t> run(qj_weights w, const Problem& pr, int64_t k, int64_t n) {
  qj_gemm_desc d = pr.desc(n);
  qj_gemm_plan p = nullptr;
  if (qj_gemm_plan_create(&d, w, &p) != QJ_OK) {
    ADD_FAILURE() << "plan: " << qj_last_error();
    return {};
  }
  std::vector<uint8_t> c(pr.m * n * 4, 0);
  EXPECT_EQ(qj_gemm_run(p, pr.m, pr.a.data(), k, c.data(), n, nullptr), QJ_OK) << qj_last_error();
  qj_gemm_plan_destroy(p);
  return c;
}

std::vector<uint8_t> run_ref(const Raw& r, const Problem& pr) {
  qj_gemm_desc d = pr.desc(r.cfg.n);
  std::vector<uint8_t> c(pr.m * r.cfg.n * 4, 0);
  qj::ref::gemm_int(d, r.ref(), pr.m, pr.a.data(), r.cfg.k, c.data(), r.cfg.n);
  return c;
}

const Config kConfigs[] = {
    {64, 37, QJ_GRAN_CHANNEL, 0, true, QJ_LAYOUT_KN},  {70, 16, QJ_GRAN_TENSOR, 0, false, QJ_LAYOUT_NK},
    {128, 50, QJ_GRAN_GROUP, 32, true, QJ_LAYOUT_KN},  {96, 5, QJ_GRAN_GROUP, 96, true, QJ_LAYOUT_NK},
    {1, 1, QJ_GRAN_CHANNEL, 0, false, QJ_LAYOUT_KN},   {513, 100, QJ_GRAN_CHANNEL, 0, true, QJ_LAYOUT_NK},
    {256, 9, QJ_GRAN_GROUP, 128, false, QJ_LAYOUT_KN},
};

std::string cfg_str(const Config& c) {
  return "k=" + std::to_string(c.k) + " n=" + std::to_string(c.n) + " gran=" + std::to_string(c.gran) +
         " group=" + std::to_string(c.group) + " zps=" + std::to_string(c.zps) + " isa=" + qj_isa_name(qj_max_isa());
}

qj_weights sentinel() { return reinterpret_cast<qj_weights>(uintptr_t{0x5a5a}); }

// Deserializes; on failure checks that *out was left alone. Destroys any result.
qj_status try_load(const void* buf, size_t size) {
  qj_weights out = sentinel();
  qj_status st = qj_weights_deserialize(buf, size, &out);
  if (st == QJ_OK)
    qj_weights_destroy(out);
  else
    EXPECT_EQ(out, sentinel()) << "deserialize wrote *out on failure (" << qj_status_name(st) << ")";
  return st;
}

TEST(WeightsSerialize, RoundTripSameResults) {
  uint32_t seed = 10;
  for (qj_isa isa : qjt::supported_isas()) {
    qjt::IsaCap cap(isa);
    for (const Config& c : kConfigs) {
      Raw r = make_raw(c, ++seed);
      qj_weights w = pack(r);
      ASSERT_NE(w, nullptr);
      std::vector<uint8_t> img = serialize(w);
      // The header says what it holds.
      EXPECT_EQ(0, std::memcmp(img.data(), "QJWEIGHT", 8));
      EXPECT_EQ(get<uint32_t>(img, kOffVersion), 5u);
      EXPECT_EQ(get<uint32_t>(img, kOffHeaderBytes), kHeaderBytes);
      EXPECT_EQ(get<uint64_t>(img, kOffTotalBytes), img.size());
      EXPECT_EQ(get<int64_t>(img, kOffK), c.k);
      EXPECT_EQ(get<int64_t>(img, kOffN), c.n);
      EXPECT_EQ(get<int32_t>(img, kOffIsa), static_cast<int32_t>(isa));

      qj_weights w2 = nullptr;
      ASSERT_EQ(qj_weights_deserialize(img.data(), img.size(), &w2), QJ_OK) << qj_last_error();
      qj_dtype dt;
      int64_t k2, n2;
      qj_isa isa2;
      ASSERT_EQ(qj_weights_info(w2, &dt, &k2, &n2, &isa2), QJ_OK);
      EXPECT_EQ(dt, QJ_S8);
      EXPECT_EQ(k2, c.k);
      EXPECT_EQ(n2, c.n);
      EXPECT_EQ(isa2, isa);
      // Same image again (deterministic format), and a larger buffer is fine: only the image is
      // written.
      std::vector<uint8_t> big(img.size() + 32, 0xee);
      ASSERT_EQ(qj_weights_serialize(w2, big.data(), big.size()), QJ_OK) << qj_last_error();
      EXPECT_EQ(0, std::memcmp(big.data(), img.data(), img.size())) << cfg_str(c);
      for (size_t i = img.size(); i < big.size(); ++i) ASSERT_EQ(big[i], 0xee) << "wrote past the image";

      Problem pr = make_problem(c.k, c.n, seed + 100);
      std::vector<uint8_t> want = run_ref(r, pr), got1 = run(w, pr, c.k, c.n);
      qj_weights_destroy(w);  // the deserialized copy must not depend on the original
      std::vector<uint8_t> got2 = run(w2, pr, c.k, c.n);
      EXPECT_EQ(got1, want) << "original weights vs src/ref: " << cfg_str(c);
      EXPECT_EQ(got2, want) << "deserialized weights vs src/ref: " << cfg_str(c);
      qj_weights_destroy(w2);
    }
  }
}

// The trailer is FNV-1a-64 of every preceding byte, as src/ops/serialize.cpp documents (the format
// is ABI: another implementation must be able to check an image).
TEST(WeightsSerialize, ChecksumIsFnv1a64) {
  for (const Config& c : kConfigs) {
    Raw r = make_raw(c, 70);
    qj_weights w = pack(r);
    std::vector<uint8_t> img = serialize(w);
    qj_weights_destroy(w);
    const uint64_t stored = get<uint64_t>(img, img.size() - 8);
    EXPECT_EQ(stored, fnv1a64(img.data(), img.size() - 8)) << cfg_str(c);
  }
}

TEST(WeightsSerialize, QuantizedWeightsRoundTrip) {
  for (qj_isa isa : qjt::supported_isas()) {
    qjt::IsaCap cap(isa);
    const int64_t k = 128, n = 33;
    std::vector<float> wf = qjt::random_floats(k * n, -1.0f, 1.0f, 3);
    for (qj_granularity g : {QJ_GRAN_TENSOR, QJ_GRAN_CHANNEL, QJ_GRAN_GROUP}) {
      qj_weights_desc d{};
      d.dtype = QJ_S8;
      d.k = k;
      d.n = n;
      d.granularity = g;
      d.group_size = 64;
      qj_weights w = nullptr;
      ASSERT_EQ(qj_weights_quantize_pack(&d, wf.data(), n, &w), QJ_OK) << qj_last_error();
      std::vector<uint8_t> img = serialize(w);
      qj_weights w2 = nullptr;
      ASSERT_EQ(qj_weights_deserialize(img.data(), img.size(), &w2), QJ_OK) << qj_last_error();
      Problem pr = make_problem(k, n, 5);
      EXPECT_EQ(run(w, pr, k, n), run(w2, pr, k, n)) << "gran=" << g << " isa=" << qj_isa_name(isa);
      qj_weights_destroy(w);
      qj_weights_destroy(w2);
    }
  }
}

TEST(WeightsSerialize, TruncatedAndPaddedBuffersAreCorrupt) {
  for (const Config& c : {kConfigs[4], kConfigs[0], kConfigs[5]}) {
    Raw r = make_raw(c, 20);
    qj_weights w = pack(r);
    std::vector<uint8_t> img = serialize(w);
    qj_weights_destroy(w);
    const size_t size = img.size();
    // Every length up to 300 bytes short (all of them for small images), and the short prefixes.
    for (size_t len = size > 300 ? size - 300 : 0; len < size; ++len)
      ASSERT_EQ(try_load(img.data(), len), QJ_ERR_CORRUPT_DATA) << "length " << len << " of " << size;
    for (size_t len = 0; len < std::min<size_t>(size, 200); ++len)
      ASSERT_EQ(try_load(img.data(), len), QJ_ERR_CORRUPT_DATA) << "length " << len << " of " << size;
    // A truncated buffer whose recorded size was patched (and resealed) to match.
    std::vector<uint8_t> cut(img.begin(), img.end() - 9);
    put<uint64_t>(cut, kOffTotalBytes, cut.size());
    reseal(cut);
    EXPECT_EQ(try_load(cut.data(), cut.size()), QJ_ERR_CORRUPT_DATA);
    // Trailing bytes.
    std::vector<uint8_t> longer = img;
    for (int extra = 1; extra <= 16; ++extra) {
      longer.push_back(0);
      EXPECT_EQ(try_load(longer.data(), longer.size()), QJ_ERR_CORRUPT_DATA) << "+" << extra << " bytes";
    }
    EXPECT_EQ(try_load(img.data(), size), QJ_OK) << qj_last_error();
  }
}

TEST(WeightsSerialize, FlippedBitsAreDetected) {
  Raw r = make_raw(kConfigs[2], 30);  // group scales, zero points: every section non-empty
  qj_weights w = pack(r);
  std::vector<uint8_t> img = serialize(w);
  qj_weights_destroy(w);
  const size_t bits = img.size() * 8;
  std::vector<size_t> positions;
  for (size_t b = 0; b < kHeaderBytes * 8; ++b) positions.push_back(b);  // the whole header
  for (size_t b = bits - 64; b < bits; ++b) positions.push_back(b);      // the checksum
  std::mt19937 g(7);
  for (int i = 0; i < 3000; ++i) positions.push_back(std::uniform_int_distribution<size_t>(0, bits - 1)(g));
  for (size_t b : positions) {
    std::vector<uint8_t> bad = img;
    bad[b / 8] ^= static_cast<uint8_t>(1u << (b % 8));
    const size_t byte = b / 8;
    // A flip to a version this library still reads (1 to 4 from 5) is caught by the checksum.
    const uint32_t v = get<uint32_t>(bad, kOffVersion);
    const qj_status want = (byte >= kOffVersion && byte < kOffVersion + 4 && (v < 1 || v > 5))
                               ? QJ_ERR_VERSION_MISMATCH
                               : QJ_ERR_CORRUPT_DATA;
    ASSERT_EQ(try_load(bad.data(), bad.size()), want) << "bit " << b << " (byte " << byte << ") of " << bits;
  }
  // A few random multi-byte corruptions of the payload.
  for (int i = 0; i < 200; ++i) {
    std::vector<uint8_t> bad = img;
    size_t at = std::uniform_int_distribution<size_t>(kHeaderBytes, img.size() - 9)(g);
    size_t len = std::min<size_t>(img.size() - 8 - at, 1 + i % 16);
    for (size_t j = 0; j < len; ++j) bad[at + j] = static_cast<uint8_t>(~bad[at + j]);
    ASSERT_EQ(try_load(bad.data(), bad.size()), QJ_ERR_CORRUPT_DATA) << "bytes " << at << "+" << len;
  }
}

TEST(WeightsSerialize, WrongVersionWithValidChecksum) {
  Raw r = make_raw(kConfigs[0], 40);
  qj_weights w = pack(r);
  std::vector<uint8_t> img = serialize(w);
  qj_weights_destroy(w);
  // Control: resealing an unchanged image keeps it valid (the test's checksum is the format's).
  std::vector<uint8_t> same = img;
  reseal(same);
  ASSERT_EQ(same, img);
  ASSERT_EQ(try_load(same.data(), same.size()), QJ_OK) << qj_last_error();
  ASSERT_EQ(get<uint32_t>(img, kOffVersion), 5u);
  for (uint32_t v : {0u, 6u, 0x100u, 0xffffffffu}) {
    std::vector<uint8_t> bad = img;
    put<uint32_t>(bad, kOffVersion, v);
    reseal(bad);
    EXPECT_EQ(try_load(bad.data(), bad.size()), QJ_ERR_VERSION_MISMATCH) << "version " << v;
    EXPECT_NE(std::string(qj_last_error()).find(std::to_string(v)), std::string::npos)
        << "message does not show the version: " << qj_last_error();
  }
}

// A 64 x 40 image of MX / BDR weights (qj_weights_quantize_pack), first read back as written,
// then relabelled as format version `version` and resealed; empty if packing failed.
std::vector<uint8_t> mx_image_of_version(qj_dtype t, uint32_t version) {
  const int64_t k = 64, n = 40;
  std::vector<float> wf(static_cast<size_t>(k * n));
  for (size_t i = 0; i < wf.size(); ++i) wf[i] = static_cast<float>(static_cast<int>(i % 13) - 6) * 0.25f;
  qj_weights_desc d{};
  d.dtype = t;
  d.k = k;
  d.n = n;
  d.layout = QJ_LAYOUT_NK;
  qj_weights mw = nullptr;
  EXPECT_EQ(qj_weights_quantize_pack(&d, wf.data(), k, &mw), QJ_OK) << qj_dtype_name(t) << ": " << qj_last_error();
  if (!mw) return {};
  std::vector<uint8_t> img = serialize(mw);
  qj_weights_destroy(mw);
  EXPECT_EQ(try_load(img.data(), img.size()), QJ_OK) << qj_dtype_name(t) << ": " << qj_last_error();
  put<uint32_t>(img, kOffVersion, version);
  reseal(img);
  return img;
}

// The image of S8 weights `r` as a library before version 5 wrote it, labelled `version`: below the
// AVX-512 tiers its panels held s16 pairs (per K pair, nr columns x 2 s16 of K), which version 5
// made bytes (kPair8, src/ops/int_weights.h). The pairs are built here from the raw weights by
// that documented layout, not by the library. Other tiers' images only get the label.
std::vector<uint8_t> old_s8_image(const Raw& r, std::vector<uint8_t> img, uint32_t version) {
  const int32_t isa = get<int32_t>(img, kOffIsa), nr = get<int32_t>(img, kOffNr);
  const int64_t kp = get<int64_t>(img, kOffKp), panels = get<int64_t>(img, kOffPanels);
  if (isa < QJ_ISA_AVX512) {
    const uint64_t bytes = get<uint64_t>(img, kOffPackedBytes);
    EXPECT_EQ(bytes, static_cast<uint64_t>(panels * kp * nr)) << "one byte a weight at " << isa;
    const size_t at = kHeaderBytes + 4 * (get<uint64_t>(img, kOffNScales) + get<uint64_t>(img, kOffNZps));
    std::vector<uint8_t> pairs(static_cast<size_t>(panels * kp * nr * 2), 0);
    for (int64_t p = 0; p < panels; ++p)
      for (int64_t kk = 0; kk < r.cfg.k; ++kk)
        for (int64_t c = 0; c < nr && p * nr + c < r.cfg.n; ++c) {
          const int16_t v = r.q[kk * r.cfg.n + p * nr + c];
          std::memcpy(&pairs[((p * kp / 2 + kk / 2) * nr + c) * 4 + (kk % 2) * 2], &v, 2);
        }
    img.erase(img.begin() + at, img.begin() + at + bytes);
    img.insert(img.begin() + at, pairs.begin(), pairs.end());
    put<uint64_t>(img, kOffPackedBytes, pairs.size());
    put<uint64_t>(img, kOffTotalBytes, img.size());
  }
  put<uint32_t>(img, kOffVersion, version);
  reseal(img);
  return img;
}

// Version 5 changed only the S8 panels below the AVX-512 tiers (bytes, not s16 pairs): images of
// versions 1 to 4 of those are read in their pairs layout and repacked, with the same results; a
// version 5 image relabelled as older (bytes where pairs are due) is corrupt, not misread.
TEST(WeightsSerialize, OlderImagesOfS8WeightsAreRepacked) {
  uint32_t seed = 70;
  for (qj_isa isa : qjt::supported_isas()) {
    qjt::IsaCap cap(isa);
    for (const Config& c : kConfigs) {
      Raw r = make_raw(c, ++seed);
      Problem pr = make_problem(c.k, c.n, seed + 7);
      const std::vector<uint8_t> want = run_ref(r, pr);
      qj_weights w = pack(r);
      const std::vector<uint8_t> img = serialize(w);
      qj_weights_destroy(w);
      for (uint32_t v : {1u, 4u}) {
        const std::vector<uint8_t> old = old_s8_image(r, img, v);
        w = nullptr;
        ASSERT_EQ(qj_weights_deserialize(old.data(), old.size(), &w), QJ_OK) << cfg_str(c) << ": " << qj_last_error();
        EXPECT_EQ(run(w, pr, c.k, c.n), want) << "version " << v << " " << cfg_str(c);
        qj_weights_destroy(w);
        if (isa >= QJ_ISA_AVX512) continue;
        std::vector<uint8_t> relabelled = img;
        put<uint32_t>(relabelled, kOffVersion, v);
        reseal(relabelled);
        EXPECT_EQ(try_load(relabelled.data(), relabelled.size()), QJ_ERR_CORRUPT_DATA) << cfg_str(c);
      }
    }
  }
}

// Version 2 changed only the MX / BDR panels (their scale bytes moved into scale lines ahead of
// the groups): a version 1 image of other weights is read as before, one of MX weights is refused.
TEST(WeightsSerialize, Version1ImagesOfNonMxWeightsOnly) {
  Raw r = make_raw(kConfigs[0], 41);
  qj_weights w = pack(r);
  std::vector<uint8_t> img = old_s8_image(r, serialize(w), 1u);
  qj_weights_destroy(w);
  EXPECT_EQ(try_load(img.data(), img.size()), QJ_OK) << qj_last_error();

  for (qj_dtype t : {QJ_MXFP4_E2M1, QJ_MXINT8, QJ_MXFP8_E4M3, QJ_BDR_MX6}) {
    std::vector<uint8_t> mimg = mx_image_of_version(t, 1u);
    ASSERT_FALSE(mimg.empty());
    EXPECT_EQ(try_load(mimg.data(), mimg.size()), QJ_ERR_VERSION_MISMATCH) << qj_dtype_name(t);
    EXPECT_NE(std::string(qj_last_error()).find("pack them again"), std::string::npos) << qj_last_error();
  }
}

// Version 4 changed only the MXFP6 E3M2 and BDR MX6 panels (6 bits per code on the VNNI tier):
// version 3 images of those are refused, those of the other MX types are read as before.
TEST(WeightsSerialize, Version3ImagesOfMxfp6E3m2AndMx6Refused) {
  for (qj_dtype t : {QJ_MXFP6_E3M2, QJ_BDR_MX6, QJ_MXFP6_E2M3, QJ_BDR_MX9, QJ_BDR_MX4}) {
    std::vector<uint8_t> mimg = mx_image_of_version(t, 3u);
    ASSERT_FALSE(mimg.empty());
    if (t != QJ_MXFP6_E3M2 && t != QJ_BDR_MX6) {
      EXPECT_EQ(try_load(mimg.data(), mimg.size()), QJ_OK) << qj_dtype_name(t) << ": " << qj_last_error();
      continue;
    }
    EXPECT_EQ(try_load(mimg.data(), mimg.size()), QJ_ERR_VERSION_MISMATCH) << qj_dtype_name(t);
    EXPECT_NE(std::string(qj_last_error()).find("pack them again"), std::string::npos) << qj_last_error();
  }
}

// Version 3 changed only the MXFP6 E2M3 panels (6 bits per code on the VNNI tier): version 2
// images of E2M3 weights are refused, those of the other MX types (of that time) are read as
// before.
TEST(WeightsSerialize, Version2ImagesOfMxfp6E2m3Refused) {
  for (qj_dtype t : {QJ_MXFP6_E2M3, QJ_MXFP4_E2M1, QJ_BDR_MX9}) {
    std::vector<uint8_t> mimg = mx_image_of_version(t, 2u);
    ASSERT_FALSE(mimg.empty());
    if (t != QJ_MXFP6_E2M3) {
      EXPECT_EQ(try_load(mimg.data(), mimg.size()), QJ_OK) << qj_dtype_name(t) << ": " << qj_last_error();
      continue;
    }
    EXPECT_EQ(try_load(mimg.data(), mimg.size()), QJ_ERR_VERSION_MISMATCH);
    EXPECT_NE(std::string(qj_last_error()).find("pack them again"), std::string::npos) << qj_last_error();
  }
}

// A correctly sealed image whose fields do not describe a well-formed object (a buggy or hostile
// writer): rejected as corrupt, never trusted.
// Any scale qj_weights_pack accepts (finite, > 0) comes back from the image: the largest finite
// float and the smallest subnormal too.
TEST(WeightsSerialize, ExtremeScalesRoundTrip) {
  const int64_t k = 8, n = 3;
  std::vector<int8_t> b(k * n, 1);
  for (float s : {std::numeric_limits<float>::max(), 3.4e38f, std::numeric_limits<float>::denorm_min()}) {
    qj_weights_desc d{};
    d.dtype = QJ_S8;
    d.k = k;
    d.n = n;
    d.layout = QJ_LAYOUT_KN;
    d.granularity = QJ_GRAN_TENSOR;
    d.scales = &s;
    qj_weights w = nullptr;
    ASSERT_EQ(qj_weights_pack(&d, b.data(), n, &w), QJ_OK) << qj_last_error();
    std::vector<uint8_t> img = serialize(w);
    qj_weights_destroy(w);
    qj_weights w2 = nullptr;
    EXPECT_EQ(qj_weights_deserialize(img.data(), img.size(), &w2), QJ_OK) << s << ": " << qj_last_error();
    qj_weights_destroy(w2);
  }
}

TEST(WeightsSerialize, InconsistentFieldsWithValidChecksum) {
  Raw r = make_raw(kConfigs[2], 50);
  qj_weights w = pack(r);
  std::vector<uint8_t> img = serialize(w);
  qj_weights_destroy(w);
  struct Patch {
    const char* what;
    size_t off;
    int size;  // 4 or 8
    int64_t value;
  };
  const int64_t k = r.cfg.k, n = r.cfg.n;
  const Patch patches[] = {
      {"header_bytes", kOffHeaderBytes, 4, 64},
      {"dtype u8", kOffDtype, 4, QJ_U8},
      {"dtype s4", kOffDtype, 4, QJ_S4},
      {"granularity row", kOffGran, 4, QJ_GRAN_ROW},
      {"granularity 77", kOffGran, 4, 77},
      {"isa 9", kOffIsa, 4, 9},
      {"isa -1", kOffIsa, 4, -1},
      {"nr 7", kOffNr, 4, 7},
      {"kg 3", kOffKg, 4, 3},
      {"k + 1", kOffK, 8, k + 1},
      {"k 0", kOffK, 8, 0},
      {"k -128", kOffK, 8, -128},
      {"n + 1", kOffN, 8, n + 1},
      {"n huge", kOffN, 8, int64_t{1} << 40},
      {"group 48", kOffGroup, 8, 48},
      {"group 0", kOffGroup, 8, 0},
      {"kp + 4", kOffKp, 8, 0},  // value filled below
      {"n_panels + 1", kOffPanels, 8, 0},
      {"n_scales - 1", kOffNScales, 8, 0},
      {"n_zps 1", kOffNZps, 8, 1},
      {"packed_bytes + 4", kOffPackedBytes, 8, 0},
      {"n_colsum huge", kOffNColsum, 8, int64_t{1} << 60},
  };
  for (Patch p : patches) {
    std::vector<uint8_t> bad = img;
    int64_t v = p.value;
    if (p.off == kOffKp) v = get<int64_t>(img, kOffKp) + 4;
    if (p.off == kOffPanels) v = get<int64_t>(img, kOffPanels) + 1;
    if (p.off == kOffNScales) v = static_cast<int64_t>(get<uint64_t>(img, kOffNScales)) - 1;
    if (p.off == kOffPackedBytes) v = static_cast<int64_t>(get<uint64_t>(img, kOffPackedBytes)) + 4;
    if (p.size == 4)
      put<int32_t>(bad, p.off, static_cast<int32_t>(v));
    else
      put<int64_t>(bad, p.off, v);
    reseal(bad);
    EXPECT_EQ(try_load(bad.data(), bad.size()), QJ_ERR_CORRUPT_DATA) << p.what;
  }
  // Bad scale values inside the payload (scales follow the header).
  for (float s : {0.0f, -1.0f, std::nanf(""), INFINITY}) {
    std::vector<uint8_t> bad = img;
    put<float>(bad, kHeaderBytes + 4 * 3, s);
    reseal(bad);
    EXPECT_EQ(try_load(bad.data(), bad.size()), QJ_ERR_CORRUPT_DATA) << "scale " << s;
  }
  // Another magic.
  std::vector<uint8_t> bad = img;
  std::memcpy(bad.data(), "QJWEIGHS", 8);
  reseal(bad);
  EXPECT_EQ(try_load(bad.data(), bad.size()), QJ_ERR_CORRUPT_DATA) << "magic";
}

// A header-only image whose counts agree with each other but not with its size: rejected as
// corrupt before anything is allocated from those counts (2^60 zero points were an attempted
// 2^62-byte allocation, QJ_ERR_OUT_OF_MEMORY; 2^28 of them a GiB zero-filled first).
TEST(WeightsSerialize, HugeConsistentCountsWithoutPayload) {
  struct Case {
    int64_t k, n;
    qj_granularity gran;
    int64_t group;
    uint64_t count;
  };
  for (Case c : {Case{1024, int64_t{1} << 28, QJ_GRAN_CHANNEL, 0, uint64_t{1} << 28},
                 Case{int64_t{1} << 31, int64_t{1} << 31, QJ_GRAN_GROUP, 4, uint64_t{1} << 60}}) {
    std::vector<uint8_t> img(kHeaderBytes + 8, 0);
    std::memcpy(img.data(), "QJWEIGHT", 8);
    put<uint32_t>(img, kOffVersion, 3u);
    put<uint32_t>(img, kOffHeaderBytes, static_cast<uint32_t>(kHeaderBytes));
    put<uint64_t>(img, kOffTotalBytes, img.size());
    put<int32_t>(img, kOffDtype, QJ_S8);
    put<int32_t>(img, kOffGran, c.gran);
    put<int32_t>(img, kOffIsa, qj_max_isa());
    put<int64_t>(img, kOffK, c.k);
    put<int64_t>(img, kOffN, c.n);
    put<int64_t>(img, kOffGroup, c.group);
    put<uint64_t>(img, kOffNScales, c.count);
    put<uint64_t>(img, kOffNZps, c.count);
    put<uint64_t>(img, kOffNColsum, c.count);
    reseal(img);
    EXPECT_EQ(try_load(img.data(), img.size()), QJ_ERR_CORRUPT_DATA) << "n=" << c.n << ": " << qj_last_error();
  }
}

// An image packed at one tier loads at every other tier: repacked for the current one (the info
// reports the current tier), never misread, same results.
TEST(WeightsSerialize, ImagesFromAnotherIsaTierAreRepacked) {
  uint32_t seed = 60;
  for (const Config& c : kConfigs) {
    Raw r = make_raw(c, ++seed);
    Problem pr = make_problem(c.k, c.n, seed + 7);
    const std::vector<uint8_t> want = run_ref(r, pr);
    for (qj_isa from : qjt::supported_isas()) {
      std::vector<uint8_t> img;
      {
        qjt::IsaCap cap(from);
        qj_weights w = pack(r);
        img = serialize(w);
        qj_weights_destroy(w);
      }
      for (qj_isa to : qjt::supported_isas()) {
        qjt::IsaCap cap(to);
        qj_weights w = nullptr;
        ASSERT_EQ(qj_weights_deserialize(img.data(), img.size(), &w), QJ_OK) << qj_last_error();
        qj_isa got = QJ_ISA_SCALAR;
        ASSERT_EQ(qj_weights_info(w, nullptr, nullptr, nullptr, &got), QJ_OK);
        // Tiers whose panel layout is identical (e.g. scalar and avx2) may keep the image's tier;
        // any other layout must have been repacked for this one.
        const bool same_layout = qj::weights_layout(from, QJ_S8) == qj::weights_layout(to, QJ_S8) &&
                                 qj::weights_kg(from) == qj::weights_kg(to) &&
                                 qj::weights_nr(from, c.n) == qj::weights_nr(to, c.n);
        if (same_layout)
          EXPECT_TRUE(got == to || got == from) << "from " << qj_isa_name(from) << " to " << qj_isa_name(to);
        else
          EXPECT_EQ(got, to) << "from " << qj_isa_name(from) << ": not repacked";
        EXPECT_EQ(run(w, pr, c.k, c.n), want)
            << "image packed at " << qj_isa_name(from) << " run at " << qj_isa_name(to) << ": " << cfg_str(c);
        // Re-serialized at this tier, it loads again with the same results.
        std::vector<uint8_t> img2 = serialize(w);
        qj_weights_destroy(w);
        w = nullptr;
        ASSERT_EQ(qj_weights_deserialize(img2.data(), img2.size(), &w), QJ_OK) << qj_last_error();
        EXPECT_EQ(run(w, pr, c.k, c.n), want);
        qj_weights_destroy(w);
      }
    }
  }
}

}  // namespace
