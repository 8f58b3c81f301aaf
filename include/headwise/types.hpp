// The matrix types every headwise interface speaks, and the letters used for their sizes.
//
// Glossary, used in every comment of the library:
//   n        tokens (rows of the residual stream X); n_q queries and n_k keys where they differ
//   d_model  width of the residual stream
//   n_heads  attention (query) heads;  d_head  width of one head's queries and keys
//            (d_model = n_heads * d_head for GPT-2; a Llama config may set head_dim otherwise)
//   n_kv_heads  key/value heads, dividing n_heads: query head h reads key/value head
//            h / (n_heads / n_kv_heads) (grouped-query attention; 1: multi-query)
//   d_v      width of one head's values (d_head in ordinary layers; latent attention's v_head_dim
//            differs; the kernels take any)
// Tokens are rows: a (n, d_model) matrix holds one token per row, row-major, as PyTorch, NumPy,
// llm.c and ggml lay them out. Weights map row vectors, `Q = X W_Q`: those a layer is given
// (MultiHeadWeights, Linear) are [in, out]; those kept as a checkpoint stores them (StoredMatrix:
// a layer's kept projections, the MLPs, experts, LM head) are [out, in], used by times_transposed.
#pragma once

#include <Eigen/Core>

namespace headwise {

using Index = Eigen::Index;

/// A dense row-major matrix: row i is token i.
template <class Scalar>
using Matrix = Eigen::Matrix<Scalar, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

/// A row vector, used for biases (added to every token row).
template <class Scalar>
using RowVector = Eigen::Matrix<Scalar, 1, Eigen::Dynamic>;

/// A column vector, used for per-row quantities such as each row's logsumexp.
template <class Scalar>
using Vector = Eigen::Matrix<Scalar, Eigen::Dynamic, 1>;

namespace detail {
/// T, in a context where a function template does not deduce it (so that Scalar comes from a
/// layer argument and x may be anything an Eigen::Ref binds to).
template <class T>
struct NonDeduced {
  using type = T;
};
}  // namespace detail

}  // namespace headwise
