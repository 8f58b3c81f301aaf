// attend_backward: the backward of attend() on the fused path, taking the forward's call and
// result: the gradients of q, k and v, by the fused backward kernel (kernels/fused_attention_backward.hpp:
// FlashAttention-2's two passes, no (n, n) matrix, bitwise the same on any thread count).
//
//   AttentionResult<float> r = attend<float>(q, k, v, call);      // call.logsumexp = true
//   AttentionGradients<float> g = attend_backward<float>(q, k, v, r, d_z, call);
#pragma once

#include <cmath>
#include <limits>

#include "headwise/attend.hpp"
#include "headwise/detail/compiled.hpp"
#include "headwise/detail/errors.hpp"
#include "headwise/kernels/fused_jobs.hpp"
#include "headwise/kernels/fused_attention_backward.hpp"
#include "headwise/options.hpp"
#include "headwise/score_rule.hpp"
#include "headwise/types.hpp"

namespace headwise {

namespace detail {

/// Throws unless a backward call's arguments fit together and hold no NaN (a NaN anywhere would
/// reach every gradient through the sums over rows, 0 x NaN being NaN, across the causal mask).
/// Returns the thread count.
template <class Scalar>
int check_backward_call(const Eigen::Ref<const Matrix<Scalar>>& q, const Eigen::Ref<const Matrix<Scalar>>& k,
                        const Eigen::Ref<const Matrix<Scalar>>& v, const AttentionResult<Scalar>& forward,
                        const Eigen::Ref<const Matrix<Scalar>>& d_z, const AttentionCall& call,
                        const AttentionOptions& options, const char* where) {
  if (call.path != AttentionPath::fused)
    invalid(where, "the backward runs the fused path only (the step-by-step one is the layer's backward_step_by_step)");
  check_heads<Scalar>(where, call.heads, q, k, v);
  const Index n_heads = call.heads.query, width = n_heads * (v.cols() / call.heads.key_value);
  const Matrix<Scalar>& z = forward.z;
  const Matrix<Scalar>& lse = forward.logsumexp;
  if (z.rows() != q.rows() || z.cols() != width || d_z.rows() != z.rows() || d_z.cols() != z.cols())
    invalid(where, "z and d_z must be ", q.rows(), "x", width, ", got ", z.rows(), "x", z.cols(), " and ", d_z.rows(), "x",
            d_z.cols());
  if (lse.rows() != n_heads || lse.cols() != q.rows())
    invalid(where, "the forward's logsumexp is ", lse.rows(), "x", lse.cols(), ", expected ", n_heads, "x", q.rows(),
            " (run the forward with call.logsumexp = true)");
  check_tiles(where, call.tiles);
  const int threads = thread_count(options.threads, where);
  const auto require_finite_in = [&](const char* name, const Eigen::Ref<const Matrix<Scalar>>& m) {
    if (!all_finite(m, threads)) require_finite(where, name, m);
  };
  require_finite_in("q", q), require_finite_in("k", k), require_finite_in("v", v), require_finite_in("z", z);
  require_finite_in("d_z", d_z);
  for (Index h = 0; h < n_heads; ++h)  // finite, or -inf for a row that saw nothing
    for (Index i = 0; i < q.rows(); ++i)
      if (std::isnan(lse(h, i)) || lse(h, i) == std::numeric_limits<Scalar>::infinity())
        invalid(where, "logsumexp has ", lse(h, i), " for head ", h, ", row ", i, " (finite, or -inf for a row that saw no key)");
  return threads;
}


/// attend_backward, its errors naming `where` (the layer's backward calls it too).
template <class Scalar>
HEADWISE_ISA_TAG AttentionGradients<Scalar> backward_of_attend(const Eigen::Ref<const Matrix<Scalar>>& q,
                                              const Eigen::Ref<const Matrix<Scalar>>& k,
                                              const Eigen::Ref<const Matrix<Scalar>>& v,
                                              const AttentionResult<Scalar>& forward,
                                              const Eigen::Ref<const Matrix<Scalar>>& d_z, const AttentionCall& call,
                                              const char* where) {
  static const AttentionOptions defaults;
  const AttentionOptions& options = call.options ? *call.options : defaults;
  const int threads = detail::check_backward_call<Scalar>(q, k, v, forward, d_z, call, options, where);
  const Index n_heads = call.heads.query, d = q.cols() / n_heads, d_v = v.cols() / call.heads.key_value;
  Matrix<Scalar> delta(n_heads, q.rows());  // D = rowsum(dZ ∘ Z), head by head
  for (Index h = 0; h < n_heads; ++h)
    delta.row(h) = forward.z.middleCols(h * d_v, d_v).cwiseProduct(d_z.middleCols(h * d_v, d_v)).rowwise().sum().transpose();
  const ScoreRule<Scalar> rule(options, q.rows(), k.rows(), n_heads, where);
  const FusedTiles used = detail::tiles_for<Scalar>(call.tiles, q.rows(), k.rows(), StoreFormat{});  // (keys as computed)
  const Eigen::Ref<const Matrix<Scalar>> lse(forward.logsumexp);
  const detail::BackwardCall<Scalar> c{q, k, v, lse, d_z, delta, rule, n_heads, n_heads / call.heads.key_value, d, d_v,
                                       used.queries, *used.keys,
                                       static_cast<Scalar>(1.0 / resolve_divisor<Scalar>(options, d, where)),
                                       options.softcap ? static_cast<Scalar>(1.0 / *options.softcap) : Scalar(0)};
  AttentionGradients<Scalar> out{Matrix<Scalar>(q.rows(), q.cols()), Matrix<Scalar>(k.rows(), k.cols()),
                                 Matrix<Scalar>(v.rows(), v.cols())};
  detail::run_backward_jobs(c, threads, out);
  return out;
}
}  // namespace detail

/// The backward of attend() on the fused path: from the forward's q, k, v, its result (z and the
/// logsumexp: the forward's call had logsumexp = true) and d_z = ∂L/∂z, the gradients of q, k and
/// v, shaped as they are. `call` is the forward's: its heads, options and tiles (what it asked to
/// record is not read). Grouped-query heads: dK and dV of a key/value head sum its query heads'.
/// Bitwise the same for any thread count.
///   AttentionResult<float> r = attend<float>(q, k, v, call);      // call.logsumexp = true
///   AttentionGradients<float> g = attend_backward<float>(q, k, v, r, d_z, call);
template <class Scalar>
AttentionGradients<Scalar> attend_backward(const Eigen::Ref<const Matrix<Scalar>>& q,
                                           const Eigen::Ref<const Matrix<Scalar>>& k,
                                           const Eigen::Ref<const Matrix<Scalar>>& v,
                                           const AttentionResult<Scalar>& forward,
                                           const Eigen::Ref<const Matrix<Scalar>>& d_z, const AttentionCall& call) {
  return detail::backward_of_attend<Scalar>(q, k, v, forward, d_z, call, "attend_backward");
}

/// The compiled mode's instantiations of the fused backward (detail/compiled.hpp).
#define HEADWISE_BACKWARD_INSTANTIATIONS(PREFIX, S) \
  PREFIX template AttentionGradients<S> detail::backward_of_attend<S>(const Eigen::Ref<const Matrix<S>>&, const Eigen::Ref<const Matrix<S>>&, const Eigen::Ref<const Matrix<S>>&, const AttentionResult<S>&, const Eigen::Ref<const Matrix<S>>&, const AttentionCall&, const char*);
HEADWISE_EXTERN_INSTANTIATIONS(HEADWISE_BACKWARD_INSTANTIATIONS)

}  // namespace headwise
