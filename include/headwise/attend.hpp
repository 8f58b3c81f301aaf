// One attention call: queries over keys and values given as plain matrices or as a packed store
// (a KV cache), with named arguments (the heads, the options, what to record, which path), and one
// result (Z, and the logsumexp and per-row statistics when asked). Every other way in is a thin
// wrapper over attend(): partial_attention (partial_attention.hpp), the layer's forward and its
// cache.
//
//   AttentionCall call;
//   call.heads = {32, 8};                  // 32 query heads over 8 key/value heads
//   call.options = &options;               // masks and modifiers (options.hpp); null: the defaults
//   call.logsumexp = true;                 // and/or call.statistics = true
//   AttentionResult<float> r = attend<float>(q, k, v, call);   // r.z, r.logsumexp, r.statistics
//
// The fused path (the default) runs the kernel of kernels/fused_attention.hpp: no (n_q, n_k)
// matrix, bitwise the same on any thread count. The step-by-step path computes each head's whole
// pattern A = softmax(rule(Q Kᵀ / divisor)) and Z = A V (attention_core.hpp): for teaching and for
// checking the kernel, with the same checks, the same options and the same result.
#pragma once

#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "headwise/attention_core.hpp"
#include "headwise/detail/attend_checks.hpp"
#include "headwise/detail/compiled.hpp"
#include "headwise/detail/errors.hpp"
#include "headwise/detail/parallel.hpp"
#include "headwise/detail/sizes.hpp"
#include "headwise/kernels/fused_jobs.hpp"
#include "headwise/kernels/packed_keys_values.hpp"
#include "headwise/kernels/row_statistics.hpp"
#include "headwise/options.hpp"
#include "headwise/score_rule.hpp"
#include "headwise/types.hpp"

namespace headwise {

/// A call's query heads and the key/value heads they share: query head h reads key/value head
/// h / (query / key_value). key_value = query: multi-head; fewer: grouped-query; 1: multi-query.
struct Heads {
  Index query = 1;      ///< n_heads
  Index key_value = 1;  ///< n_kv_heads, dividing n_heads
};

/// Which path computes a call.
enum class AttentionPath {
  fused,         ///< the fused kernel: O(n d) memory, near the machine's GEMM speed
  step_by_step,  ///< each head's whole (n_q, n_k) pattern, then A V: the teaching view
};

/// One attention call, by named fields.
struct AttentionCall {
  Heads heads;
  /// Masks, modifiers, divisor, positions, threads (options.hpp). Read where it is, not copied: it
  /// must outlive the call. Null: the defaults (causal, divisor sqrt(d_head)).
  const AttentionOptions* options = nullptr;
  bool logsumexp = false;   ///< record each row's logsumexp (result.logsumexp)
  bool statistics = false;  ///< record each row's statistics (result.statistics; row_statistics.hpp)
  AttentionPath path = AttentionPath::fused;
  FusedTiles tiles;  ///< the fused path's tiles and key shards
};

/// What attend() returns. Heads side by side in Z's columns, as in q.
template <class Scalar>
struct AttentionResult {
  Matrix<Scalar> z;                  ///< (n_q, n_heads d_v)
  Matrix<Scalar> logsumexp;          ///< (n_heads, n_q) when asked (-inf for a row that saw nothing), else empty
  RowStatistics<Scalar> statistics;  ///< (n_heads, n_q) each when asked, else empty
};

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

/// Throws unless q, k, v hold whole heads of `heads` (k of the same width as q's heads, v of any).
template <class Scalar>
void check_heads(const char* where, const Heads& heads, const Eigen::Ref<const Matrix<Scalar>>& q,
                 const Eigen::Ref<const Matrix<Scalar>>& k, const Eigen::Ref<const Matrix<Scalar>>& v) {
  if (heads.query <= 0 || heads.key_value <= 0)
    invalid(where, "n_heads and n_kv_heads must be > 0, got ", heads.query, " and ", heads.key_value);
  if (heads.query % heads.key_value != 0)
    invalid(where, "n_heads = ", heads.query, " is not divisible by n_kv_heads = ", heads.key_value);
  if (q.cols() % heads.query != 0 || q.cols() == 0)
    invalid(where, "q has ", q.cols(), " columns, not divisible by n_heads = ", heads.query);
  const Index d_head = q.cols() / heads.query;
  if (k.cols() != heads.key_value * d_head)
    invalid(where, "k has ", k.cols(), " columns, expected n_kv_heads d_head = ", heads.key_value * d_head);
  if (v.rows() != k.rows()) invalid(where, "v has ", v.rows(), " rows but k has ", k.rows(), " (one per key)");
  if (v.cols() % heads.key_value != 0 || v.cols() == 0)
    invalid(where, "v has ", v.cols(), " columns, not divisible by n_kv_heads = ", heads.key_value);
}

/// The step-by-step path: each head's pattern from the rule, then A V.
template <class Scalar>
AttentionResult<Scalar> attend_step_by_step(const Eigen::Ref<const Matrix<Scalar>>& q,
                                            const Eigen::Ref<const Matrix<Scalar>>& k,
                                            const Eigen::Ref<const Matrix<Scalar>>& v, const AttentionCall& call,
                                            const AttentionOptions& options, const char* where) {
  const Index H = call.heads.query, G = call.heads.key_value, d = q.cols() / H, d_v = v.cols() / G;
  const double divisor = resolve_divisor<Scalar>(options, d, where);
  const ScoreRule<Scalar> rule(options, q.rows(), k.rows(), H, where);
  AttentionResult<Scalar> out;
  out.z.resize(q.rows(), H * d_v);
  if (call.logsumexp) out.logsumexp.resize(H, q.rows());
  if (call.statistics) out.statistics.resize(H, q.rows());
  const int threads = thread_count(options.threads, where);
  Vector<Scalar> lse;
  Matrix<Scalar> z_h;
  for (Index h = 0; h < H; ++h) {
    const Index g = h / (H / G);
    const Matrix<Scalar> a = weights_of_head(q.middleCols(h * d, d), k.middleCols(g * d, d), divisor, rule, h, &lse);
    detail::product<Scalar>(a, v.middleCols(g * d_v, d_v), z_h, threads);  // the one product, as scores()
    out.z.middleCols(h * d_v, d_v) = z_h;
    if (call.logsumexp) out.logsumexp.row(h) = lse.transpose();
    if (call.statistics) record_statistics_of_weights(a, rule, h, out.statistics);
  }
  return out;
}

/// Keys and values out of a packed store or a sequence's blocks, as matrices (for the step-by-step
/// path on a cache). Every key must be held (none let go by a window).
template <class Scalar>
void unpack(const KvBlocks<Scalar>& kv, Matrix<Scalar>& k, Matrix<Scalar>& v) {
  if (kv.first_kept() > 0)
    invalid("unpack", "the keys before position ", kv.first_kept(), " were let go (a window's bounded cache): ",
            "the step-by-step path needs every key");
  k.resize(kv.size(), kv.n_kv_heads() * kv.d_head());
  v.resize(kv.size(), kv.n_kv_heads() * kv.d_v());
  for (Index g = 0; g < kv.n_kv_heads(); ++g)
    for (Index j = 0; j < kv.size(); ++j) {
      for (Index c = 0; c < kv.d_head(); ++c) k(j, g * kv.d_head() + c) = kv.key(g, j, c);
      for (Index c = 0; c < kv.d_v(); ++c) v(j, g * kv.d_v() + c) = kv.value(g, j, c);
    }
}

template <class Scalar>
void unpack(const PackedKeysValues<Scalar>& kv, Matrix<Scalar>& k, Matrix<Scalar>& v) {
  unpack(kv.blocks(), k, v);
}

template <class Scalar, class Observer = NoPhaseObserver, class Reach = AnyStorage>
HEADWISE_ISA_TAG AttentionResult<Scalar> attend_packed(const Eigen::Ref<const Matrix<Scalar>>& q, const KvBlocks<Scalar>& kv,
                                      const AttentionCall& call, const char* where, std::vector<Observer>* observers = nullptr);

/// Throws unless every key a row of the call sees is still held (a window's bounded cache lets
/// the keys before its window go: a call that would read one is not the window's).
template <class Scalar>
void check_kept_keys(const ScoreRule<Scalar>& rule, const KvBlocks<Scalar>& kv, const char* where) {
  if (kv.first_kept() == 0) return;
  for (Index i = 0; i < rule.n_q(); ++i)
    if (!rule.keys(i).empty() && rule.keys(i).begin < kv.first_kept())
      invalid(where, "query row ", i, " sees the key at position ", rule.keys(i).begin, ", but the keys before ", kv.first_kept(),
              " were let go (the sequence's window): attend with that window");
}

/// True if the call's grouped-query heads can run folded into rows (attend_folded): several query
/// heads per key/value head and no option that is per head (ALiBi slopes, sinks) or per row (a
/// mask, a bias).
inline bool groups_foldable(const AttentionCall& call, const AttentionOptions& o) {
  return call.heads.query > call.heads.key_value && call.heads.key_value > 0 && call.heads.query % call.heads.key_value == 0 &&
         o.query_rows_per_position == 1 && !o.alibi_slopes.size() && !o.sinks.size() && !o.mask.size() && !o.bias.size();
}

/// Queries q (n, H d) with each key/value head's `group` query heads folded into rows: row
/// t group + r of head g is query head g group + r of token t (attend_folded).
template <class Scalar>
Matrix<Scalar> fold_queries(const Eigen::Ref<const Matrix<Scalar>>& q, const Heads& heads, Index d, const char* where) {
  const Index H = heads.query, group = H / heads.key_value, n = q.rows();
  Matrix<Scalar> folded(checked_size<Scalar>(where, "the folded queries", n, group), heads.key_value * d);
  for (Index t = 0; t < n; ++t)
    for (Index h = 0; h < H; ++h) folded.row(t * group + h % group).segment(h / group * d, d) = q.row(t).segment(h * d, d);
  return folded;
}

/// A folded call's per-row values (G, n group: row t group + r of key/value head g is query head
/// g group + r of token t) in the unfolded layout (H, n); not recorded (0 x 0) stays so.
template <class M>
M unfold_rows(const M& m, const Heads& heads, Index n) {
  if (m.rows() == 0) return M();
  const Index H = heads.query, group = H / heads.key_value;
  M to(H, n);
  for (Index t = 0; t < n; ++t)
    for (Index h = 0; h < H; ++h) to(h, t) = m(h / group, t * group + h % group);
  return to;
}

/// A folded call's row statistics in the unfolded layout (unfold_rows, each of them).
template <class Scalar>
RowStatistics<Scalar> unfold_statistics(const RowStatistics<Scalar>& s, const Heads& heads, Index n) {
  RowStatistics<Scalar> out;
  out.entropy = unfold_rows(s.entropy, heads, n), out.first_token_mass = unfold_rows(s.first_token_mass, heads, n);
  out.previous_token_mass = unfold_rows(s.previous_token_mass, heads, n), out.max_weight = unfold_rows(s.max_weight, heads, n);
  out.argmax = unfold_rows(s.argmax, heads, n), out.sink_mass = unfold_rows(s.sink_mass, heads, n);
  return out;
}

/// The result of a folded call (z (n group, G d_v), the rest (G, n group)) in the unfolded layout.
template <class Scalar>
AttentionResult<Scalar> unfold_result(const AttentionResult<Scalar>& r, const Heads& heads, Index n, Index dv) {
  const Index H = heads.query, group = H / heads.key_value;
  AttentionResult<Scalar> out;
  out.z.resize(n, H * dv);
  for (Index t = 0; t < n; ++t)
    for (Index h = 0; h < H; ++h) out.z.row(t).segment(h * dv, dv) = r.z.row(t * group + h % group).segment(h / group * dv, dv);
  out.logsumexp = unfold_rows(r.logsumexp, heads, n);
  out.statistics = unfold_statistics(r.statistics, heads, n);
  return out;
}

/// The fused path with each key/value head's query heads folded into rows: row t group + r of
/// head g is query head g group + r of token t, at token t's position (query_rows_per_position),
/// so that one pass over a key/value head's keys and values (read, and widened if stored narrow,
/// once) serves its whole group. Every row's arithmetic is the one it has unfolded (rows are
/// independent in the kernel): the same bits, in the unfolded layout.
template <class Scalar, class Observer, class Reach>
AttentionResult<Scalar> attend_folded(const Eigen::Ref<const Matrix<Scalar>>& q, const KvBlocks<Scalar>& kv,
                                      const AttentionCall& call, const AttentionOptions& options, const char* where,
                                      std::vector<Observer>* observers) {
  const Index G = call.heads.key_value, group = call.heads.query / G;
  const Matrix<Scalar> folded = fold_queries<Scalar>(q, call.heads, kv.d_head(), where);
  AttentionOptions rows = options;
  rows.query_rows_per_position = group;
  AttentionCall inner = call;
  inner.heads = {G, G}, inner.options = &rows;
  const AttentionResult<Scalar> r = attend_packed<Scalar, Observer, Reach>(folded, kv, inner, where, observers);
  return unfold_result(r, call.heads, q.rows(), kv.d_v());
}

/// attend() on a packed store, its errors named by `where` (the function the caller called); the
/// kernel compiled for the storages of Reach (kv_storage.hpp).
template <class Scalar, class Observer, class Reach>
HEADWISE_ISA_TAG AttentionResult<Scalar> attend_packed(const Eigen::Ref<const Matrix<Scalar>>& q, const KvBlocks<Scalar>& kv,
                                      const AttentionCall& call, const char* where,
                                      std::vector<Observer>* observers) {
  const AttentionOptions defaults;
  const AttentionOptions& options = call.options ? *call.options : defaults;
  if (call.heads.key_value != kv.n_kv_heads())
    invalid(where, "n_kv_heads = ", call.heads.key_value, " but the store holds ", kv.n_kv_heads(), " key/value heads");
  const int threads = thread_count(options.threads, where);
  if (call.path == AttentionPath::step_by_step) {
    Matrix<Scalar> k, v;
    unpack(kv, k, v);
    check_heads<Scalar>(where, call.heads, q, k, v);
    if (!all_finite(q, threads)) require_finite(where, "q", q);
    return attend_step_by_step<Scalar>(q, k, v, call, options, where);
  }
  if (call.heads.query <= 0 || q.cols() != call.heads.query * kv.d_head())  // before Z is sized by it
    invalid(where, "q has ", q.cols(), " columns, expected n_heads d_head = ", call.heads.query, " x ", kv.d_head());
  if (groups_foldable(call, options)) return attend_folded<Scalar, Observer, Reach>(q, kv, call, options, where, observers);
  AttentionResult<Scalar> out;
  out.z.resize(q.rows(), checked_size<Scalar>(where, "Z", call.heads.query, kv.d_v()));
  Eigen::Ref<Matrix<Scalar>> z(out.z);
  check_packed_call<Scalar>(where, q, call.heads.query, kv, z, call.tiles);
  const double divisor = resolve_divisor<Scalar>(options, kv.d_head(), where);
  if (!all_finite(q, threads)) require_finite(where, "q", q);
  check_scaled_queries<Scalar>(where, q, static_cast<Scalar>(1.0 / divisor), kv.format());
  const ScoreRule<Scalar> rule(options, q.rows(), kv.size(), call.heads.query, where);
  check_kept_keys(rule, kv, where);
  const FusedTiles tiles = tiles_for<Scalar>(call.tiles, q.rows(), kv.size(), kv.format());
  FusedCall<Scalar> fused(q, kv, z, rule, tiles, static_cast<Scalar>(1.0 / divisor));
  std::atomic<bool> overflow{false};
  fused.overflow = &overflow;
  if (call.logsumexp) fused.logsumexp = &out.logsumexp;
  if (call.statistics) fused.statistics = &out.statistics;
  std::vector<Observer> seen = run_fused<Scalar, Observer, Reach>(fused, threads, tiles.split_keys);
  check_overflow(where, out.z, kv.format(), overflow, threads);
  if (observers) *observers = std::move(seen);
  return out;
}

/// attend() on plain matrices, its errors named by `where`.
template <class Scalar>
HEADWISE_ISA_TAG AttentionResult<Scalar> attend_matrices(const Eigen::Ref<const Matrix<Scalar>>& q, const Eigen::Ref<const Matrix<Scalar>>& k,
                                        const Eigen::Ref<const Matrix<Scalar>>& v, const AttentionCall& call,
                                        const char* where) {
  check_heads<Scalar>(where, call.heads, q, k, v);
  const AttentionOptions defaults;
  const AttentionOptions& options = call.options ? *call.options : defaults;
  if (call.path == AttentionPath::step_by_step) {
    const int threads = thread_count(options.threads, where);
    const auto require_finite_input = [&](const char* name, const Eigen::Ref<const Matrix<Scalar>>& m) {
      if (!all_finite(m, threads)) require_finite(where, name, m);
    };
    require_finite_input("q", q), require_finite_input("k", k), require_finite_input("v", v);
    return attend_step_by_step<Scalar>(q, k, v, call, options, where);
  }
  PackedKeysValues<Scalar> kv(k.rows(), call.heads.key_value, q.cols() / call.heads.query, v.cols() / call.heads.key_value);
  kv.template append<AsComputedOnly>(k, v, thread_count(options.threads, where));  // the store it made: as computed
  return attend_packed<Scalar, NoPhaseObserver, AsComputedOnly>(q, kv.blocks(), call, where);
}

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
        inner_(fold_ ? Heads{call.heads.key_value, call.heads.key_value} : call.heads), rows_(options),
        threads_(thread_count(options.threads, where)),
        inverse_divisor_(static_cast<Scalar>(1.0 / resolve_divisor<Scalar>(options, batch.sequences[0].kv.d_head(), where))) {
    rows_.query_rows_per_position = fold_ ? call.heads.query / call.heads.key_value : options.query_rows_per_position;
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
    rules_.emplace_back(rows_, q_[i].rows(), s.kv.size(), inner_.query, where_);
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
    at_prefix_ = rows_;
    at_prefix_.first_query_position = prefix;
    const FusedTiles& own = tiles_[static_cast<std::size_t>(sharing[0])];
    const FusedTiles tiles{std::min(call_.tiles.queries, std::max<Index>(total, 1)), own.keys, own.key_shard, true};  // all sharers' rows in a tile
    q_ref_.emplace_back(stacked_), z_ref_.emplace_back(unused_);
    rules_.emplace_back(at_prefix_, total, prefix, inner_.query, where_);
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
  AttentionOptions rows_, at_prefix_;
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

/// Attention of q (n_q, n_heads d_head) over k (n_k, n_kv_heads d_head) and v (n_k, n_kv_heads
/// d_v), heads side by side in columns; queries aligned to the end of the keys unless the options
/// place them (causal_mask.hpp). Inputs must be finite. Throws std::invalid_argument naming what
/// does not fit.
template <class Scalar>
AttentionResult<Scalar> attend(const Eigen::Ref<const Matrix<Scalar>>& q, const Eigen::Ref<const Matrix<Scalar>>& k,
                               const Eigen::Ref<const Matrix<Scalar>>& v, const AttentionCall& call = {}) {
  return detail::attend_matrices<Scalar>(q, k, v, call, "attend");
}

/// Attention of q over the kv.size() keys and values of a packed store (a KvCache's packed()).
/// call.heads.key_value must be the store's n_kv_heads.
template <class Scalar>
AttentionResult<Scalar> attend(const Eigen::Ref<const Matrix<Scalar>>& q, const PackedKeysValues<Scalar>& kv,
                               const AttentionCall& call = {}) {
  return detail::attend_packed<Scalar>(q, kv.blocks(), call, "attend");
}

/// Attention of q over one sequence's keys and values block by block (a PagedKvCache's
/// sequence(s)): the bits of the same keys and values in one packed store.
template <class Scalar>
AttentionResult<Scalar> attend(const Eigen::Ref<const Matrix<Scalar>>& q, const KvBlocks<Scalar>& kv,
                               const AttentionCall& call = {}) {
  return detail::attend_packed<Scalar>(q, kv, call, "attend");
}

/// Attention of every sequence of a batch, each over its own keys and values (batched decoding,
/// or chunks of prefill, at different lengths), in one parallel job list; results in the batch's
/// order, each bitwise what attend(q_i, kv_i, call) gives, on any thread count. call.heads and
/// call.options are every sequence's (queries aligned to the end of each one's keys).
template <class Scalar>
std::vector<AttentionResult<Scalar>> attend(const AttentionBatch<Scalar>& batch, const AttentionCall& call = {}) {
  return detail::attend_batch<Scalar>(batch, call, "attend");
}

/// attend() on a packed store by the fused path, with one observer per thread told each phase
/// its jobs enter (FusedPhase); `observers` is replaced by the observers of the threads that ran.
template <class Scalar, class Observer>
AttentionResult<Scalar> attend(const Eigen::Ref<const Matrix<Scalar>>& q, const PackedKeysValues<Scalar>& kv,
                               const AttentionCall& call, std::vector<Observer>& observers) {
  if (call.path != AttentionPath::fused) detail::invalid("attend", "observers watch the fused path only");
  return detail::attend_packed<Scalar, Observer>(q, kv.blocks(), call, "attend", &observers);
}

/// The compiled mode's instantiations (detail/compiled.hpp): the three ways into the kernel.
#define HEADWISE_ATTEND_INSTANTIATIONS(PREFIX, S)                                                                       \
  PREFIX template AttentionResult<S> detail::attend_packed<S, NoPhaseObserver>(                                       \
      const Eigen::Ref<const Matrix<S>>&, const KvBlocks<S>&, const AttentionCall&, const char*, std::vector<NoPhaseObserver>*); \
  PREFIX template AttentionResult<S> detail::attend_matrices<S>(const Eigen::Ref<const Matrix<S>>&,                   \
                                                               const Eigen::Ref<const Matrix<S>>&,                   \
                                                               const Eigen::Ref<const Matrix<S>>&, const AttentionCall&, const char*); \
  PREFIX template std::vector<AttentionResult<S>> detail::attend_batch<S>(const AttentionBatch<S>&, const AttentionCall&, const char*);
HEADWISE_EXTERN_INSTANTIATIONS(HEADWISE_ATTEND_INSTANTIATIONS)

}  // namespace headwise
