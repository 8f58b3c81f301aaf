// Internal: AVX2's registers for the stored arithmetic's products (detail/lanes.hpp): BF16 pairs
// widened to float32 exactly (a shift) and multiplied by fused multiply-adds, the second entry
// first (a product of two BF16 numbers is exact in float32: one rounding each, as the portable
// lanes' sums); int8 quads by AVX-VNNI's vpdpbusd, else by int16 products (pmaddwd, exact). Each
// a specialization of VectorLanes with the members of the products file's portable lanes.
// Included by detail/lanes.hpp where Eigen vectorizes with AVX2 and FMA (not AVX-512).
#pragma once

#include <cstdint>
#include <cstring>

#include <immintrin.h>

#include <Eigen/Core>

#include "headwise/detail/tile_product.hpp"
#include "headwise/types.hpp"

#if defined(__AVXVNNI__)
#define HEADWISE_INT8_VNNI 256
#endif

namespace headwise::detail {

template <class Stored, Index W>
struct VectorLanes;

/// 16 lanes of BF16 pairs (a pair row: two registers) and their float32 chains in two.
struct VectorBf16Lanes {
  struct Pairs { __m256i lo, hi; };
  struct Pair { __m256 second, first; };
  struct Floats { __m256 lo, hi; };
  static Floats zero_floats() { return {_mm256_setzero_ps(), _mm256_setzero_ps()}; }
  static Floats load_floats(const float* f) { return {_mm256_loadu_ps(f), _mm256_loadu_ps(f + 8)}; }
  static void store_floats(float* f, const Floats& a) { _mm256_storeu_ps(f, a.lo), _mm256_storeu_ps(f + 8, a.hi); }
  static Pairs load(const std::uint16_t* row) {
    return {_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row)), _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 16))};
  }
  static Pair broadcast(const std::uint16_t* pair) {
    std::int32_t bits;
    std::memcpy(&bits, pair, sizeof bits);
    const __m256i x = _mm256_set1_epi32(bits);
    return {second(x), first(x)};
  }
  static void dot(Floats& acc, const Pairs& b, const Pair& x) {
    acc.lo = _mm256_fmadd_ps(x.first, first(b.lo), _mm256_fmadd_ps(x.second, second(b.lo), acc.lo));
    acc.hi = _mm256_fmadd_ps(x.first, first(b.hi), _mm256_fmadd_ps(x.second, second(b.hi), acc.hi));
  }
  static __m256 second(__m256i pairs) { return _mm256_castsi256_ps(_mm256_and_si256(pairs, _mm256_set1_epi32(static_cast<int>(0xffff0000u)))); }
  static __m256 first(__m256i pairs) { return _mm256_castsi256_ps(_mm256_slli_epi32(pairs, 16)); }
};
template <>
struct VectorLanes<Eigen::bfloat16, 16> {
  using type = VectorBf16Lanes;
};

#if defined(HEADWISE_INT8_VNNI)
/// 16 lanes of int8 quads (a quad row: two registers) and their int32 sums in two parts
/// (AVX-VNNI's vpdpbusd, which multiplies unsigned bytes by signed ones: the keys' k + 128 by the
/// query, the weights by the values).
struct VectorInt8Lanes {
  static constexpr Index width = 16;
  static constexpr int parts = 2;
  static constexpr int tallest = static_cast<int>(TileShape<float>::rows);
  static constexpr bool scores_in_registers = true;
  static constexpr Index chains(Index rows) { return rows <= 2 ? 4 : rows <= 4 ? 2 : 1; }
  using Part = __m256i;
  using Loaded = __m256i;
  using Quad = __m256i;
  static Part zero() { return _mm256_setzero_si256(); }
  template <bool Keys>
  static Loaded load(const std::int8_t* row, int k) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 32 * k)); }
  template <bool Keys>
  static Quad broadcast(const std::uint8_t* quad) {
    std::int32_t bits;
    std::memcpy(&bits, quad, sizeof bits);
    return _mm256_set1_epi32(bits);
  }
  template <bool Keys>
  static Part dot(Part acc, Loaded b, Quad x) { return Keys ? _mm256_dpbusd_avx_epi32(acc, b, x) : _mm256_dpbusd_avx_epi32(acc, x, b); }
  static Part add(Part a, Part b) { return _mm256_add_epi32(a, b); }
  /// Part k of a row's sums out, and as the row's scores (int8_scores' formula and bits).
  static void store(int k, Part sums, std::int32_t* out) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 8 * k), sums); }
  static void store_scores(int k, Part sums, std::int32_t q_sum, float q_scale, const float* k_scales, float* s) {
    const __m256 dots = _mm256_cvtepi32_ps(_mm256_sub_epi32(sums, _mm256_set1_epi32(128 * q_sum)));
    _mm256_storeu_ps(s + 8 * k, _mm256_mul_ps(_mm256_mul_ps(dots, _mm256_loadu_ps(k_scales + 8 * k)), _mm256_set1_ps(q_scale)));
  }
  static void hold(Loaded&) {}  // (16 vector registers: the accumulators fill them)
};
#else
/// 16 lanes of int8 quads without VNNI: a quad row (64 bytes, four 16-byte parts of 4 lanes),
/// each part widened to 16 int16 and multiplied by the row's 4 bytes (widened, repeated) with
/// pmaddwd into 8 int32 (a lane's two pair sums), the pairs added at the end. Exact: |255 x 127 x
/// 2| fits int32, as every sum below 2^31 does.
struct VectorInt8Lanes {
  static constexpr Index width = 16;
  static constexpr int parts = 4;
  static constexpr int tallest = 1;
  static constexpr bool scores_in_registers = false;
  static constexpr Index chains(Index) { return 1; }
  using Part = __m256i;
  using Loaded = __m256i;
  using Quad = __m256i;
  static Part zero() { return _mm256_setzero_si256(); }
  template <bool Keys>  // (keys: the panel's k + 128, unsigned; values: int8)
  static Loaded load(const std::int8_t* row, int k) {
    const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 16 * k));
    return Keys ? _mm256_cvtepu8_epi16(bytes) : _mm256_cvtepi8_epi16(bytes);
  }
  template <bool Keys>  // (keys: the int8 query; values: the uint8 weights)
  static Quad broadcast(const std::uint8_t* x) {
    const auto widen = [](std::uint8_t b) { return Keys ? std::uint16_t(std::int16_t(static_cast<std::int8_t>(b))) : std::uint16_t(b); };
    const long long pattern = static_cast<long long>(std::uint64_t(widen(x[0])) | std::uint64_t(widen(x[1])) << 16 |
                                                     std::uint64_t(widen(x[2])) << 32 | std::uint64_t(widen(x[3])) << 48);
    return _mm256_set1_epi64x(pattern);
  }
  template <bool Keys>
  static Part dot(Part acc, Loaded b, Quad x) { return _mm256_add_epi32(acc, _mm256_madd_epi16(b, x)); }
  static Part add(Part a, Part b) { return _mm256_add_epi32(a, b); }
  /// Part k of a row's sums out: lanes 4k .. 4k + 3, each its two pair sums added.
  static void store(int k, Part sums, std::int32_t* out) {
    alignas(32) std::int32_t pairs[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(pairs), sums);
    for (int j = 0; j < 4; ++j) out[4 * k + j] = pairs[2 * j] + pairs[2 * j + 1];
  }
  static void hold(Loaded&) {}
};
#endif
template <>
struct VectorLanes<std::int8_t, 16> {
  using type = VectorInt8Lanes;
};

}  // namespace headwise::detail
