// Attention sinks (gpt-oss; StreamingLLM's learned variant): each head has a learned logit that
// joins every row's softmax as one more column and is then dropped, so a row's weights sum to
// less than 1 and a head can attend to "nothing". The logsumexp includes the sink.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>

#include "headwise/detail/merge_weights.hpp"

namespace headwise {

/// A row's softmax with a sink, from its running maximum m and sum l = Σ exp(s_j - m) over the keys
/// it sees: Z = scale acc / denominator (acc = Σ exp(s_j - m) v_j) and logsumexp = lse.
template <class Scalar>
struct SinkNormalisation {
  Scalar scale, denominator, lse;
};

/// With m = -inf (no key seen) the row's only mass is the sink: Z = 0, logsumexp = sink.
template <class Scalar>
SinkNormalisation<Scalar> normalise_with_sink(Scalar max, Scalar sum, Scalar sink) {
  const detail::MergeWeights<Scalar> w = detail::merge_weights(max, sink);  // the sink as one more part
  const Scalar denominator = sum * w.a + w.b;
  return {w.a, denominator, w.top + std::log(denominator)};
}

}  // namespace headwise
