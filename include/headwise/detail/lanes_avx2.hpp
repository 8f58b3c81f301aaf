// Internal: every 256-bit register form (detail/lanes.hpp says what each trait is): BF16 pairs
// widened to float32 exactly (a shift) and multiplied by fused multiply-adds, the second entry
// first (a product of two BF16 numbers is exact in float32: one rounding each, as the portable
// lanes' sums); int8 quads by AVX-VNNI's vpdpbusd, else by int16 products (pmaddwd, exact); 8
// stored numbers widened to float; the sums of four packets of 8 floats; FP4 blocks 8 at a time;
// the int8 latent's quad transpose (pshufb). Each is a specialization with the members of the
// portable form it replaces. Included by detail/lanes.hpp wherever Eigen vectorizes with AVX2 and
// FMA, AVX-512 builds too (their 256-bit packets and 16-lane double panels use these).
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include <immintrin.h>

#include <Eigen/Core>

#include "headwise/detail/prefetch.hpp"
#include "headwise/types.hpp"


namespace headwise::detail {

struct Fp8E4M3;
struct Fp8E5M2;
template <class Stored, Index W>
struct VectorLanes;
template <int P, class Stored>
struct VectorWidening;
template <int P>
struct VectorSums;
template <int P>
struct VectorFp4;
template <int P>
struct VectorFp4Int8;
template <class>
struct VectorQuadTranspose;

/// 16 lanes of BF16 pairs (a pair row: two registers) and their float32 chains in two.
struct Avx2Bf16Lanes {
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
  using type = Avx2Bf16Lanes;
};

#if defined(__AVXVNNI__)
/// 16 lanes of int8 quads (a quad row: two registers) and their int32 sums in two parts
/// (AVX-VNNI's vpdpbusd, which multiplies unsigned bytes by signed ones: the keys' k + 128 by the
/// query, the weights by the values).
struct Avx2Int8Lanes {
  static constexpr Index width = 16;
  static constexpr int parts = 2;
  static constexpr int tallest = 16;  // (as tall as the tile: the caller caps it)
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
struct Avx2Int8Lanes {
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
  using type = Avx2Int8Lanes;
};

/// 8 floats widened from 8 stored entries: BF16 by a shift, int8 by conversion, and with F16C F16
/// (vcvtph2ps) and FP8 (shifted to F16 first: E5M2 is an F16's top byte, E4M3 one place lower
/// with the sign kept, Fp8E4M3's reading).
template <class Stored>
struct VectorWidening<8, Stored> {
#if defined(__F16C__)
  static constexpr bool f16c = true;
  /// F16 and FP8 entries widened by vcvtph2ps.
  static __m256 half_of(const Stored* p) {
    if constexpr (std::is_same_v<Stored, Eigen::half>) return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    const __m128i high = _mm_slli_epi16(_mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))), 8);
    if constexpr (std::is_same_v<Stored, Fp8E5M2>) return _mm256_cvtph_ps(high);
    return _mm256_cvtph_ps(_mm_and_si128(_mm_srai_epi16(high, 1), _mm_set1_epi16(static_cast<short>(0xbfff))));
  }
#else
  static constexpr bool f16c = false;
  static __m256 half_of(const Stored*) { return _mm256_setzero_ps(); }  // (not available: callers ask `available` first)
#endif
  static constexpr bool available = std::is_same_v<Stored, Eigen::bfloat16> || std::is_same_v<Stored, std::int8_t> ||
                                    (f16c && (std::is_same_v<Stored, Eigen::half> || std::is_same_v<Stored, Fp8E4M3> ||
                                              std::is_same_v<Stored, Fp8E5M2>));
  static __m256 load(const Stored* p) {
    if constexpr (std::is_same_v<Stored, Eigen::bfloat16>)
      return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16));
    else if constexpr (std::is_same_v<Stored, std::int8_t>)
      return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
    else
      return half_of(p);
  }
};

/// The sums of four packets of 8 floats (the halves of 128 bits added, then (x0 + x2) + (x1 + x3):
/// the order of Eigen's predux with AVX), the four at once.
template <>
struct VectorSums<8> {
  static constexpr bool available = true;
  static void sum(__m256 a, __m256 b, __m256 c, __m256 d, float* out) {
    const __m256 ab = _mm256_add_ps(_mm256_permute2f128_ps(a, b, 0x20), _mm256_permute2f128_ps(a, b, 0x31));  // 128-bit halves
    const __m256 cd = _mm256_add_ps(_mm256_permute2f128_ps(c, d, 0x20), _mm256_permute2f128_ps(c, d, 0x31));
    const __m256 q = _mm256_shuffle_ps(ab, cd, 0x44), p = _mm256_shuffle_ps(ab, cd, 0xEE);  // (a0 a1 c0 c1 | b0 b1 d0 d1), the x2 x3
    const __m256 t = _mm256_add_ps(q, p);                                                  // x0 + x2, x1 + x3
    const __m256 r = _mm256_add_ps(_mm256_shuffle_ps(t, t, 0x88), _mm256_shuffle_ps(t, t, 0xDD));  // (a c a c | b d b d)
    const __m128 lo = _mm256_castps256_ps128(r), hi = _mm256_extractf128_ps(r, 1);
    _mm_storeu_ps(out, _mm_unpacklo_ps(lo, hi));  // a b c d
  }
};

/// 32 FP4 codes (16 bytes) times `scale` into out, 8 at a time: each byte twice, the low nibble
/// then the high one, the magnitude looked up among the eight of the table (vpermps reads the
/// index's low 3 bits), the sign from bit 3.
template <>
struct VectorFp4<8> {
  static constexpr bool available = true;
  static void widen(const std::uint8_t* codes, const float* values, float scale, float* out) {
    const __m256 magnitudes = _mm256_mul_ps(_mm256_loadu_ps(values), _mm256_set1_ps(scale));
    const __m256i shifts = _mm256_set_epi32(4, 0, 4, 0, 4, 0, 4, 0), nibble = _mm256_set1_epi32(0x0F);
    const __m128i twice = _mm_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
    for (int quarter = 0; quarter < 4; ++quarter) {
      std::uint32_t four;
      std::memcpy(&four, codes + 4 * quarter, 4);
      const __m128i pairs = _mm_shuffle_epi8(_mm_cvtsi32_si128(int(four)), twice);
      const __m256i index = _mm256_and_si256(_mm256_srlv_epi32(_mm256_cvtepu8_epi32(pairs), shifts), nibble);
      const __m256 sign = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_srli_epi32(index, 3), 31));
      _mm256_storeu_ps(out + 8 * quarter, _mm256_xor_ps(_mm256_permutevar8x32_ps(magnitudes, index), sign));
    }
  }
};

/// MXFP4 under the stored arithmetic in two halves of 8 lanes (mxfp4_products.hpp's layout: the
/// low nibbles' 32 bytes, then the high ones'): magnitudes and signs by pshufb, the activations'
/// signs by psignb, each quad's integer sum by pmaddubsw (exact: at most 2 x 12 x 127 a pair of
/// bytes) and pmaddwd, then one fused multiply-add a half into its 8 lanes.
template <>
struct VectorFp4Int8<8> {
  static constexpr bool available = true;
  static __m256i doubled() { return _mm256_broadcastsi128_si256(_mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, 1, 2, 3, 4, 6, 8, 12)); }
  static __m256i signs() { return _mm256_broadcastsi128_si256(_mm_setr_epi8(1, 1, 1, 1, 1, 1, 1, 1, -1, -1, -1, -1, -1, -1, -1, -1)); }
  /// The low and the high nibbles of a pair's 32 code bytes.
  static void nibbles(const std::uint8_t* codes, __m256i& low, __m256i& high) {
    const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes)), nibble = _mm256_set1_epi8(0x0F);
    low = _mm256_and_si256(c, nibble), high = _mm256_and_si256(_mm256_srli_epi16(c, 4), nibble);
  }
  /// One half's 8 lane sums: magnitudes times the activations, negated where the code is.
  static __m256i quads(__m256i magnitude, __m256i sign, const std::int8_t* q) {
    const __m256i signed_q = _mm256_sign_epi8(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q)), sign);
    return _mm256_madd_epi16(_mm256_maddubs_epi16(magnitude, signed_q), _mm256_set1_epi16(1));
  }
  static void decode_pair(const std::uint8_t* codes, float w0, float w1, Fp4Pair& out) {
    __m256i low, high;
    nibbles(codes, low, high);
    _mm256_store_si256(reinterpret_cast<__m256i*>(out.magnitude), _mm256_shuffle_epi8(doubled(), low));
    _mm256_store_si256(reinterpret_cast<__m256i*>(out.magnitude + 32), _mm256_shuffle_epi8(doubled(), high));
    const auto mask = [](__m256i n) { return std::uint64_t(std::uint32_t(_mm256_movemask_epi8(_mm256_slli_epi16(n, 4)))); };  // (bit 3 to 7)
    out.negative = mask(low) | mask(high) << 32;
    const __m256 w = _mm256_blend_ps(_mm256_set1_ps(w0), _mm256_set1_ps(w1), 0xF0);
    _mm256_store_ps(out.scale, w), _mm256_store_ps(out.scale + 8, w);
  }
  /// The signs (+1, -1) of 32 bytes whose bits are `negative`'s 32.
  static __m256i signs_of(std::uint32_t negative) {
    const __m256i spread = _mm256_shuffle_epi8(_mm256_set1_epi32(int(negative)),
                                               _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
    const __m256i bit = _mm256_set1_epi64x(std::int64_t(0x8040201008040201));
    const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
    return _mm256_or_si256(set, _mm256_set1_epi8(1));  // (-1 where set, else 1)
  }
  static void dot_pairs(const Fp4Pair* b, const Int8Pair* a, Index pairs, float* lanes) {
    __m256 low_sums = _mm256_loadu_ps(lanes), high_sums = _mm256_loadu_ps(lanes + 8);
    for (Index p = 0; p < pairs; ++p) {
      const __m256i m0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(b[p].magnitude));
      const __m256i m1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(b[p].magnitude + 32));
      const __m256i low = quads(m0, signs_of(std::uint32_t(b[p].negative)), a[p].q);
      const __m256i high = quads(m1, signs_of(std::uint32_t(b[p].negative >> 32)), a[p].q + 32);
      low_sums = _mm256_fmadd_ps(_mm256_cvtepi32_ps(low), _mm256_mul_ps(_mm256_load_ps(a[p].scale), _mm256_load_ps(b[p].scale)), low_sums);
      high_sums = _mm256_fmadd_ps(_mm256_cvtepi32_ps(high), _mm256_mul_ps(_mm256_load_ps(a[p].scale + 8), _mm256_load_ps(b[p].scale + 8)), high_sums);
    }
    _mm256_storeu_ps(lanes, low_sums), _mm256_storeu_ps(lanes + 8, high_sums);
  }
  static void dot_codes(const std::uint8_t* codes, const std::uint8_t* exponents, const float* halves, const Int8Pair* a, Index pairs,
                        float* lanes) {
    const __m256i table = doubled(), sign_table = signs();
    __m256 low_sums = _mm256_loadu_ps(lanes), high_sums = _mm256_loadu_ps(lanes + 8);
    for (Index p = 0; p < pairs; ++p) {
      prefetch_line(codes + 32 * p, 4096);  // (the stream ahead, as the widened types' decoding step asks)
      __m256i low, high;
      nibbles(codes + 32 * p, low, high);
      const __m256 w = _mm256_blend_ps(_mm256_set1_ps(halves[exponents[2 * p]]), _mm256_set1_ps(halves[exponents[2 * p + 1]]), 0xF0);
      const __m256i low_quads = quads(_mm256_shuffle_epi8(table, low), _mm256_shuffle_epi8(sign_table, low), a[p].q);
      const __m256i high_quads = quads(_mm256_shuffle_epi8(table, high), _mm256_shuffle_epi8(sign_table, high), a[p].q + 32);
      low_sums = _mm256_fmadd_ps(_mm256_cvtepi32_ps(low_quads), _mm256_mul_ps(_mm256_load_ps(a[p].scale), w), low_sums);
      high_sums = _mm256_fmadd_ps(_mm256_cvtepi32_ps(high_quads), _mm256_mul_ps(_mm256_load_ps(a[p].scale + 8), w), high_sums);
    }
    _mm256_storeu_ps(lanes, low_sums), _mm256_storeu_ps(lanes + 8, high_sums);
  }
};

/// Four keys' quads as four value columns' quads, signs flipped (pshufb, then one xor).
template <>
struct VectorQuadTranspose<void> {
  static void flip_transpose(const std::int8_t* in, std::int8_t* out) {
    const __m128i transpose = _mm_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    const __m128i piece = _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in)), transpose);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm_xor_si128(piece, _mm_set1_epi8(char(0x80))));
  }
};

}  // namespace headwise::detail
