// Hooks of a whole model's run: where a hook function is called (HookPoint), the function's type
// (TransformerLens's hook functions: read or change the value in place), and two ready-made ones:
// replace a stream by another run's, or apply head interventions at attn.hook_z.
#pragma once

#include <functional>
#include <string>
#include <utility>

#include "headwise/detail/errors.hpp"
#include "headwise/head_interventions.hpp"
#include "headwise/types.hpp"

namespace headwise::model {

/// Where a hook function is called: the hook's name, and how many heads lie side by side in its
/// value's columns (the per-head hooks: attn.hook_q, hook_k, hook_v, hook_z, hook_pattern; 0
/// elsewhere).
struct HookPoint {
  std::string name;
  Index heads = 0;
  Index first = 0;  ///< the position of the value's row 0 (a resumed run's first new token; RunOptions::first_position)
  /// Head h's columns of a per-head value ((n, d) of the (n, heads d) side by side: TransformerLens's
  /// [pos, head, d] at head h; the pattern's (n, n) of head h).
  template <class M>
  auto head(M& value, Index h) const {
    if (heads <= 0 || h < 0 || h >= heads)
      headwise::detail::invalid("HookPoint::head", "head ", h, " of ", name, ", which holds ", heads, " heads side by side");
    const Index width = value.cols() / heads;
    return value.middleCols(h * width, width);
  }
};

/// A hook function: called with the value at its hook point, which it may read or change in place
/// (TransformerLens's hook functions); the run goes on with what it leaves there (of the same shape).
template <class Scalar>
using HookFunction = std::function<void(Matrix<Scalar>& value, const HookPoint& at)>;

/// A hook function replacing the value by `value` (activation patching: another run's stream).
template <class Scalar>
HookFunction<Scalar> replace_with(Matrix<Scalar> value) {
  return [value = std::move(value)](Matrix<Scalar>& at_hook, const HookPoint&) { at_hook = value; };
}

/// A hook function for blocks.L.attn.hook_z: `interventions` on the layer's heads (ablations,
/// gates, patches of one head's Z: head_interventions.hpp), applied inside the W_O sum.
template <class Scalar>
HookFunction<Scalar> intervene(HeadInterventions<Scalar> interventions) {
  return [iv = std::move(interventions)](Matrix<Scalar>& z, const HookPoint& at) {
    if (iv.n_heads() != at.heads)
      headwise::detail::invalid("DecoderModel::run", "interventions for ", iv.n_heads(), " heads on ", at.name, ", which holds ", at.heads);
    iv.apply(z);
  };
}

}  // namespace headwise::model
