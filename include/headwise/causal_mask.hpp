// The causal mask: which keys each query may see, and the -inf picture of masked scores.
//
// Queries are aligned with the END of the keys, as in incremental decoding: with n_q queries and
// n_k keys, query i sits at position (n_k - n_q) + i and sees keys 0 .. (n_k - n_q) + i. When
// n_q == n_k this is the familiar lower triangle: query i sees keys 0..i.
#pragma once

#include <algorithm>
#include <limits>

#include "headwise/types.hpp"

namespace headwise {

/// How many keys (a prefix 0..count-1) query i of n_q may see among n_k keys.
/// Without the causal mask every query sees all n_k keys. The count can be 0 (n_q > n_k).
inline Index visible_keys(Index i, Index n_q, Index n_k, bool causal) {
  if (!causal) return n_k;
  return std::clamp<Index>(n_k - n_q + i + 1, 0, n_k);
}

/// A copy of the scores with -inf where the causal mask hides a key: for printing and teaching.
/// scores: (n_q, n_k). The computation never relies on exp(-inf): see softmax.hpp.
template <class Scalar>
Matrix<Scalar> masked_scores_for_display(const Matrix<Scalar>& scores, bool causal = true) {
  Matrix<Scalar> shown = scores;
  for (Index i = 0; i < shown.rows(); ++i) {
    const Index visible = visible_keys(i, shown.rows(), shown.cols(), causal);
    shown.row(i).tail(shown.cols() - visible).setConstant(-std::numeric_limits<Scalar>::infinity());
  }
  return shown;
}

}  // namespace headwise
