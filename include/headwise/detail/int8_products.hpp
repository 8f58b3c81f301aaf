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
// count, the split of keys, the sliver a row is computed in, and the lanes the build sums with
// (detail/lanes.hpp: AVX512-VNNI's or AVX-VNNI's vpdpbusd, AVX2's pmaddwd, or PortableInt8Lanes
// below, entry by entry): each computes the same integers.
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

#include "headwise/detail/lanes.hpp"
#include "headwise/detail/panel_layout.hpp"
#include "headwise/detail/platform.hpp"
#include "headwise/detail/tile_product.hpp"
#include "headwise/types.hpp"

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

/// W lanes of integer sums, entry by entry (the portable lanes; VNNI's and AVX2's registers are
/// in detail/lanes_avx512.hpp and detail/lanes_avx2.hpp, with the same members). A row's W sums
/// are `parts` Parts (here one lane each; a register of several lanes there), held as values in
/// plain arrays so that the compiler keeps them in registers. Keys: the panel holds k + 128 as
/// unsigned bytes and the row's quad is the int8 query's; values: the panel holds int8 values and
/// the row's quad the uint8 weights.
template <Index W>
struct PortableInt8Lanes {
  static constexpr Index width = W;
  static constexpr int parts = static_cast<int>(W);
  static constexpr int tallest = 1;                    // row by row: a row's W sums are its own
  static constexpr bool scores_in_registers = false;  // (int8_scores from the sums in memory)
  static constexpr Index chains(Index) { return 1; }
  using Part = std::int32_t;
  struct Quad { std::int32_t x[int8_quad]; };
  struct Bytes { std::int32_t x[int8_quad]; };  // a lane's four stored bytes, as the integers they are
  using Loaded = Bytes;
  static Part zero() { return 0; }
  template <bool Keys>
  static Loaded load(const std::int8_t* row, int k) {
    Bytes b;
    for (Index e = 0; e < int8_quad; ++e)
      b.x[e] = Keys ? std::int32_t(static_cast<std::uint8_t>(row[k * int8_quad + e])) : std::int32_t(row[k * int8_quad + e]);
    return b;
  }
  template <bool Keys>
  static Quad broadcast(const std::uint8_t* quad) {
    Quad x;
    for (Index e = 0; e < int8_quad; ++e) x.x[e] = Keys ? std::int32_t(static_cast<std::int8_t>(quad[e])) : std::int32_t(quad[e]);
    return x;
  }
  template <bool Keys>
  static Part dot(Part acc, const Loaded& b, const Quad& x) {
    for (Index e = 0; e < int8_quad; ++e) acc += x.x[e] * b.x[e];
    return acc;
  }
  static Part add(Part a, Part b) { return a + b; }
  static void store(int k, Part sum, std::int32_t* out) { out[k] = sum; }
  static void hold(Loaded&) {}
};

/// The lanes a build sums int8 panels of W lanes with (detail/lanes.hpp): VNNI's registers
/// (AVX512-VNNI, AVX-VNNI) or AVX2's int16 products where the build has them, else entry by entry.
template <Index W>
using Int8LanesOf = LanesOf<std::int8_t, W, PortableInt8Lanes<W>>;

/// The body of int8_panel_sums for rows r...: out[r][w] = Σ_q lane w of quad row q of the panel
/// (4W bytes each) times the 4 bytes of row r of a at a + r lda + 4q, over Lanes (a row's sums
/// its `parts` Parts, the quad row loaded part by part). S chains over the quads
/// (quad q in chain q % S, added at the end: integers, exact in any order): a short sliver (a
/// decoding step) keeps S products in flight. Given `scores` (keys, ToScores), the rows' scores
/// from the sums in registers instead (a store of the sums and their load back stalls the step;
/// bench/RESULTS.md, "Tuning constants").
template <class Lanes, bool Keys, Index S, bool ToScores, class Scalar, Index... r>
inline void int8_panel_sums_of(std::integer_sequence<Index, r...>, Index quads, const std::uint8_t* a, Index lda,
                               const std::int8_t* panel, const PanelPrefetch& prefetch, std::int32_t* out, Index ldo,
                               const Int8ScoreScales<Scalar>* scores) {
  constexpr Index row_bytes = Lanes::width * int8_quad;
  constexpr int P = Lanes::parts;
  typename Lanes::Part acc[sizeof...(r)][static_cast<std::size_t>(S * P)];
  for (auto& row : acc)
    for (auto& x : row) x = Lanes::zero();
  const auto step = [&](Index q, auto chain) HEADWISE_ALWAYS_INLINE {
    constexpr Index c = decltype(chain)::value;
    const std::int8_t* at = panel + q * row_bytes;
    prefetch_panel_row(prefetch, at, q, row_bytes);
    // A tall sliver loads the quad row once and holds it (Lanes::hold says why); a short one
    // loads it in each product, where the compiler folds the load into the instruction.
    constexpr bool tall = sizeof...(r) > 4;
    typename Lanes::Loaded b[static_cast<std::size_t>(P)];
    if constexpr (tall)
      for (int k = 0; k < P; ++k) b[k] = Lanes::template load<Keys>(at, k), Lanes::hold(b[k]);
    const auto dot = [&](Index row) HEADWISE_ALWAYS_INLINE {
      const auto x = Lanes::template broadcast<Keys>(a + row * lda + q * int8_quad);
      for (int k = 0; k < P; ++k)
        acc[row][c * P + k] = Lanes::template dot<Keys>(acc[row][c * P + k], tall ? b[k] : Lanes::template load<Keys>(at, k), x);
    };
    (dot(r), ...);
  };
  Index q = 0;
  for (; q + S <= quads; q += S) for_each_index<S>([&](auto c) { step(q + decltype(c)::value, c); });
  for (; q < quads; ++q) step(q, std::integral_constant<Index, 0>{});
  const auto finish = [&](Index row) HEADWISE_ALWAYS_INLINE {
    for_each_index<S - 1>([&](auto c) {
      for (int k = 0; k < P; ++k) acc[row][k] = Lanes::add(acc[row][k], acc[row][(decltype(c)::value + 1) * P + k]);
    });
    // (each part by value: the accumulators' address taken, the compiler keeps them in memory)
    if constexpr (ToScores && std::is_same_v<Scalar, float>)
      if (scores) {
        for (int k = 0; k < P; ++k)
          Lanes::store_scores(k, acc[row][k], scores->q_sum[row], scores->q_scale[row], scores->k_scales, scores->s + row * scores->lds);
        return;
      }
    for (int k = 0; k < P; ++k) Lanes::store(k, acc[row][k], out + row * ldo);
  };
  (finish(r), ...);
}

/// out[r][w] (rows x W int32, leading dimension ldo) = Σ over `quads` quads of row r of a (lda
/// bytes apart) by lane w of the panel. Keys: a is the int8 query and the panel
/// signed, summed as Σ (k + 128) q (the VNNI product takes one unsigned operand: the caller
/// subtracts 128 Σ q); otherwise (values) a is the uint8 weights, the panel signed, Σ u v.
/// prefetch: what to ask for ahead (PanelPrefetch). Keys given `scores`: the rows' scores
/// (int8_scores) where they say, out only as scratch.
template <class Scalar, bool Keys>
inline void int8_panel_sums(Index rows, Index quads, const std::uint8_t* a, Index lda, const std::int8_t* panel,
                            const PanelPrefetch& prefetch, std::int32_t* out, Index ldo,
                            const Int8ScoreScales<Scalar>* scores = nullptr) {
  using Lanes = Int8LanesOf<TileShape<Scalar>::lanes>;
  by_lane_heights<std::min(Lanes::tallest, static_cast<int>(TileShape<Scalar>::rows))>(rows, [&](auto height, Index row) {
    constexpr Index rows_here = decltype(height)::value;
    // (the scores from registers for a short sliver only: with a tall one's accumulators GCC
    // spills them in the product's loop)
    constexpr bool to_scores = Lanes::scores_in_registers && Keys && rows_here <= pair_rows<Scalar>;
    const Int8ScoreScales<Scalar> these = scores ? scores->from_row(row) : Int8ScoreScales<Scalar>{};
    int8_panel_sums_of<Lanes, Keys, Lanes::chains(rows_here), to_scores>(std::make_integer_sequence<Index, rows_here>{}, quads,
                                                                          a + row * lda, lda, panel, prefetch, out + row * ldo,
                                                                          ldo, scores ? &these : nullptr);
    if (!to_scores && scores)
      for (Index r = 0; r < rows_here; ++r)
        int8_scores(out + (row + r) * ldo, these.q_sum[r], these.q_scale[r], these.k_scales, these.s + r * these.lds);
  });
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
/// largest)), ties to even, in [0, 255] (in registers where the instruction set rounds them,
/// VectorRounding<std::uint8_t>).
inline void round_weights(const float* scaled, Index n, float largest, std::uint8_t* out) {
  const float inverse = 255.0f / largest;
  for (Index c = VectorRounding<std::uint8_t>::round(scaled, n, inverse, out); c < n; ++c)
    out[c] = static_cast<std::uint8_t>(std::max(0.0f, std::min(255.0f, std::nearbyint(scaled[c] * inverse))));
}

}  // namespace headwise::detail
