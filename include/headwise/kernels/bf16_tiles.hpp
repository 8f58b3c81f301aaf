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
#include "headwise/kernels/panel_tiles.hpp"
#include "headwise/types.hpp"

namespace headwise::detail {

/// S = Qs K[j0 : j0 + cols]ᵀ by BF16 pairs over the panels each sliver sees (panel_score_tile).
template <class Call, class Scratch>
void bf16_score_tile(const Call& call, Scratch& w, Index rows, Index j0, Index cols, Index g) {
  using Scalar = typename std::decay_t<decltype(w.s)>::value_type;
  const Index d = call.kv.d_head(), pairs = d / bf16_pair, stride = call.kv.key_panel_stride();
  panel_score_tile(call, w, rows, j0, cols, g,
                   [&](auto panels, Index nr, Index r0, const std::uint16_t* panel, const PanelPrefetch& prefetch, Scalar* s) {
                     bf16_panel_products<Scalar, decltype(panels)::value, false>(nr, pairs, w.q16.data() + r0 * d, d, panel, stride,
                                                                                 prefetch, s, call.tk);
                   });
}

/// acc += P V[j0 : j0 + cols] by BF16 pairs for the tile's rows, over the keys each sliver sees
/// widened to whole pairs (panel_value_tile): each row's weights rounded to BF16 (zero on the
/// pair's other key where the span begins or ends inside a pair), then each value panel's chains
/// continued block by block (a block holds whole pairs: the bits of one run).
template <class Call, class Scratch, class State>
void bf16_value_tile(const Call& call, Scratch& w, const State& st, Index rows, Index j0, Index g) {
  using Scalar = typename std::decay_t<decltype(w.s)>::value_type;
  const Index dv_padded = call.dv_padded(), stride = call.kv.value_panel_stride();
  const auto keys = [&](Index r0, Index nr, KeyRange span) {
    const Index base = span.begin / bf16_pair * bf16_pair, stop = (span.end + bf16_pair - 1) / bf16_pair * bf16_pair;
    for (Index r = 0; r < nr; ++r) {  // (the key before span.begin and after span.end - 1, in their pairs: weight 0)
      std::uint16_t* u = w.p16.data() + r * call.tk;
      u[0] = u[stop - base - 1] = 0;
      round_to_bf16(w.s.data() + (r0 + r) * call.tk + span.begin, span.end - span.begin, u + (span.begin - base));
    }
    return KeyRange{base, stop};
  };
  panel_value_tile(call, w, rows, j0, g, keys,
                   [&](auto panels, Index nr, Index r0, KeyRange run, KeyRange covered, const std::uint16_t* values,
                       const PanelPrefetch& prefetch, Index c0) {
                     const std::uint16_t* p = w.p16.data() + (run.begin - covered.begin);  // (the weights from the run's first pair)
                     bf16_panel_products<Scalar, decltype(panels)::value, true>(nr, run.size() / bf16_pair, p, call.tk, values, stride,
                                                                                prefetch, st.acc + r0 * dv_padded + c0, dv_padded);
                   });
}

}  // namespace headwise::detail
