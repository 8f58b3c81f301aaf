// One shard's partial attention at given positions, for the tests of the merge and of positions.
#pragma once

#include "headwise/partial_attention.hpp"

namespace headwise_test {

/// partial_attention of q over k, v with `heads`, the queries at first_query + i and the keys at
/// first_key + j, and `options`' masks and modifiers at those positions.
template <class Scalar>
headwise::PartialAttention<Scalar> shard_attention(const headwise::Matrix<Scalar>& q, const Eigen::Ref<const headwise::Matrix<Scalar>>& k,
                                                   const Eigen::Ref<const headwise::Matrix<Scalar>>& v, headwise::Heads heads,
                                                   headwise::Index first_query, headwise::Index first_key,
                                                   headwise::AttentionOptions options = {}) {
  options.first_query_position = first_query, options.first_key_position = first_key;
  headwise::AttentionCall call;
  call.heads = heads, call.options = &options;
  return headwise::partial_attention<Scalar>(q, k, v, call);
}

}  // namespace headwise_test
