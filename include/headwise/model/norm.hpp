// Norm: the norms of a whole model's blocks over each token's d_model values (LayerNorm, RMSNorm,
// Gemma's and Qwen3-Next's (1 + w) RMSNorm), row by row, and `normed` for a norm a block may lack.
#pragma once

#include <optional>

#include "headwise/norms.hpp"
#include "headwise/types.hpp"

namespace headwise::model {

/// A norm over each token's d_model values: LayerNorm (GPT-2: (x - mean) / sqrt(var + eps) w + b),
/// RMSNorm (w x / sqrt(mean(x²) + eps)) or Gemma's RMSNorm with (1 + w).
template <class Scalar>
struct Norm {
  enum class Kind { layer_norm, rms, rms_offset };
  Kind kind = Kind::rms;
  double eps = 1e-6;
  RowVector<Scalar> weight, bias;  ///< (1, d); bias: LayerNorm only

  /// Row by row, from each row's moments (norms.hpp: summed in index order, so a row gets the same
  /// bits alone as among others). The RMS norms are norms.hpp's one rule (apply_norm), as the
  /// QK-norms' and the latent attention's.
  Matrix<Scalar> apply(const Matrix<Scalar>& x) const {
    Matrix<Scalar> y = x;
    if (kind != Kind::layer_norm) {
      const RmsNorm rms{RmsNorm::Over::projection, eps, weight.template cast<double>().transpose(), kind == Kind::rms_offset};
      apply_norm<Scalar>(rms, y, y.cols());
      return y;
    }
    for (Index t = 0; t < x.rows(); ++t) {
      const headwise::detail::RowMoments m = headwise::detail::row_moments(x.row(t).data(), x.cols(), /*centred=*/true, eps);
      for (Index c = 0; c < x.cols(); ++c)
        y(t, c) = static_cast<Scalar>((double(x(t, c)) - m.mean) * m.inverse * double(weight(c)) + (bias.size() ? double(bias(c)) : 0.0));
    }
    return y;
  }
};

/// x through `norm`, or x itself where the block has no norm there.
template <class Scalar>
Matrix<Scalar> normed(const std::optional<Norm<Scalar>>& norm, Matrix<Scalar> x) {
  return norm ? norm->apply(x) : x;
}

}  // namespace headwise::model
