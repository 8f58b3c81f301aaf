// Internal: the fused kernel's products under KvArithmetic::stored with BF16 keys and values
// (kv_storage.hpp): BF16 pair products accumulated in float32, as AVX512-BF16's vdpbf16ps computes
// them.
//
// What is rounded, and how (the whole of the policy; everything else is as widened):
//   queries  each row of the scaled query tile Qs (one head) to BF16, to nearest (ties to even),
//            the rule the keys were stored by
//   scores   S_ij = Σ over the pairs (c, c + 1) of d_head, in ascending order, of two float32
//            multiply-adds: s += q_i,c+1 k_j,c+1, then s += q_ic k_jc (from s = 0). A product of two
//            BF16 numbers is exact in float32, so each step rounds once, as a sum does
//   weights  P = exp(S - m) by exp_nonpositive (detail/exp_nonpositive.hpp: Eigen's polynomial,
//            within 3.5 ulp of e^x); for the product with V, to BF16 (nearest, ties to even)
//   values   acc_ic += Σ over the pairs (j, j + 1) of the keys the row's sliver sees, ascending, of
//            acc += p_i,j+1 v_j+1,c then acc += p_ij v_jc: one chain per entry, continued from acc
//            (the online softmax rescales it between key tiles, as widened)
// With AVX512-BF16 (vdpbf16ps, vcvtneps2bf16) BF16 inputs, products and sums below 2^-126 are
// taken as zero, as the instructions define; the portable loops (other builds) keep them. Either
// way every result is one chain per entry in a fixed order, so it is the same whatever the thread
// count, the split of keys, the sliver a row is computed in, and where a store's blocks lie; pairs
// of weights a sliver's row does not see are exact zeros (0 v = 0 adds nothing).
//
// Layout (BF16 stores under the stored arithmetic, StoreFormat::lane_entries() = 2): a key panel of
// W keys holds component c of key w at (c / 2) 2W + 2w + c % 2 (a key's pair in one 32-bit lane, as
// vdpbf16ps reads it), so d_head must be even; a value panel of W columns holds token j's column w
// at (j / 2) 2W + 2w + j % 2 (two tokens of a column in a lane).
#pragma once

#include <cstdint>
#include <cstring>
#include <utility>

#include <Eigen/Core>

#include "headwise/detail/panel_layout.hpp"
#include "headwise/detail/tile_product.hpp"
#include "headwise/types.hpp"

#if defined(__AVX512BF16__) && defined(__AVX512BW__) && defined(EIGEN_VECTORIZE_AVX512)
#define HEADWISE_BF16_DOT 1
#include <immintrin.h>
#endif

namespace headwise::detail {


/// x[0, n) to BF16 bits at out, to nearest with ties to even (with AVX512-BF16: vcvtneps2bf16,
/// which takes inputs below 2^-126 as zero; elsewhere Eigen's conversion, the stores' own).
template <class Scalar>
inline void round_to_bf16(const Scalar* x, Index n, std::uint16_t* out) {
  Index j = 0;
#if defined(HEADWISE_BF16_DOT)
  if constexpr (std::is_same_v<Scalar, float>)
    for (; j < n; j += 16) {
      const __mmask16 lanes = n - j >= 16 ? __mmask16(0xffff) : static_cast<__mmask16>((1u << (n - j)) - 1u);
      const __m256bh b = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(lanes, x + j));
      _mm256_mask_storeu_epi16(out + j, lanes, (__m256i)b);  // (a vector cast: the same 256 bits)
    }
#endif
  for (; j < n; ++j) out[j] = Eigen::numext::bit_cast<std::uint16_t>(Eigen::bfloat16(static_cast<float>(x[j])));
}

#if defined(HEADWISE_BF16_DOT)
/// The body of bf16_panel_products for rows r...: Panels panels of W lanes (the second at panel +
/// next), each pair row 2W BF16 (two vectors); row r of a at a + r lda, its pair q at + 2q.
template <Index Panels, bool Accumulate, Index... r>
inline void bf16_panel_products_of(std::integer_sequence<Index, r...>, Index pairs, const std::uint16_t* a, Index lda,
                                   const std::uint16_t* panel, Index next, const PanelPrefetch& prefetch, float* out, Index ldo) {
  constexpr Index vectors = 2 * Panels, row_entries = 64;  // a pair row: 32 lanes of 2 BF16, two vectors
  __m512 acc[sizeof...(r)][static_cast<std::size_t>(vectors)];
  const auto start = [&](Index row) {
    for (Index v = 0; v < vectors; ++v) acc[row][v] = Accumulate ? _mm512_loadu_ps(out + row * ldo + v * 16) : _mm512_setzero_ps();
  };
  (start(r), ...);
  for (Index q = 0; q < pairs; ++q) {
    __m512bh b[static_cast<std::size_t>(vectors)];
    for (Index p = 0; p < Panels; ++p) {
      const std::uint16_t* at = panel + p * next + q * row_entries;
      prefetch_panel_row(prefetch, at, q * Panels + p, row_entries * 2);
      const __m512i lo = _mm512_loadu_si512(at), hi = _mm512_loadu_si512(at + 32);
      b[2 * p] = (__m512bh)lo, b[2 * p + 1] = (__m512bh)hi;
    }
    const auto dot = [&](Index row) {
      std::int32_t pair;
      std::memcpy(&pair, a + row * lda + 2 * q, sizeof pair);
      const __m512i x = _mm512_set1_epi32(pair);
      for (Index v = 0; v < vectors; ++v) acc[row][v] = _mm512_dpbf16_ps(acc[row][v], b[v], (__m512bh)x);
    };
    (dot(r), ...);
  }
  const auto finish = [&](Index row) {
    for (Index v = 0; v < vectors; ++v) _mm512_storeu_ps(out + row * ldo + v * 16, acc[row][v]);
  };
  (finish(r), ...);
}
#endif

/// out[r][0, Panels W) (rows x W per panel, leading dimension ldo; the second panel's at + W)
/// = (Accumulate: out +) Σ over `pairs` pairs of row r of a (BF16, lda entries apart) times lane w
/// of the panel's pair rows (BF16; the second panel at panel + next), each entry one chain of
/// multiply-adds over the pairs in ascending order, the pair's second entry first (see the top).
/// prefetch: what to ask for ahead (PanelPrefetch; the AVX512-BF16 path's only).
template <class Scalar, Index Panels, bool Accumulate>
inline void bf16_panel_products(Index rows, Index pairs, const std::uint16_t* a, Index lda, const std::uint16_t* panel,
                                Index next, const PanelPrefetch& prefetch, float* out, Index ldo) {
  constexpr Index W = TileShape<Scalar>::lanes;
#if defined(HEADWISE_BF16_DOT)
  if constexpr (W == 32) {
    constexpr int tallest = Panels == 1 ? static_cast<int>(TileShape<Scalar>::rows) : static_cast<int>(pair_rows<Scalar>);
    by_compiled_heights<tallest>(rows, 0, [&](auto height, Index row) {
      bf16_panel_products_of<Panels, Accumulate>(std::make_integer_sequence<Index, decltype(height)::value>{}, pairs, a + row * lda,
                                                 lda, panel, next, prefetch, out + row * ldo, ldo);
    });
    return;
  }
#endif
  static_cast<void>(prefetch);
  // The same chains, one entry at a time, a pair read as the one 32-bit lane it is (its second entry
  // the lane's high half on a little-endian machine). Read as two 16-bit entries, the chain's
  // second-entry-first order is a reduction GCC 12.2's -O3 vectorizer gets wrong (a product added
  // twice: `acc += a[2q+1] b[2q+1]; acc += a[2q] b[2q];` over q); read as lanes, it is not vectorized.
  const auto lane = [](const std::uint16_t* pair) {
    std::uint32_t bits;
    std::memcpy(&bits, pair, sizeof bits);
    return bits;
  };
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__  // (the second entry in the low half)
  const auto high = [](std::uint32_t bits) { return Eigen::numext::bit_cast<float>(bits << 16); };
  const auto low = [](std::uint32_t bits) { return Eigen::numext::bit_cast<float>(bits & 0xffff0000u); };
#else
  const auto high = [](std::uint32_t bits) { return Eigen::numext::bit_cast<float>(bits & 0xffff0000u); };
  const auto low = [](std::uint32_t bits) { return Eigen::numext::bit_cast<float>(bits << 16); };
#endif
  for (Index r = 0; r < rows; ++r)
    for (Index p = 0; p < Panels; ++p) {
      float acc[static_cast<std::size_t>(W)];
      for (Index w = 0; w < W; ++w) acc[w] = Accumulate ? out[r * ldo + p * W + w] : 0.0f;
      for (Index q = 0; q < pairs; ++q) {
        const std::uint32_t x = lane(a + r * lda + 2 * q);
        const std::uint16_t* row = panel + p * next + q * 2 * W;
        for (Index w = 0; w < W; ++w) {
          const std::uint32_t y = lane(row + 2 * w);
          acc[w] += high(x) * high(y);  // (exact products: one rounding each, as vdpbf16ps's)
          acc[w] += low(x) * low(y);
        }
      }
      for (Index w = 0; w < W; ++w) out[r * ldo + p * W + w] = acc[w];
    }
}

}  // namespace headwise::detail
