// Scaled scores: S = Q Kᵀ / divisor, every query against every key.
#pragma once

#include <cmath>

#include "headwise/detail/errors.hpp"
#include "headwise/detail/tile_product.hpp"
#include "headwise/types.hpp"

namespace headwise {

/// The default divisor of the scores, sqrt(d_head).
inline double default_divisor(Index d_head) { return std::sqrt(static_cast<double>(d_head)); }

/// The one check of a divisor: finite and > 0, and with it and its inverse finite and nonzero in
/// Scalar (1e-39 is a fine double but its inverse overflows a float). Returns the divisor.
template <class Scalar>
double checked_divisor(double divisor, const char* where) {
  if (!(divisor > 0.0) || !std::isfinite(divisor)) detail::invalid(where, "divisor must be finite and > 0, got ", divisor);
  if (!detail::finite_with_inverse<Scalar>(divisor))
    detail::invalid(where, "divisor ", divisor, " or its inverse is not finite and nonzero in ", detail::scalar_name<Scalar>());
  return divisor;
}

/// Raw scores S = Q Kᵀ. q: (n_q, d_head), k: (n_k, d_head) -> (n_q, n_k).
template <class DerivedQ, class DerivedK>
Matrix<typename DerivedQ::Scalar> scores(const Eigen::MatrixBase<DerivedQ>& q,
                                         const Eigen::MatrixBase<DerivedK>& k) {
  if (q.cols() != k.cols())
    detail::invalid("scores", "q has ", q.cols(), " columns but k has ", k.cols(),
                    " (both must be d_head)");
  // The library's one matrix product (detail/tile_product.hpp: the fused kernel's micro-tile, each
  // entry one ascending sum), not Eigen's GEMM: a file that calls attend() compiles one product.
  using Scalar = typename DerivedQ::Scalar;
  Matrix<Scalar> s;
  detail::product<Scalar>(q, Matrix<Scalar>(k.transpose()), s, 1);
  return s;
}

/// Scaled scores S = Q Kᵀ / divisor. q: (n_q, d_head), k: (n_k, d_head) -> (n_q, n_k).
/// The divisor must be finite and > 0 (sqrt(d_head) is the usual one: default_divisor).
template <class DerivedQ, class DerivedK>
Matrix<typename DerivedQ::Scalar> scaled_scores(const Eigen::MatrixBase<DerivedQ>& q,
                                                const Eigen::MatrixBase<DerivedK>& k,
                                                double divisor) {
  using Scalar = typename DerivedQ::Scalar;
  checked_divisor<Scalar>(divisor, "scaled_scores");
  Matrix<Scalar> s = scores(q, k);
  s /= static_cast<Scalar>(divisor);
  return s;
}

/// The gradients of ScaledScores::backward.
template <class Scalar>
struct ScoreGradients {
  Matrix<Scalar> dq;  ///< (n_q, d_head): dS K / divisor
  Matrix<Scalar> dk;  ///< (n_k, d_head): dSᵀ Q / divisor
};

/// The scaled-score step with its backward: S = Q Kᵀ / divisor. forward keeps Q and K.
///   ScaledScores<double> step(4.0);                 // the divisor, sqrt(16) for d_head 16
///   Matrix<double> s = step.forward(q, k);
///   ScoreGradients<double> g = step.backward(ds);
template <class Scalar>
class ScaledScores {
 public:
  /// The divisor must be finite and > 0.
  explicit ScaledScores(double divisor) : divisor_(checked_divisor<Scalar>(divisor, "ScaledScores")) {}
  double divisor() const { return divisor_; }

  /// q: (n_q, d_head), k: (n_k, d_head) -> (n_q, n_k).
  Matrix<Scalar> forward(const Eigen::Ref<const Matrix<Scalar>>& q, const Eigen::Ref<const Matrix<Scalar>>& k) {
    q_ = q, k_ = k;
    Matrix<Scalar> s = scores(q_, k_);
    s /= static_cast<Scalar>(divisor_);
    return s;
  }

  /// From dS = ∂L/∂S (n_q, n_k), the gradients of the last forward's Q and K.
  ScoreGradients<Scalar> backward(const Eigen::Ref<const Matrix<Scalar>>& ds) const {
    if (ds.rows() != q_.rows() || ds.cols() != k_.rows())
      detail::invalid("ScaledScores::backward", "ds is ", ds.rows(), "x", ds.cols(), ", expected ", q_.rows(), "x",
                      k_.rows(), " (the last forward's scores)");
    ScoreGradients<Scalar> g;
    const Scalar inv = static_cast<Scalar>(1.0 / divisor_);
    g.dq.resize(q_.rows(), q_.cols());
    g.dq.noalias() = (ds * k_) * inv;
    g.dk.resize(k_.rows(), k_.cols());
    g.dk.noalias() = (ds.transpose() * q_) * inv;
    return g;
  }

 private:
  double divisor_;
  Matrix<Scalar> q_, k_;  // the last forward's inputs
};

}  // namespace headwise
