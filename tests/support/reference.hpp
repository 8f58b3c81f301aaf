// A plain-loop reference of causal attention in double, written from the equation and sharing no
// code with the library: the yardstick for the property tests.
#pragma once

#include <algorithm>
#include <cmath>

#include <Eigen/Core>

namespace headwise_test {

/// z = softmax(mask(q kᵀ / divisor)) v with plain loops; queries aligned to the end of the keys.
inline Eigen::MatrixXd reference_attention(const Eigen::MatrixXd& q, const Eigen::MatrixXd& k,
                                           const Eigen::MatrixXd& v, double divisor, bool causal) {
  const Eigen::Index n_q = q.rows(), n_k = k.rows();
  Eigen::MatrixXd z = Eigen::MatrixXd::Zero(n_q, v.cols());
  for (Eigen::Index i = 0; i < n_q; ++i) {
    const Eigen::Index last = causal ? std::min(n_k - 1, n_k - n_q + i) : n_k - 1;  // may be < 0
    if (last < 0) continue;
    Eigen::VectorXd s(last + 1);
    for (Eigen::Index j = 0; j <= last; ++j) {
      double dot = 0;
      for (Eigen::Index c = 0; c < q.cols(); ++c) dot += q(i, c) * k(j, c);
      s(j) = dot / divisor;
    }
    const double max = s.maxCoeff();
    double sum = 0;
    for (Eigen::Index j = 0; j <= last; ++j) sum += std::exp(s(j) - max);
    for (Eigen::Index j = 0; j <= last; ++j)
      for (Eigen::Index c = 0; c < v.cols(); ++c) z(i, c) += std::exp(s(j) - max) / sum * v(j, c);
  }
  return z;
}

}  // namespace headwise_test
