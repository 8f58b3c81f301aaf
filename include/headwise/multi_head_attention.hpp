// Multi-head attention: n_heads heads side by side, and W_O split into per-head row blocks so that
// the layer is a sum of per-head contributions:  out = Σ_h Z_h W_O[h] + b_O.
#pragma once

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "headwise/attend.hpp"
#include "headwise/attention_core.hpp"
#include "headwise/attention_head.hpp"
#include "headwise/detail/compiled.hpp"
#include "headwise/forward_record.hpp"
#include "headwise/detail/errors.hpp"
#include "headwise/hook_function.hpp"
#include "headwise/kv_cache.hpp"
#include "headwise/layer_projections.hpp"
#include "headwise/layer_config.hpp"
#include "headwise/linear.hpp"
#include "headwise/multi_head_weights.hpp"
#include "headwise/options.hpp"
#include "headwise/norms.hpp"
#include "headwise/qkv_layout.hpp"
#include "headwise/rotary_embedding.hpp"
#include "headwise/score_rule.hpp"
#include "headwise/types.hpp"

namespace headwise {
namespace detail {
template <class Scalar>
struct PagedDecoding;  // (paged_decoding.hpp: the layer's decoding on a paged pool)
}  // namespace detail

/// Causal multi-head self-attention, with grouped-query attention when W_K and W_V hold fewer heads
/// and, from a LayerConfig, rotary positions, a sliding window, soft-capping, ALiBi or sinks.
///   MultiHeadAttention<float> mha(/*n_heads=*/12, weights);
///   Matrix<float> out = mha.forward(x);           // x, out: (n, d_model)
///   MultiHeadTrace<float> t = mha.trace(x);       // every head's intermediates and contribution
template <class Scalar>
class HEADWISE_ISA_TAG MultiHeadAttention {
 public:
  /// n_heads query heads; n_kv_heads is read from the width of w.w_k (n_kv_heads d_head columns).
  MultiHeadAttention(Index n_heads, MultiHeadWeights<Scalar> w, LayerConfig config = {});

  // ---- Shape, settings and weights ----
  Index n_heads() const { return n_heads_; }
  Index n_kv_heads() const { return n_kv_heads_; }
  Index d_head() const { return d_head_; }
  Index d_model() const { return proj_.d_model(); }
  /// The key/value head that query head h reads.
  Index kv_head_of(Index h) const { return checked_head(h, "kv_head_of") / (n_heads_ / n_kv_heads_); }
  /// The layer's own settings (rotary embedding, window, ...), and its rotary embedding if any.
  const LayerConfig& config() const { return config_; }
  const std::optional<RotaryEmbedding>& rope() const { return proj_.rope(); }
  /// The options a call with `options` runs with: the call's, completed by the layer's config.
  AttentionOptions options_for(const AttentionOptions& options) const { return options_with_layer(options, config_); }

  /// Where each head of Q, K and V lies in the columns of w_qkv(), of project_qkv() and of their
  /// gradients.
  QkvLayout layout() const { return {n_heads_, n_kv_heads_, d_head_}; }
  /// The weights as the layer keeps them (MultiHeadWeights::kept_as), [out, in]: W_Q | W_K | W_V
  /// as [(n_heads + 2 n_kv_heads) d_head, d_model], W_O as [d_model, n_heads d_head].
  const StoredMatrix& stored_w_qkv() const { return proj_.stored_w_qkv(); }
  const StoredMatrix& stored_w_o() const { return w_o_; }
  /// W_Q | W_K | W_V side by side: (d_model, (n_heads + 2 n_kv_heads) d_head), widened from what
  /// the layer keeps (a copy: for study and gradients); and its bias.
  Matrix<Scalar> w_qkv() const { return stored_w_qkv().template to_matrix<Scalar>().transpose(); }
  const RowVector<Scalar>& b_qkv() const { return proj_.b_qkv(); }
  /// W_O: (n_heads d_head, d_model), a widened copy; and b_O: (1, d_model).
  Matrix<Scalar> w_o() const { return w_o_.to_matrix<Scalar>().transpose(); }
  const RowVector<Scalar>& b_o() const { return b_o_; }
  /// The output gate's W_G (d_model, n_heads d_head), a widened copy, and b_G; empty without a gate.
  bool gated() const { return proj_.gated(); }
  Matrix<Scalar> w_gate() const { return proj_.stored_w_gate().template to_matrix<Scalar>().transpose(); }
  const RowVector<Scalar>& b_gate() const { return proj_.b_gate(); }
  /// Head h's rows of W_O: (d_head, d_model), a widened copy.
  Matrix<Scalar> w_o_block(Index h) const {
    return w_o_.columns<Scalar>(checked_head(h, "w_o_block") * d_head_, d_head_).transpose();
  }

  /// Head h on its own, with its slices of W_Q, W_K, W_V and their biases (for trace()).
  AttentionHead<Scalar> head(Index h) const;

  // ---- The fast path: the fused kernel, the cache ----
  /// The layer's output, by the fused kernel. x: (n, d_model) -> (n, d_model). n = 0 gives an
  /// empty result. Q, K and V come from one product X [W_Q | W_K | W_V], taken over chunks of
  /// rows so that K and V go straight into the kernel's packed layout; no (n, n) matrix is held,
  /// and memory stays O(n d_model). The same code as forward_incremental on an empty cache.
  /// With a z_hook: every head's Z side by side, (n, n_heads d_head), through it before the W_O
  /// sum, at "hook_z" (head_interventions.hpp: a head ablated, gated, patched).
  Matrix<Scalar> forward(const Eigen::Ref<const Matrix<Scalar>>& x, const AttentionOptions& options = {},
                         const HookFunction<Scalar>& z_hook = {}) const;

  /// Every head's Z side by side, (n, n_heads d_head), by the fused kernel, as W_O reads it (gated
  /// by the output gate if the layer has one).
  Matrix<Scalar> head_outputs(const Eigen::Ref<const Matrix<Scalar>>& x, const AttentionOptions& options = {}) const;

  /// The layer's attention before W_O, into `record` (forward_record.hpp): every head's Z side by
  /// side (n, n_heads d_head; gated by the output gate if the layer has one) and what the record
  /// asks to keep (the logsumexp, the per-row statistics, the queries, the keys and values), with
  /// the run's options and the layer's shape. All O(n d_model).
  /// Any starting position: with options.first_key_position = p the tokens sit at positions
  /// p .. p + n - 1 (their rotary angles, windows, chunks and query scales), with no earlier keys:
  /// the tokens p .. of a longer sequence whose earlier keys are not attended (forward,
  /// forward_step_by_step, trace and inspect alike). (Hugging Face places RoPE by position_ids, and
  /// Llama 4's chunks and temperature by cache_position, which start together only with a cache.)
  void attend_heads(const Eigen::Ref<const Matrix<Scalar>>& x, const AttentionOptions& options, ForwardRecord<Scalar>& record) const;

  /// A KV cache for this layer with room for `capacity` tokens, stored as config().kv_storage says.
  KvCache<Scalar> make_cache(Index capacity) const {
    return KvCache<Scalar>(capacity, n_kv_heads_, d_head_, d_head_, store_format());
  }
  /// How this layer stores keys and values: their own panels, config().kv_storage's number type.
  StoreFormat store_format() const { return {ValueStorage::own, config_.kv_storage, config_.kv_arithmetic}; }
  /// What it keeps per token in a cache: n_kv_heads() heads of keys and values d_head() wide.
  KvShape kv_shape() const { return {n_kv_heads_, d_head_, d_head_, store_format()}; }

  /// Incremental decoding: the output rows of the m tokens x (m, d_model) that follow the
  /// cache.size() tokens already in `cache`, whose keys and values are appended to it. Token i of
  /// x sits at position cache.size() + i (its rotary angle, its window) and sees keys
  /// 0 .. cache.size() + i. The cache holds rotated keys. Bitwise equal to
  /// the matching rows of forward() on the whole sequence, for any split into chunks.
  Matrix<Scalar> forward_incremental(const Eigen::Ref<const Matrix<Scalar>>& x, KvCache<Scalar>& cache,
                                     const AttentionOptions& options = {}) const;
  /// forward_incremental before W_O: the m new tokens' Z (and what `record` asks to keep: the
  /// queries, logsumexp and statistics of the new rows; the keys and values it then holds, every
  /// token's) into `record`, their keys and values appended to `cache`. A whole model's resumed
  /// run (DecoderModel::resume) reads Z here, where its hook is.
  void attend_heads(const Eigen::Ref<const Matrix<Scalar>>& x, KvCache<Scalar>& cache, const AttentionOptions& options,
                    ForwardRecord<Scalar>& record) const;


  /// A KV-sharing layer (LayerConfig::shares_keys_values_of, Gemma 4): the output rows of the m
  /// tokens x, which are the last m tokens of `source`, a cache the earlier layer filled (with keys
  /// and values from its own input), attended over every key it holds; `source` is read, not
  /// changed, and nothing is copied. Decoding runs the earlier layer's forward_incremental first,
  /// then this. Only the queries are projected (the K and V columns of the rows stay zero): W_K
  /// and W_V are not used.
  Matrix<Scalar> forward_reading_cache(const Eigen::Ref<const Matrix<Scalar>>& x, const KvCache<Scalar>& source,
                                       const AttentionOptions& options = {}) const;
  /// forward_reading_cache before W_O, into `record` as attend_heads: the m tokens' Z, and what the
  /// record asks to keep (the keys and values: every token's of `source`).
  void attend_heads_reading_cache(const Eigen::Ref<const Matrix<Scalar>>& x, const KvCache<Scalar>& source, const AttentionOptions& options,
                                  ForwardRecord<Scalar>& record) const;

  // ---- The teaching path: every head's whole pattern ----
  /// The same output by the step-by-step path: each head's whole (n, n) pattern, then A V.
  /// For reference and comparison; forward() is the fast path.
  Matrix<Scalar> forward_step_by_step(const Eigen::Ref<const Matrix<Scalar>>& x, const AttentionOptions& options = {},
                                      const HookFunction<Scalar>& z_hook = {}) const;

  /// Every head's intermediates and contribution, and the output as their sum.
  /// x: (n, d_model). Holds n_heads (n, n) patterns: for inspection, not for long inputs.
  MultiHeadTrace<Scalar> trace(const Eigen::Ref<const Matrix<Scalar>>& x,
                               const AttentionOptions& options = {}) const;

  /// trace() of a KV-sharing layer (see forward_reading_cache): the m tokens x are the last m of
  /// `source`; each head's k, k_normed and k_rotated are the keys the cache holds (the earlier
  /// layer's, after its norms and RoPE) and v its values; every pattern is (m, source.size()).
  MultiHeadTrace<Scalar> trace_reading_cache(const Eigen::Ref<const Matrix<Scalar>>& x, const KvCache<Scalar>& source,
                                             const AttentionOptions& options = {}) const;

  // ---- The W_O sum and the projections, by parts ----
  /// Head h's contribution to the output, Z_h W_O[h]. z_h: (n, d_head) -> (n, d_model).
  Matrix<Scalar> head_contribution(const Eigen::Ref<const Matrix<Scalar>>& z_h, Index h) const;

  /// The textbook form: concatenate the heads' Z and apply W_O once, Concat(Z_0..Z_H-1) W_O + b_O.
  /// z: (n, n_heads d_head) -> (n, d_model). Equal to the sum of the per-head contributions.
  Matrix<Scalar> project_heads(const Eigen::Ref<const Matrix<Scalar>>& z, int threads = 0) const;

  /// X [W_Q | W_K | W_V] + [b_Q | b_K | b_V]: x (n, d_model) -> (n, (n_heads + 2 n_kv_heads) d_head),
  /// laid out as layout() says.
  Matrix<Scalar> project_qkv(const Eigen::Ref<const Matrix<Scalar>>& x) const;

  // (paged_decoding.hpp: the layer's decoding on a paged pool, free functions over its parts)
  friend struct detail::PagedDecoding<Scalar>;

 private:
  /// The trace from the projected rows qkv: the transforms, then each head's steps against the
  /// rows' own keys and values, or (with `source`) against the cache's.
  MultiHeadTrace<Scalar> trace_of(const Eigen::Ref<const Matrix<Scalar>>& x, Matrix<Scalar>& qkv, RowPositions at,
                                  const AttentionOptions& all, const KvCache<Scalar>* source, const char* where) const {
    const QkvLayout l = layout();
    constexpr QkvPart Q = QkvPart::query, K = QkvPart::key, V = QkvPart::value;
    const Matrix<Scalar> projected = qkv;
    Matrix<Scalar> normed, keys, values;
    proj_.transform(qkv, at, 1, &normed);
    through_storage(qkv, 1);
    if (source) detail::unpack(source->packed(), keys, values);
    const Matrix<Scalar>& k_all = source ? keys : qkv;  // (keys: a (size, G d) matrix, the cache's)
    Matrix<Scalar> gate;
    if (gated()) gate = proj_.gate_of(x, 1);
    MultiHeadTrace<Scalar> t;
    t.output = b_o_.replicate(x.rows(), 1);
    for (Index h = 0; h < n_heads_; ++h) {
      const Index g = kv_head_of(h);
      HeadTrace<Scalar> head;
      head.q = l.head(projected, Q, h);
      head.q_normed = normed.size() ? Matrix<Scalar>(l.head(normed, Q, h)) : head.q;
      head.q_rotated = l.head(qkv, Q, h);
      if (source) {
        head.k = head.k_normed = head.k_rotated = keys.middleCols(g * d_head_, d_head_);
        head.v = values.middleCols(g * d_head_, d_head_);
      } else {
        head.k = l.head(projected, K, g), head.v = l.head(qkv, V, g);
        head.k_normed = normed.size() ? Matrix<Scalar>(l.head(normed, K, g)) : head.k;
        head.k_rotated = l.head(k_all, K, g);
      }
      detail::trace_scores(head, all, OneHead{h, n_heads_}, where);
      if (gated()) head.gate = gate.middleCols(h * d_head_, d_head_);
      t.contributions.push_back(head_contribution(gated() ? Matrix<Scalar>(head.z.cwiseProduct(head.gate)) : head.z, h));
      t.output += t.contributions.back();
      t.heads.push_back(std::move(head));
    }
    return t;
  }

  /// Throws unless `source` fits this layer and x (m rows) are its last m tokens, read with
  /// `options`; returns the position of x's first token.
  Index check_reading(const Eigen::Ref<const Matrix<Scalar>>& x, const KvCache<Scalar>& source, const AttentionOptions& options,
                      const char* where) const {
    check_input(x, where);
    resolve_divisor<Scalar>(options, d_head_, where);
    detail::check_kv_shape(source, kv_shape(), "cache", where);
    if (x.rows() > source.size())
      detail::invalid(where, "x has ", x.rows(), " tokens, the cache only ", source.size(), ": x must be its last tokens");
    const Index first = source.size() - x.rows();
    detail::check_origin(source.origin(), origin_of(source.size(), options, where), source.size(), where);
    return first;
  }
  /// The config checked as a call with no mask would check it (the projections check theirs).
  void check_config(const char* where) {
    detail::check_storage<Scalar>(config_.kv_storage, where);
    detail::check_arithmetic(where, store_format(), d_head_);
    const AttentionOptions options = options_for({});
    resolve_divisor<Scalar>(options, d_head_, where);
    static_cast<void>(ScoreRule<Scalar>(options, 0, 0, n_heads_, where));
  }

  /// The checks every call on x starts with (its shape and values, keys of the layer's own, the
  /// divisor); returns the call's options with the layer's own settings added.
  AttentionOptions checked_call(const Eigen::Ref<const Matrix<Scalar>>& x, const AttentionOptions& options, const char* where) const {
    check_input(x, where);
    check_own_keys(where);
    AttentionOptions all = options_for(options);
    resolve_divisor<Scalar>(all, d_head_, where);
    return all;
  }
  /// The keys and values of qkv (after RoPE and norms) replaced by what the layer's storage keeps
  /// of them: the step-by-step path then attends to the numbers the fused path reads.
  void through_storage(Matrix<Scalar>& qkv, int threads) const {
    if (config_.kv_storage == KvStorage::as_computed) return;
    const QkvLayout l = layout();
    PackedKeysValues<Scalar> kv(qkv.rows(), n_kv_heads_, d_head_, d_head_, store_format());
    kv.append(l.part(qkv, QkvPart::key), l.part(qkv, QkvPart::value), threads);
    Matrix<Scalar> k, v;
    detail::unpack(kv, k, v);
    l.part(qkv, QkvPart::key) = k;
    l.part(qkv, QkvPart::value) = v;
  }
  /// What tokens attended with `options` record in a cache (the sequence then `end` tokens long).
  KvCacheOrigin origin_of(Index end, const AttentionOptions& options, const char* where) const {
    if (options.first_query_position || options.first_key_position != 0)
      detail::invalid(where, "token i of x sits at position cache.size() + i: first_query_position and ",
                      "first_key_position must be left unset (the masks and the rotary angles both follow the cache)");
    const std::optional<RotaryEmbedding>& rope = proj_.rope();
    return {rope ? std::optional<RopeConfig>(rope->config()) : std::nullopt, options.window, options.chunk,
            rope && rope->long_factors_for(end)};
  }

  /// Z through the layer's z_hook (if any), at hook_z from position `first`.
  void call_z_hook(const HookFunction<Scalar>& z_hook, Matrix<Scalar>& z, Index first, const char* where) const {
    call_hook(z_hook, z, HookPoint{"hook_z", n_heads_, first}, where);
  }

  /// Rows of x projected in chunks by X [W_Q | W_K | W_V] + b: K and V appended to kv, then the
  /// fused kernel against everything kv holds. x: (m, d_model) -> Z (m, n_heads d_head).
  /// If anything throws, kv is rolled back to the tokens it held: a refused call changes nothing.
  template <class Store>
  AttentionResult<Scalar> attend_rows(const Eigen::Ref<const Matrix<Scalar>>& x, Store& kv, ForwardRecord<Scalar>& record, RowPositions at,
                                      const char* where) const {
    const Index held = kv.size();
    try {
      return attend_unchecked(x, kv, record, at, where);
    } catch (...) {
      kv.truncate(held);
      throw;
    }
  }
  template <class Store>
  AttentionResult<Scalar> attend_unchecked(const Eigen::Ref<const Matrix<Scalar>>& x, Store& kv, ForwardRecord<Scalar>& record,
                                           RowPositions at, const char* where) const {
    const int threads = record.threads;
    const QkvLayout l = layout();
    const Index width = l.query_width();
    AttentionResult<Scalar> result;  // every head's Z side by side, (m, n_heads d_head), and what the record keeps
    {
      Matrix<Scalar> q(x.rows(), width), part;
      constexpr Index chunk = 256;  // rows per product: a (256, 3 d_model) buffer, not (n, 3 d_model)
      for (Index i0 = 0; i0 < x.rows(); i0 += chunk) {
        const Index rows = std::min(chunk, x.rows() - i0);
        part = times_transposed<Scalar>(x.middleRows(i0, rows), stored_w_qkv(), threads);
        part.rowwise() += proj_.b_qkv();
        proj_.check_finite(part, at.first + i0, where, threads);
        proj_.transform(part, RowPositions{at.first + i0, at.end}, threads);  // norms, RoPE (Q and K in one pass), scale
        // Copied on every thread: at large n, q's fresh pages fault as they are first written, and
        // faults taken on one thread leave the others waiting (bench/RESULTS.md, "Fresh memory").
        const int copiers = detail::threads_for(double(rows) * double(width) * 64, threads);  // (a copy: a multiply-add's cost per 64 entries)
        detail::parallel_for<detail::Schedule::by_part>(copiers, rows, [&](Index r) { q.row(i0 + r) = part.row(r).head(width); });
        kv.append(l.part(part, QkvPart::key), l.part(part, QkvPart::value), threads);
      }
      AttentionCall call;  // the one attention call, on everything kv now holds
      call.heads = {n_heads_, n_kv_heads_};
      call.options = &record.options, call.logsumexp = record.keep_logsumexp, call.statistics = record.keep_statistics;
      result = detail::attend_packed<Scalar>(q, kv.blocks(), call, where);
      if (record.keep_queries) record.q = std::move(q);
    }
    return result;
  }

  /// Z W_O + b_O for rows at positions first_position + t; throws naming the first token whose
  /// output is not finite: its own scores overflowed (its Z is NaN), or the projection did.
  Matrix<Scalar> output_of(const Eigen::Ref<const Matrix<Scalar>>& z, int threads, Index first_position,
                           const char* where) const {
    Matrix<Scalar> out = times_transposed<Scalar>(z, w_o_, threads);
    out.rowwise() += b_o_;
    if (detail::all_finite(out, threads)) return out;
    for (Index t = 0; t < out.rows(); ++t) {
      if (detail::row_is_finite(out, t)) continue;
      for (Index h = 0; h < n_heads_; ++h)
        if (!detail::row_is_finite(z.row(t).segment(h * d_head_, d_head_), 0))
          detail::invalid(where, "the attention of the token at position ", first_position + t, " in head ", h,
                          " is not finite: its scores q . k / divisor overflowed; scale x or the weights down");
      detail::invalid(where, "the output Z W_O + b_O of the token at position ", first_position + t,
                      " is not finite: the output projection overflowed; scale x or the weights down");
    }
    return out;
  }
  void check_own_keys(const char* where) const {
    if (config_.shares_keys_values_of)
      detail::invalid(where, "this layer has no keys and values of its own: it reads layer ", *config_.shares_keys_values_of,
                      "'s (KV sharing); call forward_reading_cache with that layer's cache");
  }
  void check_input(const Eigen::Ref<const Matrix<Scalar>>& x, const char* where) const {
    if (x.cols() != d_model())
      detail::invalid(where, "x has ", x.cols(), " columns, expected d_model = ", d_model());
    detail::require_finite(where, "x", x);
  }
  Index checked_head(Index h, const char* where) const {
    if (h < 0 || h >= n_heads_) detail::invalid(where, "head ", h, " out of range [0, ", n_heads_, ")");
    return h;
  }
  /// Head h's projection of part p, its columns of W_QKV and b_QKV.
  Linear<Scalar> slice(QkvPart part, Index h) const {
    const Index first = layout().first_column(part, h);
    return Linear<Scalar>(stored_w_qkv().middle_rows(first, d_head_).template to_matrix<Scalar>().transpose(), proj_.b_qkv().segment(first, d_head_));
  }

  Index n_heads_ = 0, n_kv_heads_ = 0, d_head_ = 0;
  LayerConfig config_;
  LayerProjections<Scalar> proj_;  // X to Q, K, V (and the gate)
  StoredMatrix w_o_;  ///< [d_model, n_heads d_head]
  RowVector<Scalar> b_o_;
};

template <class Scalar>
MultiHeadAttention<Scalar>::MultiHeadAttention(Index n_heads, MultiHeadWeights<Scalar> w, LayerConfig config)
    : n_heads_(n_heads), config_(std::move(config)) {
  constexpr const char* where = "MultiHeadAttention";
  const QkvLayout l = detail::check_weights(w, n_heads, where);
  n_kv_heads_ = l.n_kv_heads, d_head_ = l.d_head;
  const Index d_model = w.w_q.rows();
  proj_ = LayerProjections<Scalar>(w, l, config_, where);
  w_o_ = detail::kept_weights(w.w_o.transpose(), w, w.fp8_scales ? &w.fp8_scales->o : nullptr);
  b_o_ = w.b_o.size() ? std::move(w.b_o) : RowVector<Scalar>::Zero(d_model);
  check_config(where);
}

template <class Scalar>
AttentionHead<Scalar> MultiHeadAttention<Scalar>::head(Index h) const {
  checked_head(h, "head");
  if (config_.transforms_projections() || gated())
    detail::invalid("head", "this layer ", gated() ? "gates its heads' outputs" : "norms or scales its projections",
                    ", which one AttentionHead does not compute: use trace() for a head's intermediates");
  const Index g = kv_head_of(h);
  return AttentionHead<Scalar>(slice(QkvPart::query, h), slice(QkvPart::key, g), slice(QkvPart::value, g), proj_.rope());
}

template <class Scalar>
Matrix<Scalar> MultiHeadAttention<Scalar>::forward(const Eigen::Ref<const Matrix<Scalar>>& x, const AttentionOptions& options,
    const HookFunction<Scalar>& z_hook) const {
  constexpr const char* where = "MultiHeadAttention::forward";
  ForwardRecord<Scalar> record;
  attend_heads(x, options, record);  // (the layer's config is added there)
  call_z_hook(z_hook, record.attention.z, 0, where);
  return output_of(record.attention.z, record.threads, 0, where);
}

template <class Scalar>
Matrix<Scalar> MultiHeadAttention<Scalar>::head_outputs(const Eigen::Ref<const Matrix<Scalar>>& x, const AttentionOptions& options) const {
  ForwardRecord<Scalar> record;
  attend_heads(x, options, record);
  return std::move(record.attention.z);
}

template <class Scalar>
void MultiHeadAttention<Scalar>::attend_heads(const Eigen::Ref<const Matrix<Scalar>>& x, const AttentionOptions& options, ForwardRecord<Scalar>& record) const {
  constexpr const char* where = "MultiHeadAttention::forward";
  record.options = checked_call(x, options, where), record.threads = detail::thread_count(options.threads, where);
  record.n_heads = n_heads_, record.n_kv_heads = n_kv_heads_, record.d_head = record.d_v = d_head_;
  record.arithmetic = config_.kv_arithmetic;
  const Index first = layer_first_position(record.options, where);
  PackedKeysValues<Scalar> own(x.rows(), n_kv_heads_, d_head_, d_head_, store_format());
  record.attention = attend_rows(x, own, record, RowPositions{first, first + x.rows()}, where);
  if (record.keep_keys_values) detail::unpack(own, record.k, record.v);
  proj_.apply_gate(x, record.attention.z, record.threads);
}

template <class Scalar>
void MultiHeadAttention<Scalar>::attend_heads(const Eigen::Ref<const Matrix<Scalar>>& x, KvCache<Scalar>& cache, const AttentionOptions& options,
                                              ForwardRecord<Scalar>& record) const {
  constexpr const char* where = "MultiHeadAttention::forward_incremental";
  record.options = checked_call(x, options, where), record.threads = detail::thread_count(options.threads, where);
  record.n_heads = n_heads_, record.n_kv_heads = n_kv_heads_, record.d_head = record.d_v = d_head_;
  record.arithmetic = config_.kv_arithmetic;
  const KvCacheOrigin origin = origin_of(cache.size() + x.rows(), record.options, where);
  cache.check_append(kv_shape(), x.rows(), origin, where);
  const Index held = cache.size();
  try {
    record.attention = attend_rows(x, cache.store(), record, RowPositions{held, held + x.rows()}, where);
    proj_.apply_gate(x, record.attention.z, record.threads);
  } catch (...) {
    cache.store().truncate(held);  // a refused call changes nothing
    throw;
  }
  if (record.keep_keys_values) detail::unpack(cache.packed(), record.k, record.v);
  if (cache.size() > 0) cache.origin_ = origin;  // an empty cache stays without one
}

template <class Scalar>
Matrix<Scalar> MultiHeadAttention<Scalar>::forward_incremental(const Eigen::Ref<const Matrix<Scalar>>& x, KvCache<Scalar>& cache,
    const AttentionOptions& options) const {
  constexpr const char* where = "MultiHeadAttention::forward_incremental";
  const Index held = cache.size();
  const std::optional<KvCacheOrigin> before = cache.origin_;
  ForwardRecord<Scalar> record;
  attend_heads(x, cache, options, record);
  try {
    return output_of(record.attention.z, record.threads, held, where);
  } catch (...) {
    cache.store().truncate(held), cache.origin_ = before;  // a refused call changes nothing
    throw;
  }
}

template <class Scalar>
Matrix<Scalar> MultiHeadAttention<Scalar>::forward_reading_cache(const Eigen::Ref<const Matrix<Scalar>>& x, const KvCache<Scalar>& source,
    const AttentionOptions& options) const {
  constexpr const char* where = "MultiHeadAttention::forward_reading_cache";
  ForwardRecord<Scalar> record;
  attend_heads_reading_cache(x, source, options, record);
  return output_of(record.attention.z, record.threads, source.size() - x.rows(), where);
}

template <class Scalar>
void MultiHeadAttention<Scalar>::attend_heads_reading_cache(const Eigen::Ref<const Matrix<Scalar>>& x, const KvCache<Scalar>& source,
                                                            const AttentionOptions& options, ForwardRecord<Scalar>& record) const {
  constexpr const char* where = "MultiHeadAttention::forward_reading_cache";
  record.options = options_for(options);
  record.n_heads = n_heads_, record.n_kv_heads = n_kv_heads_, record.d_head = record.d_v = d_head_;
  record.arithmetic = config_.kv_arithmetic;
  const Index first = check_reading(x, source, record.options, where);
  const int threads = record.threads = detail::thread_count(options.threads, where);
  Matrix<Scalar> qkv = proj_.project_queries(x, threads, first, where);
  proj_.transform(qkv, RowPositions{first, source.size()}, threads);
  AttentionCall call;
  call.heads = {n_heads_, n_kv_heads_};
  call.options = &record.options, call.logsumexp = record.keep_logsumexp, call.statistics = record.keep_statistics;
  Matrix<Scalar> q = layout().part(qkv, QkvPart::query);
  record.attention = detail::attend_packed<Scalar>(q, source.packed().blocks(), call, where);
  if (record.keep_queries) record.q = std::move(q);
  if (record.keep_keys_values) detail::unpack(source.packed(), record.k, record.v);
  proj_.apply_gate(x, record.attention.z, threads);
}

template <class Scalar>
Matrix<Scalar> MultiHeadAttention<Scalar>::forward_step_by_step(const Eigen::Ref<const Matrix<Scalar>>& x, const AttentionOptions& options,
    const HookFunction<Scalar>& z_hook) const {
  constexpr const char* where = "MultiHeadAttention::forward_step_by_step";
  const AttentionOptions all = checked_call(x, options, where);
  const int threads = detail::thread_count(options.threads, where);
  const Index first = layer_first_position(all, where);
  Matrix<Scalar> qkv = proj_.project(x, threads, first, where);
  const QkvLayout l = layout();
  proj_.transform(qkv, RowPositions{first, first + x.rows()}, threads);
  through_storage(qkv, threads);
  AttentionCall call;  // the one attention call, on its step-by-step path
  call.heads = {n_heads_, n_kv_heads_};
  call.options = &all, call.path = AttentionPath::step_by_step;
  Matrix<Scalar> z = detail::attend_matrices<Scalar>(l.part(qkv, QkvPart::query), l.part(qkv, QkvPart::key),
                                                     l.part(qkv, QkvPart::value), call, where).z;
  proj_.apply_gate(x, z, threads);
  call_z_hook(z_hook, z, first, where);
  return output_of(z, threads, first, where);
}

template <class Scalar>
MultiHeadTrace<Scalar> MultiHeadAttention<Scalar>::trace(const Eigen::Ref<const Matrix<Scalar>>& x,
    const AttentionOptions& options) const {
  constexpr const char* where = "MultiHeadAttention::trace";
  check_input(x, where);
  check_own_keys(where);
  const AttentionOptions all = options_for(options);  // once: each head reads its slope and sink
  resolve_divisor<Scalar>(all, d_head_, where);         // a bad divisor refused before any work
  const Index first = layer_first_position(all, where);
  Matrix<Scalar> qkv = proj_.project(x, 1, first, where);
  return trace_of(x, qkv, RowPositions{first, first + x.rows()}, all, nullptr, where);
}

template <class Scalar>
MultiHeadTrace<Scalar> MultiHeadAttention<Scalar>::trace_reading_cache(const Eigen::Ref<const Matrix<Scalar>>& x, const KvCache<Scalar>& source,
    const AttentionOptions& options) const {
  constexpr const char* where = "MultiHeadAttention::trace_reading_cache";
  const AttentionOptions all = options_for(options);
  const Index first = check_reading(x, source, all, where);
  Matrix<Scalar> qkv = proj_.project_queries(x, 1, first, where);
  return trace_of(x, qkv, RowPositions{first, source.size()}, all, &source, where);
}

template <class Scalar>
Matrix<Scalar> MultiHeadAttention<Scalar>::head_contribution(const Eigen::Ref<const Matrix<Scalar>>& z_h, Index h) const {
  checked_head(h, "head_contribution");
  if (z_h.cols() != d_head_)
    detail::invalid("head_contribution", "z_h has ", z_h.cols(), " columns, expected d_head = ", d_head_);
  Matrix<Scalar> c(z_h.rows(), d_model());
  c.noalias() = z_h * w_o_block(h);
  return c;
}

template <class Scalar>
Matrix<Scalar> MultiHeadAttention<Scalar>::project_heads(const Eigen::Ref<const Matrix<Scalar>>& z, int threads) const {
  if (z.cols() != n_heads_ * d_head_)
    detail::invalid("project_heads", "z has ", z.cols(), " columns, expected n_heads d_head = ",
                    n_heads_ * d_head_);
  return output_of(z, detail::thread_count(threads, "project_heads"), 0, "project_heads");
}

template <class Scalar>
Matrix<Scalar> MultiHeadAttention<Scalar>::project_qkv(const Eigen::Ref<const Matrix<Scalar>>& x) const {
  check_input(x, "project_qkv");
  return proj_.project(x, detail::thread_count(0, "project_qkv"), 0, "project_qkv");
}

/// The compiled mode's instantiations of the layer (detail/compiled.hpp).
#define HEADWISE_MULTI_HEAD_ATTENTION_INSTANTIATIONS(PREFIX, S) \
  PREFIX template class MultiHeadAttention<S>;
HEADWISE_EXTERN_INSTANTIATIONS(HEADWISE_MULTI_HEAD_ATTENTION_INSTANTIATIONS)

}  // namespace headwise
