// Row softmax under a mask: each row normalised over the keys it may see, its logsumexp returned
// (softmax_rows; a head's sink joins the denominator). And RowSoftmax, the softmax step with its
// backward, dS = P ∘ (dP - rowsum(dP ∘ P)), as the step-by-step backward (attention_backward.hpp)
// chains it after CausalMask (causal_mask.hpp).
#pragma once

#include <cmath>
#include <limits>
#include <memory>
#include <utility>

#include "headwise/options.hpp"
#include "headwise/score_rule.hpp"
#include "headwise/types.hpp"

namespace headwise {

/// Softmax of each row over the keys the rule lets it see, in place; returns each row's logsumexp.
/// scores: (n_q, n_k), scaled and modified (masked_scores in score_rule.hpp: -inf where a key inside
/// a row's range is hidden). Entries outside rule.keys(i), and hidden ones, become exactly 0: the
/// mask lives in the loop, never in exp(-inf), which Eigen's vectorised exp does not send to 0. The
/// row maximum is subtracted before exp, so scores of +-1e4 do not overflow. A row that sees
/// nothing becomes all zeros with logsumexp -inf; with a sink (head h's), the sink joins each
/// denominator and the logsumexp.
template <class Scalar>
Vector<Scalar> softmax_rows(Matrix<Scalar>& scores, const ScoreRule<Scalar>& rule, Index h = 0) {
  constexpr Scalar minus_inf = -std::numeric_limits<Scalar>::infinity();
  Vector<Scalar> logsumexp(scores.rows());
  for (Index i = 0; i < scores.rows(); ++i) {
    const KeyRange keys = rule.keys(i);
    auto row = scores.row(i);
    auto seen = row.segment(keys.begin, keys.size());
    const Scalar max = keys.empty() ? minus_inf : seen.maxCoeff();
    if (max == minus_inf && rule.sees_any(i, keys.begin, keys.end)) {  // every visible score overflowed to -inf: NaN, not a silent 0
      row.setConstant(std::numeric_limits<Scalar>::quiet_NaN());
      logsumexp(i) = std::numeric_limits<Scalar>::quiet_NaN();
      continue;
    }
    Scalar sum = 0;
    if (max != minus_inf) {  // else the row sees nothing (or only hidden keys)
      seen = (seen.array() == minus_inf).select(Scalar(0), (seen.array() - max).exp());
      sum = seen.sum();
    }
    row.head(keys.begin).setZero();
    row.tail(row.size() - keys.begin - keys.size()).setZero();
    if (rule.has_sinks()) {
      const SinkNormalisation<Scalar> n = normalise_with_sink(max, sum, rule.sink(h));
      seen *= n.scale / n.denominator;
      logsumexp(i) = n.lse;
    } else if (max == minus_inf) {
      seen.setZero();
      logsumexp(i) = minus_inf;
    } else {
      seen /= sum;
      logsumexp(i) = max + std::log(sum);
    }
  }
  return logsumexp;
}

/// The row-softmax step with its backward. forward keeps the weights P; backward is
/// dS = P ∘ (dP - rowsum(dP ∘ P)), with no (n_k x n_k) Jacobian. With sinks, P sums to less than 1
/// and the same formula holds (the sink has no value, so no gradient reaches it through A V).
///   RowSoftmax<double> softmax;                  // over the causal prefix (options: the rule)
///   Matrix<double> a = softmax.forward(masked);  // masked: CausalMask's output
///   Matrix<double> ds = softmax.backward(da);
template <class Scalar>
class RowSoftmax {
 public:
  explicit RowSoftmax(AttentionOptions options = {})
      : options_(std::make_shared<const AttentionOptions>(std::move(options))) {}
  /// Head head.index of a multi-head call's options (its sink), shared (not copied).
  RowSoftmax(std::shared_ptr<const AttentionOptions> options, OneHead head)
      : options_(detail::shared_options(std::move(options), head, "RowSoftmax")), head_(head) {}

  /// masked: (n_q, n_k) -> the weights A (n_q, n_k); logsumexp() gives each row's.
  Matrix<Scalar> forward(const Matrix<Scalar>& masked) {
    weights_ = masked;
    logsumexp_ = softmax_rows(weights_, ScoreRule<Scalar>(*options_, masked.rows(), masked.cols(), head_.n_heads, "RowSoftmax"),
                              head_.index);
    return weights_;
  }
  const Vector<Scalar>& logsumexp() const { return logsumexp_; }

  /// From dA = ∂L/∂A, ∂L/∂(masked scores) for the last forward.
  Matrix<Scalar> backward(const Eigen::Ref<const Matrix<Scalar>>& da) const {
    if (da.rows() != weights_.rows() || da.cols() != weights_.cols())
      detail::invalid("RowSoftmax::backward", "da is ", da.rows(), "x", da.cols(), ", expected ", weights_.rows(), "x",
                      weights_.cols(), " (the last forward's weights)");
    const Vector<Scalar> dot = da.cwiseProduct(weights_).rowwise().sum();
    Matrix<Scalar> ds = weights_.cwiseProduct(da - dot.replicate(1, da.cols()));
    return ds;
  }

 private:
  std::shared_ptr<const AttentionOptions> options_;
  OneHead head_;
  Matrix<Scalar> weights_;
  Vector<Scalar> logsumexp_;
};

/// Softmax of each row over its causal prefix (or every key when causal is false), in place.
template <class Scalar>
Vector<Scalar> softmax_rows(Matrix<Scalar>& scores, bool causal = true) {
  AttentionOptions options;
  options.causal = causal;
  return softmax_rows(scores, ScoreRule<Scalar>(options, scores.rows(), scores.cols(), 1, "softmax_rows"));
}

}  // namespace headwise
