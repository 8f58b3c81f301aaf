// One attention head: from the residual stream X and its three projections to Z = A V, with
// every intermediate kept (the trace) for teaching and inspection.
#pragma once

#include <utility>

#include "headwise/attention_core.hpp"
#include "headwise/causal_mask.hpp"
#include "headwise/detail/errors.hpp"
#include "headwise/linear.hpp"
#include "headwise/options.hpp"
#include "headwise/scores.hpp"
#include "headwise/softmax.hpp"
#include "headwise/types.hpp"

namespace headwise {

/// Every intermediate of one head on one input, in the order the equation computes them.
template <class Scalar>
struct HeadTrace {
  Matrix<Scalar> q, k, v;         ///< (n, d_head) each: the projections of X
  Matrix<Scalar> scores;          ///< (n, n): Q Kᵀ
  double divisor = 0;             ///< what the scores were divided by
  Matrix<Scalar> scaled_scores;   ///< (n, n): Q Kᵀ / divisor
  Matrix<Scalar> masked_scores;   ///< (n, n): the scaled scores with -inf where the mask hides a key
  Matrix<Scalar> weights;         ///< (n, n): A, each row a softmax over what it sees
  Vector<Scalar> logsumexp;       ///< (n): each row's log softmax denominator
  Matrix<Scalar> z;               ///< (n, d_head): A V
};

/// One head: Q = X W_Q + b_Q, K = X W_K + b_K, V = X W_V + b_V, Z = softmax(mask(Q Kᵀ / div)) V.
///   AttentionHead<double> head(Linear<double>(w_q), Linear<double>(w_k), Linear<double>(w_v));
///   HeadTrace<double> t = head.trace(x);   // t.q, t.scores, t.weights, t.z, ...
template <class Scalar>
class AttentionHead {
 public:
  /// query, key: (d_model, d_head) maps; value: (d_model, d_v) with d_v usually d_head.
  AttentionHead(Linear<Scalar> query, Linear<Scalar> key, Linear<Scalar> value)
      : query_(std::move(query)), key_(std::move(key)), value_(std::move(value)) {
    if (key_.in_features() != query_.in_features() || value_.in_features() != query_.in_features())
      detail::invalid("AttentionHead", "projections take ", query_.in_features(), ", ",
                      key_.in_features(), " and ", value_.in_features(),
                      " inputs (Q, K, V), expected the same d_model");
    if (key_.out_features() != query_.out_features())
      detail::invalid("AttentionHead", "W_Q has ", query_.out_features(), " columns but W_K has ",
                      key_.out_features(), " (both must be d_head)");
  }

  Index d_model() const { return query_.in_features(); }
  Index d_head() const { return query_.out_features(); }
  const Linear<Scalar>& query() const { return query_; }
  const Linear<Scalar>& key() const { return key_; }
  const Linear<Scalar>& value() const { return value_; }

  /// Every intermediate. x: (n, d_model).
  HeadTrace<Scalar> trace(const Eigen::Ref<const Matrix<Scalar>>& x,
                          const AttentionOptions& options = {}) const {
    check_input(x, "AttentionHead::trace");
    HeadTrace<Scalar> t;
    t.divisor = resolve_divisor(options, d_head(), "AttentionHead::trace");
    t.q = query_.forward(x);                                      // step 1: project
    t.k = key_.forward(x);
    t.v = value_.forward(x);
    detail::require_finite("AttentionHead::trace", "the query projection x W_Q + b_Q", t.q);
    detail::require_finite("AttentionHead::trace", "the key projection x W_K + b_K", t.k);
    detail::require_finite("AttentionHead::trace", "the value projection x W_V + b_V", t.v);
    t.scores = scores(t.q, t.k);                                  // step 2: score every pair
    t.scaled_scores = t.scores / static_cast<Scalar>(t.divisor);  // step 3: shrink
    t.masked_scores = masked_scores_for_display(t.scaled_scores, options.causal);
    t.weights = t.scaled_scores;                                  // step 4: mask and normalise
    t.logsumexp = softmax_rows(t.weights, options.causal);
    t.z.resize(x.rows(), value_.out_features());                  // step 5: mix the values
    t.z.noalias() = t.weights * t.v;
    return t;
  }

  /// The head's output Z = A V. x: (n, d_model) -> (n, d_v).
  Matrix<Scalar> forward(const Eigen::Ref<const Matrix<Scalar>>& x,
                         const AttentionOptions& options = {}) const {
    check_input(x, "AttentionHead::forward");
    return attention(query_.forward(x), key_.forward(x), value_.forward(x), options).z;
  }

 private:
  void check_input(const Eigen::Ref<const Matrix<Scalar>>& x, const char* where) const {
    if (x.cols() != d_model())
      detail::invalid(where, "x has ", x.cols(), " columns, expected d_model = ", d_model());
    detail::require_finite(where, "x", x);
  }

  Linear<Scalar> query_, key_, value_;
};

}  // namespace headwise
