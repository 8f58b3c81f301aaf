// HeadSum: the output projection as a sum over heads, out = Σ_h Z_h W_O[h] + b_O, where W_O[h] is
// head h's block of d_head rows of W_O. Equal to Concat(Z_0 .. Z_{H-1}) W_O + b_O; written as a
// sum, it is what lets one study (or remove, or patch) a head on its own. With its backward.
#pragma once

#include <utility>

#include "headwise/detail/errors.hpp"
#include "headwise/types.hpp"

namespace headwise {

/// The gradients of HeadSum::backward: of every head's Z (side by side), of W_O and of b_O.
template <class Scalar>
struct HeadSumGradients {
  Matrix<Scalar> dz;     ///< (n, n_heads d_head): dZ_h = dOut W_O[h]ᵀ, heads side by side
  Matrix<Scalar> dw_o;   ///< (n_heads d_head, d_model): dW_O[h] = Z_hᵀ dOut, blocks stacked
  RowVector<Scalar> db_o;  ///< (1, d_model): the column sums of dOut
};

/// out = Σ_h Z_h W_O[h] + b_O. forward keeps Z for backward.
///   HeadSum<double> sum(w_o, b_o, /*n_heads=*/4);
///   Matrix<double> out = sum.forward(z);          // z: (n, n_heads d_head)
///   HeadSumGradients<double> g = sum.backward(d_out);
template <class Scalar>
class HeadSum {
 public:
  /// w_o: (n_heads d_head, d_model); b_o: (1, d_model) or empty.
  HeadSum(Matrix<Scalar> w_o, RowVector<Scalar> b_o, Index n_heads)
      : w_o_(std::move(w_o)), b_o_(std::move(b_o)), n_heads_(n_heads) {
    constexpr const char* where = "HeadSum";
    if (n_heads <= 0) detail::invalid(where, "n_heads must be > 0, got ", n_heads);
    if (w_o_.rows() % n_heads != 0)
      detail::invalid(where, "w_o has ", w_o_.rows(), " rows, not divisible by n_heads = ", n_heads);
    if (b_o_.size() != 0 && b_o_.size() != w_o_.cols())
      detail::invalid(where, "b_o has ", b_o_.size(), " entries, expected 0 or d_model = ", w_o_.cols());
  }

  Index d_head() const { return w_o_.rows() / n_heads_; }
  /// Head h's rows of W_O: (d_head, d_model).
  auto block(Index h) const { return w_o_.middleRows(h * d_head(), d_head()); }

  /// z: (n, n_heads d_head) -> (n, d_model), summed head by head.
  Matrix<Scalar> forward(const Eigen::Ref<const Matrix<Scalar>>& z) {
    if (z.cols() != w_o_.rows())
      detail::invalid("HeadSum::forward", "z has ", z.cols(), " columns, expected n_heads d_head = ", w_o_.rows());
    z_ = z;
    Matrix<Scalar> out = Matrix<Scalar>::Zero(z.rows(), w_o_.cols());
    for (Index h = 0; h < n_heads_; ++h) out.noalias() += z.middleCols(h * d_head(), d_head()) * block(h);
    if (b_o_.size()) out.rowwise() += b_o_;
    return out;
  }

  /// From dOut (n, d_model), the gradients of the Z, W_O and b_O of the last forward.
  HeadSumGradients<Scalar> backward(const Eigen::Ref<const Matrix<Scalar>>& d_out) const {
    if (d_out.rows() != z_.rows() || d_out.cols() != w_o_.cols())
      detail::invalid("HeadSum::backward", "d_out is ", d_out.rows(), "x", d_out.cols(), ", expected ", z_.rows(), "x",
                      w_o_.cols(), " (the last forward's output)");
    HeadSumGradients<Scalar> g;
    g.dz.resize(z_.rows(), z_.cols());
    g.dw_o.resize(w_o_.rows(), w_o_.cols());
    for (Index h = 0; h < n_heads_; ++h) {
      g.dz.middleCols(h * d_head(), d_head()).noalias() = d_out * block(h).transpose();
      g.dw_o.middleRows(h * d_head(), d_head()).noalias() = z_.middleCols(h * d_head(), d_head()).transpose() * d_out;
    }
    g.db_o = d_out.colwise().sum();
    return g;
  }

 private:
  Matrix<Scalar> w_o_;
  RowVector<Scalar> b_o_;
  Index n_heads_;
  Matrix<Scalar> z_;  // the last forward's input
};

}  // namespace headwise
