// The integer forms of the MX element codes that the decoders embed in the generated code (MX.md
// section 1): FP4 (E2M1) codes as 2v, MXFP6 E2M3 as 8v, MXFP6 E3M2 as 16v, indexed by the code
// (sign bit on top). They are computed here from the element formats' bit fields rather than
// taken from src/formats, so that codegen depends on asmjit and src/core only and the kernels
// share no table with the scalar reference the tests compare them with.
#pragma once
#include <array>
#include <cstdint>

namespace qj::cg {

// Value of the code times 2^(bias - 1 + mbits), an integer: subnormals (e = 0) are m, normals
// (2^mbits + m) << (e - 1).
constexpr int mx_code_int(int code, int ebits, int mbits) {
  const int e = (code >> mbits) & ((1 << ebits) - 1), m = code & ((1 << mbits) - 1);
  const int mag = e == 0 ? m : ((1 << mbits) + m) << (e - 1);
  return (code >> (ebits + mbits)) & 1 ? -mag : mag;
}

template <class T, int kEbits, int kMbits>
constexpr std::array<T, (2 << (kEbits + kMbits))> mx_code_ints() {
  std::array<T, (2 << (kEbits + kMbits))> t{};
  for (int c = 0; c < static_cast<int>(t.size()); ++c) t[c] = static_cast<T>(mx_code_int(c, kEbits, kMbits));
  return t;
}

inline constexpr auto kFp4Ints = mx_code_ints<int8_t, 2, 1>();    // 2v in [-12, 12]
inline constexpr auto kE2m3Ints = mx_code_ints<int8_t, 2, 3>();   // 8v in [-60, 60]
inline constexpr auto kE3m2Ints = mx_code_ints<int16_t, 3, 2>();  // 16v in [-448, 448]
// The formats' largest values (MX.md: 6, 7.5, 28) and a subnormal each.
static_assert(kFp4Ints[7] == 12 && kFp4Ints[15] == -12 && kFp4Ints[1] == 1);
static_assert(kE2m3Ints[31] == 60 && kE2m3Ints[63] == -60 && kE2m3Ints[7] == 7);
static_assert(kE3m2Ints[31] == 448 && kE3m2Ints[63] == -448 && kE3m2Ints[3] == 3);

}  // namespace qj::cg
