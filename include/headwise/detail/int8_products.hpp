// Internal: the fused kernel's products under KvArithmetic::stored with int8 keys and values
// (kv_storage.hpp): integer dot products, as the CPU's VNNI instructions compute them.
//
// What is rounded, and how (the whole of the policy; everything else is as widened):
//   queries  each row of the scaled query tile Qs (one head) to int8 with one float32 scale,
//            s_q = max |Qs_row| / 127, q = Qs / s_q rounded to nearest (ties to even) in [-127, 127]
//            (the keys' own rule, kv_storage.hpp); a non-finite row gets s_q = NaN, so its scores are NaN
//   scores   S_ij = (float(Σ_c q_ic k_jc) s_kj) s_qi: the integer sum is exact (|Σ| < 2^31 for
//            d_head <= max_int8_depth), its conversion to float exact below 2^24 (d_head <= 1040)
//   weights  P = exp(S - m) by exp_nonpositive (detail/exp_nonpositive.hpp: Eigen's polynomial, within
//            3.5 ulp of e^x, in fewer steps than widened's pexp); for the product with V, within each key tile (cut at
//            multiples of 65536 keys) row i's P_ij s_vj (s_vj: value j's scale) to uint8 with one scale,
//            s_p = max_j P_ij s_vj / 255, u = nearest((P_ij s_vj) (255 / max)), ties to even, in [0, 255]
//   values   acc_i += s_p float(Σ_j u_ij v_jc) (one multiply-add per entry of the tile's sum, its
//            integers summed over the blocks the tile's keys lie in: the same bits however they lie)
// Integer sums are exact, so their order is free: every result is the same whatever the thread
// count, the split of keys, the sliver a row is computed in, and whether the build uses VNNI
// (AVX512-VNNI, AVX-VNNI) or the portable loops below, which compute the same integers.
//
// Layout (int8 stores under the stored arithmetic, one format of a store: StoreFormat): a key panel
// of W keys holds component c of key w at (c / 4) 4W + 4w + c % 4 (four components of a key in
// one 32-bit lane, as vpdpbusd reads them), so d_head must be a multiple of 4, each as k + 128, an
// unsigned byte (flip_sign: vpdpbusd's unsigned operand; the sums are Σ (k + 128) q, less 128 Σ q);
// a value panel of W columns holds token j's column w at (j / 4) 4W + 4w + j % 4 (four tokens of a
// column in a lane), as int8.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <utility>

#include "headwise/detail/panel_layout.hpp"
#include "headwise/detail/tile_product.hpp"
#include "headwise/types.hpp"

#if defined(EIGEN_VECTORIZE_AVX512) || defined(__AVX2__)
#include <immintrin.h>
#endif
#if defined(__AVX512VNNI__) && defined(__AVX512BW__) && defined(EIGEN_VECTORIZE_AVX512)
#define HEADWISE_INT8_VNNI 512
#elif defined(__AVXVNNI__) && defined(EIGEN_VECTORIZE_AVX) && !defined(EIGEN_VECTORIZE_AVX512)
#define HEADWISE_INT8_VNNI 256
#include <immintrin.h>
#endif

namespace headwise::detail {



/// One query row (d entries, scaled) to int8: out, its scale (NaN if the row is not finite; 0 if
/// it is all zeros, or so small that its scale is) and the sum of its integers. Plain loops that
/// the compiler vectorises: the largest magnitude as the largest of the entries' bits with the
/// sign cleared (the order of non-negative floats; inf and NaN above every finite one), a local
/// sum (out may alias `sum`: summed through the reference, the loop stays entry by entry;
/// bench/RESULTS.md, "Tuning constants"), nearbyint (to nearest, ties to even, whatever the
/// caller's flags).
template <class Scalar>
inline void quantize_query_row(const Scalar* row, Index d, std::int8_t* out, float& scale, std::int32_t& sum) {
  constexpr std::uint32_t magnitude_bits = 0x7fffffffu, infinity_bits = 0x7f800000u;
  std::uint32_t largest_bits = 0;
  for (Index c = 0; c < d; ++c) {
    std::uint32_t bits;
    const float x = static_cast<float>(row[c]);
    std::memcpy(&bits, &x, sizeof bits);
    largest_bits = std::max(largest_bits, bits & magnitude_bits);
  }
  float largest;
  std::memcpy(&largest, &largest_bits, sizeof largest);
  const float s = largest_bits >= infinity_bits ? std::numeric_limits<float>::quiet_NaN() : largest / 127.0f;
  scale = s;
  sum = 0;
  if (!(s > 0.0f)) {  // (NaN, or 0)
    std::fill_n(out, std::max<Index>(d, 0), std::int8_t(0));
    return;
  }
  std::int32_t total = 0;
  for (Index c = 0; c < d; ++c) {
    const auto q = static_cast<std::int32_t>(std::min(127.0f, std::max(-127.0f, std::nearbyint(static_cast<float>(row[c]) / s))));
    out[c] = static_cast<std::int8_t>(q);
    total += q;
  }
  sum = total;
}

/// f(std::integral_constant<Index, i>) for i = 0 .. N - 1, spelled out (constant indices keep an
/// array of vectors in registers).
template <class F, Index... i>
inline void for_each_index_of(std::integer_sequence<Index, i...>, F& f) {
  (f(std::integral_constant<Index, i>{}), ...);
}
template <Index N, class F>
inline void for_each_index(F&& f) {
  for_each_index_of(std::make_integer_sequence<Index, N>{}, f);
}

/// Row r's scores over one key panel from its integer sums: s[w] = (float(sum[w] - 128 q_sum)
/// k_scale[w]) q_scale, by packets.
template <class Scalar>
inline void int8_scores(const std::int32_t* sums, std::int32_t q_sum, float q_scale, const float* k_scales, Scalar* s) {
  using namespace Eigen::internal;
  using Packet = typename TileShape<Scalar>::Packet;
  constexpr Index P = TileShape<Scalar>::packet, W = TileShape<Scalar>::lanes;
  if constexpr (std::is_same_v<Scalar, float>) {
    alignas(64) float dots[static_cast<std::size_t>(W)];
    for (Index w = 0; w < W; ++w) dots[w] = static_cast<float>(sums[w] - 128 * q_sum);
    const Packet qs = pset1<Packet>(q_scale);
    for (Index p = 0; p < W; p += P) pstoreu(s + p, pmul(pmul(pload<Packet>(dots + p), ploadu<Packet>(k_scales + p)), qs));
  } else {
    static_cast<void>(sums), static_cast<void>(q_sum), static_cast<void>(q_scale), static_cast<void>(k_scales), static_cast<void>(s);
  }
}

/// Where a key panel's integer sums become its scores (int8_panel_sums with Keys): row r's at
/// s + r lds, from q_sum[r], q_scale[r] and the panel's keys' scales (int8_scores).
template <class Scalar>
struct Int8ScoreScales {
  const std::int32_t* q_sum = nullptr;
  const float* q_scale = nullptr;
  const float* k_scales = nullptr;
  Scalar* s = nullptr;
  Index lds = 0;
  /// The same for the rows from `row` on.
  Int8ScoreScales from_row(Index row) const { return {q_sum + row, q_scale + row, k_scales, s + row * lds, lds}; }
};

#if defined(HEADWISE_INT8_VNNI)
#if HEADWISE_INT8_VNNI == 512
using Int8Vector = __m512i;
inline Int8Vector int8_load(const void* p) { return _mm512_loadu_si512(p); }
inline Int8Vector int8_zero() { return _mm512_setzero_si512(); }
inline Int8Vector int8_broadcast(std::int32_t x) { return _mm512_set1_epi32(x); }
inline Int8Vector int8_dot(Int8Vector acc, Int8Vector u8, Int8Vector s8) { return _mm512_dpbusd_epi32(acc, u8, s8); }
inline Int8Vector int8_add(Int8Vector x, Int8Vector y) { return _mm512_add_epi32(x, y); }
inline void int8_store(std::int32_t* p, Int8Vector x) { _mm512_storeu_si512(p, x); }
/// int8_scores on one vector of sums, in registers (its formula, its bits).
inline void int8_vector_scores(Int8Vector sums, std::int32_t q_sum, float q_scale, const float* k_scales, float* s) {
  const __m512 dots = _mm512_cvtepi32_ps(_mm512_sub_epi32(sums, _mm512_set1_epi32(128 * q_sum)));
  _mm512_storeu_ps(s, _mm512_mul_ps(_mm512_mul_ps(dots, _mm512_loadu_ps(k_scales)), _mm512_set1_ps(q_scale)));
}
#else
using Int8Vector = __m256i;
inline Int8Vector int8_load(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
inline Int8Vector int8_zero() { return _mm256_setzero_si256(); }
inline Int8Vector int8_broadcast(std::int32_t x) { return _mm256_set1_epi32(x); }
inline Int8Vector int8_dot(Int8Vector acc, Int8Vector u8, Int8Vector s8) { return _mm256_dpbusd_avx_epi32(acc, u8, s8); }
inline Int8Vector int8_add(Int8Vector x, Int8Vector y) { return _mm256_add_epi32(x, y); }
inline void int8_store(std::int32_t* p, Int8Vector x) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), x); }
inline void int8_vector_scores(Int8Vector sums, std::int32_t q_sum, float q_scale, const float* k_scales, float* s) {
  const __m256 dots = _mm256_cvtepi32_ps(_mm256_sub_epi32(sums, _mm256_set1_epi32(128 * q_sum)));
  _mm256_storeu_ps(s, _mm256_mul_ps(_mm256_mul_ps(dots, _mm256_loadu_ps(k_scales)), _mm256_set1_ps(q_scale)));
}
#endif
/// A quad row of a panel (W lanes of 4 bytes) is two vectors.
template <class Scalar>
constexpr bool int8_vnni_fits = sizeof(Int8Vector) * 2 == TileShape<Scalar>::lanes * int8_quad;

inline std::int32_t int8_lane(const void* p) {
  std::int32_t x;
  std::memcpy(&x, p, sizeof x);
  return x;
}

/// Row `row`'s sums (lo: lanes [0, V), hi: [V, 2V)) out: at out, or, given `scores`, as its scores.
template <bool ToScores, class Scalar>
EIGEN_ALWAYS_INLINE void int8_row_out(Int8Vector lo, Int8Vector hi, std::int32_t* out, const Int8ScoreScales<Scalar>* scores, Index row) {
  constexpr Index V = sizeof(Int8Vector) / 4;
  if constexpr (ToScores && std::is_same_v<Scalar, float>)
    if (scores) {
      float* s = scores->s + row * scores->lds;
      int8_vector_scores(lo, scores->q_sum[row], scores->q_scale[row], scores->k_scales, s);
      int8_vector_scores(hi, scores->q_sum[row], scores->q_scale[row], scores->k_scales + V, s + V);
      return;
    }
  int8_store(out, lo);
  int8_store(out + V, hi);
}

/// The body of int8_panel_sums for rows r...: out[r][w] = Σ_q lane w of quad row q of the panel
/// (4W bytes each) times the 4 bytes of row r of a at a + r lda + 4q. Keys: the panel is the
/// keys as unsigned k + 128 (flip_sign), a the int8 query; values: a the uint8 weights, the panel
/// the int8 values. S chains over the quads (quad q in chain q % S, added at the end: integers,
/// exact in any order): a short sliver (a decoding step) keeps 2 S products in flight. Given
/// `scores` (keys, ToScores), the rows' scores from the sums in registers instead (a store of the
/// sums and their load back stalls the step; bench/RESULTS.md, "Tuning constants").
template <bool Keys, Index S, bool ToScores, class Scalar, Index... r>
inline void int8_panel_sums_of(std::integer_sequence<Index, r...>, Index quads, const std::uint8_t* a, Index lda,
                               const std::int8_t* panel, const PanelPrefetch& prefetch, std::int32_t* out, Index ldo,
                               const Int8ScoreScales<Scalar>* scores) {
  constexpr Index row_bytes = 2 * sizeof(Int8Vector);  // bytes per quad row
  Int8Vector acc[sizeof...(r)][static_cast<std::size_t>(2 * S)];
  for (auto& row : acc)
    for (auto& x : row) x = int8_zero();
  const auto step = [&](Index q, auto chain) {
    constexpr Index c = decltype(chain)::value;
    const std::int8_t* at = panel + q * row_bytes;
    prefetch_panel_row(prefetch, at, q, row_bytes);
    Int8Vector p0 = int8_load(at), p1 = int8_load(at + sizeof(Int8Vector));
#if defined(__GNUC__) && HEADWISE_INT8_VNNI == 512
    // A tall sliver (prefill, a latent's heads: bound by its arithmetic) holds the loaded row in
    // registers for every row's product: left to itself GCC folds the load into each vpdpbusd, and
    // the load ports bound the products. A decoding step's short sliver leaves the loads folded:
    // held, it runs faster in cache but slower from memory, where a whole model's decoding reads
    // every layer's cache from (bench/RESULTS.md, "Tuning constants"). Not with 16 vector registers (AVX-VNNI), whose
    // accumulators fill them.
    if constexpr (sizeof...(r) > 4) asm("" : "+v"(p0), "+v"(p1));
#endif
    const auto dot = [&](Index row) {
      const Int8Vector x = int8_broadcast(int8_lane(a + row * lda + q * int8_quad));
      if constexpr (Keys) acc[row][2 * c] = int8_dot(acc[row][2 * c], p0, x), acc[row][2 * c + 1] = int8_dot(acc[row][2 * c + 1], p1, x);
      else acc[row][2 * c] = int8_dot(acc[row][2 * c], x, p0), acc[row][2 * c + 1] = int8_dot(acc[row][2 * c + 1], x, p1);
    };
    (dot(r), ...);
  };
  Index q = 0;
  for (; q + S <= quads; q += S) for_each_index<S>([&](auto c) { step(q + decltype(c)::value, c); });
  for (; q < quads; ++q) step(q, std::integral_constant<Index, 0>{});
  const auto finish = [&](Index row) {
    for_each_index<S - 1>([&](auto c) {
      acc[row][0] = int8_add(acc[row][0], acc[row][2 * c + 2]), acc[row][1] = int8_add(acc[row][1], acc[row][2 * c + 3]);
    });
    int8_row_out<ToScores>(acc[row][0], acc[row][1], out + row * ldo, scores, row);
  };
  (finish(r), ...);
}
#endif

#if defined(__AVX2__) && !defined(EIGEN_VECTORIZE_AVX512)
/// int8_panel_sums on AVX2 without VNNI, for panels of 16 lanes (a quad row: 64 bytes, four
/// 16-byte pieces of 4 lanes): each piece widened to 16 int16, multiplied by the row's 4 bytes
/// (widened, repeated) with pmaddwd into 8 int32 (a lane's two pair sums), the pairs added at the
/// end. Exact: |255 x 127 x 2| fits int32, as every sum below 2^31 does.
template <bool Keys>
inline void int8_panel_sums_avx2(Index rows, Index quads, const std::uint8_t* a, Index lda, const std::int8_t* panel,
                                 std::int32_t* out, Index ldo) {
  for (Index r = 0; r < rows; ++r) {
    __m256i acc[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256()};
    for (Index q = 0; q < quads; ++q) {
      const std::uint8_t* x = a + r * lda + q * int8_quad;
      const auto widen = [](std::uint8_t b) { return Keys ? std::uint16_t(std::int16_t(static_cast<std::int8_t>(b))) : std::uint16_t(b); };
      const long long pattern = static_cast<long long>(std::uint64_t(widen(x[0])) | std::uint64_t(widen(x[1])) << 16 |
                                                       std::uint64_t(widen(x[2])) << 32 | std::uint64_t(widen(x[3])) << 48);
      const __m256i factors = _mm256_set1_epi64x(pattern);
      for (int c = 0; c < 4; ++c) {
        const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(panel + q * 64 + c * 16));
        const __m256i entries = Keys ? _mm256_cvtepu8_epi16(bytes) : _mm256_cvtepi8_epi16(bytes);
        acc[c] = _mm256_add_epi32(acc[c], _mm256_madd_epi16(entries, factors));
      }
    }
    alignas(32) std::int32_t pairs[8];
    for (int c = 0; c < 4; ++c) {
      _mm256_store_si256(reinterpret_cast<__m256i*>(pairs), acc[c]);
      for (int j = 0; j < 4; ++j) out[r * ldo + 4 * c + j] = pairs[2 * j] + pairs[2 * j + 1];
    }
  }
}
#endif

/// int8_panel_sums without VNNI: the same integers, by int16 products on AVX2 (pmaddwd, exact)
/// or one entry at a time.
template <class Scalar, bool Keys>
inline void int8_panel_sums_portable(Index rows, Index quads, const std::uint8_t* a, Index lda, const std::int8_t* panel,
                                     std::int32_t* out, Index ldo) {
  constexpr Index W = TileShape<Scalar>::lanes;
#if defined(__AVX2__) && !defined(EIGEN_VECTORIZE_AVX512)
  if constexpr (W == 16) {  // AVX2 without VNNI: the same integers by int16 products (pmaddwd), exact
    int8_panel_sums_avx2<Keys>(rows, quads, a, lda, panel, out, ldo);
    return;
  }
#endif
  for (Index r = 0; r < rows; ++r) {  // the same integers, without VNNI (one entry at a time)
    std::int32_t* o = out + r * ldo;
    std::fill(o, o + W, 0);
    for (Index q = 0; q < quads; ++q)
      for (Index w = 0; w < W; ++w)
        for (Index e = 0; e < int8_quad; ++e) {
          const std::int32_t x = Keys ? static_cast<std::int8_t>(a[r * lda + q * int8_quad + e]) : a[r * lda + q * int8_quad + e];
          const std::int8_t stored = panel[(q * W + w) * int8_quad + e];
          o[w] += x * (Keys ? std::int32_t(static_cast<std::uint8_t>(stored)) : std::int32_t(stored));
        }
  }
}

/// out[r][w] (rows x W int32, leading dimension ldo) = Σ over `quads` quads of row r of a (lda
/// bytes apart) by lane w of the panel. Keys: a is the int8 query and the panel
/// signed, summed as Σ (k + 128) q (the VNNI product takes one unsigned operand: the caller
/// subtracts 128 Σ q); otherwise (values) a is the uint8 weights, the panel signed, Σ u v.
/// prefetch: what to ask for ahead (PanelPrefetch; the VNNI paths' only). Keys given `scores`:
/// the rows' scores (int8_scores) where they say, out only as scratch.
template <class Scalar, bool Keys>
inline void int8_panel_sums(Index rows, Index quads, const std::uint8_t* a, Index lda, const std::int8_t* panel,
                            const PanelPrefetch& prefetch, std::int32_t* out, Index ldo,
                            const Int8ScoreScales<Scalar>* scores = nullptr) {
#if defined(HEADWISE_INT8_VNNI)
  if constexpr (int8_vnni_fits<Scalar>) {
    by_compiled_heights<static_cast<int>(TileShape<Scalar>::rows)>(rows, 0, [&](auto height, Index row) {
      constexpr Index rows_here = decltype(height)::value, chains = rows_here <= 2 ? 4 : rows_here <= 4 ? 2 : 1;
      // (the scores from registers for a short sliver only: with a tall one's accumulators GCC
      // spills them in the product's loop)
      constexpr bool to_scores = Keys && rows_here <= pair_rows<Scalar>;
      const Int8ScoreScales<Scalar> these = scores ? scores->from_row(row) : Int8ScoreScales<Scalar>{};
      int8_panel_sums_of<Keys, chains, to_scores>(std::make_integer_sequence<Index, rows_here>{}, quads, a + row * lda, lda, panel,
                                                  prefetch, out + row * ldo, ldo, scores ? &these : nullptr);
      if (!to_scores && scores)
        for (Index r = 0; r < rows_here; ++r)
          int8_scores(out + (row + r) * ldo, these.q_sum[r], these.q_scale[r], these.k_scales, these.s + r * these.lds);
    });
    return;
  }
#endif
  static_cast<void>(prefetch);
  int8_panel_sums_portable<Scalar, Keys>(rows, quads, a, lda, panel, out, ldo);
  if (scores)
    for (Index r = 0; r < rows; ++r)
      int8_scores(out + r * ldo, scores->q_sum[r], scores->q_scale[r], scores->k_scales, scores->s + r * scores->lds);
}


/// Weights p[0, n) times the values' scales s[0, n) into scaled[0, n); returns their largest and
/// their sum (NaN if one is: weights are at most 1 and scales finite, so a NaN weight is the one
/// way to a NaN here). By packets.
template <class Scalar>
inline std::pair<float, float> weights_times_scales(const Scalar* p, Index n, const float* s, float* scaled) {
  using namespace Eigen::internal;
  using Packet = typename TileShape<float>::Packet;
  constexpr Index P = TileShape<float>::packet;
  Packet best = pset1<Packet>(0.0f), total = pset1<Packet>(0.0f);
  Index j = 0;
  if constexpr (std::is_same_v<Scalar, float>)
    for (; j + P <= n; j += P) {
      const Packet x = pmul(ploadu<Packet>(p + j), ploadu<Packet>(s + j));
      pstoreu(scaled + j, x);
      best = pmax(best, x), total = padd(total, x);
    }
  float largest = predux_max(best), sum = predux(total);
  for (; j < n; ++j) {
    scaled[j] = static_cast<float>(p[j]) * s[j];
    largest = std::max(largest, scaled[j]), sum += scaled[j];
  }
  return {largest, sum};
}

/// scaled[0, n) (the largest of them `largest` > 0) to uint8: out[j] = nearest(scaled[j] (255 /
/// largest)), ties to even, in [0, 255].
inline void round_weights(const float* scaled, Index n, float largest, std::uint8_t* out) {
  const float inverse = 255.0f / largest;
#if defined(EIGEN_VECTORIZE_AVX512)
  // (cvtps2dq rounds as the MXCSR says, to nearest with ties to even, as nearbyint; cvtusdb
  // saturates at 255, as the clamp below)
  const __m512 f = _mm512_set1_ps(inverse);
  Index c = 0;
#if defined(__AVX512BW__)
  // 64 at a time, narrowed by two saturating packs (in 128-bit lanes) and one permute of their
  // 32-bit groups: the same bytes as the narrowing store below (which some AVX-512 cores run
  // slowly) for every q below 32768 (the int16 pack's range); here q <= 255
  // (`largest` is the largest of `scaled`) or INT_MIN (a NaN), 0 in both ways
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
#else
  for (Index c = 0; c < n; ++c) out[c] = static_cast<std::uint8_t>(std::max(0.0f, std::min(255.0f, std::nearbyint(scaled[c] * inverse))));
#endif
}

}  // namespace headwise::detail
