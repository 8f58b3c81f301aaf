// attend() on many sequences in one call (serving): each sequence's queries over its own keys and
// values (a PagedKvCache's sequences, or any store's blocks), at its own length, in one parallel
// job list over (sequence, key/value head, key shard), each result bitwise what the sequence gets
// alone (attend.hpp). Sequences forked from one prompt attend its shared prefix once, all their
// rows in one pass, merged with their own keys by logsumexp (FlashInfer's cascade).
//
//   AttentionBatch<float> batch;
//   batch.sequences.emplace_back(q_a, pool.sequence(a), /*shares=*/true);
//   batch.shared_prefix = 4096;      // the prompt a and b were forked from
//   std::vector<AttentionResult<float>> r = attend(batch, call);
#pragma once

#include <atomic>
#include <utility>
#include <vector>

#include "headwise/attend.hpp"
#include "headwise/detail/compiled.hpp"
#include "headwise/kernels/fused_jobs.hpp"
#include "headwise/types.hpp"

namespace headwise {

/// One sequence of a batch: the queries of its new tokens, q (m, n_heads d_head), and the keys and
/// values it attends to (a PagedKvCache's sequence(s) or a store's blocks(), the new tokens'
/// already appended: the queries are its last m positions).
template <class Scalar>
struct BatchedSequence {
  BatchedSequence(Matrix<Scalar> queries, const KvBlocks<Scalar>& keys_values, bool shares = false)
      : q(std::move(queries)), kv(keys_values), shares_prefix(shares) {}
  Matrix<Scalar> q;
  KvBlocks<Scalar> kv;
  bool shares_prefix = false;  ///< its first AttentionBatch::shared_prefix keys are the batch's shared prefix
};

/// Many sequences in one call, each at its own length (serving): one parallel job list over
/// (sequence, key/value head, key shard), each sequence's result bitwise what it gets alone.
///   AttentionBatch<float> batch;
///   batch.sequences.emplace_back(q_a, pool.sequence(a), /*shares=*/true);
///   batch.shared_prefix = 4096;      // the prompt a and b were forked from
///   std::vector<AttentionResult<float>> r = attend(batch, call);
template <class Scalar>
struct AttentionBatch {
  std::vector<BatchedSequence<Scalar>> sequences;
  /// Keys 0 .. shared_prefix - 1 are the same pool blocks in every sequence that shares_prefix (a
  /// prompt they were forked from): its whole key shards are attended once for all of them, every
  /// sharing sequence's query rows in one pass over them, and each row's state merged by
  /// logsumexp with its sequence's own keys after them (FlashInfer's cascade): the bits each gets
  /// alone. 0: no prefix.
  Index shared_prefix = 0;
};

namespace detail {

/// Throws unless a batch's sequences agree with the call and each other: heads, d_head, d_v,
/// storage; a shared prefix only with options that treat every prefix key alike for every query.
template <class Scalar>
void check_batch(const AttentionBatch<Scalar>& batch, const AttentionCall& call, const AttentionOptions& o, const char* where) {
  for (std::size_t i = 0; i < batch.sequences.size(); ++i) {
    const KvBlocks<Scalar>& kv = batch.sequences[i].kv;
    const KvBlocks<Scalar>& first = batch.sequences[0].kv;
    if (kv.n_kv_heads() != call.heads.key_value)
      invalid(where, "sequence ", i, " holds ", kv.n_kv_heads(), " key/value heads, the call's n_kv_heads is ", call.heads.key_value);
    if (kv.d_head() != first.d_head() || kv.d_v() != first.d_v())
      invalid(where, "sequence ", i, " holds heads of d_head ", kv.d_head(), " and d_v ", kv.d_v(), ", sequence 0 of ", first.d_head(),
              " and ", first.d_v(), ": a batch's sequences share their heads");
    if (kv.storage() != first.storage() || kv.values_are_keys() != first.values_are_keys() ||
        kv.format().arithmetic != first.format().arithmetic)
      invalid(where, "sequence ", i, " stores keys and values ", storage_name(kv.storage()), " (", arithmetic_name(kv.format().arithmetic),
              "), sequence 0 ", storage_name(first.storage()), " (", arithmetic_name(first.format().arithmetic), "): a batch reads one storage");
    if (batch.sequences[i].q.cols() != call.heads.query * kv.d_head())
      invalid(where, "the queries of sequence ", i, " have ", batch.sequences[i].q.cols(), " columns, expected n_heads d_head = ",
              call.heads.query, " x ", kv.d_head());
  }
  if (batch.shared_prefix < 0) invalid(where, "shared_prefix must be >= 0, got ", batch.shared_prefix);
  if (batch.shared_prefix == 0) return;
  if (o.window || o.chunk || !o.cu_seqlens.empty() || o.key_valid.size() || o.mask.size() || o.bias.size() || o.alibi_slopes.size() ||
      o.first_query_position || o.first_key_position != 0 || call.statistics)
    invalid(where, "a shared prefix is attended once for every query: not with a window, chunks, packed sequences, padding, a mask, ",
            "a bias, ALiBi, placed positions or statistics (which depend on each query's position)");
}

/// The part of the shared prefix attended once: its whole key shards (of the first sharer's tiles)
/// that are also whole blocks, and the sequences that attend it together (sharing ones whose tiles
/// are the first sharer's, so that those shards are theirs alone too, and each of whose rows sees
/// all of it: a row inside the prefix attends by itself). Throws naming a sequence
/// that shares_prefix but holds fewer keys, or other blocks there.
template <class Scalar>
std::pair<Index, std::vector<Index>> cascade_of(const AttentionBatch<Scalar>& batch, const std::vector<FusedTiles>& tiles,
                                                const std::vector<ScoreRule<Scalar>>& rules, const char* where) {
  std::vector<Index> sharing;
  Index prefix = 0;
  for (std::size_t i = 0; i < batch.sequences.size(); ++i) {
    const BatchedSequence<Scalar>& s = batch.sequences[i];
    if (!s.shares_prefix) continue;
    if (s.kv.size() < batch.shared_prefix || s.kv.first_kept() > 0)
      invalid(where, "sequence ", i, " holds keys ", s.kv.first_kept(), " .. ", s.kv.size(), ", not the shared prefix's 0 .. ", batch.shared_prefix);
    if (sharing.empty()) {
      const Index shard = tiles[i].key_shard;
      for (prefix = batch.shared_prefix / shard * shard; prefix > 0 && prefix % s.kv.block_tokens() != 0;) prefix -= shard;
    }
    const std::size_t first = sharing.empty() ? i : static_cast<std::size_t>(sharing[0]);
    const KvBlocks<Scalar>& ref = batch.sequences[first].kv;
    for (Index j = 0; j + ref.block_tokens() <= batch.shared_prefix; j += ref.block_tokens())  // (a last, partial block may be a copy)
      if (s.kv.pool().keys != ref.pool().keys || s.kv.block_of(j) != ref.block_of(j))
        invalid(where, "sequence ", i, " shares_prefix but holds other blocks than sequence ", first,
                " for the shared prefix's keys from ", j, " (fork both from the prompt's sequence)");
    bool sees_all = true;  // (a row before the prefix's end, a prefill's, must not see all of it)
    for (Index r = 0; r < rules[i].n_q() && sees_all; ++r) sees_all = rules[i].keys(r).begin == 0 && rules[i].keys(r).end >= prefix;
    if (sees_all && tiles[i].keys == tiles[first].keys && tiles[i].key_shard == tiles[first].key_shard) sharing.push_back(static_cast<Index>(i));
  }
  if (prefix == 0) sharing.clear();
  return {prefix, sharing};
}

/// The kernel's calls of a batch (attend on an AttentionBatch), and what they refer to, kept in
/// place (reserved: nothing moves once a call refers to it): each sequence's call planned as it is
/// alone (its queries folded, its rule and tiles), then the shared prefix's call over the
/// cascading sequences' rows, then one run of the kernel (run_fused_batch).
template <class Scalar>
class BatchCalls {
 public:
  BatchCalls(const AttentionBatch<Scalar>& batch, const AttentionCall& call, const AttentionOptions& options, const char* where)
      : batch_(batch), call_(call), where_(where), n_(batch.sequences.size()), fold_(groups_foldable(call, options)),
        inner_(fold_ ? Heads{call.heads.key_value, call.heads.key_value} : call.heads), options_(options),
        folded_(fold_ ? call.heads.query / call.heads.key_value : 1),
        threads_(thread_count(options.threads, where)),
        inverse_divisor_(static_cast<Scalar>(1.0 / resolve_divisor<Scalar>(options, batch.sequences[0].kv.d_head(), where))) {
    q_.resize(n_), z_.resize(n_), tiles_.resize(n_), raw_.resize(n_);
    q_ref_.reserve(n_ + 1), z_ref_.reserve(n_ + 1), rules_.reserve(n_ + 1), calls_.reserve(n_ + 1);
    for (std::size_t i = 0; i < n_; ++i) add_sequence(i);
    fused_.split_keys = call.tiles.split_keys;
    fused_.prefix_rows.assign(n_, -1);
    const auto [prefix, sharing] = cascade_of(batch, tiles_, rules_, where);
    if (prefix > 0) add_prefix(prefix, sharing);
    for (std::size_t i = 0; i < n_; ++i) fused_.calls.push_back(&calls_[i]);
  }

  /// Runs the kernel once over the whole batch, for the stored type its sequences share.
  std::vector<AttentionResult<Scalar>> run() {
    const KvBlocks<Scalar>& kv = batch_.sequences[0].kv;
    with_kernel_type<Scalar>(kv.storage(), kv.format().arithmetic, [&](auto tag) {
      using Stored = std::remove_const_t<std::remove_pointer_t<decltype(tag)>>;
      run_fused_batch<Stored, Scalar, NoPhaseObserver>(fused_, threads_);
    });
    std::vector<AttentionResult<Scalar>> out(n_);
    for (std::size_t i = 0; i < n_; ++i) {
      check_overflow(where_, z_[i], kv.format(), overflow_, threads_);
      raw_[i].z = std::move(z_[i]);
      const BatchedSequence<Scalar>& s = batch_.sequences[i];
      out[i] = fold_ ? unfold_result(raw_[i], call_.heads, s.q.rows(), s.kv.d_v()) : std::move(raw_[i]);
    }
    return out;
  }

 private:
  void add_sequence(std::size_t i) {
    const BatchedSequence<Scalar>& s = batch_.sequences[i];
    if (!all_finite(s.q, threads_)) require_finite(where_, "q", s.q);
    q_[i] = fold_ ? fold_queries<Scalar>(s.q, call_.heads, s.kv.d_head(), where_) : s.q;
    z_[i].resize(q_[i].rows(), checked_size<Scalar>(where_, "Z", inner_.query, s.kv.d_v()));
    q_ref_.emplace_back(q_[i]), z_ref_.emplace_back(z_[i]);
    check_packed_call<Scalar>(where_, q_ref_.back(), inner_.query, s.kv, z_ref_.back(), call_.tiles);
    check_scaled_queries<Scalar>(where_, q_ref_.back(), inverse_divisor_, s.kv.format());
    rules_.emplace_back(options_, q_[i].rows(), s.kv.size(), inner_.query, where_, folded_);
    check_kept_keys(rules_.back(), s.kv, where_);
    tiles_[i] = tiles_for<Scalar>(call_.tiles, q_[i].rows(), s.kv.size(), s.kv.format());
    calls_.emplace_back(q_ref_.back(), s.kv, z_ref_.back(), rules_.back(), tiles_[i], inverse_divisor_);
    calls_.back().overflow = &overflow_;
    if (call_.logsumexp) calls_.back().logsumexp = &raw_[i].logsumexp;
    if (call_.statistics) calls_.back().statistics = &raw_[i].statistics;
  }
  /// The prefix's call: keys [0, prefix) of the first sharer, the sharers' rows stacked, every
  /// row placed after the prefix (so that it sees all of it); each sharer then attends from there.
  void add_prefix(Index prefix, const std::vector<Index>& sharing) {
    Index total = 0;
    for (const Index i : sharing) fused_.prefix_rows[static_cast<std::size_t>(i)] = total, total += q_[static_cast<std::size_t>(i)].rows();
    stacked_.resize(total, q_[0].cols());
    for (const Index i : sharing) {
      stacked_.middleRows(fused_.prefix_rows[static_cast<std::size_t>(i)], q_[static_cast<std::size_t>(i)].rows()) = q_[static_cast<std::size_t>(i)];
      calls_[static_cast<std::size_t>(i)].first_key = prefix;
    }
    at_prefix_ = options_;
    at_prefix_.first_query_position = prefix;
    const FusedTiles& own = tiles_[static_cast<std::size_t>(sharing[0])];
    const FusedTiles tiles{std::min(call_.tiles.queries, std::max<Index>(total, 1)), own.keys, own.key_shard, true};  // all sharers' rows in a tile
    q_ref_.emplace_back(stacked_), z_ref_.emplace_back(unused_);
    rules_.emplace_back(at_prefix_, total, prefix, inner_.query, where_, folded_);
    const KvBlocks<Scalar> keys = batch_.sequences[static_cast<std::size_t>(sharing[0])].kv.first(prefix);
    calls_.emplace_back(q_ref_.back(), keys, z_ref_.back(), rules_.back(), tiles, inverse_divisor_);
    calls_.back().overflow = &overflow_;
    fused_.prefix = &calls_.back();
  }

  const AttentionBatch<Scalar>& batch_;
  const AttentionCall& call_;
  const char* where_;
  std::size_t n_;
  bool fold_;
  Heads inner_;
  const AttentionOptions& options_;
  Index folded_;                // each position's rows (the group where folded, else 1)
  AttentionOptions at_prefix_;  // (the options, the queries placed after the shared prefix)
  int threads_;
  Scalar inverse_divisor_;
  std::vector<Matrix<Scalar>> q_, z_;
  Matrix<Scalar> stacked_, unused_;
  std::vector<Eigen::Ref<const Matrix<Scalar>>> q_ref_;
  std::vector<Eigen::Ref<Matrix<Scalar>>> z_ref_;
  std::vector<ScoreRule<Scalar>> rules_;
  std::vector<FusedTiles> tiles_;
  std::vector<FusedCall<Scalar>> calls_;
  std::vector<AttentionResult<Scalar>> raw_;
  FusedBatch<Scalar> fused_;
  std::atomic<bool> overflow_{false};  // (a row of any of the calls beyond the range: check_overflow)
};

/// attend() on a batch, its errors named by `where`.
template <class Scalar>
HEADWISE_ISA_TAG std::vector<AttentionResult<Scalar>> attend_batch(const AttentionBatch<Scalar>& batch, const AttentionCall& call, const char* where) {
  const AttentionOptions defaults;
  const AttentionOptions& options = call.options ? *call.options : defaults;
  if (batch.sequences.empty()) return {};
  check_batch(batch, call, options, where);
  if (call.path == AttentionPath::step_by_step) {
    std::vector<AttentionResult<Scalar>> out;
    for (const BatchedSequence<Scalar>& s : batch.sequences) out.push_back(attend_packed<Scalar>(s.q, s.kv, call, where));
    return out;
  }
  return BatchCalls<Scalar>(batch, call, options, where).run();
}

}  // namespace detail

/// Attention of every sequence of a batch, each over its own keys and values (batched decoding,
/// or chunks of prefill, at different lengths), in one parallel job list; results in the batch's
/// order, each bitwise what attend(q_i, kv_i, call) gives, on any thread count. call.heads and
/// call.options are every sequence's (queries aligned to the end of each one's keys).
template <class Scalar>
std::vector<AttentionResult<Scalar>> attend(const AttentionBatch<Scalar>& batch, const AttentionCall& call = {}) {
  return detail::attend_batch<Scalar>(batch, call, "attend");
}

/// The compiled mode's instantiations (detail/compiled.hpp): the batch's way into the kernel.
#define HEADWISE_ATTEND_BATCH_INSTANTIATIONS(PREFIX, S) \
  PREFIX template std::vector<AttentionResult<S>> detail::attend_batch<S>(const AttentionBatch<S>&, const AttentionCall&, const char*);
HEADWISE_EXTERN_INSTANTIATIONS(HEADWISE_ATTEND_BATCH_INSTANTIATIONS)

}  // namespace headwise
