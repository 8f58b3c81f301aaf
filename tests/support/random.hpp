// Reproducible random matrices for the property tests.
#pragma once

#include <cmath>
#include <random>

#include "headwise/multi_head_attention.hpp"
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

/// A layer with random weights and biases: n_heads query heads of d_model / n_heads, n_kv_heads
/// key/value heads (grouped-query when fewer), entries of standard deviation scale / sqrt(d_model),
/// and the layer's own settings (rotary embedding, window, ...) from `config`.
template <class Scalar>
headwise::MultiHeadAttention<Scalar> random_layer(headwise::Index d_model, headwise::Index n_heads,
                                                  headwise::Index n_kv_heads, std::mt19937& rng, double scale = 1.0,
                                                  headwise::LayerConfig config = {}) {
  const headwise::Index kv_width = n_kv_heads * (d_model / n_heads);
  const double sd = scale / std::sqrt(double(d_model));
  headwise::MultiHeadWeights<Scalar> w;
  w.w_q = random_matrix<Scalar>(d_model, d_model, rng, sd);
  w.w_k = random_matrix<Scalar>(d_model, kv_width, rng, sd);
  w.w_v = random_matrix<Scalar>(d_model, kv_width, rng, sd);
  w.w_o = random_matrix<Scalar>(d_model, d_model, rng, sd);
  w.b_q = random_row<Scalar>(d_model, rng, 0.1);
  w.b_k = random_row<Scalar>(kv_width, rng, 0.1);
  w.b_v = random_row<Scalar>(kv_width, rng, 0.1);
  w.b_o = random_row<Scalar>(d_model, rng, 0.1);
  return headwise::MultiHeadAttention<Scalar>(n_heads, std::move(w), std::move(config));
}

}  // namespace headwise_test
