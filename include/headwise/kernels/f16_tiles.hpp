// The F16 arithmetic of the fused kernel (TileArithmetic<F16Products>: F16 keys and values under
// KvArithmetic::stored): the F16 chains of detail/f16_products.hpp, which says what is rounded,
// over the panels kernels/panel_tiles.hpp walks (the widened F16 store's). The loop around them
// (kernels/fused_attention.hpp: masks, the online softmax, shards, merges) is every arithmetic's.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "headwise/detail/f16_products.hpp"
#include "headwise/detail/tile_product.hpp"
#include "headwise/kernels/decoding_prefetch.hpp"
#include "headwise/kernels/fused_call.hpp"
#include "headwise/kernels/panel_tiles.hpp"
#include "headwise/types.hpp"

namespace headwise::detail {

/// The kernel's stored type for F16 keys and values under KvArithmetic::stored: the numbers are
/// F16 (the widened store's panels), multiplied in chains of F16 (detail/f16_products.hpp).
struct F16Products {};

/// S = Qs K[j0 : j0 + cols]ᵀ by F16 chains over the panels each sliver sees (panel_score_tile).
template <class Call, class Scratch>
void f16_score_tile(const Call& call, Scratch& w, Index rows, Index j0, Index cols, Index g) {
  using Scalar = typename std::decay_t<decltype(w.s)>::value_type;
  constexpr Index W = TileShape<Scalar>::lanes;
  const Index d = call.kv.d_head(), stride = call.kv.key_panel_stride();
  panel_score_tile<std::uint16_t, PanelWalk>(
      call, w, rows, j0, cols, g,
      [&](auto panels, Index nr, Index r0, Index c0, const KeyPanels<std::uint16_t>& at, const PanelPrefetch& prefetch) {
        f16_score_products<W, decltype(panels)::value>(nr, d, w.q16.data() + r0 * d, d, at.keys, stride, prefetch,
                                                       w.s.data() + r0 * call.tk + c0, call.tk);
      });
}

/// acc += P V[j0 : j0 + cols] by F16 chains for the tile's rows, over the keys each sliver sees
/// (panel_value_tile): each row's weights rounded to F16, then each value panel's chains over the
/// sliver's keys, run by run of keys in one block (a chunk's chain carried from one run to the
/// next in w.h16: the bits of one run).
template <class Call, class Scratch, class State>
void f16_value_tile(const Call& call, Scratch& w, const State& st, Index rows, Index j0, Index g) {
  using Scalar = typename std::decay_t<decltype(w.s)>::value_type;
  constexpr Index W = TileShape<Scalar>::lanes;
  const Index dv_padded = call.dv_padded(), stride = call.kv.value_panel_stride();
  const auto keys = [&](Index r0, Index nr, KeyRange span) {
    for (Index r = 0; r < nr; ++r)
      round_to_f16(w.s.data() + (r0 + r) * call.tk + span.begin, span.size(), w.p16.data() + r * call.tk + span.begin);
    return span;
  };
  panel_value_tile<std::uint16_t, PanelWalk>(call, w, rows, j0, g, keys,
                   [&](auto panels, Index nr, Index r0, KeyRange run, KeyRange covered, const std::uint16_t* values,
                       const PanelPrefetch& prefetch, Index c0) {
                     const F16Run chains{run.size(), run.begin % f16_chain, run.begin != covered.begin && run.begin % f16_chain != 0,
                                         run.end == covered.end};
                     f16_value_products<W, decltype(panels)::value>(nr, chains, w.p16.data() + run.begin, call.tk, values, stride, prefetch,
                                                                    w.h16.data() + c0, dv_padded, st.acc + r0 * dv_padded + c0, dv_padded);
                   });
}

/// F16 keys and values multiplied in chains of F16: the query tile and each sliver's weights
/// rounded to F16; exp_nonpositive. A score chain can leave F16's range (beyond 65504) where the
/// float scores would not: the loop notes it (check_overflow refuses the call).
template <>
struct TileArithmetic<F16Products> {
  static constexpr bool short_exp = true;
  static constexpr bool scores_may_overflow = true;

  template <class Scalar>
  struct Scratch {
    // The query tile and a sliver's weights in F16; the value chains carried from one run to the next.
    std::vector<std::uint16_t> q16, p16, h16;
    void allocate(const FusedCall<Scalar>& call, Index rows) {
      constexpr const char* where = "attend";
      constexpr Index R = TileShape<Scalar>::rows;
      detail::allocate(q16, checked_size<Scalar>(where, "a query tile", rows, call.kv.d_head()), std::uint16_t(0), where, "a query tile");
      detail::allocate(p16, checked_size<Scalar>(where, "a score tile", R, call.tk), std::uint16_t(0), where, "a score tile");
      detail::allocate(h16, checked_size<Scalar>(where, "a value tile", R, call.dv_padded()), std::uint16_t(0), where, "a value tile");
    }
  };

  template <class Scalar, class Scratch>
  static void load_query(const FusedCall<Scalar>& call, Scratch& w, Index rows) {
    const Index d_head = call.kv.d_head();
    for (Index r = 0; r < rows; ++r) round_to_f16(w.scaled.row(r).data(), d_head, w.q16.data() + r * d_head);
  }
  template <class Scalar, class Scratch>
  static void score_tile(const FusedCall<Scalar>& call, Scratch& w, Index rows, Index j0, Index cols, Index g) {
    f16_score_tile(call, w, rows, j0, cols, g);
  }
  template <class Scalar, class Scratch, class State>
  static void value_tile(const FusedCall<Scalar>& call, Scratch& w, const State& st, Index rows, Index j0, Index, Index g) {
    f16_value_tile(call, w, st, rows, j0, g);
  }
};

}  // namespace headwise::detail
