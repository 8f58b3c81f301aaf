// Scaled scores: S = Q Kᵀ / divisor, every query against every key.
#pragma once

#include <cmath>

#include "headwise/detail/errors.hpp"
#include "headwise/types.hpp"

namespace headwise {

/// The default divisor of the scores, sqrt(d_head).
inline double default_divisor(Index d_head) { return std::sqrt(static_cast<double>(d_head)); }

/// Raw scores S = Q Kᵀ. q: (n_q, d_head), k: (n_k, d_head) -> (n_q, n_k).
template <class DerivedQ, class DerivedK>
Matrix<typename DerivedQ::Scalar> scores(const Eigen::MatrixBase<DerivedQ>& q,
                                         const Eigen::MatrixBase<DerivedK>& k) {
  if (q.cols() != k.cols())
    detail::invalid("scores", "q has ", q.cols(), " columns but k has ", k.cols(),
                    " (both must be d_head)");
  Matrix<typename DerivedQ::Scalar> s(q.rows(), k.rows());
  s.noalias() = q * k.transpose();
  return s;
}

/// Scaled scores S = Q Kᵀ / divisor. q: (n_q, d_head), k: (n_k, d_head) -> (n_q, n_k).
/// The divisor must be finite and > 0 (sqrt(d_head) is the usual one: default_divisor).
template <class DerivedQ, class DerivedK>
Matrix<typename DerivedQ::Scalar> scaled_scores(const Eigen::MatrixBase<DerivedQ>& q,
                                                const Eigen::MatrixBase<DerivedK>& k,
                                                double divisor) {
  using Scalar = typename DerivedQ::Scalar;
  if (!(divisor > 0.0) || !std::isfinite(divisor))
    detail::invalid("scaled_scores", "divisor must be finite and > 0, got ", divisor);
  Matrix<Scalar> s = scores(q, k);
  s /= static_cast<Scalar>(divisor);
  return s;
}

}  // namespace headwise
