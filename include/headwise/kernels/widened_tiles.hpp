// The widened arithmetic of the fused kernel (the primary TileArithmetic): keys and values read in
// the type they are stored in (Scalar; for float also BF16, F16, or int8 with a scale per token)
// and widened to Scalar as the products load them, every product and sum in Scalar. The score
// and value tiles are the micro-kernel's (detail/tile_product.hpp) over the packed panels.
#pragma once

#include <algorithm>
#include <type_traits>
#include <vector>

#include "headwise/detail/tile_product.hpp"
#include "headwise/kernels/decoding_prefetch.hpp"
#include "headwise/kernels/fused_call.hpp"
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

/// S = Qs K[j0 : j0 + cols]ᵀ for the tile's rows, sliver by sliver of R rows, each only over the
/// key panels its rows see (w.spans): the part of a diagonal tile above the diagonal (or
/// before a window) is never computed. Row r of S at w.s + r tk. Each panel's product is its own
/// (a panel never crosses a block).
template <class Stored, class Scalar, class Scratch>
void widened_score_tile(const FusedCall<Scalar>& call, Scratch& w, Index rows, Index j0, Index cols, Index g) {
  constexpr Index R = TileShape<Scalar>::rows, W = TileShape<Scalar>::lanes;
  const Index d_head = call.kv.d_head();
  if (rows <= pair_rows<Scalar>) {  // one short sliver (a decoding step): two panels at a time where both are seen, in one block
    const KeyRange span = w.spans[0];
    const Index first = span.begin / W * W, products = (span.end - first + 2 * W - 1) / (2 * W);
    for (Index c0 = first, step; c0 < span.end; c0 += step) {
      const bool pair = c0 + W < span.end && j0 + c0 + W < call.kv.block_end(j0 + c0);
      const Stored* panel = call.kv.template key_panel<Stored>(g, j0 + c0);
      Scalar* s = w.s.data() + c0;
      const char* next_phase =  // (the values: this tile's, read next)
          score_phase_prefetch<Stored>(call, g, {j0 + first, j0 + span.end}, (c0 - first) / (2 * W), products).next_phase;
      if (pair) micro_kernel_pair<Scalar, ALayout::packed, /*Accumulate=*/false>(rows, d_head, w.q.data(), 0, panel, W, call.kv.key_panel_stride(), s, call.tk, next_phase);
      else micro_kernel_rows<Scalar, ALayout::packed, /*Accumulate=*/false>(rows, d_head, w.q.data(), 0, panel, W, s, call.tk);
      step = pair ? 2 * W : W;
      if constexpr (std::is_same_v<Stored, std::int8_t>)
        for (Index p = 0; p < step; p += W) scale_columns(s + p, rows, call.tk, call.kv.key_scales(g, j0 + c0 + p));
    }
    return;
  }
  // Panel by panel (a panel of keys stays in L1 while every sliver that sees it is multiplied).
  for (Index c0 = 0; c0 < cols; c0 += W)
    for (Index r0 = 0; r0 < rows; r0 += R) {
      const Index nr = std::min(R, rows - r0);
      const KeyRange span = w.spans[static_cast<std::size_t>(r0 / R)];
      if (c0 >= span.end || c0 + W <= span.begin) continue;  // no row of the sliver sees this panel
      micro_kernel_rows<Scalar, ALayout::packed, /*Accumulate=*/false>(nr, d_head, w.q.data() + r0 * d_head, 0,
                                                                        call.kv.template key_panel<Stored>(g, j0 + c0), W,
                                                                        w.s.data() + r0 * call.tk + c0, call.tk);
      if constexpr (std::is_same_v<Stored, std::int8_t>)
        scale_columns(w.s.data() + r0 * call.tk + c0, nr, call.tk, call.kv.key_scales(g, j0 + c0));
    }
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

/// acc += P V[j0 : j0 + cols] for the tile's rows, sliver by sliver, each over the keys its rows
/// see (w.spans), P read in place from w.s (rows of tk), V from its packed panels (or, where the
/// values are the keys', from w.v). A sliver's keys that lie in two blocks are two runs of one
/// product, the second continuing the first's chains: the bits of one run.
template <class Stored, class Scalar, class Scratch>
void widened_value_tile(const FusedCall<Scalar>& call, Scratch& w, const RowState<Scalar>& st, Index rows, Index j0,
                Index cols, Index g) {
  constexpr Index R = TileShape<Scalar>::rows, W = TileShape<Scalar>::lanes;
  const bool own = !call.kv.values_are_keys();
  if constexpr (std::is_same_v<Stored, Scalar>)  // (values inside the keys are stored as computed)
    if (!own) values_from_keys(call, w, j0, cols, g);
  const Index dv_padded = call.dv_padded(), stride = own ? call.kv.value_panel_stride() : call.tk * W;
  for (Index r0 = 0; r0 < rows; r0 += R) {
    const Index nr = std::min(R, rows - r0);
    const KeyRange span = w.spans[static_cast<std::size_t>(r0 / R)];
    for (Index a = span.begin, b; a < span.end; a = b) {  // run by run of keys in one block
      b = own ? std::min(span.end, call.kv.block_end(j0 + a) - j0) : span.end;
      const Stored* values = own ? call.kv.template value_row<Stored>(g, j0 + a) : reinterpret_cast<const Stored*>(w.v.data() + a * W);
      Scalar* p = w.s.data() + r0 * call.tk + a;
      if constexpr (std::is_same_v<Stored, std::int8_t>) {  // int8 values: each key's scale folded into its column of P
        const float* scale = call.kv.value_scales(g, j0 + a);
        for (Index r = 0; r < nr; ++r)
          for (Index j = 0; j < b - a; ++j) p[r * call.tk + j] *= static_cast<Scalar>(scale[j]);
      }
      const bool decoding = own && rows <= pair_rows<Scalar> && a == span.begin;  // (the next tile's keys, read next)
      Index c0 = 0;
      if (nr <= pair_rows<Scalar>)  // a decoding step: two value panels at a time
        for (; c0 + W < dv_padded; c0 += 2 * W)
          micro_kernel_pair<Scalar, ALayout::rows, /*Accumulate=*/true>(
              nr, b - a, p, call.tk, values + c0 / W * stride, W, stride, st.acc + r0 * dv_padded + c0, dv_padded,
              decoding ? value_phase_prefetch<Stored>(call, g, j0, c0 / (2 * W), (dv_padded / W + 1) / 2).next_phase : nullptr);
      for (; c0 < dv_padded; c0 += W)
        micro_kernel_rows<Scalar, ALayout::rows>(nr, b - a, p, call.tk, values + c0 / W * stride, W, st.acc + r0 * dv_padded + c0,
                                                 dv_padded);
    }
  }
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
