// The fused kernel's score and value tiles for BF16 keys and values under the stored arithmetic
// (KvArithmetic::stored): the pair products of detail/bf16_products.hpp, which says what is
// rounded. kernels/fused_attention.hpp calls these in place of its widened score_tile and
// value_tile when the kernel's stored type is detail::Bf16Products; the loop around them (masks,
// the online softmax, shards, merges) is the same.
#pragma once

#include <algorithm>
#include <cstdint>

#include "headwise/detail/bf16_products.hpp"
#include "headwise/detail/tile_product.hpp"
#include "headwise/kernels/decoding_prefetch.hpp"
#include "headwise/types.hpp"

namespace headwise::detail {

/// The query tile's rows (scaled, w.scaled) to BF16 (the rows of head h of this tile).
template <class Scratch>
void round_query_tile(Scratch& w, Index rows, Index d_head) {
  for (Index r = 0; r < rows; ++r) round_to_bf16(w.scaled.row(r).data(), d_head, w.q16.data() + r * d_head);
}

/// S = Qs K[j0 : j0 + cols]ᵀ by BF16 pairs, sliver by sliver, each only over the key panels its
/// rows see (w.spans); row r of S at w.s + r tk. A short sliver (a decoding step) takes two panels
/// at a time where both are seen and in one block; taller ones go panel by panel (a panel stays in
/// L1 while every sliver that sees it is multiplied). The same chains either way.
template <class Call, class Scratch>
void bf16_score_tile(const Call& call, Scratch& w, Index rows, Index j0, Index cols, Index g) {
  using Scalar = typename std::decay_t<decltype(w.s)>::value_type;
  constexpr Index R = TileShape<Scalar>::rows, W = TileShape<Scalar>::lanes;
  const Index d = call.kv.d_head(), pairs = d / bf16_pair, stride = call.kv.key_panel_stride();
  if (rows <= pair_rows<Scalar>) {
    const KeyRange span = w.spans[0];
    const Index first = span.begin / W * W, products = (span.end - first + 2 * W - 1) / (2 * W);
    for (Index c0 = first, step; c0 < span.end; c0 += step) {
      const bool two = c0 + W < span.end && j0 + c0 + W < call.kv.block_end(j0 + c0);
      const std::uint16_t* panel = call.kv.template key_panel<std::uint16_t>(g, j0 + c0);
      const PanelPrefetch prefetch = score_phase_prefetch<std::uint16_t>(call, g, {j0 + first, j0 + span.end}, (c0 - first) / (2 * W), products);
      Scalar* s = w.s.data() + c0;
      if (two) bf16_panel_products<Scalar, 2, false>(rows, pairs, w.q16.data(), d, panel, stride, prefetch, s, call.tk);
      else bf16_panel_products<Scalar, 1, false>(rows, pairs, w.q16.data(), d, panel, stride, prefetch, s, call.tk);
      step = two ? 2 * W : W;
    }
    return;
  }
  for (Index c0 = 0; c0 < cols; c0 += W)
    for (Index r0 = 0; r0 < rows; r0 += R) {
      const KeyRange span = w.spans[static_cast<std::size_t>(r0 / R)];
      if (c0 >= span.end || c0 + W <= span.begin) continue;  // no row of the sliver sees this panel
      bf16_panel_products<Scalar, 1, false>(std::min(R, rows - r0), pairs, w.q16.data() + r0 * d, d,
                                            call.kv.template key_panel<std::uint16_t>(g, j0 + c0), stride, PanelPrefetch{},
                                            w.s.data() + r0 * call.tk + c0, call.tk);
    }
}

/// acc += P V[j0 : j0 + cols] by BF16 pairs for the tile's rows, sliver by sliver over the keys
/// its rows see (w.spans), widened to whole pairs: each row's weights rounded to BF16 (zero on the
/// pair's other key where the span begins or ends inside a pair), then each value panel's chains
/// continued block by block (a block holds whole pairs: the bits of one run).
template <class Call, class Scratch, class State>
void bf16_value_tile(const Call& call, Scratch& w, const State& st, Index rows, Index j0, Index g) {
  using Scalar = typename std::decay_t<decltype(w.s)>::value_type;
  constexpr Index R = TileShape<Scalar>::rows, W = TileShape<Scalar>::lanes;
  const Index dv_padded = call.dv_padded(), stride = call.kv.value_panel_stride();
  const bool decoding = rows <= pair_rows<Scalar>;  // (one short sliver: its stream asked for ahead)
  const Index products = (dv_padded / W + 1) / 2;  // (a decoding step's: two value panels at a time)
  for (Index r0 = 0; r0 < rows; r0 += R) {
    const Index nr = std::min(R, rows - r0);
    const KeyRange span = w.spans[static_cast<std::size_t>(r0 / R)];
    if (span.empty()) continue;
    const Index base = span.begin / bf16_pair * bf16_pair, stop = (span.end + bf16_pair - 1) / bf16_pair * bf16_pair;
    for (Index r = 0; r < nr; ++r) {  // (the key before span.begin and after span.end - 1, in their pairs: weight 0)
      std::uint16_t* u = w.p16.data() + r * call.tk;
      u[0] = u[stop - base - 1] = 0;
      round_to_bf16(w.s.data() + (r0 + r) * call.tk + span.begin, span.end - span.begin, u + (span.begin - base));
    }
    for (Index a = base, b; a < stop; a = b) {  // block by block
      b = std::min(stop, call.kv.block_end(j0 + a) - j0);
      const std::uint16_t* values = call.kv.template value_row<std::uint16_t>(g, j0 + a);
      const std::uint16_t* p = w.p16.data() + (a - base);
      const auto prefetch = [&](Index c0) {
        return !decoding ? PanelPrefetch{}
               : a == base ? value_phase_prefetch<std::uint16_t>(call, g, j0, c0 / (2 * W), products)
                           : PanelPrefetch{decoding_value_prefetch_bytes};
      };
      Index c0 = 0;
      if (nr <= pair_rows<Scalar>)  // a short sliver: two value panels at a time
        for (; c0 + W < dv_padded; c0 += 2 * W)
          bf16_panel_products<Scalar, 2, true>(nr, (b - a) / bf16_pair, p, call.tk, values + c0 / W * stride, stride, prefetch(c0),
                                               st.acc + r0 * dv_padded + c0, dv_padded);
      for (; c0 < dv_padded; c0 += W)
        bf16_panel_products<Scalar, 1, true>(nr, (b - a) / bf16_pair, p, call.tk, values + c0 / W * stride, stride, prefetch(c0),
                                             st.acc + r0 * dv_padded + c0, dv_padded);
    }
  }
}

}  // namespace headwise::detail
