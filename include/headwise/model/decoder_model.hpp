// A whole decoder model around headwise's layers, one block type with parts each present or not
// (model/block.hpp: attention, latent attention or Gated DeltaNet; a dense MLP or experts): token
// embeddings (GPT-2 adds learned positions; Gemma multiplies by sqrt(d_model); Gemma 4 adds
// per-layer inputs), the blocks, then the final norm, the LM head (W_U, tied to the embedding or
// not) and Gemma's soft-cap of the logits. A run records the hooks asked for, by TransformerLens's
// names (hook_names: the stream, attention's q, k, v, pattern and z, the MLP's, ...), and runs the
// hook functions given (RunOptions::hook_functions), which may change a hook's value where it is
// not read-only; no (n, n) pattern is held unless one is asked for. resume reruns from a layer on
// caches (patching); decoding keeps one LayerCache per layer (model/layer_cache.hpp), bitwise the
// forward's rows; generate decodes greedily or samples.
//
//   auto model = headwise::io::load_decoder_model<float>("gpt2/");
//   headwise::model::RunOptions<float> run_options;
//   run_options.hooks = {"blocks.5.hook_resid_pre", "blocks.5.attn.hook_pattern"};
//   auto run = model.run(ids, run_options);       // run.logits (n, vocab), run.hooks.at(name)
#pragma once

#include <algorithm>
#include <cmath>
#include <functional>
#include <cstring>
#include <map>
#include <limits>
#include <numeric>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <random>

#include "headwise/detail/compiled.hpp"
#include "headwise/detail/errors.hpp"
#include "headwise/detail/parallel.hpp"
#include "headwise/detail/tile_product.hpp"
#include "headwise/forward_record.hpp"
#include "headwise/gated_delta_net.hpp"
#include "headwise/model/block.hpp"
#include "headwise/model/hooks.hpp"
#include "headwise/model/model_run.hpp"
#include "headwise/model/layer_cache.hpp"
#include "headwise/multi_head_attention.hpp"
#include "headwise/multi_head_latent_attention.hpp"
#include "headwise/norms.hpp"
#include "headwise/stored_matrix.hpp"
#include "headwise/types.hpp"

namespace headwise::model {

/// How a model's parameters are named in its checkpoint (the keys of parameter gradients and of
/// training's weights): GPT-2's (transformer.h.L.attn.c_attn.weight, Conv1D [in, out], "transformer."
/// or no prefix) or the Llama-style families' (model.layers.L.self_attn.q_proj.weight, [out, in];
/// Phi-3's fused qkv_proj and gate_up_proj).
struct CheckpointNames {
  enum class Style { llama, gpt2 };
  Style style = Style::llama;
  std::string prefix;  ///< GPT-2: "transformer." or ""
  bool fused_qkv = false, fused_gate_up = false;  ///< Phi-3
  bool attention_biases = false;                  ///< q/k/v biases in the checkpoint (Qwen2; GPT-2 always)
  bool output_bias = false;                       ///< o_proj's bias in the checkpoint (attention_bias: true; GPT-2 always)
  std::string mlp = "mlp";                        ///< the MLP's module: Llama 4's is feed_forward
};

template <class Scalar>
class HEADWISE_ISA_TAG DecoderModel {
 public:
  StoredMatrix embedding;          ///< [vocab, d_model], as stored
  Matrix<Scalar> positions;        ///< (n_positions, d_model): GPT-2's learned positions; empty: none
  double embedding_scale = 1.0;    ///< Gemma: sqrt(d_model), rounded to Scalar
  double logit_softcap = 0.0;      ///< Gemma 2: logits = cap tanh(logits / cap); 0: none
  std::vector<Block<Scalar>> blocks;
  Norm<Scalar> final_norm;
  /// The LM head [vocab, d_model] as stored: logits = x W_Uᵀ; where they are tied, the embedding
  /// itself (the same bytes, not a copy).
  StoredMatrix unembedding;
  CheckpointNames names;  ///< how the checkpoint names the parameters (set by the loader)
  std::optional<PerLayerEmbedding<Scalar>> per_layer_embedding;  ///< Gemma 4's per-layer inputs; none elsewhere

  /// Whether the LM head is the embedding itself (tied: the same bytes).
  bool tied() const { return unembedding.data() == embedding.data() && unembedding.rows() == embedding.rows(); }
  /// Refuses, naming `where`, a model with a latent attention layer (DeepSeek-V3, Kimi K2) or a
  /// Gated DeltaNet layer (Qwen3-Next): the tools that read a layer's heads, weights or caches one
  /// by one know ordinary attention only.
  void check_attention_layers(const char* where) const {
    for (Index l = 0; l < n_layers(); ++l) {
      const Block<Scalar>& b = blocks[static_cast<std::size_t>(l)];
      if (b.latent || b.delta_net)
        detail::invalid(where, "layer ", l, b.latent ? " is multi-head latent attention (DeepSeek-V3, Kimi K2)" : " is a Gated DeltaNet layer (Qwen3-Next)",
                        ": not read here yet; run, decode, generate, hooks and the logit lens are");
    }
  }
  Index vocab_size() const { return embedding.rows(); }
  Index d_model() const { return embedding.cols(); }
  Index n_layers() const { return static_cast<Index>(blocks.size()); }

  /// Every hook a run can record, by TransformerLens's names where it has them: per layer L
  /// "blocks.L." + hook_resid_pre, attn_in, attn.hook_q, attn.hook_k, attn.hook_v (after norms
  /// and RoPE, (n, heads d_head) side by side), attn.hook_pattern ((n, heads n): head h's pattern
  /// in columns [h n, (h+1) n)), attn.hook_z, attn.output, hook_attn_out, hook_resid_mid, mlp_in,
  /// mlp.output, hook_mlp_out, hook_resid_post, attn.statistics (the fused kernel's per-row
  /// statistics, into ModelRun::statistics), attn.logsumexp (into ModelRun::logsumexp), on dense
  /// MLPs mlp.hook_pre, mlp.hook_post and (gated) mlp.hook_pre_linear (FeedForward::Record) and, on sparse blocks, mlp.routing (into
  /// ModelRun::routing) and, with a shared expert, mlp.shared_output (read-only); and "ln_final.out".
  /// A Gated DeltaNet layer has no attn.hook_* / statistics / logsumexp; it has linear_attn.
  /// hook_mixed_qkv, hook_conv_out, hook_q, hook_k (per key head, unit length), hook_v, hook_z,
  /// hook_beta, hook_g, hook_core_out (per value head; GatedDeltaNetRecord), hook_pattern (each value
  /// head's (n, n) mixing matrix, GatedDeltaNet::mixing: O(n²) a head), read-only, and
  /// linear_attn.hook_gated_out (per value head: what out_proj reads, which a hook function may
  /// change, as attn.hook_z). Gemma 4: hook_per_layer_inputs (n, n_layers p: every layer's
  /// per-layer input), per layer per_layer.hook_gate (n, p; read-only) and per_layer.hook_out
  /// (n, d_model: what the per-layer input adds); hook_resid_post is after the layer scalar.
  std::vector<std::string> hook_names() const;

  /// The model on token ids at positions options.first_position ..: logits and the hooks asked
  /// for, each hook function run where its hook is. One forward: the attention hooks are what the
  /// layer's one fused run kept (its ForwardRecord), a pattern read off its queries, keys and
  /// logsumexp.
  ModelRun<Scalar> run(const std::vector<Index>& ids, const RunOptions<Scalar>& options = {}) const;
  Matrix<Scalar> logits(const std::vector<Index>& ids) const { return run(ids).logits; }

  /// A run resumed at layer `layer` (patching reruns only what a patch changes): x is the stream
  /// entering it (hook_resid_pre's rows) for the tokens after those that the caches of that layer
  /// and the later ones hold (make_caches; the same count in each, the position of x's row 0), the tokens before
  /// them given by their keys and values alone. Each layer from `layer` on appends the new tokens'
  /// keys and values to its cache; hooks and hook functions see the new rows (HookPoint::first);
  /// logits for them. Resumed from layer 0 on empty caches with x = embed(ids) it is run(ids)
  /// filling the caches; with a cache that a run of the same tokens filled, its logits equal run's
  /// rows bit for bit (decoding = forward). attn.hook_k, hook_v and hook_pattern, which hold every
  /// token, are refused here.
  ModelRun<Scalar> resume(Index layer, Matrix<Scalar> x, std::vector<LayerCache<Scalar>>& caches, const RunOptions<Scalar>& options = {}) const;

  // ---- Decoding and generation ----
  /// One cache per layer: a KV cache with room for `capacity` tokens, or a Gated DeltaNet layer's
  /// state (fixed size).
  std::vector<LayerCache<Scalar>> make_caches(Index capacity) const;
  /// The logits of the tokens ids that follow the caches' tokens (appended to every cache): bitwise
  /// the matching rows of logits() on the whole sequence, for any split into chunks.
  Matrix<Scalar> decode(const std::vector<Index>& ids, std::vector<LayerCache<Scalar>>& caches, int threads = 0) const;
  /// Greedy decoding (temperature 0), or sampling from softmax(logits / temperature) over the
  /// top_k most likely tokens (0: all) with a seeded generator; `count` new tokens after the prompt.
  struct Sampling {
    double temperature = 0.0;
    Index top_k = 0;
    unsigned seed = 0;
  };
  std::vector<Index> generate(const std::vector<Index>& prompt, Index count, const Sampling& sampling = {}) const;

  /// The residual stream entering layer 0: embedding rows (scaled), plus positions first ...
  Matrix<Scalar> embed(const std::vector<Index>& ids, Index first = 0) const;
  /// The final norm and the LM head (soft-capped where the model is) on rows of the residual
  /// stream x: the logits of the stream after the last block, the logit lens's of any other.
  Matrix<Scalar> unembed(const Matrix<Scalar>& x, int threads = 0) const { return head_of(final_norm.apply(x), threads); }

 private:
  /// decode without the LM head: the final norm's output for ids, their keys and values appended to caches.
  Matrix<Scalar> decode_stream(const std::vector<Index>& ids, std::vector<LayerCache<Scalar>>& caches, int threads) const;
  /// x + post(attn), then the MLP half of block l, its per-layer input (from per_layer, the
  /// model's, where it has them) and scalar (decoding's path; run_block records hooks).
  Matrix<Scalar> finish_block(Index l, Matrix<Scalar> x, Matrix<Scalar> attn, const Matrix<Scalar>& per_layer, int threads) const {
    const Block<Scalar>& b = blocks[static_cast<std::size_t>(l)];
    x += normed(b.post_attention_norm, std::move(attn));
    const Matrix<Scalar> m = normed(b.mlp_norm, x);
    Matrix<Scalar> mlp = b.mlp_of(m, nullptr, threads);
    if (const auto& s = b.side_experts) mlp = s->dense_norm.apply(mlp) + s->output_norm.apply(s->experts.forward(s->input_norm.apply(x), nullptr, threads, &x));
    x += normed(b.post_mlp_norm, std::move(mlp));
    if (b.per_layer_input) x += b.per_layer_input->forward(x, per_layer_slice(per_layer, l), threads);
    if (b.layer_scalar != Scalar(1)) x *= b.layer_scalar;
    return x;
  }
  Matrix<Scalar> per_layer_slice(const Matrix<Scalar>& per_layer, Index l) const {
    const Index p = per_layer_embedding->width;
    return per_layer.middleCols(l * p, p);
  }
  /// What run_block reads besides the stream: the layer's cache (a resumed run), the per-layer
  /// inputs (Gemma 4), and the caches of the layers whose keys and values later layers read
  /// (Gemma 4's KV sharing, filled by a run).
  struct BlockContext {
    LayerCache<Scalar>* cache = nullptr;
    const Matrix<Scalar>* per_layer = nullptr;
    std::map<Index, KvCache<Scalar>>* shared = nullptr;
  };
  /// The source layer of each KV-sharing layer, with a cache for n tokens (empty without sharing).
  std::map<Index, KvCache<Scalar>> shared_caches(Index n, const RunOptions<Scalar>& options) const {
    std::map<Index, KvCache<Scalar>> shared;
    for (const Block<Scalar>& b : blocks)
      if (const std::optional<Index> source = b.attention.config().shares_keys_values_of) {
        if (options.first_position != 0)
          detail::invalid("DecoderModel::run", "first_position is ", options.first_position, ", and this model's later layers read the keys and ",
                          "values of earlier ones (KV sharing), which a run starts from position 0");
        if (!shared.count(*source)) shared.emplace(*source, blocks[static_cast<std::size_t>(*source)].attention.make_cache(n));
      }
    return shared;
  }
  /// The LM head: x W_U, soft-capped where the model says so.
  Matrix<Scalar> head_of(const Matrix<Scalar>& x, int threads) const {
    if (unembedding.rows() != vocab_size() || unembedding.cols() != d_model())
      detail::invalid("DecoderModel::run", "unembedding is ", unembedding.rows(), "x", unembedding.cols(), ", expected ", vocab_size(), "x",
                      d_model(), " (vocab, d_model)");
    if (!(logit_softcap >= 0.0 && std::isfinite(logit_softcap)))
      detail::invalid("DecoderModel::run", "logit_softcap is ", logit_softcap, " (0: none, or a positive cap)");
    Matrix<Scalar> logits = times_transposed<Scalar>(x, unembedding, threads);
    if (!detail::all_finite(logits, threads)) refuse_logits(x, logits);
    if (logit_softcap > 0.0) {
      const auto cap = static_cast<Scalar>(logit_softcap);
      logits = logits.unaryExpr([cap](Scalar u) { return std::tanh(u / cap) * cap; });
    }
    return logits;
  }
  /// Throws naming the first logit that is not finite and where it came from: the stream the LM
  /// head read (the last block's MLP or the final norm overflowed; the attention layers refuse
  /// what reaches them, and nothing after the last one did) or the head's own product. Checked
  /// before a soft-cap, which would hide an overflow as ±cap (and keep a NaN). x: the head's input.
  [[noreturn]] static void refuse_logits(const Matrix<Scalar>& x, const Matrix<Scalar>& logits) {
    Index t = 0, id = 0;
    while (detail::row_is_finite(logits, t)) ++t;
    while (std::isfinite(static_cast<double>(logits(t, id)))) ++id;
    const char* cause = detail::row_is_finite(x, t) ? "the LM head's product overflowed (or an unembedding entry is not finite)"
                                                    : "the residual stream after the last block is not finite (its MLP or the final norm "
                                                      "overflowed)";
    detail::invalid("DecoderModel::run", "the logit of row ", t, " for id ", id, " is ", logits(t, id), ": ", cause);
  }
  static Index choose(const Eigen::Ref<const RowVector<Scalar>>& logits, const Sampling& s, std::mt19937_64& rng) {
    Index best = 0;
    logits.maxCoeff(&best);
    if (s.temperature == 0.0) return best;
    std::vector<Index> order(static_cast<std::size_t>(logits.size()));
    std::iota(order.begin(), order.end(), Index(0));
    const std::size_t k = s.top_k ? std::min<std::size_t>(static_cast<std::size_t>(s.top_k), order.size()) : order.size();
    std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k), order.end(),
                      [&](Index a, Index b) { return logits(a) > logits(b) || (logits(a) == logits(b) && a < b); });
    std::vector<double> weights(k);
    for (std::size_t j = 0; j < k; ++j) weights[j] = std::exp((double(logits(order[j])) - double(logits(best))) / s.temperature);
    std::discrete_distribution<std::size_t> pick(weights.begin(), weights.end());
    return order[pick(rng)];
  }

  Matrix<Scalar> run_block(Index l, Matrix<Scalar> x, const RunOptions<Scalar>& options, ModelRun<Scalar>& out, const BlockContext& context) const {
    const Block<Scalar>& b = blocks[static_cast<std::size_t>(l)];
    const std::string p = "blocks." + std::to_string(l) + ".";
    x = at({p + "hook_resid_pre"}, std::move(x), options, out);
    const Matrix<Scalar> a = at({p + "attn_in"}, normed(b.attention_norm, x), options, out);
    Matrix<Scalar> attn = at({p + "attn.output"}, b.delta_net ? linear_attention_of(l, a, options, out)
                                                              : attention_of(l, a, options, out, context),
                             options, out);
    attn = normed(b.post_attention_norm, std::move(attn));
    x = at({p + "hook_resid_mid"}, x + at({p + "hook_attn_out"}, std::move(attn), options, out), options, out);
    const Matrix<Scalar> m = at({p + "mlp_in"}, normed(b.mlp_norm, x), options, out);
    Routing<Scalar> routing;
    typename FeedForward<Scalar>::Record inner;
    const bool keep_inner = options.hooks.count(p + "mlp.hook_pre") || options.hooks.count(p + "mlp.hook_pre_linear") ||
                            options.hooks.count(p + "mlp.hook_post");
    Matrix<Scalar> mlp = b.mlp_of(m, &routing, options.threads, keep_inner ? &inner : nullptr);
    if (b.experts && options.hooks.count(p + "mlp.shared_output")) out.hooks[p + "mlp.shared_output"] = routing.shared_output;
    if (b.experts && options.hooks.count(p + "mlp.routing")) out.routing[l] = std::move(routing);
    if (keep_inner) {
      for (auto* part : {&inner.pre, &inner.pre_linear, &inner.post}) {
        const char* name = part == &inner.pre ? "mlp.hook_pre" : part == &inner.pre_linear ? "mlp.hook_pre_linear" : "mlp.hook_post";
        if (options.hooks.count(p + name)) out.hooks[p + name] = std::move(*part);
      }
    }
    mlp = at({p + "mlp.output"}, std::move(mlp), options, out);
    if (b.side_experts) mlp = with_side_experts(l, x, std::move(mlp), options, out);
    mlp = normed(b.post_mlp_norm, std::move(mlp));
    x += at({p + "hook_mlp_out"}, std::move(mlp), options, out);
    if (b.per_layer_input) {
      Matrix<Scalar> gate;
      Matrix<Scalar> added = b.per_layer_input->forward(x, per_layer_slice(*context.per_layer, l), options.threads, &gate);
      if (options.hooks.count(p + "per_layer.hook_gate")) out.hooks[p + "per_layer.hook_gate"] = std::move(gate);
      x += at({p + "per_layer.hook_out"}, std::move(added), options, out);
    }
    if (b.layer_scalar != Scalar(1)) x *= b.layer_scalar;
    return at({p + "hook_resid_post"}, std::move(x), options, out);
  }

  /// Gemma 4's MLP half with experts beside the dense MLP (its output `dense`), from the stream x:
  /// moe_in (the experts' input), moe.output and the routing hooked.
  Matrix<Scalar> with_side_experts(Index l, const Matrix<Scalar>& x, const Matrix<Scalar>& dense, const RunOptions<Scalar>& options,
                                   ModelRun<Scalar>& out) const {
    const SideExperts<Scalar>& s = *blocks[static_cast<std::size_t>(l)].side_experts;
    const std::string p = "blocks." + std::to_string(l) + ".";
    const Matrix<Scalar> in = at({p + "moe_in"}, s.input_norm.apply(x), options, out);
    Routing<Scalar> routing;
    const Matrix<Scalar> moe = at({p + "moe.output"}, s.experts.forward(in, &routing, options.threads, &x), options, out);
    if (options.hooks.count(p + "mlp.routing")) out.routing[l] = std::move(routing);
    return s.dense_norm.apply(dense) + s.output_norm.apply(moe);
  }

  /// Layer l's attention on a, its one fused run keeping what the hooks ask for (q, k, v, the
  /// statistics, and for the pattern the queries, keys and logsumexp), then hook_z (read or
  /// changed) into the W_O sum.
  Matrix<Scalar> attention_of(Index l, const Matrix<Scalar>& a, const RunOptions<Scalar>& options, ModelRun<Scalar>& out,
                              const BlockContext& context) const {
    KvCache<Scalar>* cache = context.cache ? &context.cache->keys_values() : nullptr;
    if (blocks[static_cast<std::size_t>(l)].latent) return latent_attention_of(l, a, options, out, cache);
    const MultiHeadAttention<Scalar>& layer = blocks[static_cast<std::size_t>(l)].attention;
    const std::string p = "blocks." + std::to_string(l) + ".";
    const auto recorded = [&](const char* name) { return options.hooks.count(p + name) != 0; };
    const bool pattern = recorded("attn.hook_pattern");
    ForwardRecord<Scalar> record;
    record.keep_queries = pattern || recorded("attn.hook_q");
    record.keep_keys_values = pattern || recorded("attn.hook_k") || recorded("attn.hook_v");
    record.keep_logsumexp = pattern || recorded("attn.logsumexp"), record.keep_statistics = recorded("attn.statistics");
    if (options.read_attention) record.keep_queries = record.keep_keys_values = record.keep_logsumexp = record.keep_statistics = true;
    AttentionOptions at_positions;
    at_positions.threads = options.threads;
    const std::optional<Index> source = layer.config().shares_keys_values_of;
    if (source) {  // (Gemma 4's KV sharing: the source layer's keys and values, which it appended to its cache)
      layer.attend_heads_reading_cache(a, context.shared->at(*source), at_positions, record);
    } else if (context.shared && context.shared->count(l)) {
      layer.attend_heads(a, context.shared->at(l), at_positions, record);
    } else if (cache) {
      layer.attend_heads(a, *cache, at_positions, record);  // (positions from the cache's count)
    } else {
      at_positions.first_key_position = options.first_position;
      layer.attend_heads(a, at_positions, record);
    }
    if (options.read_attention) options.read_attention(l, record);
    if (pattern) {  // (first: it reads the queries, which attn.hook_q takes)
      const Index n = a.rows();
      Matrix<Scalar> patterns(n, layer.n_heads() * n);
      for (Index h = 0; h < layer.n_heads(); ++h) patterns.middleCols(h * n, n) = record.pattern(h);
      keep(out, p + "attn.hook_pattern", std::move(patterns), layer.n_heads());
    }
    if (recorded("attn.hook_q")) keep(out, p + "attn.hook_q", std::move(record.q), layer.n_heads());
    if (recorded("attn.hook_k") || recorded("attn.hook_v")) {
      if (recorded("attn.hook_k")) keep(out, p + "attn.hook_k", std::move(record.k), layer.n_kv_heads());
      if (recorded("attn.hook_v")) keep(out, p + "attn.hook_v", std::move(record.v), layer.n_kv_heads());
    }
    if (record.keep_statistics) out.statistics[l] = std::move(record.attention.statistics);
    if (recorded("attn.logsumexp")) out.logsumexp[l] = std::move(record.attention.logsumexp);
    const Matrix<Scalar> z = at({p + "attn.hook_z", layer.n_heads()}, std::move(record.attention.z), options, out);
    return layer.project_heads(z, options.threads);
  }

  /// Layer l's latent attention on a by the fast path (absorbed, fused), Z through hook_z into the
  /// W_O sum; q, k, v and the pattern, where asked for, from its expanded form (the trace: each
  /// head's [q_nope | RoPE(q_pe)], [k_nope | RoPE(k_pe)], v and weights; equal to the fast path's
  /// to rounding).
  Matrix<Scalar> latent_attention_of(Index l, const Matrix<Scalar>& a, const RunOptions<Scalar>& options, ModelRun<Scalar>& out,
                                     KvCache<Scalar>* cache) const {
    const MultiHeadLatentAttention<Scalar>& layer = *blocks[static_cast<std::size_t>(l)].latent;
    const std::string p = "blocks." + std::to_string(l) + ".";
    if (cache) detail::invalid("DecoderModel::resume", "layer ", l, " is latent attention: a run resumes over ordinary attention only");
    const auto recorded = [&](const char* name) { return options.hooks.count(p + name) != 0; };
    ForwardRecord<Scalar> record;
    record.keep_logsumexp = recorded("attn.logsumexp"), record.keep_statistics = recorded("attn.statistics");
    AttentionOptions at_positions;
    at_positions.threads = options.threads, at_positions.first_key_position = options.first_position;
    layer.attend_heads(a, at_positions, record);
    if (recorded("attn.hook_q") || recorded("attn.hook_k") || recorded("attn.hook_v") || recorded("attn.hook_pattern")) {
      const LatentAttentionTrace<Scalar> trace = layer.trace(a, at_positions);
      const auto side_by_side = [&](Matrix<Scalar> HeadTrace<Scalar>::*part) {
        const Index width = (trace.heads.front().*part).cols();
        Matrix<Scalar> all(a.rows(), layer.n_heads() * width);
        for (Index h = 0; h < layer.n_heads(); ++h) all.middleCols(h * width, width) = trace.heads[static_cast<std::size_t>(h)].*part;
        return all;
      };
      if (recorded("attn.hook_q")) keep(out, p + "attn.hook_q", side_by_side(&HeadTrace<Scalar>::q_rotated), layer.n_heads());
      if (recorded("attn.hook_k")) keep(out, p + "attn.hook_k", side_by_side(&HeadTrace<Scalar>::k_rotated), layer.n_heads());
      if (recorded("attn.hook_v")) keep(out, p + "attn.hook_v", side_by_side(&HeadTrace<Scalar>::v), layer.n_heads());
      if (recorded("attn.hook_pattern")) keep(out, p + "attn.hook_pattern", side_by_side(&HeadTrace<Scalar>::weights), layer.n_heads());
    }
    if (record.keep_statistics) out.statistics[l] = std::move(record.attention.statistics);
    if (record.keep_logsumexp) out.logsumexp[l] = std::move(record.attention.logsumexp);
    const Matrix<Scalar> z = at({p + "attn.hook_z", layer.n_heads()}, std::move(record.attention.z), options, out);
    return layer.project_heads(z);
  }

  /// Layer l's Gated DeltaNet on a from a fresh state (resume refuses these layers: its state is
  /// not rolled back), its steps recorded where asked, linear_attn.hook_gated_out (read or
  /// changed) into out_proj.
  Matrix<Scalar> linear_attention_of(Index l, const Matrix<Scalar>& a, const RunOptions<Scalar>& options, ModelRun<Scalar>& out) const {
    const GatedDeltaNet<Scalar>& layer = *blocks[static_cast<std::size_t>(l)].delta_net;
    const std::string p = "blocks." + std::to_string(l) + ".linear_attn.";
    if (options.first_position != 0)
      detail::invalid("DecoderModel::run", "first_position is ", options.first_position, ", and layer ", l,
                      " is a Gated DeltaNet layer, whose state needs every earlier token (decode from its cache instead)");
    GatedDeltaNetCache<Scalar> state = layer.make_cache();
    GatedDeltaNetRecord<Scalar> record;
    bool any = false;
    for (const std::string& h : options.hooks) any = any || h.rfind(p, 0) == 0;
    Matrix<Scalar> gated = layer.mix(a, state, options.threads, any ? &record : nullptr);
    const Index nk = layer.shape.key_heads, nv = layer.shape.value_heads;
    const std::pair<const char*, std::pair<Matrix<Scalar> GatedDeltaNetRecord<Scalar>::*, Index>> steps[] = {
        {"hook_mixed_qkv", {&GatedDeltaNetRecord<Scalar>::mixed_qkv, 0}}, {"hook_conv_out", {&GatedDeltaNetRecord<Scalar>::conv_out, 0}},
        {"hook_q", {&GatedDeltaNetRecord<Scalar>::q, nk}}, {"hook_k", {&GatedDeltaNetRecord<Scalar>::k, nk}},
        {"hook_v", {&GatedDeltaNetRecord<Scalar>::v, nv}}, {"hook_z", {&GatedDeltaNetRecord<Scalar>::z, nv}},
        {"hook_beta", {&GatedDeltaNetRecord<Scalar>::beta, nv}}, {"hook_g", {&GatedDeltaNetRecord<Scalar>::g, nv}},
        {"hook_core_out", {&GatedDeltaNetRecord<Scalar>::core_out, nv}}};
    if (options.hooks.count(p + "hook_pattern")) keep(out, p + "hook_pattern", layer.mixing(record), nv);  // (before the record's parts move)
    for (const auto& [name, part] : steps)
      if (options.hooks.count(p + name)) keep(out, p + name, std::move(record.*part.first), part.second);
    gated = at({p + "hook_gated_out", nv}, std::move(gated), options, out);
    return layer.project(gated, options.threads);
  }

  /// Records a read-only hook's value.
  static void keep(ModelRun<Scalar>& out, const std::string& name, Matrix<Scalar> value, Index heads) {
    out.hooks[name] = std::move(value);
    if (heads) out.heads[name] = heads;
  }

  /// The value at hook `point`: through its hook function if there is one, recorded if asked;
  /// returned for the next step.
  Matrix<Scalar> at(const HookPoint& point, Matrix<Scalar> value, const RunOptions<Scalar>& options, ModelRun<Scalar>& out) const {
    if (const auto function = options.hook_functions.find(point.name); function != options.hook_functions.end()) {
      HookPoint here = point;
      here.first = options.first_position;
      call_hook(function->second, value, here, "DecoderModel::run");
    }
    if (options.hooks.count(point.name)) {
      out.hooks[point.name] = value;
      if (point.heads) out.heads[point.name] = point.heads;
    }
    return value;
  }

  void check_options(const RunOptions<Scalar>& options) const {
    const std::vector<std::string> known = hook_names();
    const auto is_known = [&](const std::string& name) { return std::find(known.begin(), known.end(), name) != known.end(); };
    for (const std::string& h : options.hooks)
      if (!is_known(h)) detail::invalid("DecoderModel::run", "no hook \"", h, "\" in this model (hook_names() lists them)");
    for (const auto& [name, function] : options.hook_functions) {
      if (!is_known(name)) detail::invalid("DecoderModel::run", "no hook \"", name, "\" in this model (hook_names() lists them)");
      if (!function) detail::invalid("DecoderModel::run", "the hook function on ", name, " is empty");
      const std::size_t dot = name.rfind("blocks.", 0) == 0 ? name.find('.', 7) : std::string::npos;
      for (const LayerHook& h : layer_hooks())
        if (!h.writable && dot != std::string::npos && name.compare(dot + 1, std::string::npos, h.name) == 0)
          detail::invalid("DecoderModel::run", name, " is read-only: the layer used it before a hook function could change it ",
                          "(change attn_in, or a head's Z at attn.hook_z)");
    }
    if (options.read_attention) check_attention_layers("RunOptions::read_attention");
    if (options.first_position < 0) detail::invalid("DecoderModel::run", "first_position must be >= 0, got ", options.first_position);
    if (options.logits_to_keep < 0)
      detail::invalid("DecoderModel::run", "logits_to_keep must be >= 0 (0: every token), got ", options.logits_to_keep);
    detail::thread_count(options.threads, "DecoderModel::run");
  }
};

// The members a program calls, defined outside the class: not inline, so that a file compiled
// against headwise::compiled (HEADWISE_COMPILED) does not instantiate them again.
template <class Scalar>
std::vector<std::string> DecoderModel<Scalar>::hook_names() const {
  std::vector<std::string> out;
  for (Index l = 0; l < n_layers(); ++l)
    for (const LayerHook& h : layer_hooks())
      if (has_part(blocks[static_cast<std::size_t>(l)], h.part)) out.push_back("blocks." + std::to_string(l) + "." + h.name);
  if (per_layer_embedding) out.push_back("hook_per_layer_inputs");
  out.push_back("ln_final.out");
  return out;
}

template <class Scalar>
ModelRun<Scalar> DecoderModel<Scalar>::run(const std::vector<Index>& ids, const RunOptions<Scalar>& options) const {
  check_options(options);
  ModelRun<Scalar> out;
  Matrix<Scalar> x = embed(ids, options.first_position);
  const Matrix<Scalar> per_layer =
      per_layer_embedding ? at({"hook_per_layer_inputs"}, per_layer_embedding->of(ids, x, options.threads), options, out) : Matrix<Scalar>();
  std::map<Index, KvCache<Scalar>> shared = shared_caches(static_cast<Index>(ids.size()), options);
  const BlockContext context{nullptr, &per_layer, &shared};
  for (Index l = 0; l < n_layers(); ++l) x = run_block(l, std::move(x), options, out, context);
  Matrix<Scalar> last = at({"ln_final.out"}, final_norm.apply(x), options, out);
  const Index kept = options.logits_to_keep == 0 ? last.rows() : std::min(options.logits_to_keep, last.rows());
  out.logits = head_of(last.bottomRows(kept), options.threads);
  return out;
}

template <class Scalar>
ModelRun<Scalar> DecoderModel<Scalar>::resume(Index layer, Matrix<Scalar> x, std::vector<LayerCache<Scalar>>& caches,
                                              const RunOptions<Scalar>& options) const {
  constexpr const char* where = "DecoderModel::resume";
  check_options(options);
  check_attention_layers(where);
  for (Index l = 0; l < n_layers(); ++l)
    if (per_layer_embedding || blocks[static_cast<std::size_t>(l)].attention.config().shares_keys_values_of)
      detail::invalid(where, per_layer_embedding ? "the model has per-layer inputs, which a resumed run (from the stream, without ids) cannot read"
                                                 : "the model's later layers read earlier layers' keys and values (KV sharing)",
                      ": resume is for models without them (Gemma 4 is run whole)");
  if (layer < 0 || layer > n_layers()) detail::invalid(where, "layer ", layer, " is not in [0, ", n_layers(), "]");
  if (static_cast<Index>(caches.size()) != n_layers()) detail::invalid(where, caches.size(), " caches for ", n_layers(), " layers (make_caches)");
  if (x.cols() != d_model()) detail::invalid(where, "x has ", x.cols(), " columns, the model's stream ", d_model());
  if (options.first_position != 0) detail::invalid(where, "first_position is set by the caches' count, not given (got ", options.first_position, ")");
  if (options.read_attention) detail::invalid(where, "read_attention reads a whole sequence's record; a resumed run has the new tokens' (use run)");
  const Index first = layer < n_layers() ? caches[static_cast<std::size_t>(layer)].size() : 0;
  for (Index l = layer; l < n_layers(); ++l)
    if (caches[static_cast<std::size_t>(l)].size() != first)
      detail::invalid(where, "the caches of layers ", layer, " .. hold different numbers of tokens (layer ", l, ": ",
                      caches[static_cast<std::size_t>(l)].size(), ", layer ", layer, ": ", first, ")");
  // A hook below `layer` would never fire here: refused, as is one on a row before the first (HookPoint::first).
  const auto below = [&](const std::string& name) {
    if (name.rfind("blocks.", 0) != 0) return false;
    return std::stoll(name.substr(7, name.find('.', 7) - 7)) < layer;
  };
  for (const std::string& h : options.hooks)
    if (below(h)) detail::invalid(where, "the hook ", h, " is below layer ", layer, ", where the run resumes: it would record nothing");
  for (const auto& [name, function] : options.hook_functions)
    if (below(name)) detail::invalid(where, "the hook function on ", name, " is below layer ", layer, ", where the run resumes: it would never run");
  for (const std::string& h : options.hooks)
    for (const char* whole : {"attn.hook_k", "attn.hook_v", "attn.hook_pattern"})
      if (h.size() > std::strlen(whole) && h.compare(h.size() - std::strlen(whole), std::string::npos, whole) == 0)
        detail::invalid(where, h, " holds every token's keys, values or weights; a resumed run has the new tokens' (record it in run)");
  RunOptions<Scalar> o = options;
  o.first_position = first;
  ModelRun<Scalar> out;
  for (Index l = layer; l < n_layers(); ++l) x = run_block(l, std::move(x), o, out, BlockContext{&caches[static_cast<std::size_t>(l)]});
  Matrix<Scalar> last = at({"ln_final.out"}, final_norm.apply(x), o, out);
  const Index kept = options.logits_to_keep == 0 ? last.rows() : std::min(options.logits_to_keep, last.rows());
  out.logits = head_of(last.bottomRows(kept), options.threads);
  return out;
}

template <class Scalar>
std::vector<LayerCache<Scalar>> DecoderModel<Scalar>::make_caches(Index capacity) const {
  std::vector<LayerCache<Scalar>> caches;
  for (const Block<Scalar>& b : blocks)
    caches.push_back(b.delta_net ? LayerCache<Scalar>(b.delta_net->make_cache())
                     : b.latent  ? LayerCache<Scalar>(b.latent->make_cache(capacity))
                                 // (a KV-sharing layer keeps nothing: it reads its source layer's cache)
                                 : LayerCache<Scalar>(b.attention.make_cache(b.attention.config().shares_keys_values_of ? 0 : capacity)));
  return caches;
}

template <class Scalar>
Matrix<Scalar> DecoderModel<Scalar>::decode(const std::vector<Index>& ids, std::vector<LayerCache<Scalar>>& caches, int threads) const {
  return head_of(decode_stream(ids, caches, threads), threads);
}

template <class Scalar>
Matrix<Scalar> DecoderModel<Scalar>::decode_stream(const std::vector<Index>& ids, std::vector<LayerCache<Scalar>>& caches, int threads) const {
  if (static_cast<Index>(caches.size()) != n_layers())
    detail::invalid("DecoderModel::decode", caches.size(), " caches for ", n_layers(), " layers (make_caches)");
  const Index first = caches.empty() ? 0 : caches.front().size();
  Matrix<Scalar> x = embed(ids, first);
  const Matrix<Scalar> per_layer = per_layer_embedding ? per_layer_embedding->of(ids, x, threads) : Matrix<Scalar>();
  for (Index l = 0; l < n_layers(); ++l) {
    const Block<Scalar>& b = blocks[static_cast<std::size_t>(l)];
    const std::optional<Index> source = b.attention.config().shares_keys_values_of;  // (Gemma 4: its cache stays empty)
    if (caches[static_cast<std::size_t>(l)].size() != (source ? 0 : first))
      detail::invalid("DecoderModel::decode", "the caches hold different numbers of tokens (layer ", l, ")");
    AttentionOptions options;
    options.threads = threads;
    const Matrix<Scalar> a = normed(b.attention_norm, x);
    LayerCache<Scalar>& cache = caches[static_cast<std::size_t>(l)];
    Matrix<Scalar> attn = b.delta_net ? b.delta_net->project(b.delta_net->mix(a, cache.state(), threads), threads)
                          : b.latent  ? b.latent->forward_incremental(a, cache.keys_values(), options)
                          : source    ? b.attention.forward_reading_cache(a, caches[static_cast<std::size_t>(*source)].keys_values(), options)
                                      : b.attention.forward_incremental(a, cache.keys_values(), options);
    x = finish_block(l, std::move(x), std::move(attn), per_layer, threads);
  }
  return final_norm.apply(x);
}

template <class Scalar>
std::vector<Index> DecoderModel<Scalar>::generate(const std::vector<Index>& prompt, Index count, const Sampling& sampling) const {
  if (prompt.empty()) detail::invalid("DecoderModel::generate", "the prompt is empty");
  if (count < 0 || !(sampling.temperature >= 0.0) || sampling.top_k < 0)
    detail::invalid("DecoderModel::generate", "count, temperature and top_k must be >= 0");
  if (count > std::numeric_limits<Index>::max() - static_cast<Index>(prompt.size()))
    detail::invalid("DecoderModel::generate", "count = ", count, " tokens after a prompt of ", prompt.size(), " is past INT64_MAX tokens");
  std::vector<LayerCache<Scalar>> caches = make_caches(static_cast<Index>(prompt.size()) + count);
  std::mt19937_64 rng(sampling.seed);
  std::vector<Index> out;
  const Matrix<Scalar> stream = decode_stream(prompt, caches, 0);
  Matrix<Scalar> logits = head_of(stream.bottomRows(1), 0);  // (the prompt's last token's logits only)
  for (Index i = 0; i < count; ++i) {
    out.push_back(choose(logits.row(logits.rows() - 1), sampling, rng));
    if (i + 1 < count) logits = decode({out.back()}, caches);
  }
  return out;
}

template <class Scalar>
Matrix<Scalar> DecoderModel<Scalar>::embed(const std::vector<Index>& ids, Index first) const {
  constexpr const char* where = "DecoderModel::run";
  const auto n = static_cast<Index>(ids.size());
  if (first > std::numeric_limits<Index>::max() - n)
    detail::invalid(where, "first_position = ", first, " plus ", n, " tokens is past INT64_MAX");
  if (positions.size() && first + n > positions.rows())
    detail::invalid(where, "the text has ", first + n, " tokens, more than the model's ", positions.rows(), " positions (n_positions)");
  Matrix<Scalar> x(n, d_model());
  for (Index t = 0; t < n; ++t) {
    const Index id = ids[static_cast<std::size_t>(t)];
    if (id < 0 || id >= vocab_size()) detail::invalid(where, "token ", t, " has id ", id, ", not in [0, ", vocab_size(), ")");
    x.row(t) = embedding.row<Scalar>(id) * static_cast<Scalar>(embedding_scale);
    if (positions.size()) x.row(t) += positions.row(first + t);
  }
  return x;
}

/// The compiled mode's instantiations of the whole model (detail/compiled.hpp).
#define HEADWISE_DECODER_MODEL_INSTANTIATIONS(PREFIX, S) \
  PREFIX template class DecoderModel<S>;
HEADWISE_EXTERN_INSTANTIATIONS(HEADWISE_DECODER_MODEL_INSTANTIATIONS)

}  // namespace headwise::model
