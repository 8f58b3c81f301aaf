// The score and value tiles' loops, every arithmetic's (the widened one, kernels/widened_tiles.hpp;
// BF16 pairs, kernels/bf16_tiles.hpp; F16 chains, kernels/f16_tiles.hpp; int8 sums,
// kernels/int8_tiles.hpp): which panels each sliver's products cover, in which runs of keys, how
// many panels a decoding step's product takes, and what it asks for ahead. The products (and the
// rounding of the weights) are the arithmetic's, passed in as callables; Panel is the type the
// panels are stored in; Walk (PanelWalk or one derived from it) says what an arithmetic needs of
// the loop beside its products.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <type_traits>
#include <utility>

#include "headwise/detail/tile_product.hpp"
#include "headwise/kernels/decoding_prefetch.hpp"
#include "headwise/types.hpp"

namespace headwise::detail {

/// A key panel where a run of panels in one block begins, and the next ones by advance(): the
/// numbers, and where they carry a scale per token (int8 numbers) their scales. Found once a
/// block (an address is a division), then stepped.
template <class Panel>
struct KeyPanels {
  static constexpr bool scaled = std::is_same_v<Panel, std::int8_t>;
  const Panel* keys = nullptr;
  const float* scales = nullptr;  // (scaled only: the W keys' scales)
  template <class Call>
  KeyPanels(const Call& call, Index g, Index j)
      : keys(call.kv.template key_panel<Panel>(g, j)), scales(scaled ? call.kv.key_scales(g, j) : nullptr) {}
  void advance(Index panels, Index stride, Index lanes) {
    keys += panels * stride;
    if constexpr (scaled) scales += panels * lanes;
  }
};

/// What a decoding step's score products ask for ahead (PanelWalk): the values of the tokens it
/// scores, a piece each (score_phase_prefetch); called with each product's first key, in order.
template <class Panel, class Call>
struct ScorePhaseAsks {
  static constexpr Index W = std::decay_t<decltype(std::declval<Call>().kv)>::lanes;
  const Call& call;
  Index g;
  KeyRange tokens;
  Index parts;
  ScorePhaseAsks(const Call& c, Index head, KeyRange t)
      : call(c), g(head), tokens(t), parts((t.size() + 2 * W - 1) / (2 * W)) {}
  PanelPrefetch operator()(Index j) const { return score_phase_prefetch<Panel>(call, g, tokens, (j - tokens.begin) / (2 * W), parts); }
};

/// How the widened, BF16 and F16 products take the panels; an arithmetic that needs otherwise
/// derives from it and says what differs.
struct PanelWalk {
  /// A decoding step's products take up to this many panels at once (1 or 2).
  static constexpr Index panels_at_once = 2;
  /// A sliver's keys are cut into runs at multiples of this (0: uncut), each run's weights rounded
  /// and its products finished on their own.
  static constexpr Index run_tokens = 0;
  template <class Panel, class Call>
  using KeyAsks = ScorePhaseAsks<Panel, Call>;
  /// What a decoding step's value product over `run` (of `covered`, tile-relative) for the value
  /// panels from c0 asks for ahead: the first run its piece of the next key tile's keys
  /// (value_phase_prefetch), every run its own panels (decoding_value_prefetch_bytes).
  template <class Panel, class Call>
  static PanelPrefetch value_asks(const Call& call, Index g, Index j0, KeyRange run, KeyRange covered, Index c0) {
    constexpr Index W = std::decay_t<decltype(call.kv)>::lanes;
    if (run.begin != covered.begin) return PanelPrefetch{decoding_value_prefetch_bytes};
    return value_phase_prefetch<Panel>(call, g, j0, c0 / (2 * W), (call.dv_padded() / W + 1) / 2);
  }
};

/// S = Qs K[j0 : j0 + cols]ᵀ, sliver by sliver, each only over the key panels its rows see
/// (w.spans); row r of S at w.s + r tk. A short sliver (a decoding step) goes block by block, up
/// to Walk::panels_at_once panels of one block at a time, asking for what Walk::KeyAsks says;
/// taller ones go panel by panel (a panel stays in L1 while every sliver that sees it is
/// multiplied). products(panels, rows, first row, c0, key panels, prefetch) multiplies `rows`
/// query rows from `first row` by `panels` (an integral constant) panels (keys c0 ... of the tile).
template <class Panel, class Walk, class Call, class Scratch, class Products>
void panel_score_tile(const Call& call, Scratch& w, Index rows, Index j0, Index cols, Index g, const Products& products) {
  using Scalar = typename std::decay_t<decltype(w.s)>::value_type;
  constexpr Index R = TileShape<Scalar>::rows, W = TileShape<Scalar>::lanes;
  using One = std::integral_constant<Index, 1>;
  using Two = std::integral_constant<Index, 2>;
  const Index stride = call.kv.key_panel_stride();
  if (rows > pair_rows<Scalar>) {
    for (Index c0 = 0; c0 < cols; c0 += W) {
      std::optional<KeyPanels<Panel>> at;  // (found where the first sliver that sees the panel needs it)
      for (Index r0 = 0; r0 < rows; r0 += R) {
        const KeyRange span = w.spans[static_cast<std::size_t>(r0 / R)];
        if (c0 >= span.end || c0 + W <= span.begin) continue;  // no row of the sliver sees this panel
        if (!at) at.emplace(call, g, j0 + c0);
        products(One{}, std::min(R, rows - r0), r0, c0, *at, PanelPrefetch{});
      }
    }
    return;
  }
  const KeyRange span = w.spans[0];
  const Index first = span.begin / W * W;
  typename Walk::template KeyAsks<Panel, Call> asks(call, g, {j0 + first, j0 + span.end});
  for (Index a = first, b; a < span.end; a = b) {  // block by block
    b = std::min(span.end, call.kv.block_end(j0 + a) - j0);
    KeyPanels<Panel> at(call, g, j0 + a);
    for (Index c0 = a, n; c0 < b; c0 += n * W, at.advance(n, stride, W)) {
      n = Walk::panels_at_once == 2 && c0 + W < b ? 2 : 1;
      const PanelPrefetch prefetch = asks(j0 + c0);
      if constexpr (Walk::panels_at_once == 2)
        if (n == 2) {
          products(Two{}, rows, 0, c0, at, prefetch);
          continue;
        }
      products(One{}, rows, 0, c0, at, prefetch);
    }
  }
}

/// acc += P V[j0 : j0 + ...] for the tile's rows, sliver by sliver, over the keys each sliver sees
/// cut at multiples of Walk::run_tokens: keys(first row, rows, keys) rounds the sliver's weights
/// over those keys and says which keys its products cover; then run by run of keys in one block,
/// value panel by value panel (a short sliver: up to Walk::panels_at_once at a time, asking for
/// what Walk::value_asks says). products(panels, rows, first row, run, covered, values, prefetch,
/// c0) multiplies the run's weights by `panels` value panels from `values` (the panel of columns
/// c0 ...) into the rows' accumulators; the run that ends `covered` is its last. Where the values
/// are the keys' (a latent's), `tile_values` holds the tile's as value panels (panel c / W, key j
/// at j W): one run, nothing asked for ahead.
template <class Panel, class Walk, class Call, class Scratch, class Keys, class Products>
void panel_value_tile(const Call& call, Scratch& w, Index rows, Index j0, Index g, const Keys& keys, const Products& products,
                      const Panel* tile_values = nullptr) {
  using Scalar = typename std::decay_t<decltype(w.s)>::value_type;
  constexpr Index R = TileShape<Scalar>::rows, W = TileShape<Scalar>::lanes;
  using One = std::integral_constant<Index, 1>;
  using Two = std::integral_constant<Index, 2>;
  const bool own = tile_values == nullptr;
  const Index dv_padded = call.dv_padded(), stride = own ? call.kv.value_panel_stride() : call.tk * W;
  const bool decoding = own && rows <= pair_rows<Scalar>;  // (one short sliver: its stream asked for ahead)
  for (Index r0 = 0; r0 < rows; r0 += R) {
    const Index nr = std::min(R, rows - r0);
    const KeyRange span = w.spans[static_cast<std::size_t>(r0 / R)];
    for (Index cut = span.begin, cut_end = span.end; cut < span.end; cut = cut_end) {
      if constexpr (Walk::run_tokens > 0) cut_end = std::min(span.end, ((j0 + cut) / Walk::run_tokens + 1) * Walk::run_tokens - j0);
      const KeyRange covered = keys(r0, nr, KeyRange{cut, cut_end});
      for (Index a = covered.begin, b; a < covered.end; a = b) {  // run by run of keys in one block
        b = own ? std::min(covered.end, call.kv.block_end(j0 + a) - j0) : covered.end;
        const Panel* values = own ? call.kv.template value_row<Panel>(g, j0 + a) : tile_values + a * W;
        const KeyRange run{a, b};
        const auto prefetch = [&](Index c0) {
          return decoding ? Walk::template value_asks<Panel>(call, g, j0, run, covered, c0) : PanelPrefetch{};
        };
        Index c0 = 0;
        if constexpr (Walk::panels_at_once == 2)
          if (nr <= pair_rows<Scalar>)  // a short sliver: two value panels at a time
            for (; c0 + W < dv_padded; c0 += 2 * W) products(Two{}, nr, r0, run, covered, values + c0 / W * stride, prefetch(c0), c0);
        for (; c0 < dv_padded; c0 += W) products(One{}, nr, r0, run, covered, values + c0 / W * stride, prefetch(c0), c0);
      }
    }
  }
}

}  // namespace headwise::detail
