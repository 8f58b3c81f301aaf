// The fused kernel's score and value tiles for F16 keys and values under the stored arithmetic
// (KvArithmetic::stored): the F16 chains of detail/f16_products.hpp, which says what is rounded.
// kernels/fused_attention.hpp calls these in place of its widened score_tile and value_tile when
// the kernel's stored type is detail::F16Products; the loop around them (masks, the online
// softmax, shards, merges) is the same. The panels are the widened F16 store's.
#pragma once

#include <algorithm>
#include <cstdint>

#include "headwise/detail/f16_products.hpp"
#include "headwise/detail/tile_product.hpp"
#include "headwise/kernels/decoding_prefetch.hpp"
#include "headwise/types.hpp"

namespace headwise::detail {

/// The query tile's rows (scaled, w.scaled) to F16 (the rows of head h of this tile).
template <class Scratch>
void round_query_tile_to_f16(Scratch& w, Index rows, Index d_head) {
  for (Index r = 0; r < rows; ++r) round_to_f16(w.scaled.row(r).data(), d_head, w.q16.data() + r * d_head);
}

/// S = Qs K[j0 : j0 + cols]ᵀ by F16 chains, sliver by sliver, each only over the key panels its
/// rows see (w.spans); row r of S at w.s + r tk. A short sliver (a decoding step) takes two panels
/// at a time where both are seen and in one block; taller ones go panel by panel.
template <class Call, class Scratch>
void f16_score_tile(const Call& call, Scratch& w, Index rows, Index j0, Index cols, Index g) {
  using Scalar = typename std::decay_t<decltype(w.s)>::value_type;
  constexpr Index R = TileShape<Scalar>::rows, W = TileShape<Scalar>::lanes;
  const Index d = call.kv.d_head(), stride = call.kv.key_panel_stride();
  if (rows <= pair_rows<Scalar>) {
    const KeyRange span = w.spans[0];
    const Index first = span.begin / W * W, products = (span.end - first + 2 * W - 1) / (2 * W);
    for (Index c0 = first, step; c0 < span.end; c0 += step) {
      const bool two = c0 + W < span.end && j0 + c0 + W < call.kv.block_end(j0 + c0);
      const std::uint16_t* panel = call.kv.template key_panel<std::uint16_t>(g, j0 + c0);
      const PanelPrefetch prefetch = score_phase_prefetch<std::uint16_t>(call, g, {j0 + first, j0 + span.end}, (c0 - first) / (2 * W), products);
      Scalar* s = w.s.data() + c0;
      if (two) f16_score_products<W, 2>(rows, d, w.q16.data(), d, panel, stride, prefetch, s, call.tk);
      else f16_score_products<W, 1>(rows, d, w.q16.data(), d, panel, stride, prefetch, s, call.tk);
      step = two ? 2 * W : W;
    }
    return;
  }
  for (Index c0 = 0; c0 < cols; c0 += W)
    for (Index r0 = 0; r0 < rows; r0 += R) {
      const KeyRange span = w.spans[static_cast<std::size_t>(r0 / R)];
      if (c0 >= span.end || c0 + W <= span.begin) continue;  // no row of the sliver sees this panel
      f16_score_products<W, 1>(std::min(R, rows - r0), d, w.q16.data() + r0 * d, d, call.kv.template key_panel<std::uint16_t>(g, j0 + c0),
                               stride, PanelPrefetch{}, w.s.data() + r0 * call.tk + c0, call.tk);
    }
}

/// acc += P V[j0 : j0 + cols] by F16 chains for the tile's rows, sliver by sliver over the keys
/// its rows see (w.spans): each row's weights rounded to F16, then each value panel's chains over
/// the sliver's keys, run by run of keys in one block (a chunk's chain carried from one run to
/// the next in w.h16: the bits of one run).
template <class Call, class Scratch, class State>
void f16_value_tile(const Call& call, Scratch& w, const State& st, Index rows, Index j0, Index g) {
  using Scalar = typename std::decay_t<decltype(w.s)>::value_type;
  constexpr Index R = TileShape<Scalar>::rows, W = TileShape<Scalar>::lanes;
  const Index dv_padded = call.dv_padded(), stride = call.kv.value_panel_stride();
  const bool decoding = rows <= pair_rows<Scalar>;  // (one short sliver: its stream asked for ahead)
  const Index products = (dv_padded / W + 1) / 2;  // (a decoding step's: two value panels at a time)
  for (Index r0 = 0; r0 < rows; r0 += R) {
    const Index nr = std::min(R, rows - r0);
    const KeyRange span = w.spans[static_cast<std::size_t>(r0 / R)];
    if (span.empty()) continue;
    for (Index r = 0; r < nr; ++r)
      round_to_f16(w.s.data() + (r0 + r) * call.tk + span.begin, span.size(), w.p16.data() + r * call.tk + span.begin);
    for (Index a = span.begin, b; a < span.end; a = b) {  // run by run of keys in one block
      b = std::min(span.end, call.kv.block_end(j0 + a) - j0);
      const F16Run run{b - a, a % f16_chain, a != span.begin && a % f16_chain != 0, b == span.end};
      const std::uint16_t* values = call.kv.template value_row<std::uint16_t>(g, j0 + a);
      const std::uint16_t* p = w.p16.data() + a;
      const auto prefetch = [&](Index c0) {
        return !decoding ? PanelPrefetch{}
               : a == span.begin ? value_phase_prefetch<std::uint16_t>(call, g, j0, c0 / (2 * W), products)
                                 : PanelPrefetch{decoding_value_prefetch_bytes};
      };
      Index c0 = 0;
      if (nr <= pair_rows<Scalar>)  // a short sliver: two value panels at a time
        for (; c0 + W < dv_padded; c0 += 2 * W)
          f16_value_products<W, 2>(nr, run, p, call.tk, values + c0 / W * stride, stride, prefetch(c0), w.h16.data() + c0, dv_padded,
                                   st.acc + r0 * dv_padded + c0, dv_padded);
      for (; c0 < dv_padded; c0 += W)
        f16_value_products<W, 1>(nr, run, p, call.tk, values + c0 / W * stride, stride, prefetch(c0), w.h16.data() + c0, dv_padded,
                                 st.acc + r0 * dv_padded + c0, dv_padded);
    }
  }
}

}  // namespace headwise::detail
