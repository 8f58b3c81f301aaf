// Partial attention and the exact merge: attention of queries over one contiguous shard of the keys
// returns Z and each row's logsumexp, and two partials over disjoint shards merge exactly into the
// attention over both:
//   lse = logaddexp(lse_a, lse_b),   z = e^(lse_a - lse) z_a + e^(lse_b - lse) z_b
// A shard a query cannot see contributes z = 0, lse = -inf and changes nothing. So the keys of one
// call can be split across threads (split-key decoding) or processes (sequence parallelism) and
// merged in any grouping. Positions are absolute: the causal mask, windows, packed sequences and
// ALiBi apply at the keys' and queries' real positions. A sink joins one denominator only: give
// `sinks` with one shard.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>

#include "headwise/detail/errors.hpp"
#include "headwise/detail/merge_weights.hpp"
#include "headwise/attend.hpp"
#include "headwise/options.hpp"
#include "headwise/types.hpp"

namespace headwise {

/// One shard's attention: Z (n_q, n_heads d_v) and logsumexp (n_heads, n_q), attend()'s result.
template <class Scalar>
using PartialAttention = AttentionResult<Scalar>;

/// The attention of queries q (n_q, n_heads d) over one shard of keys k, v (m, n_kv_heads d / d_v),
/// at the positions call.options places them (first_query_position + i, first_key_position + j:
/// the masks and modifiers apply there; a mask or bias is (n_q, m), this shard's columns): attend()
/// with the logsumexp recorded, whatever the call asks.
///   AttentionOptions at;
///   at.first_query_position = 0, at.first_key_position = 4096;   // keys 4096 .. of the sequence
///   call.options = &at, call.heads = {8, 2};   // the heads, and the shard's positions
///   PartialAttention<float> part = partial_attention<float>(q, k_shard, v_shard, call);
template <class Scalar>
PartialAttention<Scalar> partial_attention(const Eigen::Ref<const Matrix<Scalar>>& q, const Eigen::Ref<const Matrix<Scalar>>& k,
                                           const Eigen::Ref<const Matrix<Scalar>>& v, const AttentionCall& call) {
  AttentionCall shard = call;
  shard.logsumexp = true;
  return detail::attend_matrices<Scalar>(q, k, v, shard, "partial_attention");
}

/// Merges b into a: a becomes the attention over both shards. Shapes must agree.
template <class Scalar>
void merge_into(PartialAttention<Scalar>& a, const PartialAttention<Scalar>& b) {
  if (a.z.rows() != b.z.rows() || a.z.cols() != b.z.cols() || a.logsumexp.rows() != b.logsumexp.rows() ||
      a.logsumexp.cols() != b.logsumexp.cols() || a.logsumexp.cols() != a.z.rows() || a.logsumexp.rows() == 0 ||
      a.z.cols() % a.logsumexp.rows() != 0)
    detail::invalid("merge_into", "partials of shapes z ", a.z.rows(), "x", a.z.cols(), ", lse ", a.logsumexp.rows(), "x",
                    a.logsumexp.cols(), " and z ", b.z.rows(), "x", b.z.cols(), ", lse ", b.logsumexp.rows(), "x",
                    b.logsumexp.cols(), " do not merge");
  constexpr Scalar minus_inf = -std::numeric_limits<Scalar>::infinity();
  const Index heads = a.logsumexp.rows(), d_v = a.z.cols() / heads;
  for (Index h = 0; h < heads; ++h)
    for (Index i = 0; i < a.z.rows(); ++i) {
      const Scalar la = a.logsumexp(h, i), lb = b.logsumexp(h, i);
      if (lb == minus_inf) continue;  // b saw nothing: a stays
      auto za = a.z.row(i).segment(h * d_v, d_v);
      const auto zb = b.z.row(i).segment(h * d_v, d_v);
      if (la == minus_inf) {
        za = zb, a.logsumexp(h, i) = lb;
        continue;
      }
      const detail::MergeWeights<Scalar> w = detail::merge_weights(la, lb);
      const Scalar total = w.a + w.b;
      za = za * (w.a / total) + zb * (w.b / total);
      a.logsumexp(h, i) = w.top + std::log(total);
    }
}

/// The merge of two partials over disjoint shards.
template <class Scalar>
PartialAttention<Scalar> merge(PartialAttention<Scalar> a, const PartialAttention<Scalar>& b) {
  merge_into(a, b);
  return a;
}

}  // namespace headwise
