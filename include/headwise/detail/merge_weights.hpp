// Internal: the one rule that merges two parts of a softmax known by their log-scales, written
// once for its three users: the fused kernel's key shards (running maxima, online_softmax_state.hpp),
// partial attention over shards of keys (logsumexps, partial_attention.hpp, and so ring
// attention) and a sink's logit joining a row's denominator (attention_sinks.hpp):
//   top = max(log_a, log_b),  a = e^(log_a - top),  b = e^(log_b - top)
// and each caller scales its sums, accumulators or outputs by a and b.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>

namespace headwise::detail {

template <class Scalar>
struct MergeWeights {
  Scalar top;  ///< the larger log-scale: the merged part's
  Scalar a, b;  ///< e^(log_a - top), e^(log_b - top)
};

/// The weights of parts a and b. A part at -inf (it saw nothing) weighs exactly 0; log_b must be
/// finite or log_a -inf too is not a merge (callers keep a as it is when b saw nothing).
template <class Scalar>
inline MergeWeights<Scalar> merge_weights(Scalar log_a, Scalar log_b) {
  const Scalar top = log_a == -std::numeric_limits<Scalar>::infinity() ? log_b : std::max(log_a, log_b);
  return {top, std::exp(log_a - top), std::exp(log_b - top)};
}

}  // namespace headwise::detail
