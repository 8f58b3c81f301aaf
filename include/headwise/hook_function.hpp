// Hook functions, TransformerLens's way of reading or changing a value inside a run: where one is
// called (HookPoint: the hook's name, how many heads lie side by side in its value, the position of
// its row 0), its type, the one rule a call keeps (call_hook: the value keeps its shape and stays
// finite), and the ready-made ones that are not about heads: a value replaced by another run's,
// several hook functions in turn. The head interventions (ablate, gate, patch one head's Z) are
// hook functions too: head_interventions.hpp. A whole model takes them by hook name
// (model::RunOptions::hook_functions); one layer's forward takes one for its Z.
#pragma once

#include <functional>
#include <string>
#include <utility>

#include "headwise/detail/errors.hpp"
#include "headwise/types.hpp"

namespace headwise {

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
      detail::invalid("HookPoint::head", "head ", h, " of ", name, ", which holds ", heads, " heads side by side");
    const Index width = value.cols() / heads;
    return value.middleCols(h * width, width);
  }
};

/// A hook function: called with the value at its hook point, which it may read or change in place
/// (TransformerLens's hook functions); the run goes on with what it leaves there (of the same shape).
template <class Scalar>
using HookFunction = std::function<void(Matrix<Scalar>& value, const HookPoint& at)>;

/// Calls `function` on `value` at `at` (nothing if it is empty): it must leave the value's shape
/// and a finite value, or the call `where` is refused, naming the hook.
template <class Scalar>
void call_hook(const HookFunction<Scalar>& function, Matrix<Scalar>& value, const HookPoint& at, const char* where) {
  if (!function) return;
  const Index rows = value.rows(), cols = value.cols();
  function(value, at);
  if (value.rows() != rows || value.cols() != cols)
    detail::invalid(where, "the hook function on ", at.name, " left it ", value.rows(), "x", value.cols(), ", the value there is ", rows,
                    "x", cols);
  if (!value.allFinite()) detail::invalid(where, "the hook function on ", at.name, " left a value that is not finite");
}

/// A hook function replacing the value by `value` (activation patching: another run's stream).
template <class Scalar>
HookFunction<Scalar> replace_with(Matrix<Scalar> value) {
  return [value = std::move(value)](Matrix<Scalar>& at_hook, const HookPoint&) { at_hook = value; };
}

/// Hook functions called in turn at one hook point, each on what the one before left:
///   run_options.hook_functions["blocks.1.attn.hook_z"] = headwise::in_turn(headwise::ablate_head(5), headwise::gate_head(3, 0.5));
template <class... Functions>
auto in_turn(Functions... functions) {
  return [=](auto& value, const HookPoint& at) { (functions(value, at), ...); };
}

}  // namespace headwise
