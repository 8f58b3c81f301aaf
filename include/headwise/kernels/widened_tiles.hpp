// The widened arithmetic of the fused kernel (the primary TileArithmetic): keys and values read in
// the type they are stored in (Scalar; for float also BF16, F16, or int8 with a scale per token)
// and widened to Scalar as the products load them, every product and sum in Scalar. The score
// and value tiles are the micro-kernel's products (detail/tile_product.hpp) in the panel loops
// (kernels/panel_tiles.hpp).
#pragma once

#include <algorithm>
#include <type_traits>
#include <vector>

#include "headwise/detail/tile_product.hpp"
#include "headwise/kernels/decoding_prefetch.hpp"
#include "headwise/kernels/fused_call.hpp"
#include "headwise/kernels/panel_tiles.hpp"
#include "headwise/types.hpp"

namespace headwise::detail {

/// Keys stored in int8 (its scale per token): s[r][c] *= scale[c] for the nr rows of a sliver
/// over one key panel, W entries from `scales`.
template <class Scalar>
inline void scale_columns(Scalar* s, Index nr, Index ld, const float* scales) {
  using namespace Eigen::internal;
  using Packet = typename TileShape<Scalar>::Packet;
  constexpr Index P = TileShape<Scalar>::packet, W = TileShape<Scalar>::lanes;
  for (Index p = 0; p < W; p += P) {
    Packet f;
    if constexpr (std::is_same_v<Scalar, float>) f = ploadu<Packet>(scales + p);
    else f = pset1<Packet>(Scalar(0));  // (a float64 store is never int8)
    for (Index r = 0; r < nr; ++r) pstoreu(s + r * ld + p, pmul(ploadu<Packet>(s + r * ld + p), f));
  }
}

/// S = Qs K[j0 : j0 + cols]ᵀ for the tile's rows over the key panels each sliver sees
/// (panel_score_tile), by the micro-kernel; int8 keys' scales applied to their columns after.
template <class Stored, class Scalar, class Scratch>
void widened_score_tile(const FusedCall<Scalar>& call, Scratch& w, Index rows, Index j0, Index cols, Index g) {
  constexpr Index W = TileShape<Scalar>::lanes;
  const Index d = call.kv.d_head(), stride = call.kv.key_panel_stride();
  panel_score_tile<Stored, PanelWalk>(
      call, w, rows, j0, cols, g,
      [&](auto panels, Index nr, Index r0, Index c0, const KeyPanels<Stored>& at, const PanelPrefetch& prefetch) {
        constexpr Index n = decltype(panels)::value;
        const Scalar* q = w.q.data() + r0 * d;
        Scalar* s = w.s.data() + r0 * call.tk + c0;
        if constexpr (n == 2)
          micro_kernel_pair<Scalar, ALayout::packed, /*Accumulate=*/false>(nr, d, q, 0, at.keys, W, stride, s, call.tk, prefetch.next_phase);
        else micro_kernel_rows<Scalar, ALayout::packed, /*Accumulate=*/false>(nr, d, q, 0, at.keys, W, s, call.tk);
        if constexpr (KeyPanels<Stored>::scaled)
          for (Index p = 0; p < n * W; p += W) scale_columns(s + p, nr, call.tk, at.scales + p);
      });
}

/// Where the values are the keys' first d_v components: the values of keys [j0, j0 + cols) of
/// head g, out of the key panels score_tile has just read (from cache, not memory), into w.v in
/// the value panels' layout (panel c / W, row j - j0, lane c % W; zero past d_v). A W x W block
/// transposed per key panel and value panel (by register blocks): 1 / rows of the P V product's work.
template <class Scalar, class Scratch>
void values_from_keys(const FusedCall<Scalar>& call, Scratch& w, Index j0, Index cols, Index g) {
  constexpr Index W = TileShape<Scalar>::lanes;
  using Block = Eigen::Map<Eigen::Matrix<Scalar, W, W, Eigen::RowMajor>>;
  using ConstBlock = Eigen::Map<const Eigen::Matrix<Scalar, Eigen::Dynamic, W, Eigen::RowMajor>>;
  const Index dv = call.kv.d_v(), stride = call.tk * W;
  for (Index p = std::max<Index>(0, call.kv.first_kept() - j0) / W; p * W < cols; ++p) {  // (no panel before the kept keys is read)
    const Scalar* panel = call.kv.template key_panel<Scalar>(g, j0 + p * W);  // row c: component c of W keys
    for (Index c0 = 0; c0 < dv; c0 += W) {
      Block out(w.v.data() + c0 / W * stride + p * W * W);  // row: a key, column: a component
      const Index valid = std::min(W, dv - c0);
      if (valid == W) {  // by P x P blocks in registers (an entry at a time cost the latent step 12-16%)
        transpose_panel(W, panel + c0 * W, W, out.data());
        continue;
      }
      out.leftCols(valid) = ConstBlock(panel + c0 * W, valid, W).transpose();
      out.rightCols(W - valid).setZero();
    }
  }
}

/// acc += P V[j0 : j0 + cols] for the tile's rows over the keys each sliver sees
/// (panel_value_tile), by the micro-kernel, P read in place from w.s (rows of tk); int8 values'
/// scales folded into their columns of P first, block by block. Where the values are the keys',
/// they come from the key panels score_tile has just read (values_from_keys).
template <class Stored, class Scalar, class Scratch>
void widened_value_tile(const FusedCall<Scalar>& call, Scratch& w, const RowState<Scalar>& st, Index rows, Index j0,
                        Index cols, Index g) {
  constexpr Index W = TileShape<Scalar>::lanes;
  const Stored* tile_values = nullptr;  // (values inside the keys are stored as computed)
  if constexpr (std::is_same_v<Stored, Scalar>)
    if (call.kv.values_are_keys()) values_from_keys(call, w, j0, cols, g), tile_values = w.v.data();
  const Index dv_padded = call.dv_padded(), stride = tile_values ? call.tk * W : call.kv.value_panel_stride();
  const auto keys = [&](Index r0, Index nr, KeyRange span) {
    if constexpr (std::is_same_v<Stored, std::int8_t>)
      for (Index a = span.begin, b; a < span.end; a = b) {
        b = std::min(span.end, call.kv.block_end(j0 + a) - j0);
        const float* scale = call.kv.value_scales(g, j0 + a);
        for (Index r = r0; r < r0 + nr; ++r) {
          Scalar* p = w.s.data() + r * call.tk;
          for (Index j = a; j < b; ++j) p[j] *= static_cast<Scalar>(scale[j - a]);
        }
      }
    return span;
  };
  panel_value_tile<Stored, PanelWalk>(
      call, w, rows, j0, g, keys,
      [&](auto panels, Index nr, Index r0, KeyRange run, KeyRange, const Stored* values, const PanelPrefetch& prefetch, Index c0) {
        const Scalar* p = w.s.data() + r0 * call.tk + run.begin;
        Scalar* acc = st.acc + r0 * dv_padded + c0;
        if constexpr (decltype(panels)::value == 2)
          micro_kernel_pair<Scalar, ALayout::rows, /*Accumulate=*/true>(nr, run.size(), p, call.tk, values, W, stride, acc, dv_padded,
                                                                        prefetch.next_phase);
        else micro_kernel_rows<Scalar, ALayout::rows>(nr, run.size(), p, call.tk, values, W, acc, dv_padded);
      },
      tile_values);
}

/// The widened arithmetic: the scaled query tile packed for the micro-kernel, keys and values
/// widened as loaded, Eigen's exp.
template <class Stored>
struct TileArithmetic {
  static constexpr bool short_exp = false;             // (exp_and_sum: Eigen's pexp)
  static constexpr bool scores_may_overflow = false;   // (a score is a Scalar chain: no range of its own)

  template <class Scalar>
  struct Scratch {
    std::vector<Scalar> q;  // the scaled query tile, packed (detail::pack_a)
    std::vector<Scalar> v;  // values that are the keys' (PackedKeysValues::values_are_keys): a key tile's, as value panels
    void allocate(const FusedCall<Scalar>& call, Index rows) {
      constexpr const char* where = "attend";
      detail::allocate(q, checked_size<Scalar>(where, "a query tile", rows, call.kv.d_head()), Scalar(0), where, "a query tile");
      if (call.kv.values_are_keys() && call.kv.storage() == KvStorage::as_computed)
        detail::allocate(v, checked_size<Scalar>(where, "a value tile", call.tk, call.dv_padded()), Scalar(0), where, "a value tile");
    }
  };

  template <class Scalar, class Scratch>
  static void load_query(const FusedCall<Scalar>& call, Scratch& w, Index rows) {
    pack_a<Scalar>(rows, call.kv.d_head(), {w.scaled.data(), call.kv.d_head()}, w.q.data());
  }
  template <class Scalar, class Scratch>
  static void score_tile(const FusedCall<Scalar>& call, Scratch& w, Index rows, Index j0, Index cols, Index g) {
    widened_score_tile<Stored>(call, w, rows, j0, cols, g);
  }
  template <class Scalar, class Scratch, class State>
  static void value_tile(const FusedCall<Scalar>& call, Scratch& w, const State& st, Index rows, Index j0, Index cols, Index g) {
    widened_value_tile<Stored>(call, w, st, rows, j0, cols, g);
  }
};

}  // namespace headwise::detail
