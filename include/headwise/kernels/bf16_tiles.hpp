// The BF16 arithmetic of the fused kernel (TileArithmetic<Bf16Products>: BF16 keys and values under
// KvArithmetic::stored): the pair products of detail/bf16_products.hpp, which says what is rounded,
// over the panels kernels/panel_tiles.hpp walks. The loop around them (kernels/fused_attention.hpp:
// masks, the online softmax, shards, merges) is every arithmetic's.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "headwise/detail/bf16_products.hpp"
#include "headwise/detail/tile_product.hpp"
#include "headwise/kernels/decoding_prefetch.hpp"
#include "headwise/kernels/fused_call.hpp"
#include "headwise/kernels/panel_tiles.hpp"
#include "headwise/types.hpp"

namespace headwise::detail {

/// The kernel's stored type for BF16 keys and values under KvArithmetic::stored: the numbers are
/// BF16 (laid out in pairs, detail/bf16_products.hpp), multiplied as BF16 pairs.
struct Bf16Products {};

/// S = Qs K[j0 : j0 + cols]ᵀ by BF16 pairs over the panels each sliver sees (panel_score_tile).
template <class Call, class Scratch>
void bf16_score_tile(const Call& call, Scratch& w, Index rows, Index j0, Index cols, Index g) {
  using Scalar = typename std::decay_t<decltype(w.s)>::value_type;
  const Index d = call.kv.d_head(), pairs = d / bf16_pair, stride = call.kv.key_panel_stride();
  panel_score_tile<std::uint16_t, PanelWalk>(
      call, w, rows, j0, cols, g,
      [&](auto panels, Index nr, Index r0, Index c0, const KeyPanels<std::uint16_t>& at, const PanelPrefetch& prefetch) {
        bf16_panel_products<Scalar, decltype(panels)::value, false>(nr, pairs, w.q16.data() + r0 * d, d, at.keys, stride, prefetch,
                                                                    w.s.data() + r0 * call.tk + c0, call.tk);
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
  panel_value_tile<std::uint16_t, PanelWalk>(call, w, rows, j0, g, keys,
                   [&](auto panels, Index nr, Index r0, KeyRange run, KeyRange covered, const std::uint16_t* values,
                       const PanelPrefetch& prefetch, Index c0) {
                     const std::uint16_t* p = w.p16.data() + (run.begin - covered.begin);  // (the weights from the run's first pair)
                     bf16_panel_products<Scalar, decltype(panels)::value, true>(nr, run.size() / bf16_pair, p, call.tk, values, stride,
                                                                                prefetch, st.acc + r0 * dv_padded + c0, dv_padded);
                   });
}

/// BF16 keys and values multiplied by pairs: the query tile and each sliver's weights rounded to
/// BF16; exp_nonpositive.
template <>
struct TileArithmetic<Bf16Products> {
  static constexpr bool short_exp = true;
  static constexpr bool scores_may_overflow = false;  // (pairs summed in float: a float's range)

  template <class Scalar>
  struct Scratch {
    std::vector<std::uint16_t> q16, p16;  // the query tile and a sliver's weights in BF16
    void allocate(const FusedCall<Scalar>& call, Index rows) {
      constexpr const char* where = "attend";
      detail::allocate(q16, checked_size<Scalar>(where, "a query tile", rows, call.kv.d_head()), std::uint16_t(0), where, "a query tile");
      detail::allocate(p16, checked_size<Scalar>(where, "a score tile", TileShape<Scalar>::rows, call.tk), std::uint16_t(0), where,
                       "a score tile");
    }
  };

  template <class Scalar, class Scratch>
  static void load_query(const FusedCall<Scalar>& call, Scratch& w, Index rows) {
    const Index d_head = call.kv.d_head();
    for (Index r = 0; r < rows; ++r) round_to_bf16(w.scaled.row(r).data(), d_head, w.q16.data() + r * d_head);
  }
  template <class Scalar, class Scratch>
  static void score_tile(const FusedCall<Scalar>& call, Scratch& w, Index rows, Index j0, Index cols, Index g) {
    bf16_score_tile(call, w, rows, j0, cols, g);
  }
  template <class Scalar, class Scratch, class State>
  static void value_tile(const FusedCall<Scalar>& call, Scratch& w, const State& st, Index rows, Index j0, Index, Index g) {
    bf16_value_tile(call, w, st, rows, j0, g);
  }
};

}  // namespace headwise::detail
