// Internal: AVX2's registers for the stored arithmetic's products (detail/lanes.hpp): BF16 pairs
// widened to float32 exactly (a shift) and multiplied by fused multiply-adds, the second entry
// first (a product of two BF16 numbers is exact in float32: one rounding each, as the portable
// lanes' sums). A specialization of VectorLanes with the members of the products file's portable
// lanes. Included by detail/lanes.hpp where Eigen vectorizes with AVX2 and FMA (not AVX-512).
#pragma once

#include <cstdint>
#include <cstring>

#include <immintrin.h>

#include <Eigen/Core>

#include "headwise/types.hpp"

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

}  // namespace headwise::detail
