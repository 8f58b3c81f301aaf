// The int8 arithmetic of the fused kernel (TileArithmetic<Int8Products>: int8 keys and values under
// KvArithmetic::stored): the integer products of detail/int8_products.hpp, which says what is
// rounded, over the panels kernels/panel_tiles.hpp walks (Int8Walk: one panel at a time, a
// sliver's keys cut at int8_run_tokens, its own asks ahead); the weights rounded to uint8 run by
// run; a key_prefix store's values taken out of its key panels (int8_values_from_keys); and the
// scratch they need. The loop around them (kernels/fused_attention.hpp: masks, the online
// softmax, shards, merges) is every arithmetic's.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <vector>

#include "headwise/detail/int8_products.hpp"
#include "headwise/detail/tile_product.hpp"
#include "headwise/kernels/decoding_prefetch.hpp"
#include "headwise/kernels/fused_call.hpp"
#include "headwise/kernels/panel_tiles.hpp"
#include "headwise/types.hpp"


namespace headwise::detail {

/// The kernel's stored type for int8 keys and values under KvArithmetic::stored: the numbers are
/// int8 (laid out in quads, detail/int8_products.hpp), multiplied as integers.
struct Int8Products {};

/// The most tokens one integer sum of weights times values covers: Σ u v of 255 x 127 each stays
/// below 2^31. A key tile's keys are cut at multiples of it (fixed positions: the same cuts for any call).
constexpr Index int8_run_tokens = 65536;

/// The query tile's rows (scaled, w.scaled) to int8 with their scales and sums (the rows of head h
/// of this tile; detail/int8_products.hpp).
template <class Scratch>
void quantize_query_tile(Scratch& w, Index rows, Index d_head) {
  for (Index r = 0; r < rows; ++r)
    quantize_query_row(w.scaled.row(r).data(), d_head, w.q8.data() + r * d_head, w.q_scale[static_cast<std::size_t>(r)],
                       w.q_sum[static_cast<std::size_t>(r)]);
}

/// What a decoding step's int8 score products ask for ahead (Int8Walk): the keys int8_key_lead
/// tokens later where they lie in another block (key_panel_ahead), weighed once a block of the
/// panel and of the one that far ahead, then stepped with the panels.
template <class Panel, class Call>
struct Int8KeyAsks {
  const Call& call;
  Index g;
  Index held_to = 0, later_held_to = 0;  // the ends of the blocks of the panel and of the one int8_key_lead later
  PanelPrefetch ahead;
  Int8KeyAsks(const Call& c, Index head, KeyRange) : call(c), g(head) {}
  PanelPrefetch operator()(Index j) {
    if (j >= held_to) held_to = call.kv.block_end(j), later_held_to = 0;  // (a new block: the ask weighed again)
    if (j + int8_key_lead >= later_held_to) ahead = key_panel_ahead(call, g, j), later_held_to = call.kv.block_end(j + int8_key_lead);
    const PanelPrefetch now = ahead;
    if (ahead.next_phase) ahead.next_phase += call.kv.key_panel_stride();  // (within the block later_held_to ends)
    return now;
  }
};

/// How the int8 products take the panels (kernels/panel_tiles.hpp): one panel at a time; a
/// sliver's keys cut at multiples of int8_run_tokens (its integer sums' limit); the keys asked for
/// across blocks (Int8KeyAsks) and each value panel one key tile later (next_tile_value_panel).
struct Int8Walk : PanelWalk {
  static constexpr Index panels_at_once = 1;
  static constexpr Index run_tokens = int8_run_tokens;
  template <class Panel, class Call>
  using KeyAsks = Int8KeyAsks<Panel, Call>;
  template <class Panel, class Call>
  static PanelPrefetch value_asks(const Call& call, Index g, Index j0, KeyRange run, KeyRange, Index c0) {
    return next_tile_value_panel(call, g, {j0 + run.begin, j0 + run.end}, c0 / std::decay_t<decltype(call.kv)>::lanes);
  }
};

/// S = Qs K[j0 : j0 + cols]ᵀ as integers rescaled (int8_scores) over the panels each sliver sees
/// (panel_score_tile); row r of S at w.s + r tk.
template <class Call, class Scratch>
void int8_score_tile(const Call& call, Scratch& w, Index rows, Index j0, Index cols, Index g) {
  using Scalar = typename std::decay_t<decltype(w.s)>::value_type;
  const Index d = call.kv.d_head(), quads = d / int8_quad;
  panel_score_tile<std::int8_t, Int8Walk>(
      call, w, rows, j0, cols, g, [&](auto, Index nr, Index r0, Index c0, const KeyPanels<std::int8_t>& at, const PanelPrefetch& prefetch) {
        const auto* query = reinterpret_cast<const std::uint8_t*>(w.q8.data() + r0 * d);
        const Int8ScoreScales<Scalar> scores{w.q_sum.data() + r0, w.q_scale.data() + r0, at.scales, w.s.data() + r0 * call.tk + c0, call.tk};
        int8_panel_sums<Scalar, /*Keys=*/true>(nr, quads, query, d, at.keys, prefetch, w.sums.data(), TileShape<Scalar>::lanes, &scores);
      });
}

/// acc[0, W) += scale float(sums[0, W)) by packets; a NaN scale (a NaN weight) makes them NaN.
template <class Scalar>
inline void add_scaled_sums(Scalar* acc, const std::int32_t* sums, float scale) {
  using namespace Eigen::internal;
  using Packet = typename TileShape<Scalar>::Packet;
  constexpr Index P = TileShape<Scalar>::packet, W = TileShape<Scalar>::lanes;
  if (std::isnan(scale)) return std::fill(acc, acc + W, std::numeric_limits<Scalar>::quiet_NaN());
  alignas(64) Scalar sum[static_cast<std::size_t>(W)];
  for (Index c = 0; c < W; ++c) sum[c] = static_cast<Scalar>(sums[c]);
  const Packet s = pset1<Packet>(static_cast<Scalar>(scale));
  for (Index c = 0; c < W; c += P) pstoreu(acc + c, pmadd(s, pload<Packet>(sum + c), ploadu<Packet>(acc + c)));
}

/// Row r of the sliver's weights over the keys [a, b) of the tile (its P row at p, relative to
/// j0) times the values' scales, block by block, rounded to uint8 at u (from the quad boundary
/// below a); returns their scale s_p (0: the row sees none of these keys; NaN: a NaN weight).
template <class Call, class Scratch, class Scalar>
float int8_weight_row(const Call& call, Scratch& w, const Scalar* p, Index a, Index b, Index j0, Index g, std::uint8_t* u) {
  const Index base = a / int8_quad * int8_quad, stop = (b + int8_quad - 1) / int8_quad * int8_quad;
  std::fill(u, u + (stop - base), std::uint8_t(0));
  float largest = 0, sum = 0;
  for (Index pa = a, pb; pa < b; pa = pb) {  // block by block: each block's scales lie together
    pb = std::min(b, call.kv.block_end(j0 + pa) - j0);
    const auto [most, total] = weights_times_scales(p + pa, pb - pa, call.kv.value_scales(g, j0 + pa), w.weights.data() + (pa - a));
    largest = std::max(largest, most), sum += total;
  }
  if (std::isnan(sum)) return sum;
  if (largest == 0.0f) return 0.0f;
  round_weights(w.weights.data(), b - a, largest, u + (a - base));
  return largest / 255.0f;
}

/// Where the values are the keys' first d_v components (a latent, ValueStorage::key_prefix): the
/// values of the keys [j0, j0 + cols) of head g (from the first one held), out of their key panels
/// into w.v8 as the tile's value panels (panel c / W, tokens from j0; zero past d_v), with the keys'
/// scales. A key panel's component quad cq holds 4 keys' 4 components (k + 128) in each 16 bytes, a
/// value panel's token quad 4 columns' 4 tokens (int8): each 16 bytes is a 4 x 4 transpose, by one
/// byte shuffle (SSSE3) or byte by byte. 1 / rows of the product's work.
template <class Call, class Scratch>
void int8_values_from_keys(const Call& call, Scratch& w, Index j0, Index cols, Index g) {
  using Scalar = typename std::decay_t<decltype(w.s)>::value_type;
  constexpr Index W = TileShape<Scalar>::lanes, pieces = W / int8_quad;  // 16-byte pieces in a quad row
  const Index dv = call.kv.d_v(), panel_bytes = call.tk * W;
  for (Index p = std::max<Index>(0, call.kv.first_kept() - j0) / W; p * W < cols; ++p) {
    const std::int8_t* keys = call.kv.template key_panel<std::int8_t>(g, j0 + p * W);
    for (Index cq = 0; cq < call.dv_padded() / int8_quad; ++cq) {
      std::int8_t* out = w.v8.data() + (cq * int8_quad / W) * panel_bytes + p * W * W + cq % pieces * 16;
      const Index valid = std::clamp<Index>(dv - cq * int8_quad, 0, int8_quad);  // components of this quad that are values
      if (valid == 0) {  // past d_v (and perhaps past the key panel): zeros
        for (Index L = 0; L < pieces; ++L) std::fill(out + L * int8_quad * W, out + L * int8_quad * W + 16, std::int8_t(0));
        continue;
      }
      const std::int8_t* in = keys + cq * int8_quad * W;
      for (Index L = 0; L < pieces; ++L, in += 16, out += int8_quad * W) {
        if (valid == int8_quad) {
          VectorQuadTranspose<>::flip_transpose(in, out);
          continue;
        }
        for (Index e = 0; e < int8_quad; ++e)  // out: column e's 4 tokens; in: token i's 4 components
          for (Index i = 0; i < int8_quad; ++i) out[int8_quad * e + i] = e < valid ? flip_sign(in[int8_quad * i + e]) : std::int8_t(0);
      }
    }
  }
}

/// acc += P V[j0 : j0 + cols] for the tile's rows over the keys each sliver sees, cut at
/// multiples of int8_run_tokens (panel_value_tile): each row's weights times the values' scales to
/// uint8 (int8_weight_row), their integer products with the values summed over the blocks the run
/// lies in (w.sums: the rows' sums, then a block's piece), rescaled once the run's last block is
/// summed. The bits do not depend on where the blocks lie.
template <class Call, class Scratch, class State>
void int8_value_tile(const Call& call, Scratch& w, const State& st, Index rows, Index j0, Index cols, Index g) {
  using Scalar = typename std::decay_t<decltype(w.s)>::value_type;
  constexpr Index W = TileShape<Scalar>::lanes;
  const std::int8_t* tile_values = nullptr;
  if (call.kv.values_are_keys()) int8_values_from_keys(call, w, j0, cols, g), tile_values = w.v8.data();
  const Index dv_padded = call.dv_padded(), ld = call.tk + int8_quad;
  std::int32_t *total = w.sums.data(), *piece = w.sums.data() + TileShape<Scalar>::rows * dv_padded;
  const auto keys = [&](Index r0, Index nr, KeyRange cut) {
    for (Index r = 0; r < nr; ++r)
      w.p_scale[static_cast<std::size_t>(r)] =
          int8_weight_row(call, w, w.s.data() + (r0 + r) * call.tk, cut.begin, cut.end, j0, g, w.p8.data() + r * ld);
    return KeyRange{cut.begin / int8_quad * int8_quad, cut.end};  // (from the quad boundary below: a block holds whole quads)
  };
  panel_value_tile<std::int8_t, Int8Walk>(
      call, w, rows, j0, g, keys,
      [&](auto, Index nr, Index r0, KeyRange run, KeyRange covered, const std::int8_t* values, const PanelPrefetch& prefetch, Index c0) {
        const bool first = run.begin == covered.begin;
        int8_panel_sums<Scalar, /*Keys=*/false>(nr, (run.size() + int8_quad - 1) / int8_quad, w.p8.data() + (run.begin - covered.begin), ld,
                                                values, prefetch, first ? total + c0 : piece, first ? dv_padded : W);
        if (!first)
          for (Index r = 0; r < nr; ++r) std::transform(piece + r * W, piece + (r + 1) * W, total + r * dv_padded + c0, total + r * dv_padded + c0, std::plus<>());
        if (run.end != covered.end) return;
        for (Index r = 0; r < nr; ++r)
          if (const float scale = w.p_scale[static_cast<std::size_t>(r)]; scale != 0.0f)  // (0: the row sees none of these keys)
            add_scaled_sums(st.acc + (r0 + r) * dv_padded + c0, total + r * dv_padded + c0, scale);
      },
      tile_values);
}

/// Int8 keys and values multiplied as integers: the query tile and each sliver's weights rounded
/// to int8 / uint8 with their scales, integer sums rescaled once a run; exp_nonpositive.
template <>
struct TileArithmetic<Int8Products> {
  static constexpr bool short_exp = true;
  static constexpr bool scores_may_overflow = false;  // (integer sums times float scales: a float's range)

  template <class Scalar>
  struct Scratch {
    // The query tile in int8, its rows' scales and sums; a sliver's integer sums over a panel (a
    // block's, and the tile's); its weights in uint8, their scales, and one row of them as floats
    // on the way; where the values are the keys', a key tile's values as value panels.
    std::vector<std::int8_t> q8;
    std::vector<float> q_scale, p_scale, weights;
    std::vector<std::int32_t> q_sum, sums;
    std::vector<std::uint8_t> p8;
    std::vector<std::int8_t> v8;
    void allocate(const FusedCall<Scalar>& call, Index rows) {
      constexpr const char* where = "attend";
      constexpr Index R = TileShape<Scalar>::rows, W = TileShape<Scalar>::lanes;
      detail::allocate(q8, checked_size<Scalar>(where, "a query tile", rows, call.kv.d_head()), std::int8_t(0), where, "a query tile");
      detail::allocate(q_scale, rows, 0.0f, where, "a query tile"), detail::allocate(q_sum, rows, std::int32_t(0), where, "a query tile");
      detail::allocate(sums, R * (call.dv_padded() + W), std::int32_t(0), where, "a score tile"), detail::allocate(p_scale, R, 0.0f, where, "a score tile");
      detail::allocate(weights, call.tk, 0.0f, where, "a score tile");
      detail::allocate(p8, checked_size<Scalar>(where, "a score tile", R, call.tk + int8_quad), std::uint8_t(0), where, "a score tile");
      if (call.kv.values_are_keys())
        detail::allocate(v8, checked_size<Scalar>(where, "a value tile", call.tk, call.dv_padded()), std::int8_t(0), where, "a value tile");
    }
  };

  template <class Scalar, class Scratch>
  static void load_query(const FusedCall<Scalar>& call, Scratch& w, Index rows) {
    quantize_query_tile(w, rows, call.kv.d_head());
  }
  template <class Scalar, class Scratch>
  static void score_tile(const FusedCall<Scalar>& call, Scratch& w, Index rows, Index j0, Index cols, Index g) {
    int8_score_tile(call, w, rows, j0, cols, g);
  }
  template <class Scalar, class Scratch, class State>
  static void value_tile(const FusedCall<Scalar>& call, Scratch& w, const State& st, Index rows, Index j0, Index cols, Index g) {
    int8_value_tile(call, w, st, rows, j0, cols, g);
  }
};

}  // namespace headwise::detail
