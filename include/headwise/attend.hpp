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

/// True if the call's grouped-query heads can run folded into rows (attend_packed): several query
/// heads per key/value head and no option that is per head (ALiBi slopes, sinks) or per row (a
/// mask, a bias).
inline bool groups_foldable(const AttentionCall& call, const AttentionOptions& o) {
  return call.heads.query > call.heads.key_value && call.heads.key_value > 0 && call.heads.query % call.heads.key_value == 0 &&
         o.query_rows_per_position == 1 && !o.alibi_slopes.size() && !o.sinks.size() && !o.mask.size() && !o.bias.size();
}

/// Queries q (n, H d) with each key/value head's `group` query heads folded into rows: row
/// t group + r of head g is query head g group + r of token t (attend_packed).
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

/// The kernel's call as attend_packed resolved it: the options (the defaults where the call has
/// none), the thread count, and the queries' heads as the kernel sees them: `heads` heads, each
/// position's `folded` rows (1, or a key/value head's query heads folded into rows).
struct ResolvedCall {
  const AttentionCall& call;
  const AttentionOptions& options;
  int threads;
  Index heads;
  Index folded = 1;
};

/// The fused kernel on q (rows as `resolved` says) over kv: checks what the kernel reads, then
/// one run of it.
template <class Scalar, class Observer, class Reach>
HEADWISE_ISA_TAG AttentionResult<Scalar> attend_resolved(const Eigen::Ref<const Matrix<Scalar>>& q, const KvBlocks<Scalar>& kv,
                                                         const ResolvedCall& resolved, const char* where,
                                                         std::vector<Observer>* observers) {
  const AttentionCall& call = resolved.call;
  const AttentionOptions& options = resolved.options;
  AttentionResult<Scalar> out;
  out.z.resize(q.rows(), checked_size<Scalar>(where, "Z", resolved.heads, kv.d_v()));
  Eigen::Ref<Matrix<Scalar>> z(out.z);
  check_packed_call<Scalar>(where, q, resolved.heads, kv, z, call.tiles);
  const double divisor = resolve_divisor<Scalar>(options, kv.d_head(), where);
  if (!all_finite(q, resolved.threads)) require_finite(where, "q", q);
  check_scaled_queries<Scalar>(where, q, static_cast<Scalar>(1.0 / divisor), kv.format());
  const ScoreRule<Scalar> rule(options, q.rows(), kv.size(), resolved.heads, where, resolved.folded);
  check_kept_keys(rule, kv, where);
  const FusedTiles tiles = tiles_for<Scalar>(call.tiles, q.rows(), kv.size(), kv.format());
  FusedCall<Scalar> fused(q, kv, z, rule, tiles, static_cast<Scalar>(1.0 / divisor));
  std::atomic<bool> overflow{false};
  fused.overflow = &overflow;
  if (call.logsumexp) fused.logsumexp = &out.logsumexp;
  if (call.statistics) fused.statistics = &out.statistics;
  std::vector<Observer> seen = run_fused<Scalar, Observer, Reach>(fused, resolved.threads, tiles.split_keys);
  check_overflow(where, out.z, kv.format(), overflow, resolved.threads);
  if (observers) *observers = std::move(seen);
  return out;
}

/// attend() on a packed store, its errors named by `where` (the function the caller called); the
/// kernel compiled for the storages of Reach (kv_storage.hpp). Where groups_foldable, each
/// key/value head's query heads are folded into rows (row t group + r of head g is query head
/// g group + r of token t, at token t's position), so that one pass over a key/value head's keys
/// and values (read, and widened if stored narrow, once) serves its whole group; every row's
/// arithmetic is the one it has unfolded (rows are independent in the kernel): the same bits,
/// returned in the unfolded layout.
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
  if (!groups_foldable(call, options))
    return attend_resolved<Scalar, Observer, Reach>(q, kv, {call, options, threads, call.heads.query}, where, observers);
  const Index G = call.heads.key_value;
  const Matrix<Scalar> folded = fold_queries<Scalar>(q, call.heads, kv.d_head(), where);
  const AttentionResult<Scalar> r =
      attend_resolved<Scalar, Observer, Reach>(folded, kv, {call, options, threads, G, call.heads.query / G}, where, observers);
  return unfold_result(r, call.heads, q.rows(), kv.d_v());
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

/// attend() on a packed store by the fused path, with one observer per thread told each phase
/// its jobs enter (FusedPhase); `observers` is replaced by the observers of the threads that ran.
template <class Scalar, class Observer>
AttentionResult<Scalar> attend(const Eigen::Ref<const Matrix<Scalar>>& q, const PackedKeysValues<Scalar>& kv,
                               const AttentionCall& call, std::vector<Observer>& observers) {
  if (call.path != AttentionPath::fused) detail::invalid("attend", "observers watch the fused path only");
  return detail::attend_packed<Scalar, Observer>(q, kv.blocks(), call, "attend", &observers);
}

/// The compiled mode's instantiations (detail/compiled.hpp): the two ways into the kernel here
/// (attend_batch.hpp has the third).
#define HEADWISE_ATTEND_INSTANTIATIONS(PREFIX, S)                                                                       \
  PREFIX template AttentionResult<S> detail::attend_packed<S, NoPhaseObserver>(                                       \
      const Eigen::Ref<const Matrix<S>>&, const KvBlocks<S>&, const AttentionCall&, const char*, std::vector<NoPhaseObserver>*); \
  PREFIX template AttentionResult<S> detail::attend_matrices<S>(const Eigen::Ref<const Matrix<S>>&,                   \
                                                               const Eigen::Ref<const Matrix<S>>&,                   \
                                                               const Eigen::Ref<const Matrix<S>>&, const AttentionCall&, const char*);
HEADWISE_EXTERN_INSTANTIATIONS(HEADWISE_ATTEND_INSTANTIATIONS)

}  // namespace headwise
