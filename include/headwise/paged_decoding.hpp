// A MultiHeadAttention layer's decoding on a paged pool (paged_kv_cache.hpp), the serving path, as
// free functions: one sequence's new tokens, or a batch of several sequences' in one call (their
// projections one product, then one attention call on an AttentionBatch, attend_batch.hpp, with a
// shared prefix), each sequence bitwise what it gets alone and what forward_incremental on a
// KvCache gives; a sliding-window layer lets go of the blocks no later query sees.
//
//   auto pool = headwise::make_paged_cache(layer, /*blocks=*/4096, /*block_tokens=*/64);
//   const Index s = pool.add_sequence();
//   Matrix<float> y = headwise::decode_paged(layer, prompt, pool, s);   // then token by token
#pragma once

#include <cstddef>
#include <stdexcept>
#include <vector>

#include "headwise/attend_batch.hpp"
#include "headwise/detail/compiled.hpp"
#include "headwise/detail/parallel.hpp"
#include "headwise/multi_head_attention.hpp"
#include "headwise/paged_kv_cache.hpp"
#include "headwise/types.hpp"

namespace headwise {
namespace detail {

/// The paged calls' work over the layer's parts (its friend).
template <class Scalar>
struct PagedDecoding {
  using Layer = MultiHeadAttention<Scalar>;

  /// The batched call (decode_paged on a PagedBatch).
  static Matrix<Scalar> decode(const Layer& layer, const Eigen::Ref<const Matrix<Scalar>>& x, PagedKvCache<Scalar>& pool, const PagedBatch& batch,
                                 const AttentionOptions& options) {
    constexpr const char* where = "decode_paged";
    const AttentionOptions all = layer.checked_call(x, options, where);
    pool.check_shape(layer.kv_shape(), where);
    const std::vector<KvCacheOrigin> origins = check_batch_rows(layer, x, pool, batch, all, where);
    const int threads = detail::thread_count(options.threads, where);
    std::vector<typename PagedKvCache<Scalar>::Saved> saved;
    for (const BatchRows& r : batch.rows) saved.push_back(pool.save(r.sequence));
    Matrix<Scalar> out;
    try {
      Matrix<Scalar> z = attend_batch_rows(layer, x, pool, batch, all, threads, where);
      layer.proj_.apply_gate(x, z, threads);
      out = batch_output_of(layer, z, saved, batch, threads, where);
    } catch (...) {
      for (const auto& before : saved) pool.restore(before);  // a refused call changes nothing
      throw;
    }
    for (std::size_t i = 0; i < batch.rows.size(); ++i) {
      const Index s = batch.rows[i].sequence;
      if (pool.size(s) > 0) pool.set_origin(s, origins[i]);
      if (all.window) pool.forget_before(s, pool.size(s) + 1 - *all.window);
    }
    return out;
  }

  /// Throws unless batch's entries fit the pool and x (PagedKvCache::check_batch) and each sequence's
  /// tokens may follow what it holds; returns what each sequence will then record as filled by.
  static std::vector<KvCacheOrigin> check_batch_rows(const Layer& layer, const Eigen::Ref<const Matrix<Scalar>>& x, const PagedKvCache<Scalar>& pool,
                                                       const PagedBatch& batch, const AttentionOptions& options, const char* where) {
    pool.check_batch(batch, x.rows(), where);
    std::vector<KvCacheOrigin> origins;
    for (const BatchRows& r : batch.rows) {
      origins.push_back(layer.origin_of(pool.size(r.sequence) + r.tokens, options, where));
      pool.check_continues(r.sequence, r.tokens, origins.back(), where);
    }
    return origins;
  }

  /// Z W_O + b_O of a batched call's rows in one product; where one is not finite, the error
  /// names its sequence's token (as the layer's output on that sequence's rows alone).
  static Matrix<Scalar> batch_output_of(const Layer& layer, const Matrix<Scalar>& z, const std::vector<typename PagedKvCache<Scalar>::Saved>& before,
                                          const PagedBatch& batch, int threads, const char* where) {
    try {
      return layer.output_of(z, threads, 0, where);
    } catch (const std::invalid_argument&) {
      for (std::size_t i = 0, row = 0; i < batch.rows.size(); row += static_cast<std::size_t>(batch.rows[i].tokens), ++i)
        layer.output_of(z.middleRows(static_cast<Index>(row), batch.rows[i].tokens), threads, before[i].size, where);
      throw;
    }
  }

  /// The batched call's work: Q, K, V of every row in one product, each sequence's rows placed at
  /// its positions (norms, RoPE) and its keys and values appended, then one attention call.
  static Matrix<Scalar> attend_batch_rows(const Layer& layer, const Eigen::Ref<const Matrix<Scalar>>& x, PagedKvCache<Scalar>& pool,
                                            const PagedBatch& batch, const AttentionOptions& options, int threads, const char* where) {
    const QkvLayout l = layer.layout();
    Matrix<Scalar> qkv = times_transposed<Scalar>(x, layer.stored_w_qkv(), threads);
    qkv.rowwise() += layer.proj_.b_qkv();
    AttentionBatch<Scalar> attention;
    attention.shared_prefix = batch.shared_prefix;
    for (Index i = 0, row = 0; i < static_cast<Index>(batch.rows.size()); row += batch.rows[static_cast<std::size_t>(i)].tokens, ++i) {
      const BatchRows& r = batch.rows[static_cast<std::size_t>(i)];
      const Index held = pool.size(r.sequence);
      auto rows = qkv.middleRows(row, r.tokens);
      layer.proj_.check_finite(rows, held, where, threads);
      layer.proj_.transform(rows, RowPositions{held, held + r.tokens}, threads);
      pool.append(r.sequence, l.part(rows, QkvPart::key), l.part(rows, QkvPart::value), threads);
      attention.sequences.emplace_back(l.part(rows, QkvPart::query), pool.sequence(r.sequence), r.shares_prefix);
    }
    AttentionCall call;
    call.heads = {layer.n_heads_, layer.n_kv_heads_};
    call.options = &options;
    const std::vector<AttentionResult<Scalar>> results = detail::attend_batch<Scalar>(attention, call, where);
    Matrix<Scalar> z(x.rows(), l.query_width());
    for (Index i = 0, row = 0; i < static_cast<Index>(results.size()); row += batch.rows[static_cast<std::size_t>(i)].tokens, ++i)
      z.middleRows(row, batch.rows[static_cast<std::size_t>(i)].tokens) = results[static_cast<std::size_t>(i)].z;
    return z;
  }
};

}  // namespace detail

/// A pool for `layer`'s keys and values: `blocks` blocks of `block_tokens` tokens, stored as its
/// config().kv_storage says.
template <class Scalar>
PagedKvCache<Scalar> make_paged_cache(const MultiHeadAttention<Scalar>& layer, Index blocks, Index block_tokens = 64) {
  PagedKvShape shape;
  shape.blocks = blocks, shape.block_tokens = block_tokens, shape.kv = layer.kv_shape();
  return PagedKvCache<Scalar>(shape);
}

/// Batched decoding (serving): the tokens of several sequences of a pool in one call, x
/// (Σ m_i, d_model) with sequence batch.rows[i].sequence's m_i = batch.rows[i].tokens rows after
/// those of the entries before it. The projections are one product each for every row; each
/// sequence's keys and values are appended to it; then one attention call for all of them
/// (attend on an AttentionBatch, with batch.shared_prefix). Each sequence's rows are bitwise what
/// decode_paged(layer, its rows, pool, its id) gives; a refused call changes no sequence.
template <class Scalar>
Matrix<Scalar> decode_paged(const MultiHeadAttention<Scalar>& layer,
                            const Eigen::Ref<const Matrix<typename detail::NonDeduced<Scalar>::type>>& x, PagedKvCache<Scalar>& pool,
                            const PagedBatch& batch, const AttentionOptions& options = {}) {
  return detail::PagedDecoding<Scalar>::decode(layer, x, pool, batch, options);
}

/// Incremental decoding of sequence s of a paged pool: the output rows of the m tokens x that
/// follow the pool.size(s) tokens it holds, whose keys and values are appended to it, as
/// forward_incremental on a KvCache (bitwise the matching rows of forward()). A layer with a
/// sliding window then lets go of the blocks no later query sees (PagedKvCache::forget_before): the
/// sequence keeps at most window + block_tokens - 1 keys between calls, so its memory stays flat as
/// it decodes (a call of m tokens holds m more while it runs: feed a long prompt in chunks). A
/// refused call changes nothing.
template <class Scalar>
Matrix<Scalar> decode_paged(const MultiHeadAttention<Scalar>& layer,
                            const Eigen::Ref<const Matrix<typename detail::NonDeduced<Scalar>::type>>& x, PagedKvCache<Scalar>& pool,
                            Index s, const AttentionOptions& options = {}) {
  PagedBatch one;
  one.rows = {{s, x.rows(), false}};
  return decode_paged(layer, x, pool, one, options);  // a batch of one sequence
}

/// The compiled mode's instantiations (detail/compiled.hpp).
#define HEADWISE_PAGED_DECODING_INSTANTIATIONS(PREFIX, S) PREFIX template struct detail::PagedDecoding<S>;
HEADWISE_EXTERN_INSTANTIATIONS(HEADWISE_PAGED_DECODING_INSTANTIATIONS)

}  // namespace headwise
