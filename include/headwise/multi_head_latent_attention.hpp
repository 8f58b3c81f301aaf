// Multi-head latent attention (DeepSeek-V2/V3, Kimi K2): every head's keys and values come from one
// compressed latent per token, c_kv (kv_lora_rank wide), and one rotated key part k_pe that all
// heads share. Per head h, as Hugging Face computes it:
//   c_q = RMSNorm(x W_q_a)  (or none: a plain W_q);      [q_nope_h | q_pe_h] = c_q W_q_b
//   [c_kv | k_pe] = x W_kv_a;  c_kv = RMSNorm(c_kv);     [k_nope_h | v_h]   = c_kv W_kv_b
//   q_h = [q_nope_h | RoPE(q_pe_h)],  k_h = [k_nope_h | RoPE(k_pe)]
//   Z_h = softmax(q_h k_hᵀ / divisor, causal) v_h,        out = Σ_h Z_h W_O[h] + b_O
// The teaching view (forward_step_by_step, trace) computes exactly that, head by head. The fast path
// absorbs W_kv_b into the queries, as DeepSeek's inference does: q_nope_h k_nope_hᵀ =
// (q_nope_h W_UK_hᵀ) c_kvᵀ, so every head attends over the same keys [c_kv | RoPE(k_pe)]
// (kv_lora_rank + qk_rope_head_dim wide) with the values c_kv (the keys' first kv_lora_rank
// components, stored once): one shared key/value head, its query heads folded into rows
// (AttentionOptions::query_rows_per_position), so that the fused kernel reads the keys once for
// all heads; then Z_h = z_latent_h W_UV_h. A KV cache (make_cache) holds c_kv and RoPE(k_pe) per
// token: 576 numbers in DeepSeek-V3, where the expanded form would hold 128 x (192 + 128).
//
// The output is still a sum of per-head contributions, Z_h W_O[h]: heads are ablated, patched and
// inspected as in MultiHeadAttention (interpret/ takes either layer).
#pragma once

#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "headwise/attend.hpp"
#include "headwise/attention_head.hpp"
#include "headwise/detail/compiled.hpp"
#include "headwise/forward_record.hpp"
#include "headwise/detail/errors.hpp"
#include "headwise/detail/tile_product.hpp"
#include "headwise/hook_function.hpp"
#include "headwise/kv_cache.hpp"
#include "headwise/multi_head_attention.hpp"
#include "headwise/options.hpp"
#include "headwise/norms.hpp"
#include "headwise/rotary_embedding.hpp"
#include "headwise/stored_matrix.hpp"
#include "headwise/types.hpp"

namespace headwise {

/// The weights of a latent attention layer, [in, out] (y = x W), as Hugging Face's
/// DeepseekV3Attention holds them transposed. Queries: a plain w_q, or (LoRA-style) w_q_a, the
/// RMSNorm weight q_a_norm and w_q_b. Per head h the query columns [h (nope + rope), (h + 1) (nope
/// + rope)) are [q_nope | q_pe], the columns of w_kv_b [h (nope + v), (h + 1) (nope + v)) are
/// [k_nope | v], and the rows [h v, (h + 1) v) of w_o are W_O[h].
template <class Scalar>
struct LatentAttentionWeights {
  Matrix<Scalar> w_q;          ///< (d_model, n_heads (nope + rope)), or empty with w_q_a and w_q_b
  Matrix<Scalar> w_q_a;        ///< (d_model, q_lora_rank)
  RowVector<Scalar> q_a_norm;  ///< (1, q_lora_rank)
  Matrix<Scalar> w_q_b;        ///< (q_lora_rank, n_heads (nope + rope))
  Matrix<Scalar> w_kv_a;       ///< (d_model, kv_lora_rank + rope): [c_kv | k_pe]
  RowVector<Scalar> kv_a_norm;  ///< (1, kv_lora_rank)
  Matrix<Scalar> w_kv_b;       ///< (kv_lora_rank, n_heads (nope + v))
  Matrix<Scalar> w_o;          ///< (n_heads v, d_model)
  RowVector<Scalar> b_o;       ///< (1, d_model), or empty for no bias
  /// The type the layer keeps w_q (or w_q_a and w_q_b), w_kv_a and w_o in (stored_matrix.hpp),
  /// [out, in], and multiplies by widened in registers: F32 for float and F64 for double by
  /// default; BF16, F16 or FP8 (a float layer) round them once, to nearest even: exact for weights
  /// a checkpoint stores so, a quarter (FP8) of the bytes a decoding step streams.
  WeightType kept_as = std::is_same_v<Scalar, double> ? WeightType::f64 : WeightType::f32;
  /// With kept_as F8_E4M3 or F8_E5M2: the block scales of those weights as a checkpoint stores them,
  /// [out, in] (q, or q_a and q_b; kv_a; o); none otherwise.
  struct Fp8Scales {
    BlockScales q, q_a, q_b, kv_a, o;
  };
  std::optional<Fp8Scales> fp8_scales;
};

/// A latent attention layer's shape and settings, by name (as DeepSeek-V3's config names them).
struct LatentAttentionConfig {
  Index n_heads = 0;
  Index qk_nope_head_dim = 0;  ///< the part of each query and key that is not rotated
  Index qk_rope_head_dim = 0;  ///< the rotated part: k_pe, one for all heads
  Index v_head_dim = 0;
  /// RoPE of the rotated part (d_head = qk_rope_head_dim; YaRN with DeepSeek's mscale pair).
  RopeConfig rope;
  /// rope_interleave (Hugging Face's DeepSeek-V3): the rotated part's components de-interleaved
  /// (0, 2, 4, ..., 1, 3, 5, ...) before RoPE's rotate_half; false: rotate_half as they are.
  bool rope_interleave = true;
  double norm_eps = 1e-6;         ///< q_a_layernorm and kv_a_layernorm
  std::optional<double> divisor;  ///< unset: sqrt(nope + rope); DeepSeek's YaRN: that / mscale(f, mscale_all_dim)²
  /// How the latent is stored, in the layer's caches and in its forward's own store, and how the
  /// fused kernel multiplies by it (kv_storage.hpp): as computed (the default), or int8 under the
  /// stored arithmetic (float32 layers; latent_width a multiple of 4): one scale per token, the
  /// absorbed queries rounded to int8 per row, integer products (detail/int8_products.hpp). The
  /// step-by-step path attends to the same stored numbers, widened.
  KvStorage kv_storage = KvStorage::as_computed;
  KvArithmetic kv_arithmetic = KvArithmetic::widened;
};

/// Every intermediate of a latent attention layer on one input, the expanded form.
template <class Scalar>
struct LatentAttentionTrace {
  Matrix<Scalar> c_q;   ///< (n, q_lora_rank): the normed query latent (empty with a plain w_q)
  Matrix<Scalar> c_kv;  ///< (n, kv_lora_rank): the normed key/value latent (what the cache holds)
  Matrix<Scalar> k_pe;  ///< (n, qk_rope_head_dim): the shared rotated key part (what the cache holds)
  /// Per head: q = [q_nope | q_pe] and k = [k_nope | k_pe] before RoPE, q_rotated and k_rotated
  /// as they enter Q Kᵀ, v, the scores, weights and Z (attention_head.hpp's HeadTrace). With a
  /// latent stored narrower (kv_storage), k_rotated, v and what follows come from the stored latent,
  /// k's k_pe from the one computed (the store keeps it rotated only).
  std::vector<HeadTrace<Scalar>> heads;
  std::vector<Matrix<Scalar>> contributions;  ///< per head: Z_h W_O[h], (n, d_model)
  Matrix<Scalar> output;                      ///< (n, d_model)
};

template <class Scalar>
class HEADWISE_ISA_TAG MultiHeadLatentAttention {
 public:
  /// Throws std::invalid_argument naming a weight whose shape does not fit the config, or a
  /// setting out of range.
  MultiHeadLatentAttention(LatentAttentionWeights<Scalar> w, LatentAttentionConfig config);

  Index n_heads() const { return config_.n_heads; }
  Index d_model() const { return kv_a_.cols(); }
  Index kv_lora_rank() const { return w_.kv_a_norm.size(); }
  Index q_lora_rank() const { return q_.rows() ? 0 : w_.q_a_norm.size(); }  ///< 0: a plain w_q
  Index qk_nope_head_dim() const { return config_.qk_nope_head_dim; }
  Index qk_rope_head_dim() const { return config_.qk_rope_head_dim; }
  Index v_head_dim() const { return config_.v_head_dim; }
  /// What the cache holds per token, c_kv and RoPE(k_pe): kv_lora_rank + qk_rope_head_dim.
  Index latent_width() const { return kv_lora_rank() + rope(); }
  /// What the scores are divided by.
  double divisor() const { return config_.divisor ? *config_.divisor : std::sqrt(double(nope() + rope())); }
  const LatentAttentionConfig& config() const { return config_; }
  /// The weights, those kept stored widened back (a copy).
  LatentAttentionWeights<Scalar> weights() const;
  /// W_O (n_heads v_head_dim, d_model), widened (a copy).
  Matrix<Scalar> w_o() const { return o_.to_matrix<Scalar>().transpose(); }
  const RowVector<Scalar>& b_o() const { return w_.b_o; }
  /// W_O[h]: the rows of W_O that head h's Z (v_head_dim wide) meets.
  Matrix<Scalar> w_o_block(Index h) const { return o_.columns<Scalar>(checked_head(h, "w_o_block") * v(), v()).transpose(); }

  /// The layer by the fast path (absorbed, fused): x (n, d_model) -> (n, d_model), positions 0 .. n - 1.
  /// With a z_hook (here and below): every head's Z side by side through it before the W_O sum, at
  /// "hook_z" (head_interventions.hpp).
  Matrix<Scalar> forward(const Eigen::Ref<const Matrix<Scalar>>& x, const AttentionOptions& options = {},
                         const HookFunction<Scalar>& z_hook = {}) const;
  /// Every head's Z side by side, (n, n_heads v_head_dim), by the fast path.
  Matrix<Scalar> head_outputs(const Eigen::Ref<const Matrix<Scalar>>& x, const AttentionOptions& options = {}) const;
  /// The attention before W_O by the fast path, into `record` (forward_record.hpp): Z (n, n_heads
  /// v_head_dim) and what it asks to keep: the logsumexp and statistics (n_heads, n), the absorbed
  /// queries (n, n_heads latent_width: head h's [q_nope_h W_UK_hᵀ | RoPE(q_pe_h)], as they meet
  /// the latent) and the latent keys (one head, values its first kv_lora_rank components).
  void attend_heads(const Eigen::Ref<const Matrix<Scalar>>& x, const AttentionOptions& options, ForwardRecord<Scalar>& record) const;

  /// A cache of the latent for `capacity` tokens: latent_width() numbers per token.
  KvCache<Scalar> make_cache(Index capacity) const {
    const KvShape shape = kv_shape();
    return KvCache<Scalar>(capacity, shape.n_kv_heads, shape.d_head, shape.d_v, shape.format);
  }
  /// What it keeps per token in a cache: one latent head latent_width() wide, whose first
  /// kv_lora_rank() components are the values.
  KvShape kv_shape() const { return {1, latent_width(), kv_lora_rank(), store_format()}; }
  /// How the latent is kept: the values inside the keys, config().kv_storage's number type.
  StoreFormat store_format() const { return {ValueStorage::key_prefix, config_.kv_storage, config_.kv_arithmetic}; }
  /// Decoding: x (m, d_model) the tokens after the cache's, at positions cache.size() .. + m - 1;
  /// appends their latent and returns their output, bitwise the matching rows of forward() on the
  /// whole sequence, for any split into chunks and any thread count.
  Matrix<Scalar> forward_incremental(const Eigen::Ref<const Matrix<Scalar>>& x, KvCache<Scalar>& cache,
                                     const AttentionOptions& options = {},
                                     const HookFunction<Scalar>& z_hook = {}) const;

  /// The teaching view: the expanded form, head by head (HF's computation), through each head's
  /// whole pattern. Equal to forward() to rounding.
  Matrix<Scalar> forward_step_by_step(const Eigen::Ref<const Matrix<Scalar>>& x, const AttentionOptions& options = {},
                                      const HookFunction<Scalar>& z_hook = {}) const;

  /// Every intermediate of the expanded form on x (positions 0 .. n - 1).
  LatentAttentionTrace<Scalar> trace(const Eigen::Ref<const Matrix<Scalar>>& x, const AttentionOptions& options = {}) const;

  /// Z W_O + b_O for every head's Z side by side, z (n, n_heads v_head_dim) -> (n, d_model).
  Matrix<Scalar> project_heads(const Eigen::Ref<const Matrix<Scalar>>& z) const;

 private:
  /// A layer input's projections: the queries (n, n_heads (nope + rope)), their rotated parts
  /// rotated and before, and the latent (n, latent_width): [c_kv normed | RoPE(k_pe)].
  struct Projected {
    Matrix<Scalar> c_q, q, q_unrotated, latent, k_pe_unrotated;
  };

  /// Keys per shard: a shard's state is n_heads x kv_lora_rank (DeepSeek-V3: 256 KiB, a ninth of
  /// its 1024 keys' latent at the kernel's default shard, which made a step over 262144 tokens on
  /// 2 threads slower than on 1); 2048 halves that and still gives a 4096-token step two shards
  /// for two threads (bench/RESULTS.md). Fixed, so that decoding gives the forward's bits.
  static constexpr Index latent_key_shard = 2048;

  Index nope() const { return config_.qk_nope_head_dim; }
  Index rope() const { return config_.qk_rope_head_dim; }
  Index v() const { return config_.v_head_dim; }

  /// w x / sqrt(mean(x²) + eps), row by row (Hugging Face's DeepseekV3RMSNorm).
  Matrix<Scalar> rms_norm(Matrix<Scalar> x, const RowVector<Scalar>& weight) const {
    apply_norm<Scalar>(RmsNorm{RmsNorm::Over::projection, config_.norm_eps, weight.template cast<double>().transpose(), false}, x, x.cols());
    return x;
  }
  /// RoPE on every head of `part` (m, heads rope) at positions first .. first + m - 1, its
  /// components de-interleaved first where the layer says so.
  void rotate(Matrix<Scalar>& part, Index first, int threads) const {
    if (config_.rope_interleave) {
      const Matrix<Scalar> given = part;
      const Index half = rope() / 2;
      for (Index c0 = 0; c0 < part.cols(); c0 += rope())
        for (Index i = 0; i < half; ++i)
          part.col(c0 + i) = given.col(c0 + 2 * i), part.col(c0 + half + i) = given.col(c0 + 2 * i + 1);
    }
    rope_->rotate<Scalar>(part, first, threads);
  }

  Projected project(const Eigen::Ref<const Matrix<Scalar>>& x, Index first, int threads) const {
    Projected p;
    if (q_.rows()) {
      p.q = times_transposed<Scalar>(x, q_, threads);
    } else {
      p.c_q = rms_norm(times_transposed<Scalar>(x, q_a_, threads), w_.q_a_norm);
      p.q = times_transposed<Scalar>(p.c_q, q_b_, threads);
    }
    p.q_unrotated = p.q;
    Matrix<Scalar> q_pe(x.rows(), n_heads() * rope());
    for (Index h = 0; h < n_heads(); ++h) q_pe.middleCols(h * rope(), rope()) = p.q.middleCols(h * (nope() + rope()) + nope(), rope());
    rotate(q_pe, first, threads);
    for (Index h = 0; h < n_heads(); ++h) p.q.middleCols(h * (nope() + rope()) + nope(), rope()) = q_pe.middleCols(h * rope(), rope());
    p.latent = times_transposed<Scalar>(x, kv_a_, threads);
    p.latent.leftCols(kv_lora_rank()) = rms_norm(p.latent.leftCols(kv_lora_rank()), w_.kv_a_norm);
    p.k_pe_unrotated = p.latent.rightCols(rope());
    Matrix<Scalar> k_pe = p.k_pe_unrotated;
    rotate(k_pe, first, threads);
    p.latent.rightCols(rope()) = k_pe;
    return p;
  }

  /// The fast path's attention of the projected queries over `kv` (the latent of every token so
  /// far): the queries absorbed and folded into rows (row t n_heads + h: token t, head h), one
  /// shared head, then each head's z_latent W_UV_h.
  AttentionResult<Scalar> attend_latent(const Projected& p, const PackedKeysValues<Scalar>& kv, const AttentionOptions& options,
                                        ForwardRecord<Scalar>* record, const char* where) const {
    const Index n = p.q.rows(), H = n_heads(), L = latent_width(), R = kv_lora_rank();
    using Strided = Eigen::Map<Matrix<Scalar>, 0, Eigen::OuterStride<>>;
    Matrix<Scalar> folded(n * H, L);
    for (Index h = 0; h < H; ++h) {
      Strided rows(folded.data() + h * L, n, L, Eigen::OuterStride<>(H * L));  // token t's row of head h
      rows.leftCols(R) = detail::product_of<Scalar>(p.q.middleCols(h * (nope() + rope()), nope()), w_uk_[static_cast<std::size_t>(h)]);
      rows.rightCols(rope()) = p.q.middleCols(h * (nope() + rope()) + nope(), rope());
    }
    AttentionOptions all = options_for(options);
    all.query_rows_per_position = H;
    AttentionCall call;
    call.heads = {1, 1}, call.options = &all, call.logsumexp = record && record->keep_logsumexp;
    call.statistics = record && record->keep_statistics;
    call.tiles.key_shard = latent_key_shard;
    AttentionResult<Scalar> latent = detail::attend_packed<Scalar>(folded, kv.blocks(), call, where);
    AttentionResult<Scalar> out;
    out.z.resize(n, H * v());
    for (Index h = 0; h < H; ++h) {
      const Strided head_latent(latent.z.data() + h * R, n, R, Eigen::OuterStride<>(H * R));
      out.z.middleCols(h * v(), v()) = detail::product_of<Scalar>(head_latent, w_uv_[static_cast<std::size_t>(h)]);
    }
    out.logsumexp = detail::unfold_rows(latent.logsumexp, {H, 1}, n);  // (the folded rows: row t H + h is head h of token t)
    out.statistics = detail::unfold_statistics(latent.statistics, {H, 1}, n);
    if (record && record->keep_queries) {
      record->q.resize(n, H * L);
      for (Index h = 0; h < H; ++h) record->q.middleCols(h * L, L) = Strided(folded.data() + h * L, n, L, Eigen::OuterStride<>(H * L));
    }
    return out;
  }
  /// What attend_heads gives for no tokens.
  AttentionResult<Scalar> empty_result(ForwardRecord<Scalar>& record) const {
    AttentionResult<Scalar> r;
    r.z.resize(0, n_heads() * v());
    if (record.keep_logsumexp) r.logsumexp.resize(n_heads(), 0);
    if (record.keep_statistics) r.statistics.resize(n_heads(), 0);
    if (record.keep_queries) record.q.resize(0, n_heads() * latent_width());
    return r;
  }

  /// The call's options with the layer's divisor; a layer lays its call out itself.
  AttentionOptions options_for(const AttentionOptions& options) const {
    AttentionOptions all = options;
    if (!all.divisor) all.divisor = divisor();
    return all;
  }

  /// Z (of the rows from position `first`) through the z_hook, then W_O.
  Matrix<Scalar> output_of(Matrix<Scalar> z, const HookFunction<Scalar>& z_hook, Index first, const char* where) const {
    if (z.cols() != n_heads() * v()) detail::invalid(where, "z has ", z.cols(), " columns, expected n_heads v_head_dim = ", n_heads() * v());
    call_hook(z_hook, z, HookPoint{"hook_z", n_heads(), first}, where);
    Matrix<Scalar> out = times_transposed<Scalar>(z, o_, 1);
    if (w_.b_o.size()) out.rowwise() += w_.b_o;
    if (!detail::all_finite(out, 1))
      detail::invalid(where, "the output is not finite: the scores or the output projection overflowed; scale x or the weights down");
    return out;
  }

  Index checked_head(Index h, const char* where) const {
    if (h < 0 || h >= n_heads()) detail::invalid(where, "head ", h, " out of range [0, ", n_heads(), ")");
    return h;
  }

  void check_input(const Eigen::Ref<const Matrix<Scalar>>& x, const AttentionOptions& options, const char* where) const {
    if (x.cols() != d_model()) detail::invalid(where, "x has ", x.cols(), " columns, expected d_model = ", d_model());
    if (x.rows() > 0 && x.rows() > detail::max_elements<Scalar>() / (n_heads() * latent_width()))
      detail::invalid(where, "x has ", x.rows(), " tokens: the queries folded into rows (tokens x n_heads x latent_width) would overflow");
    detail::require_finite(where, "x", x);
    if (options.first_query_position || options.first_key_position != 0 || options.query_rows_per_position != 1)
      detail::invalid(where, "the layer places its queries and keys itself: first_query_position, first_key_position and "
                      "query_rows_per_position must be left unset");
    if (options.mask.size() || options.bias.size() || options.alibi_slopes.size() || options.sinks.size())
      detail::invalid(where, "masks, biases, ALiBi slopes and sinks are not read by a latent attention layer (its fast path "
                      "folds the heads into rows)");
  }

  /// Throws unless `cache` is this layer's latent cache with room for m tokens, filled (if at all)
  /// with the same rotary embedding, window and chunk; returns what it will then record.
  KvCacheOrigin check_cache(const KvCache<Scalar>& cache, Index m, const AttentionOptions& options, const char* where) const {
    const KvCacheOrigin mine{config_.rope, options.window, options.chunk, false};
    cache.check_append(kv_shape(), m, mine, where);
    return mine;
  }

  void check_weights(const char* where) const;

  LatentAttentionConfig config_;
  LatentAttentionWeights<Scalar> w_;  // (w_q, w_q_a, w_q_b, w_kv_a and w_o emptied: kept in q_ .. o_)
  StoredMatrix q_, q_a_, q_b_, kv_a_, o_;  // [out, in], kept_as
  std::optional<RotaryEmbedding> rope_;
  std::vector<Matrix<Scalar>> w_uk_, w_uv_;  // per head: W_UK_hᵀ (nope, kv_lora_rank), W_UV_h (kv_lora_rank, v)
};

/// Throws naming the first weight whose shape does not fit the config (or that is not finite).
template <class Scalar>
void MultiHeadLatentAttention<Scalar>::check_weights(const char* where) const {
  const LatentAttentionConfig& c = config_;
  constexpr Index limit = Index(1) << 30;  // each size: their products stay below 2^62
  if (c.n_heads <= 0 || c.qk_nope_head_dim < 0 || c.qk_rope_head_dim <= 0 || c.qk_rope_head_dim % 2 || c.v_head_dim <= 0 ||
      c.n_heads > limit || c.qk_nope_head_dim > limit || c.qk_rope_head_dim > limit || c.v_head_dim > limit)
    detail::invalid(where, "n_heads ", c.n_heads, ", qk_nope_head_dim ", c.qk_nope_head_dim, ", qk_rope_head_dim ", c.qk_rope_head_dim,
                    " and v_head_dim ", c.v_head_dim, ": each must be in [1, 2^30] (qk_nope may be 0, qk_rope is even)");
  if (w_.kv_a_norm.size() > limit || w_.q_a_norm.size() > limit)
    detail::invalid(where, "kv_lora_rank and q_lora_rank must be at most 2^30");
  if (c.rope.d_head != c.qk_rope_head_dim)
    detail::invalid(where, "rope.d_head is ", c.rope.d_head, ", expected qk_rope_head_dim = ", c.qk_rope_head_dim);
  if (c.divisor && !(*c.divisor > 0.0 && std::isfinite(*c.divisor))) detail::invalid(where, "divisor must be finite and > 0, got ", *c.divisor);
  if (!(c.norm_eps > 0.0 && std::isfinite(c.norm_eps))) detail::invalid(where, "norm_eps must be finite and > 0, got ", c.norm_eps);
  const Index d = w_.w_kv_a.rows(), R = w_.kv_a_norm.size(), q_width = c.n_heads * (c.qk_nope_head_dim + c.qk_rope_head_dim);
  const auto shape = [&](const char* name, const auto& m, Index rows, Index cols) {
    if (m.rows() != rows || m.cols() != cols)
      detail::invalid(where, name, " is ", m.rows(), "x", m.cols(), ", expected ", rows, "x", cols);
    detail::require_finite(where, name, m);
  };
  if (d <= 0 || R <= 0) detail::invalid(where, "w_kv_a (d_model, kv_lora_rank + rope) and kv_a_norm (kv_lora_rank) must not be empty");
  shape("w_kv_a", w_.w_kv_a, d, R + c.qk_rope_head_dim);
  shape("kv_a_norm", w_.kv_a_norm, 1, R);
  shape("w_kv_b", w_.w_kv_b, R, c.n_heads * (c.qk_nope_head_dim + c.v_head_dim));
  if (w_.w_q.size()) {
    shape("w_q", w_.w_q, d, q_width);
    if (w_.w_q_a.size() || w_.w_q_b.size()) detail::invalid(where, "both a plain w_q and w_q_a / w_q_b are given: one or the other");
  } else {
    const Index Q = w_.q_a_norm.size();
    if (Q <= 0) detail::invalid(where, "neither w_q nor w_q_a, q_a_norm and w_q_b are given");
    shape("w_q_a", w_.w_q_a, d, Q);
    shape("q_a_norm", w_.q_a_norm, 1, Q);
    shape("w_q_b", w_.w_q_b, Q, q_width);
  }
  shape("w_o", w_.w_o, c.n_heads * c.v_head_dim, w_.w_o.cols());
  if (w_.w_o.cols() != d) detail::invalid(where, "w_o has ", w_.w_o.cols(), " columns, expected d_model = ", d);
  if (w_.b_o.size()) shape("b_o", w_.b_o, 1, d);
  if (std::is_same_v<Scalar, double> != (w_.kept_as == WeightType::f64))
    detail::invalid(where, "kept_as is ", weight_type_name(w_.kept_as), ": a ",
                    std::is_same_v<Scalar, double> ? "float64 layer keeps F64" : "float layer keeps F32, BF16, F16 or FP8", " weights");
  if (is_fp8(w_.kept_as) != w_.fp8_scales.has_value())
    detail::invalid(where, "kept_as is ", weight_type_name(w_.kept_as),
                    is_fp8(w_.kept_as) ? " but fp8_scales are not given" : " but fp8_scales are given (they are for FP8)");
}

template <class Scalar>
MultiHeadLatentAttention<Scalar>::MultiHeadLatentAttention(LatentAttentionWeights<Scalar> w, LatentAttentionConfig config)
    : config_(std::move(config)), w_(std::move(w)) {
  check_weights("MultiHeadLatentAttention");
  detail::check_storage<Scalar>(config_.kv_storage, "MultiHeadLatentAttention");
  detail::check_arithmetic("MultiHeadLatentAttention", store_format(), latent_width());
  detail::check_values_in_keys("MultiHeadLatentAttention", store_format(), latent_width(), kv_lora_rank());
  rope_.emplace(config_.rope);
  for (Index h = 0; h < n_heads(); ++h) {  // W_UK_hᵀ and W_UV_h: the blocks of w_kv_b the fast path absorbs
    w_uk_.push_back(w_.w_kv_b.middleCols(h * (nope() + v()), nope()).transpose());
    w_uv_.push_back(w_.w_kv_b.middleCols(h * (nope() + v()) + nope(), v()));
  }
  const std::optional<typename LatentAttentionWeights<Scalar>::Fp8Scales>& s = w_.fp8_scales;
  const auto kept = [&](Matrix<Scalar>& in_out, const BlockScales* scales) {
    StoredMatrix m = scales ? StoredMatrix::from(in_out.transpose(), w_.kept_as, *scales) : StoredMatrix::from(in_out.transpose(), w_.kept_as);
    in_out = Matrix<Scalar>();
    return m;
  };
  if (w_.w_q.size()) q_ = kept(w_.w_q, s ? &s->q : nullptr);
  else q_a_ = kept(w_.w_q_a, s ? &s->q_a : nullptr), q_b_ = kept(w_.w_q_b, s ? &s->q_b : nullptr);
  kv_a_ = kept(w_.w_kv_a, s ? &s->kv_a : nullptr), o_ = kept(w_.w_o, s ? &s->o : nullptr);
}

template <class Scalar>
LatentAttentionWeights<Scalar> MultiHeadLatentAttention<Scalar>::weights() const {
  LatentAttentionWeights<Scalar> w = w_;
  const auto widened = [](const StoredMatrix& m) { return m.rows() ? Matrix<Scalar>(m.to_matrix<Scalar>().transpose()) : Matrix<Scalar>(); };
  w.w_q = widened(q_), w.w_q_a = widened(q_a_), w.w_q_b = widened(q_b_), w.w_kv_a = widened(kv_a_), w.w_o = widened(o_);
  return w;
}

template <class Scalar>
Matrix<Scalar> MultiHeadLatentAttention<Scalar>::forward(const Eigen::Ref<const Matrix<Scalar>>& x, const AttentionOptions& options,
    const HookFunction<Scalar>& z_hook) const {
  Matrix<Scalar> z = head_outputs(x, options);
  return output_of(z, z_hook, 0, "MultiHeadLatentAttention::forward");
}

template <class Scalar>
Matrix<Scalar> MultiHeadLatentAttention<Scalar>::head_outputs(const Eigen::Ref<const Matrix<Scalar>>& x, const AttentionOptions& options) const {
  ForwardRecord<Scalar> record;
  attend_heads(x, options, record);
  return std::move(record.attention.z);
}

template <class Scalar>
void MultiHeadLatentAttention<Scalar>::attend_heads(const Eigen::Ref<const Matrix<Scalar>>& x, const AttentionOptions& options, ForwardRecord<Scalar>& record) const {
  constexpr const char* where = "MultiHeadLatentAttention::forward";
  check_input(x, options, where);
  record.options = options;
  record.options.divisor = options.divisor ? *options.divisor : divisor();
  record.n_heads = n_heads(), record.n_kv_heads = 1, record.d_head = latent_width(), record.d_v = v_head_dim();
  record.arithmetic = config_.kv_arithmetic;
  const int threads = detail::thread_count(options.threads, where);
  PackedKeysValues<Scalar> kv(x.rows(), 1, latent_width(), kv_lora_rank(), store_format());
  if (x.rows() == 0) {
    record.attention = empty_result(record);
  } else {
    const Projected p = project(x, 0, threads);
    kv.append(p.latent, threads);
    record.attention = attend_latent(p, kv, options, &record, where);
  }
  if (record.keep_keys_values) detail::unpack(kv, record.k, record.v);
}

template <class Scalar>
Matrix<Scalar> MultiHeadLatentAttention<Scalar>::forward_incremental(const Eigen::Ref<const Matrix<Scalar>>& x, KvCache<Scalar>& cache,
    const AttentionOptions& options,
    const HookFunction<Scalar>& z_hook) const {
  constexpr const char* where = "MultiHeadLatentAttention::forward_incremental";
  check_input(x, options, where);
  const KvCacheOrigin mine = check_cache(cache, x.rows(), options, where);
  if (x.rows() == 0) return Matrix<Scalar>(0, d_model());
  const int threads = detail::thread_count(options.threads, where);
  const Projected p = project(x, cache.size(), threads);
  const Index held = cache.size();
  const std::optional<KvCacheOrigin> before = cache.origin();
  cache.store().append(p.latent, threads);
  cache.origin_ = mine;
  try {  // a call that fails (options the rule refuses, an overflow) leaves the cache as it was
    Matrix<Scalar> z = attend_latent(p, cache.packed(), options, nullptr, where).z;
    return output_of(z, z_hook, held, where);
  } catch (...) {
    cache.store().truncate(held);
    cache.origin_ = before;
    throw;
  }
}

template <class Scalar>
Matrix<Scalar> MultiHeadLatentAttention<Scalar>::forward_step_by_step(const Eigen::Ref<const Matrix<Scalar>>& x, const AttentionOptions& options,
    const HookFunction<Scalar>& z_hook) const {
  const LatentAttentionTrace<Scalar> t = trace(x, options);
  Matrix<Scalar> z(x.rows(), n_heads() * v());
  for (Index h = 0; h < n_heads(); ++h) z.middleCols(h * v(), v()) = t.heads[static_cast<std::size_t>(h)].z;
  return output_of(z, z_hook, 0, "MultiHeadLatentAttention::forward_step_by_step");
}

template <class Scalar>
LatentAttentionTrace<Scalar> MultiHeadLatentAttention<Scalar>::trace(const Eigen::Ref<const Matrix<Scalar>>& x, const AttentionOptions& options) const {
  constexpr const char* where = "MultiHeadLatentAttention::trace";
  check_input(x, options, where);
  const int threads = detail::thread_count(options.threads, where);
  Projected p = project(x, 0, threads);
  if (config_.kv_storage != KvStorage::as_computed) {  // the latent as the store keeps it: what the fast path reads
    PackedKeysValues<Scalar> kv(x.rows(), 1, latent_width(), kv_lora_rank(), store_format());
    kv.append(p.latent, threads);
    Matrix<Scalar> values;
    detail::unpack(kv, p.latent, values);
  }
  const AttentionOptions all = options_for(options);
  LatentAttentionTrace<Scalar> t;
  t.c_q = p.c_q, t.c_kv = p.latent.leftCols(kv_lora_rank()), t.k_pe = p.latent.rightCols(rope());
  t.output = Matrix<Scalar>::Zero(x.rows(), d_model());
  for (Index h = 0; h < n_heads(); ++h) {
    HeadTrace<Scalar> head;
    const Matrix<Scalar> k_nope = detail::product_of<Scalar>(t.c_kv, w_.w_kv_b.middleCols(h * (nope() + v()), nope()));
    head.q = head.q_normed = p.q_unrotated.middleCols(h * (nope() + rope()), nope() + rope());
    head.q_rotated = p.q.middleCols(h * (nope() + rope()), nope() + rope());
    head.k.resize(x.rows(), nope() + rope()), head.k_rotated.resize(x.rows(), nope() + rope());
    head.k << k_nope, p.k_pe_unrotated;
    head.k_rotated << k_nope, t.k_pe;
    head.k_normed = head.k;
    head.v = detail::product_of<Scalar>(t.c_kv, w_uv_[static_cast<std::size_t>(h)]);
    detail::trace_scores(head, all, OneHead{h, n_heads()}, where);
    t.contributions.push_back(detail::product_of<Scalar>(head.z, w_o_block(h)));
    t.output += t.contributions.back();
    t.heads.push_back(std::move(head));
  }
  if (w_.b_o.size()) t.output.rowwise() += w_.b_o;
  return t;
}

template <class Scalar>
Matrix<Scalar> MultiHeadLatentAttention<Scalar>::project_heads(const Eigen::Ref<const Matrix<Scalar>>& z) const {
  return output_of(Matrix<Scalar>(z), {}, 0, "project_heads");
}

/// The compiled mode's instantiations of the latent-attention layer (detail/compiled.hpp).
#define HEADWISE_LATENT_ATTENTION_INSTANTIATIONS(PREFIX, S) \
  PREFIX template class MultiHeadLatentAttention<S>;
HEADWISE_EXTERN_INSTANTIATIONS(HEADWISE_LATENT_ATTENTION_INSTANTIATIONS)

}  // namespace headwise
