// HeadInterventions: changes to heads applied inside the W_O sum, out = Σ_h g_h Z'_h W_O[h] + b_O,
// where Z'_h is Z_h itself, zeros (ablation), a mean row (mean ablation) or Z_h from another run
// (activation patching), and g_h a gate. One forward pass, either path.
#pragma once

#include <optional>
#include <vector>

#include "headwise/detail/errors.hpp"
#include "headwise/detail/sizes.hpp"
#include "headwise/types.hpp"

namespace headwise {

/// Per-head interventions for MultiHeadAttention::forward and forward_step_by_step.
///   HeadInterventions<float> iv(/*n_heads=*/12);
///   iv.ablate(5).gate(3, 0.5f).patch(7, other_run_z7);
template <class Scalar>
class HeadInterventions {
 public:
  explicit HeadInterventions(Index n_heads) {
    constexpr const char* where = "HeadInterventions";
    if (n_heads <= 0) detail::invalid(where, "n_heads must be > 0, got ", n_heads);
    detail::allocate(gates_, detail::checked_size<Scalar>(where, "the gates", n_heads), Scalar(1), where, "the gates");
    detail::allocate(replacements_, detail::checked_size<std::optional<Matrix<Scalar>>>(where, "the replacements", n_heads),
                     std::optional<Matrix<Scalar>>(), where, "the replacements");
  }

  Index n_heads() const { return static_cast<Index>(gates_.size()); }

  /// Zero ablation: head h contributes nothing.
  HeadInterventions& ablate(Index h) { return gate(h, Scalar(0)); }
  /// Mean ablation: head h's Z replaced at every position by `mean` (1, d_head), for instance its
  /// mean over positions in a reference run (see mean_over_positions).
  HeadInterventions& ablate_with_mean(Index h, const RowVector<Scalar>& mean) {
    replacements_[index(h, "ablate_with_mean")] = Matrix<Scalar>(mean);
    return *this;
  }
  /// Scales head h's contribution by g.
  HeadInterventions& gate(Index h, Scalar g) {
    gates_[index(h, "gate")] = g;
    return *this;
  }
  /// Activation patching: head h's Z replaced by z_h (n, d_head) from another run on n tokens.
  HeadInterventions& patch(Index h, const Matrix<Scalar>& z_h) {
    replacements_[index(h, "patch")] = z_h;
    return *this;
  }

  /// Applies the interventions to z (n, n_heads d_head), every head's Z side by side, in place.
  void apply(Matrix<Scalar>& z) const {
    constexpr const char* where = "HeadInterventions::apply";
    if (z.cols() % n_heads() != 0)
      detail::invalid(where, "z has ", z.cols(), " columns, not divisible by n_heads = ", n_heads());
    const Index d_head = z.cols() / n_heads();
    for (Index h = 0; h < n_heads(); ++h) {
      auto z_h = z.middleCols(h * d_head, d_head);
      if (const auto& r = replacements_[static_cast<std::size_t>(h)]) {
        if (r->cols() != d_head || (r->rows() != 1 && r->rows() != z.rows()))
          detail::invalid(where, "the replacement of head ", h, " is ", r->rows(), "x", r->cols(), ", expected ",
                          z.rows(), "x", d_head, " or 1x", d_head);
        if (r->rows() == 1) z_h = r->replicate(z.rows(), 1);
        else z_h = *r;
      }
      if (gates_[static_cast<std::size_t>(h)] != Scalar(1)) z_h *= gates_[static_cast<std::size_t>(h)];
    }
  }

 private:
  std::size_t index(Index h, const char* where) const {
    if (h < 0 || h >= n_heads()) detail::invalid(where, "head ", h, " out of range [0, ", n_heads(), ")");
    return static_cast<std::size_t>(h);
  }

  std::vector<Scalar> gates_;
  std::vector<std::optional<Matrix<Scalar>>> replacements_;
};

/// Head h's Z averaged over positions: z (n, n_heads d_head) -> (1, d_head).
template <class Scalar>
RowVector<Scalar> mean_over_positions(const Matrix<Scalar>& z, Index n_heads, Index h) {
  if (n_heads <= 0 || z.cols() % n_heads != 0 || h < 0 || h >= n_heads)
    detail::invalid("mean_over_positions", "head ", h, " of ", n_heads, " heads in z with ", z.cols(), " columns");
  const Index d_head = z.cols() / n_heads;
  return z.middleCols(h * d_head, d_head).colwise().mean();
}

}  // namespace headwise
