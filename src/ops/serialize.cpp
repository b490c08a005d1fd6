// Serialized packed weights: a versioned, checksummed image.
//
// Layout (little-endian, no padding between fields):
//   Header (below) | scales (f32 x n_scales) | zero points (s32 x n_zps) | packed panels
//   (packed_bytes) | column sums (s32 x n_colsum) | FNV-1a-64 of every preceding byte (u64)
// A reader rejects a wrong magic or a short/long buffer (QJ_ERR_CORRUPT_DATA), another format
// version (QJ_ERR_VERSION_MISMATCH), a checksum mismatch or inconsistent fields
// (QJ_ERR_CORRUPT_DATA). Panels packed for another ISA tier are repacked for the current one.
// Every weight type shares the format: the packed layout is implied by (dtype, isa) and checked
// against set_weights_geometry; float weights have no scales, zero points or column sums, and
// keep their pack-time clamp count in `clamped` (the former reserved2, 0 in older images).
#include <cmath>
#include <cstring>

#include "src/core/status.h"
#include "src/ops/int_weights.h"
#include "src/ops/mx16_weights.h"
#include "src/ops/mx_weights.h"

namespace qj {
namespace {

constexpr char kMagic[8] = {'Q', 'J', 'W', 'E', 'I', 'G', 'H', 'T'};
// 5: S8 panels below the AVX-512 tiers (AVX2, scalar) hold bytes, not s16 pairs (kPair8); older
//    such images are read in their pairs layout and repacked.
// 4: so do MXFP6 E3M2 and BDR MX6 panels (kMx16) of the VNNI tier.
// 3: MXFP6 E2M3 panels of the VNNI tier hold 6 bits per code (PackedWeights::fp6_dense).
// 2: MX / BDR panels hold their scale bytes in scale lines ahead of the groups (int_weights.h).
// 1: they held them after all the steps. Older images of the types a version did not change are
// read alike.
constexpr uint32_t kVersion = 5;

struct Header {
  char magic[8];
  uint32_t version;
  uint32_t header_bytes;
  uint64_t total_bytes;
  int32_t dtype, gran, isa, nr, kg, reserved;
  int64_t k, n, group_size, kp, n_panels;
  uint64_t n_scales, n_zps, packed_bytes, n_colsum;
  uint64_t clamped;
};
static_assert(sizeof(Header) == 128, "stable header size");

uint64_t fnv1a(const uint8_t* p, size_t n) {
  uint64_t h = 14695981039346656037ull;  // the FNV-1a-64 offset basis
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
  return h;
}

size_t payload_bytes(const Header& h) {
  return h.n_scales * 4 + h.n_zps * 4 + h.packed_bytes + h.n_colsum * 4;
}

}  // namespace

size_t weights_serialized_size(const PackedWeights& w) {
  return sizeof(Header) + w.scales.size() * 4 + w.zero_points.size() * 4 +
         w.n_panels * w.panel_bytes() + w.colsum.size() * 4 + 8;
}

qj_status weights_serialize(const PackedWeights& w, void* buf, size_t size) {
  size_t need = weights_serialized_size(w);
  if (size < need)
    return fail(QJ_ERR_INVALID_ARGUMENT, "size=%zu is smaller than the %zu bytes needed", size, need);
  Header h{};
  std::memcpy(h.magic, kMagic, 8);
  h.version = kVersion;
  h.header_bytes = sizeof(Header);
  h.total_bytes = need;
  h.dtype = w.dtype;
  h.gran = w.gran;
  h.isa = w.isa;
  h.nr = w.nr;
  h.kg = w.kg;
  h.k = w.k;
  h.n = w.n;
  h.group_size = w.group_size;
  h.kp = w.kp;
  h.n_panels = w.n_panels;
  h.n_scales = w.scales.size();
  h.n_zps = w.zero_points.size();
  h.packed_bytes = w.n_panels * w.panel_bytes();
  h.n_colsum = w.colsum.size();
  h.clamped = static_cast<uint64_t>(w.clamped);
  uint8_t* p = static_cast<uint8_t*>(buf);
  uint8_t* q = p;
  auto put = [&](const void* src, size_t n) {
    if (n) std::memcpy(q, src, n);
    q += n;
  };
  put(&h, sizeof h);
  put(w.scales.data(), h.n_scales * 4);
  put(w.zero_points.data(), h.n_zps * 4);
  put(w.packed.data(), h.packed_bytes);
  put(w.colsum.data(), h.n_colsum * 4);
  uint64_t sum = fnv1a(p, q - p);
  put(&sum, 8);
  return QJ_OK;
}

qj_status weights_deserialize(const void* buf, size_t size, qj_isa isa,
                              std::shared_ptr<PackedWeights>* out) {
  const uint8_t* p = static_cast<const uint8_t*>(buf);
  if (size < sizeof(Header) + 8)
    return fail(QJ_ERR_CORRUPT_DATA, "size=%zu is too small for a serialized weights image", size);
  Header h;
  std::memcpy(&h, p, sizeof h);
  if (std::memcmp(h.magic, kMagic, 8) != 0)
    return fail(QJ_ERR_CORRUPT_DATA, "buf does not start with the quantjit weights magic");
  if (h.version < 1 || h.version > kVersion)
    return fail(QJ_ERR_VERSION_MISMATCH, "serialized weights version %u, this library reads %u",
                h.version, kVersion);
  if (h.header_bytes != sizeof(Header) || h.total_bytes != size)
    return fail(QJ_ERR_CORRUPT_DATA, "size=%zu does not match the image's recorded size %llu "
                "(truncated or padded buffer)", size, (unsigned long long)h.total_bytes);
  uint64_t sum;
  std::memcpy(&sum, p + size - 8, 8);
  if (fnv1a(p, size - 8) != sum)
    return fail(QJ_ERR_CORRUPT_DATA, "checksum mismatch: the weights image is corrupted");
  // Fields must describe a well-formed object (the checksum does not prove that the writer was us).
  const qj_dtype dt = static_cast<qj_dtype>(h.dtype);
  const bool mx_type = mx_weights_type(dt);  // scales are E8M0 bytes inside the panels
  // their panels' last change
  const uint32_t layout_version = dt == QJ_MXFP6_E3M2 || dt == QJ_BDR_MX6 ? 4 : dt == QJ_MXFP6_E2M3 ? 3 : 2;
  if (mx_type && h.version < layout_version)
    return fail(QJ_ERR_VERSION_MISMATCH, "serialized %s weights of version %u: their panel layout "
                "changed in version %u; pack them again", qj_dtype_name(dt), h.version, layout_version);
  const bool int_type = dt == QJ_S8 || dt == QJ_S4 || dt == QJ_U4 || mx_type;
  const bool float_type = dt == QJ_F16 || dt == QJ_BF16;
  bool ok = (int_type || float_type) && h.k > 0 && h.n > 0 && h.k <= (int64_t(1) << 31) &&
            h.n <= (int64_t(1) << 31) && h.isa >= QJ_ISA_SCALAR && h.isa <= QJ_ISA_AVX512_VNNI &&
            (h.gran == QJ_GRAN_TENSOR || h.gran == QJ_GRAN_CHANNEL || h.gran == QJ_GRAN_GROUP);
  const int64_t mx_block = mx16_weights_type(dt) ? mx16_block(dt) : 32;
  if (ok && mx_type)
    ok = h.gran == QJ_GRAN_GROUP && h.group_size == mx_block && h.k % mx_block == 0 && h.n_zps == 0;
  else if (ok && h.gran == QJ_GRAN_GROUP)
    ok = int_type && h.group_size > 0 && h.group_size < h.k && h.k % h.group_size == 0 &&
         h.group_size % (dt == QJ_S8 ? 4 : 8) == 0;
  if (ok && float_type)
    ok = h.gran == QJ_GRAN_TENSOR && h.n_scales == 0 && h.n_zps == 0 && h.n_colsum == 0;
  if (ok && !float_type) ok = h.clamped == 0;
  const qj_isa img_isa = static_cast<qj_isa>(h.isa);
  auto w = std::make_shared<PackedWeights>();
  if (ok) {
    w->dtype = dt;
    w->k = h.k;
    w->n = h.n;
    w->gran = static_cast<qj_granularity>(h.gran);
    w->group_size = h.gran == QJ_GRAN_GROUP ? h.group_size : 0;
    const int64_t groups = w->groups();
    const uint64_t count = float_type || mx_type ? 0 : h.gran == QJ_GRAN_TENSOR ? 1 : groups * h.n;
    ok = h.n_scales == count && (h.n_zps == 0 || h.n_zps == count) &&
         h.n_colsum == (float_type || mx_fp8_weights_type(dt) ? 0 : static_cast<uint64_t>(groups * h.n));
    // Every section must fit in the buffer before any size is added up (no wrap-around) or
    // anything is allocated from the header's counts.
    ok = ok && h.n_scales <= size / 4 && h.n_zps <= size / 4 && h.n_colsum <= size / 4 && h.packed_bytes <= size;
    if (ok) {
      if (h.n_zps) w->zero_points.resize(1);  // geometry depends on their presence only
      set_weights_geometry(w.get(), img_isa);
      if (w->layout == PackLayout::kPair8 && h.version < 5) w->layout = PackLayout::kPair16;
      ok = h.nr == w->nr && h.kg == w->kg && h.kp == w->kp && h.n_panels == w->n_panels &&
           h.packed_bytes == static_cast<uint64_t>(w->n_panels) * w->panel_bytes() &&
           sizeof(Header) + payload_bytes(h) + 8 == size;
    }
  }
  if (!ok) return fail(QJ_ERR_CORRUPT_DATA, "the weights image has inconsistent fields");

  w->clamped = static_cast<int64_t>(h.clamped);
  const uint8_t* q = p + sizeof(Header);
  w->scales.resize(h.n_scales);
  if (h.n_scales) std::memcpy(w->scales.data(), q, h.n_scales * 4);  // float weights: none
  q += h.n_scales * 4;
  w->zero_points.resize(h.n_zps);
  if (h.n_zps) std::memcpy(w->zero_points.data(), q, h.n_zps * 4);
  q += h.n_zps * 4;
  if (!allocate_packed(w.get(), h.packed_bytes, false))
    return fail(QJ_ERR_OUT_OF_MEMORY, "cannot allocate %llu bytes", (unsigned long long)h.packed_bytes);
  std::memcpy(w->packed.data(), q, h.packed_bytes);
  q += h.packed_bytes;
  w->colsum.resize(h.n_colsum);
  if (h.n_colsum) std::memcpy(w->colsum.data(), q, h.n_colsum * 4);
  for (float s : w->scales)
    if (!std::isfinite(s) || !(s > 0.0f))  // as qj_weights_pack requires
      return fail(QJ_ERR_CORRUPT_DATA, "the weights image holds a scale that is not finite and > 0");
  for (int32_t z : w->zero_points) {
    const int lo = w->dtype == QJ_S8 ? -128 : (w->dtype == QJ_S4 ? -8 : 0);
    const int hi = w->dtype == QJ_S8 ? 127 : (w->dtype == QJ_S4 ? 7 : 15);
    if (z < lo || z > hi)
      return fail(QJ_ERR_CORRUPT_DATA, "the weights image holds a zero point outside the %s range",
                  qj_dtype_name(w->dtype));
  }
  if (!weights_match_isa(*w, isa))
    return repack_int_weights(*w, isa, out);  // another tier's layout: repack, never misread
  *out = std::move(w);
  return QJ_OK;
}

}  // namespace qj
