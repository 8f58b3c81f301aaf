// Internal: every 512-bit register form (detail/lanes.hpp says what each trait is): F16 chains in
// AVX512-FP16's vfmadd231ph; BF16 pairs in AVX512-BF16's vdpbf16ps (else widened and multiplied by
// fused multiply-adds); int8 quads in AVX512-VNNI's vpdpbusd; the rounding of floats to F16
// (vcvtps2ph), BF16 (vcvtneps2bf16) and the int8 arithmetic's uint8 weights; 16 stored numbers
// widened to float; the sums of four packets of 16 floats; exp's 2^n by vscalefps; FP4 blocks by
// one permute; and the row-dot product's block of A's rows. Each is a specialization with the
// members of the portable form it replaces. Included by detail/lanes.hpp where Eigen vectorizes
// with AVX-512.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include <immintrin.h>

#include <Eigen/Core>

#include "headwise/detail/platform.hpp"  // HEADWISE_HOLD_IN_REGISTER, HEADWISE_CPU_IS_AMD
#include "headwise/detail/prefetch.hpp"
#include "headwise/types.hpp"


namespace headwise::detail {

struct Fp8E4M3;
struct Fp8E5M2;
template <class Stored, Index W>
struct VectorLanes;
template <class Stored>
struct VectorRounding;
template <int P, class Stored>
struct VectorWidening;
template <int P>
struct VectorSums;
template <int P>
struct VectorScale;
template <int P>
struct VectorFp4;
template <int P>
struct VectorFp4Int8;
template <class>
struct VectorTuning;

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

#if defined(__AVX512FP16__) && defined(__AVX512VL__)
#define HEADWISE_F16_FMA 1  // (the tests and benchmarks ask which lanes a build has)
/// 32 lanes of F16 chains in one register, their float32 sums in two (AVX512-FP16).
struct Avx512F16Lanes {
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
  using type = Avx512F16Lanes;
};
#endif

#if defined(__AVX512BF16__) && defined(__AVX512BW__)
#define HEADWISE_BF16_DOT 1
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
struct Avx512Bf16Lanes {
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
struct Avx512Bf16Lanes {
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
  using type = Avx512Bf16Lanes;
};

/// scaled[0, n) times `inverse` to uint8, to nearest (ties to even: cvtps2dq as the MXCSR says,
/// as nearbyint), clamped to [0, 255] (cvtusdb saturates at 255).
template <>
struct VectorRounding<std::uint8_t> {
  static Index round(const float* scaled, Index n, float inverse, std::uint8_t* out) {
    const __m512 f = _mm512_set1_ps(inverse);
    Index c = 0;
#if defined(__AVX512BW__)
    // 64 at a time, narrowed by two saturating packs (in 128-bit lanes) and one permute of their
    // 32-bit groups: the same bytes as the narrowing store below (which some AVX-512 cores run
    // slowly) for every q below 32768 (the int16 pack's range); here q <= 255 (the caller's
    // `inverse` is 255 over the largest of `scaled`) or INT_MIN (a NaN), 0 in both ways
    const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    for (; c + 64 <= n; c += 64) {
      __m512i q[4];
      for (Index k = 0; k < 4; ++k) q[k] = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(scaled + c + 16 * k), f));
      const __m512i bytes = _mm512_packus_epi16(_mm512_packus_epi32(q[0], q[1]), _mm512_packus_epi32(q[2], q[3]));
      _mm512_storeu_si512(out + c, _mm512_permutexvar_epi32(order, bytes));
    }
#endif
    for (; c < n; c += 16) {
      const __mmask16 lanes = n - c >= 16 ? __mmask16(0xffff) : static_cast<__mmask16>((1u << (n - c)) - 1u);
      const __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_maskz_loadu_ps(lanes, scaled + c), f));
      _mm512_mask_cvtusepi32_storeu_epi8(out + c, lanes, _mm512_max_epi32(q, _mm512_setzero_si512()));
    }
    return n;
  }
};

#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
#define HEADWISE_INT8_VNNI 512
/// 32 lanes of int8 quads (a quad row: two registers) and their int32 sums in two parts
/// (AVX512-VNNI's vpdpbusd, which multiplies unsigned bytes by signed ones: the keys' k + 128 by
/// the query, the weights by the values).
struct Avx512Int8Lanes {
  static constexpr Index width = 32;
  static constexpr int parts = 2;
  static constexpr int tallest = 16;  // (as tall as the tile: the caller caps it)
  static constexpr bool scores_in_registers = true;
  /// Chains of products in flight: a short sliver (a decoding step) keeps 2 S vpdpbusd in flight.
  static constexpr Index chains(Index rows) { return rows <= 2 ? 4 : rows <= 4 ? 2 : 1; }
  using Part = __m512i;
  using Loaded = __m512i;
  using Quad = __m512i;
  static Part zero() { return _mm512_setzero_si512(); }
  template <bool Keys>
  static Loaded load(const std::int8_t* row, int k) { return _mm512_loadu_si512(row + 64 * k); }
  template <bool Keys>
  static Quad broadcast(const std::uint8_t* quad) {
    std::int32_t bits;
    std::memcpy(&bits, quad, sizeof bits);
    return _mm512_set1_epi32(bits);
  }
  template <bool Keys>
  static Part dot(Part acc, Loaded b, Quad x) { return Keys ? _mm512_dpbusd_epi32(acc, b, x) : _mm512_dpbusd_epi32(acc, x, b); }
  static Part add(Part a, Part b) { return _mm512_add_epi32(a, b); }
  /// Part k of a row's sums out, and as the row's scores (int8_scores' formula and bits).
  static void store(int k, Part sums, std::int32_t* out) { _mm512_storeu_si512(out + 16 * k, sums); }
  static void store_scores(int k, Part sums, std::int32_t q_sum, float q_scale, const float* k_scales, float* s) {
    const __m512 dots = _mm512_cvtepi32_ps(_mm512_sub_epi32(sums, _mm512_set1_epi32(128 * q_sum)));
    _mm512_storeu_ps(s + 16 * k, _mm512_mul_ps(_mm512_mul_ps(dots, _mm512_loadu_ps(k_scales + 16 * k)), _mm512_set1_ps(q_scale)));
  }
  /// A tall sliver (prefill, a latent's heads: bound by its arithmetic) holds the loaded row in
  /// registers for every row's product: left to itself GCC folds the load into each vpdpbusd, and
  /// the load ports bound the products. A decoding step's short sliver leaves the loads folded:
  /// held, it runs faster in cache but slower from memory, where a whole model's decoding reads
  /// every layer's cache from (bench/RESULTS.md, "Tuning constants").
  static void hold(Loaded& b) {
    HEADWISE_HOLD_IN_REGISTER(b);
  }
};
template <>
struct VectorLanes<std::int8_t, 32> {
  using type = Avx512Int8Lanes;
};

/// MXFP4 under the stored arithmetic (mxfp4_products.hpp's layout): a pair's nibbles split by one
/// mask and one shift, its magnitudes looked up by vpshufb, its signs a mask; a row's pairs by
/// vpdpbusd (the magnitudes unsigned, the activations negated where the code is), then one fused
/// multiply-add a pair into the 16 lanes.
template <>
struct VectorFp4Int8<16> {
  static constexpr bool available = true;
  static void decode_pair(const std::uint8_t* codes, float w0, float w1, Fp4Pair& out) {
    const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes)), nibble = _mm256_set1_epi8(0x0F);
    const __m256i low = _mm256_and_si256(c, nibble), high = _mm256_and_si256(_mm256_srli_epi16(c, 4), nibble);
    const __m512i index = _mm512_inserti64x4(_mm512_castsi256_si512(low), high, 1);  // (the pair's layout)
    const __m512i doubled = _mm512_broadcast_i32x4(_mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, 1, 2, 3, 4, 6, 8, 12));
    _mm512_store_si512(out.magnitude, _mm512_shuffle_epi8(doubled, index));
    out.negative = _mm512_test_epi8_mask(index, _mm512_set1_epi8(0x08));
    _mm512_store_ps(out.scale, _mm512_mask_blend_ps(__mmask16(0xF0F0), _mm512_set1_ps(w0), _mm512_set1_ps(w1)));
  }
  static void dot_pairs(const Fp4Pair* b, const Int8Pair* a, Index pairs, float* lanes) {
    __m512 sums = _mm512_loadu_ps(lanes);
    for (Index p = 0; p < pairs; ++p) {
      const __m512i q = _mm512_load_si512(a[p].q);
      const __m512i signed_q = _mm512_mask_sub_epi8(q, b[p].negative, _mm512_setzero_si512(), q);
      const __m512i products = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_load_si512(b[p].magnitude), signed_q);
      const __m512 scale = _mm512_mul_ps(_mm512_load_ps(a[p].scale), _mm512_load_ps(b[p].scale));
      sums = _mm512_fmadd_ps(_mm512_cvtepi32_ps(products), scale, sums);
    }
    _mm512_storeu_ps(lanes, sums);
  }
  /// dot_pairs over whole pairs decoded as they are read: codes (32 bytes a pair) and exponents (2
  /// a pair) in place, each block's scale for the doubled values from halves[exponent].
  static void dot_codes(const std::uint8_t* codes, const std::uint8_t* exponents, const float* halves, const Int8Pair* a, Index pairs,
                        float* lanes) {
    const __m256i nibble = _mm256_set1_epi8(0x0F);
    const __m512i doubled = _mm512_broadcast_i32x4(_mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, 1, 2, 3, 4, 6, 8, 12)), sign = _mm512_set1_epi8(0x08);
    __m512 sums = _mm512_loadu_ps(lanes);
    for (Index p = 0; p < pairs; ++p) {
      prefetch_line(codes + 32 * p, 4096);  // (the stream ahead, as the widened types' decoding step asks)
      const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + 32 * p));
      const __m512i index = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_and_si256(c, nibble)),
                                               _mm256_and_si256(_mm256_srli_epi16(c, 4), nibble), 1);
      const __m512i q = _mm512_load_si512(a[p].q);
      const __m512i signed_q = _mm512_mask_sub_epi8(q, _mm512_test_epi8_mask(index, sign), _mm512_setzero_si512(), q);
      const __m512i products = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_shuffle_epi8(doubled, index), signed_q);
      const __m512 w = _mm512_mask_blend_ps(__mmask16(0xF0F0), _mm512_set1_ps(halves[exponents[2 * p]]), _mm512_set1_ps(halves[exponents[2 * p + 1]]));
      sums = _mm512_fmadd_ps(_mm512_cvtepi32_ps(products), _mm512_mul_ps(_mm512_load_ps(a[p].scale), w), sums);
    }
    _mm512_storeu_ps(lanes, sums);
  }
};
#endif

/// 16 floats widened from 16 stored entries: BF16 by a shift, F16 by vcvtph2ps, int8 by
/// conversion, FP8 shifted to F16 first (E5M2 is an F16's top byte; E4M3 one place lower with the
/// sign kept, Fp8E4M3's reading).
template <class Stored>
struct VectorWidening<16, Stored> {
  static constexpr bool available = std::is_same_v<Stored, Eigen::bfloat16> || std::is_same_v<Stored, Eigen::half> ||
                                    std::is_same_v<Stored, std::int8_t> || std::is_same_v<Stored, Fp8E4M3> ||
                                    std::is_same_v<Stored, Fp8E5M2>;
  static __m512 load(const Stored* p) {
    if constexpr (std::is_same_v<Stored, Eigen::bfloat16>)
      return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), 16));
    else if constexpr (std::is_same_v<Stored, Eigen::half>)
      return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    else if constexpr (std::is_same_v<Stored, std::int8_t>)
      return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
    else {
      const __m256i high = _mm256_slli_epi16(_mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 8);
      if constexpr (std::is_same_v<Stored, Fp8E5M2>) return _mm512_cvtph_ps(high);
      // S.EEEE.MMM in the top byte, shifted down one with the sign copied, that copy cleared
      return _mm512_cvtph_ps(_mm256_and_si256(_mm256_srai_epi16(high, 1), _mm256_set1_epi16(static_cast<short>(0xbfff))));
    }
  }
};

/// The sums of four packets of 16 floats (the halves of 512 bits added, then those of 256, then
/// (x0 + x2) + (x1 + x3): the order of Eigen's predux with AVX-512 where AVX512DQ is on), the four
/// at once.
template <>
struct VectorSums<16> {
  static constexpr bool available = true;
  static void sum(__m512 a, __m512 b, __m512 c, __m512 d, float* out) {
    const __m512 ab = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x44), _mm512_shuffle_f32x4(a, b, 0xEE));  // 256-bit halves
    const __m512 cd = _mm512_add_ps(_mm512_shuffle_f32x4(c, d, 0x44), _mm512_shuffle_f32x4(c, d, 0xEE));
    const __m512 q = _mm512_add_ps(_mm512_shuffle_f32x4(ab, cd, 0x88), _mm512_shuffle_f32x4(ab, cd, 0xDD));  // 128-bit halves
    const __m512 t = _mm512_add_ps(q, _mm512_permute_ps(q, 0xEE));                                     // x0 + x2, x1 + x3
    const __m512 r = _mm512_add_ps(t, _mm512_permute_ps(t, 0x55));
    _mm_storeu_ps(out, _mm512_castps512_ps128(_mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), r)));
  }
};

/// y 2^n for 16 floats (vscalefps: exp_nonpositive's last step without building 2^n's bits).
template <>
struct VectorScale<16> {
  static constexpr bool available = true;
  static __m512 scale(__m512 y, __m512 n) { return _mm512_scalef_ps(y, n); }
};

/// 32 FP4 codes (16 bytes) times `scale` into out: each byte twice, the low nibble then the high
/// one (a shift of 0 or 4 per lane), looked up in the table of sixteen values times the scale by
/// one permute.
template <>
struct VectorFp4<16> {
  static constexpr bool available = true;
  static void widen(const std::uint8_t* codes, const float* values, float scale, float* out) {
    const __m512 table = _mm512_mul_ps(_mm512_loadu_ps(values), _mm512_set1_ps(scale));  // (exact: a power of two)
    const __m512i shifts = _mm512_set_epi32(4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0), nibble = _mm512_set1_epi32(0x0F);
    const __m128i twice = _mm_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
    const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes));
    for (int half = 0; half < 2; ++half) {
      const __m128i pairs = _mm_shuffle_epi8(half ? _mm_srli_si128(bytes, 8) : bytes, twice);
      const __m512i index = _mm512_and_si512(_mm512_srlv_epi32(_mm512_cvtepu8_epi32(pairs), shifts), nibble);
      _mm512_storeu_ps(out + 16 * half, _mm512_permutexvar_ps(index, table));
    }
  }
};

/// With AVX-512 the row-dot product's block of A's rows: 4 MiB on AMD (its L3 serves them fast
/// enough that fewer passes over B win), 1 MiB elsewhere (Intel's L2 holds them, its L3 is slow
/// to serve them): bench/RESULTS.md, "Tuning constants". The blocking changes no bit.
template <>
struct VectorTuning<void> {
  static Index a_block_bytes() {
    static const Index bytes = HEADWISE_CPU_IS_AMD() ? Index(4) << 20 : Index(1) << 20;
    return bytes;
  }
};

}  // namespace headwise::detail
