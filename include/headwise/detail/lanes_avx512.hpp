// Internal: AVX-512's registers for the stored arithmetic's products (detail/lanes.hpp): F16
// chains in AVX512-FP16's vfmadd231ph, BF16 pairs in AVX512-BF16's vdpbf16ps (else widened and
// multiplied by fused multiply-adds), and the rounding of floats to F16 (vcvtps2ph) and BF16
// (vcvtneps2bf16). Each is a specialization of VectorLanes or
// VectorRounding with the same members as the products file's portable lanes; the algorithms
// around them are in the products files. Included by detail/lanes.hpp where Eigen vectorizes
// with AVX-512.
#pragma once

#include <cstdint>
#include <cstring>

#include <immintrin.h>

#include <Eigen/Core>

#include "headwise/types.hpp"

#if defined(__AVX512FP16__) && defined(__AVX512VL__)
#define HEADWISE_F16_FMA 1
#endif
#if defined(__AVX512BF16__) && defined(__AVX512BW__)
#define HEADWISE_BF16_DOT 1
#endif

namespace headwise::detail {

template <class Stored, Index W>
struct VectorLanes;
template <class Stored>
struct VectorRounding;

#if defined(__AVX512BW__) && defined(__AVX512VL__)
/// x to F16 bits, 16 at a time (vcvtps2ph: to nearest, ties to even).
template <>
struct VectorRounding<Eigen::half> {
  static Index round(const float* x, Index n, std::uint16_t* out) {
    for (Index j = 0; j < n; j += 16) {
      const __mmask16 lanes = n - j >= 16 ? __mmask16(0xffff) : static_cast<__mmask16>((1u << (n - j)) - 1u);
      const __m256i h = _mm512_cvtps_ph(_mm512_maskz_loadu_ps(lanes, x + j), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      _mm256_mask_storeu_epi16(out + j, lanes, h);
    }
    return n;
  }
};
#endif

#if defined(HEADWISE_F16_FMA)
/// 32 lanes of F16 chains in one register, their float32 sums in two (AVX512-FP16).
struct VectorF16Lanes {
  struct Halves { __m512h v; };
  struct Floats { __m512 lo, hi; };
  static Halves zero() { return {_mm512_setzero_ph()}; }
  static Floats zero_floats() { return {_mm512_setzero_ps(), _mm512_setzero_ps()}; }
  static Halves load(const std::uint16_t* bits) { return {_mm512_loadu_ph(bits)}; }
  static Halves broadcast(std::uint16_t bits) { return {_mm512_castsi512_ph(_mm512_set1_epi16(static_cast<short>(bits)))}; }
  static void fma(const Halves& a, const Halves& b, Halves& acc) { acc.v = _mm512_fmadd_ph(a.v, b.v, acc.v); }
  static void store(std::uint16_t* bits, const Halves& h) { _mm512_storeu_ph(bits, h.v); }
  static Floats load_floats(const float* f) { return {_mm512_loadu_ps(f), _mm512_loadu_ps(f + 16)}; }
  static void store_floats(float* f, const Floats& a) { _mm512_storeu_ps(f, a.lo), _mm512_storeu_ps(f + 16, a.hi); }
  static void add(Floats& acc, const Halves& h) {  // lanes 0-15 and 16-31, widened exactly
    const __m512i bits = _mm512_castph_si512(h.v);
    acc.lo = _mm512_add_ps(acc.lo, _mm512_cvtxph_ps(_mm512_castph512_ph256(h.v)));
    acc.hi = _mm512_add_ps(acc.hi, _mm512_cvtxph_ps(_mm256_castsi256_ph(_mm512_castsi512_si256(_mm512_shuffle_i64x2(bits, bits, 0xEE)))));
  }
};
template <>
struct VectorLanes<Eigen::half, 32> {
  using type = VectorF16Lanes;
};
#endif

#if defined(HEADWISE_BF16_DOT)
/// x to BF16 bits, 16 at a time (vcvtneps2bf16: to nearest, ties to even; inputs below 2^-126
/// taken as zero, as the pair products below take them).
template <>
struct VectorRounding<Eigen::bfloat16> {
  static Index round(const float* x, Index n, std::uint16_t* out) {
    for (Index j = 0; j < n; j += 16) {
      const __mmask16 lanes = n - j >= 16 ? __mmask16(0xffff) : static_cast<__mmask16>((1u << (n - j)) - 1u);
      const __m256bh b = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(lanes, x + j));
      _mm256_mask_storeu_epi16(out + j, lanes, (__m256i)b);  // (a vector cast: the same 256 bits)
    }
    return n;
  }
};

/// 32 lanes of BF16 pairs (a pair row: two registers) and their float32 chains in two
/// (AVX512-BF16's vdpbf16ps: acc += the pair's second products, then its first, each rounded once).
struct VectorBf16Lanes {
  struct Pairs { __m512bh lo, hi; };
  struct Pair { __m512bh v; };
  struct Floats { __m512 lo, hi; };
  static Floats zero_floats() { return {_mm512_setzero_ps(), _mm512_setzero_ps()}; }
  static Floats load_floats(const float* f) { return {_mm512_loadu_ps(f), _mm512_loadu_ps(f + 16)}; }
  static void store_floats(float* f, const Floats& a) { _mm512_storeu_ps(f, a.lo), _mm512_storeu_ps(f + 16, a.hi); }
  static Pairs load(const std::uint16_t* row) { return {(__m512bh)_mm512_loadu_si512(row), (__m512bh)_mm512_loadu_si512(row + 32)}; }
  static Pair broadcast(const std::uint16_t* pair) {
    std::int32_t bits;
    std::memcpy(&bits, pair, sizeof bits);
    return {(__m512bh)_mm512_set1_epi32(bits)};
  }
  static void dot(Floats& acc, const Pairs& b, const Pair& x) {
    acc.lo = _mm512_dpbf16_ps(acc.lo, b.lo, x.v), acc.hi = _mm512_dpbf16_ps(acc.hi, b.hi, x.v);
  }
};
#else
/// 32 lanes of BF16 pairs without AVX512-BF16: each pair's entries widened to float32 exactly (a
/// shift), multiplied and added by fused multiply-adds, the second entry first (a product of two
/// BF16 numbers is exact in float32: one rounding each, as the portable lanes' sums).
struct VectorBf16Lanes {
  struct Pairs { __m512i lo, hi; };
  struct Pair { __m512 second, first; };
  struct Floats { __m512 lo, hi; };
  static Floats zero_floats() { return {_mm512_setzero_ps(), _mm512_setzero_ps()}; }
  static Floats load_floats(const float* f) { return {_mm512_loadu_ps(f), _mm512_loadu_ps(f + 16)}; }
  static void store_floats(float* f, const Floats& a) { _mm512_storeu_ps(f, a.lo), _mm512_storeu_ps(f + 16, a.hi); }
  static Pairs load(const std::uint16_t* row) { return {_mm512_loadu_si512(row), _mm512_loadu_si512(row + 32)}; }
  static Pair broadcast(const std::uint16_t* pair) {
    std::int32_t bits;
    std::memcpy(&bits, pair, sizeof bits);
    const __m512i x = _mm512_set1_epi32(bits);
    return {second(x), first(x)};
  }
  static void dot(Floats& acc, const Pairs& b, const Pair& x) {
    acc.lo = _mm512_fmadd_ps(x.first, first(b.lo), _mm512_fmadd_ps(x.second, second(b.lo), acc.lo));
    acc.hi = _mm512_fmadd_ps(x.first, first(b.hi), _mm512_fmadd_ps(x.second, second(b.hi), acc.hi));
  }
  static __m512 second(__m512i pairs) { return _mm512_castsi512_ps(_mm512_and_si512(pairs, _mm512_set1_epi32(static_cast<int>(0xffff0000u)))); }
  static __m512 first(__m512i pairs) { return _mm512_castsi512_ps(_mm512_slli_epi32(pairs, 16)); }
};
#endif
template <>
struct VectorLanes<Eigen::bfloat16, 32> {
  using type = VectorBf16Lanes;
};

}  // namespace headwise::detail
