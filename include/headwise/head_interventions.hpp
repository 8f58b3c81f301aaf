// Head interventions, each a hook function for a layer's Z (hook_function.hpp): every head's Z side
// by side, changed before the W_O sum, out = Σ_h Z'_h W_O[h] + b_O, where Z'_h is zeros (ablation),
// a mean row (mean ablation), Z_h from another run (activation patching) or g Z_h (a gate). One way
// to change a head's Z: a whole model takes these at blocks.L.attn.hook_z, one layer's forward as
// its z_hook; in_turn combines several.
//   auto out = layer.forward(x, {}, headwise::in_turn(headwise::ablate_head(5), headwise::gate_head(3, 0.5)));
#pragma once

#include <type_traits>
#include <utility>

#include "headwise/detail/errors.hpp"
#include "headwise/hook_function.hpp"
#include "headwise/types.hpp"

namespace headwise {

/// Zero ablation: head h contributes nothing.
inline auto ablate_head(Index h) {
  return [h](auto& z, const HookPoint& at) { at.head(z, h).setZero(); };
}

/// Scales head h's contribution by g.
inline auto gate_head(Index h, double g) {
  return [h, g](auto& z, const HookPoint& at) {
    using Scalar = typename std::decay_t<decltype(z)>::Scalar;
    at.head(z, h) *= static_cast<Scalar>(g);
  };
}

/// Activation patching: head h's Z replaced by `z_h` (n, d_head) from another run on the same n
/// tokens, or by one row (1, d_head) at every position (mean ablation: mean_over_positions).
template <class Scalar>
HookFunction<Scalar> patch_head(Index h, Matrix<Scalar> z_h) {
  return [h, z_h = std::move(z_h)](Matrix<Scalar>& z, const HookPoint& at) {
    auto head = at.head(z, h);
    if (z_h.cols() != head.cols() || (z_h.rows() != 1 && z_h.rows() != z.rows()))
      detail::invalid("patch_head", "the replacement of head ", h, " on ", at.name, " is ", z_h.rows(), "x", z_h.cols(), ", expected ",
                      z.rows(), "x", head.cols(), " or 1x", head.cols());
    if (z_h.rows() == 1) head = z_h.replicate(z.rows(), 1);
    else head = z_h;
  };
}

/// Head h's Z averaged over positions: z (n, n_heads d_head) -> (1, d_head), for mean ablation
/// (patch_head(h, mean_over_positions(z, heads, h))).
template <class Scalar>
Matrix<Scalar> mean_over_positions(const Matrix<Scalar>& z, Index n_heads, Index h) {
  if (n_heads <= 0 || z.cols() % n_heads != 0 || h < 0 || h >= n_heads)
    detail::invalid("mean_over_positions", "head ", h, " of ", n_heads, " heads in z with ", z.cols(), " columns");
  const Index d_head = z.cols() / n_heads;
  return z.middleCols(h * d_head, d_head).colwise().mean();
}

}  // namespace headwise
