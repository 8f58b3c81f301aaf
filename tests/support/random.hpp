// Reproducible random matrices for the property tests.
#pragma once

#include <random>

#include "headwise/types.hpp"

namespace headwise_test {

template <class Scalar>
headwise::Matrix<Scalar> random_matrix(headwise::Index rows, headwise::Index cols, std::mt19937& rng,
                                       double scale = 1.0) {
  std::normal_distribution<double> normal(0.0, scale);
  headwise::Matrix<Scalar> m(rows, cols);
  for (headwise::Index i = 0; i < m.size(); ++i) m.data()[i] = static_cast<Scalar>(normal(rng));
  return m;
}

template <class Scalar>
headwise::RowVector<Scalar> random_row(headwise::Index cols, std::mt19937& rng, double scale = 1.0) {
  return random_matrix<Scalar>(1, cols, rng, scale);
}

}  // namespace headwise_test
