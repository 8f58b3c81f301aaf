// The scalar of a model's logits that its backward differentiates and the analyses measure: the
// mean next-token cross-entropy (or any weighted sum of per-row cross-entropies), a logit
// difference, or any direction on the logits; its value and its gradient with respect to the logits.
//
//   auto metric = headwise::model::Metric<float>::logit_difference(mary, john);   // the last row's
//   double v = metric.value(run.logits);
#pragma once

#include <cmath>
#include <utility>
#include <vector>

#include "headwise/detail/errors.hpp"
#include "headwise/detail/parallel.hpp"
#include "headwise/types.hpp"

namespace headwise::model {

/// A scalar of the logits (n, vocab) that a backward differentiates and the analyses measure.
template <class Scalar>
struct Metric {
  enum class Kind { cross_entropy, logit_difference, direction };
  Kind kind = Kind::cross_entropy;
  std::vector<Index> targets;  ///< cross_entropy: the id row t should predict, or -1 (no term)
  double weight = 1.0;         ///< cross_entropy: the value is weight Σ_t -log softmax(logits_t)[targets[t]]
  Index row = -1, a = 0, b = 0;  ///< logit_difference: logits(row, a) - logits(row, b); row -1: the last
  Matrix<Scalar> along;        ///< direction: Σ along ∘ logits, (n, vocab)

  /// The mean next-token cross-entropy on ids (row t predicts ids[t + 1], n - 1 terms).
  static Metric next_token_loss(const std::vector<Index>& ids) {
    Metric m;
    if (ids.size() < 2) headwise::detail::invalid("Metric::next_token_loss", "ids has ", ids.size(), " tokens (at least 2: one to predict)");
    m.targets.assign(ids.begin() + 1, ids.end()), m.targets.push_back(-1);
    m.weight = 1.0 / double(ids.size() - 1);
    return m;
  }
  /// logits(row, a) - logits(row, b) (row -1: the last token's): IOI's metric.
  static Metric logit_difference(Index a, Index b, Index row = -1) {
    Metric m;
    m.kind = Kind::logit_difference, m.a = a, m.b = b, m.row = row;
    return m;
  }
  /// Σ direction ∘ logits: any linear function of the logits (one row's, a token's, ...).
  static Metric direction(Matrix<Scalar> direction) {
    Metric m;
    m.kind = Kind::direction, m.along = std::move(direction);
    return m;
  }

  /// The metric's value on logits, and (with d_logits) its gradient, in double over Scalar's logits;
  /// the cross-entropy's rows on up to `threads` threads (0: the default, as AttentionOptions), each
  /// row's term kept and the terms then summed in row order (the same bits on any number of threads).
  double value(const Matrix<Scalar>& logits, Matrix<Scalar>* d_logits = nullptr, int threads = 1) const {
    check(logits);
    if (d_logits) d_logits->setZero(logits.rows(), logits.cols());
    if (kind == Kind::direction) {
      if (d_logits) *d_logits = along;
      return (along.template cast<double>().array() * logits.template cast<double>().array()).sum();
    }
    if (kind == Kind::logit_difference) {
      const Index r = row < 0 ? logits.rows() - 1 : row;
      if (d_logits) (*d_logits)(r, a) += Scalar(1), (*d_logits)(r, b) -= Scalar(1);
      return double(logits(r, a)) - double(logits(r, b));
    }
    std::vector<double> terms(static_cast<std::size_t>(logits.rows()), 0.0);
    const Index vocab = logits.cols();
    headwise::detail::parallel_for<headwise::detail::Schedule::by_part>(
        headwise::detail::threads_for(8.0 * double(logits.rows()) * double(vocab), headwise::detail::thread_count(threads, "Metric")),
        logits.rows(), [&](Index t) {
          const Index target = targets[static_cast<std::size_t>(t)];
          if (target < 0) return;
          const double top = double(logits.row(t).maxCoeff());
          const Eigen::Array<double, 1, Eigen::Dynamic> e = (logits.row(t).template cast<double>().array() - top).exp();  // (each exp once)
          const double sum = e.sum();
          terms[static_cast<std::size_t>(t)] = top + std::log(sum) - double(logits(t, target));
          if (!d_logits) return;
          d_logits->row(t) = (e * (weight / sum)).template cast<Scalar>().matrix();
          (*d_logits)(t, target) -= static_cast<Scalar>(weight);
        });
    double total = 0;
    for (const double term : terms) total += term;
    return weight * total;
  }

 private:
  void check(const Matrix<Scalar>& logits) const {
    constexpr const char* where = "Metric";
    const Index n = logits.rows(), vocab = logits.cols();
    if (kind == Kind::direction && (along.rows() != n || along.cols() != vocab))
      headwise::detail::invalid(where, "the direction is ", along.rows(), "x", along.cols(), ", the logits ", n, "x", vocab);
    if (kind == Kind::logit_difference && (row >= n || row < -1 || a < 0 || b < 0 || a >= vocab || b >= vocab || n == 0))
      headwise::detail::invalid(where, "logit difference of ids ", a, " and ", b, " at row ", row, ": the logits are ", n, "x", vocab);
    if (kind == Kind::cross_entropy) {
      if (static_cast<Index>(targets.size()) != n) headwise::detail::invalid(where, targets.size(), " targets for ", n, " rows of logits");
      for (const Index t : targets)
        if (t < -1 || t >= vocab) headwise::detail::invalid(where, "target id ", t, " is not in [0, ", vocab, ") (or -1: no term)");
    }
  }
};

}  // namespace headwise::model
