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
// taken as zero, as the instructions define; the other lanes (detail/lanes.hpp: AVX2's and
// AVX-512's fused multiply-adds of the widened entries, the portable lanes' products and sums)
// keep them (a product below 2^-126, which a float rounds, is kept whole by a fused multiply-add
// before its one rounding: the only place the two differ). Either way every result is one chain per entry in a fixed order, so it is the same whatever the thread
// count, the split of keys, the sliver a row is computed in, and where a store's blocks lie; pairs
// of weights a sliver's row does not see are exact zeros (0 v = 0 adds nothing).
//
// Layout (BF16 stores under the stored arithmetic, StoreFormat::lane_entries() = 2): a key panel of
// W keys holds component c of key w at (c / 2) 2W + 2w + c % 2 (a key's pair in one 32-bit lane, as
// vdpbf16ps reads it), so d_head must be even; a value panel of W columns holds token j's column w
// at (j / 2) 2W + 2w + j % 2 (two tokens of a column in a lane).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#include <Eigen/Core>

#include "headwise/detail/lanes.hpp"
#include "headwise/detail/panel_layout.hpp"
#include "headwise/detail/tile_product.hpp"
#include "headwise/types.hpp"

namespace headwise::detail {

/// x[0, n) to BF16 bits at out, to nearest with ties to even (in registers where the instruction
/// set rounds them, VectorRounding: AVX512-BF16's vcvtneps2bf16, which takes inputs below 2^-126 as
/// zero; elsewhere Eigen's conversion, the stores' own).
template <class Scalar>
inline void round_to_bf16(const Scalar* x, Index n, std::uint16_t* out) {
  Index j = 0;
  if constexpr (std::is_same_v<Scalar, float>) j = VectorRounding<Eigen::bfloat16>::round(x, n, out);
  for (; j < n; ++j) out[j] = Eigen::numext::bit_cast<std::uint16_t>(Eigen::bfloat16(static_cast<float>(x[j])));
}

/// W lanes of BF16 pairs and their float32 chains, lane by lane (the portable lanes; AVX512-BF16's
/// are Avx512Bf16Lanes and Avx2Bf16Lanes, detail/lanes_avx512.hpp and lanes_avx2.hpp). A pair is read as the one 32-bit lane it is (its
/// second entry the lane's high half on a little-endian machine): read as two 16-bit entries, the
/// chain's second-entry-first order is a reduction GCC 12.2's -O3 vectorizer gets wrong (a product
/// added twice: `acc += a[2q+1] b[2q+1]; acc += a[2q] b[2q];` over q); read as lanes, it is not
/// vectorized.
template <Index W>
struct PortableBf16Lanes {
  struct Pairs { const std::uint16_t* row; };  // a pair row, read where it lies
  using Pair = std::uint32_t;
  struct Floats { float x[static_cast<std::size_t>(W)]; };
  static Floats zero_floats() { return Floats{}; }
  static Floats load_floats(const float* f) {
    Floats a;
    std::copy(f, f + W, a.x);
    return a;
  }
  static void store_floats(float* f, const Floats& a) { std::copy(a.x, a.x + W, f); }
  static Pairs load(const std::uint16_t* row) { return {row}; }
  static Pair broadcast(const std::uint16_t* pair) {
    std::uint32_t bits;
    std::memcpy(&bits, pair, sizeof bits);
    return bits;
  }
  static void dot(Floats& acc, const Pairs& b, Pair x) {
    for (Index w = 0; w < W; ++w) {
      const std::uint32_t y = broadcast(b.row + 2 * w);
      acc.x[w] += second(x) * second(y);  // (exact products: one rounding each, as vdpbf16ps's)
      acc.x[w] += first(x) * first(y);
    }
  }
  /// A pair's second and first entry, as the floats they are.
  static float second(std::uint32_t bits) { return Eigen::numext::bit_cast<float>(big_endian ? bits << 16 : bits & 0xffff0000u); }
  static float first(std::uint32_t bits) { return Eigen::numext::bit_cast<float>(big_endian ? bits & 0xffff0000u : bits << 16); }
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__  // (the second entry in the low half)
  static constexpr bool big_endian = true;
#else
  static constexpr bool big_endian = false;
#endif
};

/// The lanes a build multiplies BF16 panels of W lanes with (detail/lanes.hpp).
template <Index W>
using Bf16LanesOf = LanesOf<Eigen::bfloat16, W, PortableBf16Lanes<W>>;

/// The body of bf16_panel_products for rows r...: Panels panels of W lanes (the second at panel +
/// next), each pair row 2W BF16; row r of a at a + r lda, its pair q at + 2q.
template <class Lanes, Index W, Index Panels, bool Accumulate, Index... r>
inline void bf16_panel_products_of(std::integer_sequence<Index, r...>, Index pairs, const std::uint16_t* a, Index lda,
                                   const std::uint16_t* panel, Index next, const PanelPrefetch& prefetch, float* out, Index ldo) {
  typename Lanes::Floats acc[sizeof...(r)][static_cast<std::size_t>(Panels)];
  const auto start = [&](Index row) {
    for (Index p = 0; p < Panels; ++p) acc[row][p] = Accumulate ? Lanes::load_floats(out + row * ldo + p * W) : Lanes::zero_floats();
  };
  (start(r), ...);
  for (Index q = 0; q < pairs; ++q) {
    typename Lanes::Pairs b[static_cast<std::size_t>(Panels)];
    for (Index p = 0; p < Panels; ++p) {
      const std::uint16_t* at = panel + p * next + q * 2 * W;
      prefetch_panel_row(prefetch, at, q * Panels + p, 2 * W * Index(sizeof(std::uint16_t)));
      b[p] = Lanes::load(at);
    }
    const auto dot = [&](Index row) {
      const auto x = Lanes::broadcast(a + row * lda + 2 * q);
      for (Index p = 0; p < Panels; ++p) Lanes::dot(acc[row][p], b[p], x);
    };
    (dot(r), ...);
  }
  const auto finish = [&](Index row) {
    for (Index p = 0; p < Panels; ++p) Lanes::store_floats(out + row * ldo + p * W, acc[row][p]);
  };
  (finish(r), ...);
}

/// out[r][0, Panels W) (rows x W per panel, leading dimension ldo; the second panel's at + W)
/// = (Accumulate: out +) Σ over `pairs` pairs of row r of a (BF16, lda entries apart) times lane w
/// of the panel's pair rows (BF16; the second panel at panel + next), each entry one chain of
/// multiply-adds over the pairs in ascending order, the pair's second entry first (see the top).
/// prefetch: what to ask for ahead (PanelPrefetch).
template <class Scalar, Index Panels, bool Accumulate>
inline void bf16_panel_products(Index rows, Index pairs, const std::uint16_t* a, Index lda, const std::uint16_t* panel,
                                Index next, const PanelPrefetch& prefetch, float* out, Index ldo) {
  constexpr Index W = TileShape<Scalar>::lanes;
  using Lanes = Bf16LanesOf<W>;
  if constexpr (std::is_same_v<Lanes, PortableBf16Lanes<W>>) {
    // Lane by lane: a row and a panel at a time, so that its W chains stay in registers, and
    // without prefetch (the chains bound this path, not the loads): the same bits.
    for (Index r = 0; r < rows; ++r)
      for (Index p = 0; p < Panels; ++p)
        bf16_panel_products_of<Lanes, W, 1, Accumulate>(std::integer_sequence<Index, 0>{}, pairs, a + r * lda, lda, panel + p * next, 0,
                                                        PanelPrefetch{}, out + r * ldo + p * W, ldo);
  } else {
    constexpr int tallest = Panels == 1 ? static_cast<int>(TileShape<Scalar>::rows) : static_cast<int>(pair_rows<Scalar>);
    by_compiled_heights<tallest>(rows, 0, [&](auto height, Index row) {
      bf16_panel_products_of<Lanes, W, Panels, Accumulate>(std::make_integer_sequence<Index, decltype(height)::value>{}, pairs,
                                                           a + row * lda, lda, panel, next, prefetch, out + row * ldo, ldo);
    });
  }
}

}  // namespace headwise::detail
