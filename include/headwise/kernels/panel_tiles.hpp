// The score and value tiles' loops of the arithmetics whose products read whole key and value
// panels (the widened one, kernels/widened_tiles.hpp; BF16 pairs, kernels/bf16_tiles.hpp; F16
// chains, kernels/f16_tiles.hpp): which panels each sliver's products cover, in which runs of
// keys, two panels at a time for a decoding step, and what they ask for ahead. The products (and
// the rounding of the weights) are the arithmetic's, passed in as callables; Panel is the type the
// panels are stored in.
#pragma once

#include <algorithm>
#include <type_traits>

#include "headwise/detail/tile_product.hpp"
#include "headwise/kernels/decoding_prefetch.hpp"
#include "headwise/types.hpp"

namespace headwise::detail {

/// S = Qs K[j0 : j0 + cols]ᵀ, sliver by sliver, each only over the key panels its rows see
/// (w.spans); row r of S at w.s + r tk. A short sliver (a decoding step) takes two panels at a time
/// where both are seen and in one block, asking for the tile's values ahead (score_phase_prefetch);
/// taller ones go panel by panel (a panel stays in L1 while every sliver that sees it is
/// multiplied). products(panels, rows, first row, c0, panel, prefetch) multiplies `rows` query
/// rows from `first row` by `panels` (an integral constant: 1 or 2) panels from `panel` (keys c0 ...
/// of the tile) into their scores.
template <class Panel, class Call, class Scratch, class Products>
void panel_score_tile(const Call& call, Scratch& w, Index rows, Index j0, Index cols, Index g, const Products& products) {
  using Scalar = typename std::decay_t<decltype(w.s)>::value_type;
  constexpr Index R = TileShape<Scalar>::rows, W = TileShape<Scalar>::lanes;
  using One = std::integral_constant<Index, 1>;
  using Two = std::integral_constant<Index, 2>;
  if (rows <= pair_rows<Scalar>) {
    const KeyRange span = w.spans[0];
    const Index first = span.begin / W * W, asks = (span.end - first + 2 * W - 1) / (2 * W);
    for (Index c0 = first, step; c0 < span.end; c0 += step) {
      const bool two = c0 + W < span.end && j0 + c0 + W < call.kv.block_end(j0 + c0);
      const Panel* panel = call.kv.template key_panel<Panel>(g, j0 + c0);
      const PanelPrefetch prefetch = score_phase_prefetch<Panel>(call, g, {j0 + first, j0 + span.end}, (c0 - first) / (2 * W), asks);
      if (two) products(Two{}, rows, 0, c0, panel, prefetch);
      else products(One{}, rows, 0, c0, panel, prefetch);
      step = two ? 2 * W : W;
    }
    return;
  }
  for (Index c0 = 0; c0 < cols; c0 += W)
    for (Index r0 = 0; r0 < rows; r0 += R) {
      const KeyRange span = w.spans[static_cast<std::size_t>(r0 / R)];
      if (c0 >= span.end || c0 + W <= span.begin) continue;  // no row of the sliver sees this panel
      products(One{}, std::min(R, rows - r0), r0, c0, call.kv.template key_panel<Panel>(g, j0 + c0), PanelPrefetch{});
    }
}

/// acc += P V[j0 : j0 + ...] for the tile's rows, sliver by sliver, over the keys each sliver's
/// products cover (keys(first row, rows, span) rounds the sliver's weights and says which, from the
/// span its rows see), run by run of keys in one block; a short sliver (a decoding step) takes
/// two value panels at a time and asks for the next tile's keys ahead (value_phase_prefetch).
/// products(panels, rows, first row, run, covered, values, prefetch, c0) multiplies the run's
/// weights by `panels` value panels from `values` (the panel of columns c0 ...) into the rows'
/// accumulators. Where the values are the keys' (values_from_keys), `tile_values` holds the tile's
/// as value panels (panel c / W, key j at j W): one run, nothing asked for ahead.
template <class Panel, class Call, class Scratch, class Keys, class Products>
void panel_value_tile(const Call& call, Scratch& w, Index rows, Index j0, Index g, const Keys& keys, const Products& products,
                      const Panel* tile_values = nullptr) {
  using Scalar = typename std::decay_t<decltype(w.s)>::value_type;
  constexpr Index R = TileShape<Scalar>::rows, W = TileShape<Scalar>::lanes;
  using One = std::integral_constant<Index, 1>;
  using Two = std::integral_constant<Index, 2>;
  const bool own = tile_values == nullptr;
  const Index dv_padded = call.dv_padded(), stride = own ? call.kv.value_panel_stride() : call.tk * W;
  const bool decoding = own && rows <= pair_rows<Scalar>;  // (one short sliver: its stream asked for ahead)
  const Index asks = (dv_padded / W + 1) / 2;      // (a decoding step's products: two value panels at a time)
  for (Index r0 = 0; r0 < rows; r0 += R) {
    const Index nr = std::min(R, rows - r0);
    const KeyRange span = w.spans[static_cast<std::size_t>(r0 / R)];
    if (span.empty()) continue;
    const KeyRange covered = keys(r0, nr, span);
    for (Index a = covered.begin, b; a < covered.end; a = b) {  // run by run of keys in one block
      b = own ? std::min(covered.end, call.kv.block_end(j0 + a) - j0) : covered.end;
      const Panel* values = own ? call.kv.template value_row<Panel>(g, j0 + a) : tile_values + a * W;
      const auto prefetch = [&](Index c0) {
        return !decoding ? PanelPrefetch{}
               : a == covered.begin ? value_phase_prefetch<Panel>(call, g, j0, c0 / (2 * W), asks)
                                    : PanelPrefetch{decoding_value_prefetch_bytes};
      };
      const KeyRange run{a, b};
      Index c0 = 0;
      if (nr <= pair_rows<Scalar>)  // a short sliver: two value panels at a time
        for (; c0 + W < dv_padded; c0 += 2 * W) products(Two{}, nr, r0, run, covered, values + c0 / W * stride, prefetch(c0), c0);
      for (; c0 < dv_padded; c0 += W) products(One{}, nr, r0, run, covered, values + c0 / W * stride, prefetch(c0), c0);
    }
  }
}

}  // namespace headwise::detail
