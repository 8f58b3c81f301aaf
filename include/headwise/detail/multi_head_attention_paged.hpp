// MultiHeadAttention's decoding on a paged pool (paged_kv_cache.hpp), the serving path: one
// sequence's tokens, or a batch of several sequences' in one call (their projections one product,
// then one attention call on an AttentionBatch, with a shared prefix), each sequence bitwise what
// it gets alone; a sliding-window layer lets go of the blocks no later query sees. The members
// multi_head_attention.hpp declares, defined here; included at its end (not on its own).
#pragma once

#include <vector>

namespace headwise {

template <class Scalar>
Matrix<Scalar> MultiHeadAttention<Scalar>::forward_incremental(const Eigen::Ref<const Matrix<Scalar>>& x, PagedKvCache<Scalar>& pool, Index s,
    const AttentionOptions& options) const {
  PagedBatch one;
  one.rows = {{s, x.rows(), false}};
  return forward_incremental(x, pool, one, options);  // a batch of one sequence
}

template <class Scalar>
Matrix<Scalar> MultiHeadAttention<Scalar>::forward_incremental(const Eigen::Ref<const Matrix<Scalar>>& x, PagedKvCache<Scalar>& pool, const PagedBatch& batch,
    const AttentionOptions& options) const {
  constexpr const char* where = "MultiHeadAttention::forward_incremental";
  const AttentionOptions all = checked_call(x, options, where);
  pool.check_shape(kv_shape(), where);
  const std::vector<KvCacheOrigin> origins = check_batch_rows(x, pool, batch, all, where);
  const int threads = detail::thread_count(options.threads, where);
  std::vector<typename PagedKvCache<Scalar>::Saved> saved;
  for (const BatchRows& r : batch.rows) saved.push_back(pool.save(r.sequence));
  Matrix<Scalar> out;
  try {
    Matrix<Scalar> z = attend_batch_rows(x, pool, batch, all, threads, where);
    proj_.apply_gate(x, z, threads);
    out = batch_output_of(z, saved, batch, threads, where);
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

template <class Scalar>
PagedKvCache<Scalar> MultiHeadAttention<Scalar>::make_paged_cache(Index blocks, Index block_tokens) const {
  PagedKvShape shape;
  shape.blocks = blocks, shape.block_tokens = block_tokens, shape.kv = kv_shape();
  return PagedKvCache<Scalar>(shape);
}

template <class Scalar>
std::vector<KvCacheOrigin> MultiHeadAttention<Scalar>::check_batch_rows(const Eigen::Ref<const Matrix<Scalar>>& x, const PagedKvCache<Scalar>& pool,
    const PagedBatch& batch, const AttentionOptions& options, const char* where) const {
  pool.check_batch(batch, x.rows(), where);
  std::vector<KvCacheOrigin> origins;
  for (const BatchRows& r : batch.rows) {
    origins.push_back(origin_of(pool.size(r.sequence) + r.tokens, options, where));
    pool.check_continues(r.sequence, r.tokens, origins.back(), where);
  }
  return origins;
}

template <class Scalar>
Matrix<Scalar> MultiHeadAttention<Scalar>::batch_output_of(const Matrix<Scalar>& z, const std::vector<typename PagedKvCache<Scalar>::Saved>& before,
    const PagedBatch& batch, int threads, const char* where) const {
  try {
    return output_of(z, threads, 0, where);
  } catch (const std::invalid_argument&) {
    for (std::size_t i = 0, row = 0; i < batch.rows.size(); row += static_cast<std::size_t>(batch.rows[i].tokens), ++i)
      output_of(z.middleRows(static_cast<Index>(row), batch.rows[i].tokens), threads, before[i].size, where);
    throw;
  }
}

template <class Scalar>
Matrix<Scalar> MultiHeadAttention<Scalar>::attend_batch_rows(const Eigen::Ref<const Matrix<Scalar>>& x, PagedKvCache<Scalar>& pool, const PagedBatch& batch,
    const AttentionOptions& options, int threads, const char* where) const {
  const QkvLayout l = layout();
  Matrix<Scalar> qkv = times_transposed<Scalar>(x, stored_w_qkv(), threads);
  qkv.rowwise() += proj_.b_qkv();
  AttentionBatch<Scalar> attention;
  attention.shared_prefix = batch.shared_prefix;
  for (Index i = 0, row = 0; i < static_cast<Index>(batch.rows.size()); row += batch.rows[static_cast<std::size_t>(i)].tokens, ++i) {
    const BatchRows& r = batch.rows[static_cast<std::size_t>(i)];
    const Index held = pool.size(r.sequence);
    auto rows = qkv.middleRows(row, r.tokens);
    proj_.check_finite(rows, held, where, threads);
    proj_.transform(rows, RowPositions{held, held + r.tokens}, threads);
    pool.append(r.sequence, l.part(rows, QkvPart::key), l.part(rows, QkvPart::value), threads);
    attention.sequences.emplace_back(l.part(rows, QkvPart::query), pool.sequence(r.sequence), r.shares_prefix);
  }
  AttentionCall call;
  call.heads = {n_heads_, n_kv_heads_};
  call.options = &options;
  const std::vector<AttentionResult<Scalar>> results = detail::attend_batch<Scalar>(attention, call, where);
  Matrix<Scalar> z(x.rows(), l.query_width());
  for (Index i = 0, row = 0; i < static_cast<Index>(results.size()); row += batch.rows[static_cast<std::size_t>(i)].tokens, ++i)
    z.middleRows(row, batch.rows[static_cast<std::size_t>(i)].tokens) = results[static_cast<std::size_t>(i)].z;
  return z;
}

}  // namespace headwise
