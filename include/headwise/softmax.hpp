// Row softmax under the causal mask: each row normalised over the keys it may see.
#pragma once

#include <cmath>
#include <limits>

#include "headwise/causal_mask.hpp"
#include "headwise/types.hpp"

namespace headwise {

/// Softmax of each row over its visible prefix, in place; returns each row's logsumexp.
/// scores: (n_q, n_k), already scaled. Row i is normalised over the keys visible_keys(i, ...)
/// lets it see; the entries after them become exactly 0 (the mask lives in the loop, never in
/// exp(-inf), which Eigen's vectorised exp does not send to 0). The row maximum is subtracted
/// before exp, so scores of +-1e4 do not overflow. A row that sees nothing becomes all zeros and
/// its logsumexp is -inf. Returns: (n_q) logsumexp_j s_ij over the visible j.
template <class Scalar>
Vector<Scalar> softmax_rows(Matrix<Scalar>& scores, bool causal = true) {
  const Index n_q = scores.rows(), n_k = scores.cols();
  Vector<Scalar> logsumexp(n_q);
  for (Index i = 0; i < n_q; ++i) {
    const Index visible = visible_keys(i, n_q, n_k, causal);
    auto row = scores.row(i);
    row.tail(n_k - visible).setZero();
    if (visible == 0) {
      logsumexp(i) = -std::numeric_limits<Scalar>::infinity();
      continue;
    }
    auto seen = row.head(visible);
    const Scalar max = seen.maxCoeff();
    seen = (seen.array() - max).exp();
    const Scalar sum = seen.sum();
    seen /= sum;
    logsumexp(i) = max + std::log(sum);
  }
  return logsumexp;
}

}  // namespace headwise
