// Linear: the projection y = x W + b, with W stored [in, out] as Hugging Face GPT-2's Conv1D.
#pragma once

#include <utility>

#include "headwise/detail/errors.hpp"
#include "headwise/types.hpp"

namespace headwise {

/// The gradients of Linear::backward: of the input, the weight and the bias.
template <class Scalar>
struct LinearGradients {
  Matrix<Scalar> dx;       ///< (n, in): dY Wᵀ
  Matrix<Scalar> dw;       ///< (in, out): Xᵀ dY
  RowVector<Scalar> db;    ///< (1, out): the column sums of dY (empty without a bias)
};

/// A linear map of row vectors with an optional bias: y = x W + b.
///   Linear<float> q_proj(w_q, b_q);      // w_q: (d_model, d_head), b_q: (1, d_head) or empty
///   Matrix<float> q = q_proj.forward(x); // x: (n, d_model) -> q: (n, d_head)
template <class Scalar>
class Linear {
 public:
  /// weight: (in, out). bias: (1, out), or empty for no bias.
  explicit Linear(Matrix<Scalar> weight, RowVector<Scalar> bias = RowVector<Scalar>())
      : weight_(std::move(weight)), bias_(std::move(bias)) {
    if (bias_.size() != 0 && bias_.size() != weight_.cols())
      detail::invalid("Linear", "bias has ", bias_.size(), " entries, expected 0 or out = ",
                      weight_.cols());
    detail::require_finite("Linear", "weight", weight_);
    detail::require_finite("Linear", "bias", bias_);
  }

  Index in_features() const { return weight_.rows(); }
  Index out_features() const { return weight_.cols(); }
  bool has_bias() const { return bias_.size() != 0; }
  const Matrix<Scalar>& weight() const { return weight_; }
  const RowVector<Scalar>& bias() const { return bias_; }

  /// x: (n, in) -> (n, out).
  /// (A row-major Ref given a column-major argument makes a temporary copy; pass row-major.)
  Matrix<Scalar> forward(const Eigen::Ref<const Matrix<Scalar>>& x) const {
    if (x.cols() != in_features())
      detail::invalid("Linear::forward", "x has ", x.cols(), " columns, expected in = ",
                      in_features());
    Matrix<Scalar> y(x.rows(), out_features());
    y.noalias() = x * weight_;
    if (has_bias()) y.rowwise() += bias_;
    return y;
  }

  /// The gradients at input x (n, in) given dy = ∂L/∂y (n, out). The layer keeps no input: the
  /// caller passes the x its forward saw (a Linear is shared weights, used from many calls).
  LinearGradients<Scalar> backward(const Eigen::Ref<const Matrix<Scalar>>& x,
                                   const Eigen::Ref<const Matrix<Scalar>>& dy) const {
    if (x.cols() != in_features() || dy.cols() != out_features() || dy.rows() != x.rows())
      detail::invalid("Linear::backward", "x is ", x.rows(), "x", x.cols(), " and dy ", dy.rows(), "x", dy.cols(),
                      ", expected (n, ", in_features(), ") and (n, ", out_features(), ")");
    LinearGradients<Scalar> g;
    g.dx.resize(x.rows(), in_features());
    g.dx.noalias() = dy * weight_.transpose();
    g.dw.resize(in_features(), out_features());
    g.dw.noalias() = x.transpose() * dy;
    if (has_bias()) g.db = dy.colwise().sum();
    return g;
  }

 private:
  Matrix<Scalar> weight_;
  RowVector<Scalar> bias_;
};

}  // namespace headwise
