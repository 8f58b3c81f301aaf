// A whole decoder model around headwise's attention layers, one block type with small parts:
// token embeddings (GPT-2 adds learned positions; Gemma multiplies by sqrt(d_model)); per block a
// norm before the attention layer and one after it, a norm before the MLP (GPT-2's gelu_new MLP,
// SwiGLU, GeGLU, or Qwen3-MoE's top-k experts) and one after it, each present or not (GPT-2 and
// Llama norm before, Gemma 2 and 3 before and after, OLMo 2 after only); then the final norm, the
// LM head (W_U, tied to the embedding or not) and Gemma 2's soft-cap of the logits. A run records the residual stream
// at TransformerLens's hook names, only the hooks asked for: no (n, n) pattern is held unless one is.
//
//   auto model = headwise::io::load_decoder_model<float>("gpt2/");
//   headwise::model::RunOptions<float> run_options;
//   run_options.hooks = {"blocks.5.hook_resid_pre", "blocks.5.attn.hook_pattern"};
//   auto run = model.run(ids, run_options);       // run.logits (n, vocab), run.hooks.at(name)
#pragma once

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <random>

#include "headwise/detail/compiled.hpp"
#include "headwise/detail/errors.hpp"
#include "headwise/detail/tile_product.hpp"
#include "headwise/head_interventions.hpp"
#include "headwise/multi_head_attention.hpp"
#include "headwise/norms.hpp"
#include "headwise/types.hpp"

namespace headwise::model {

/// A norm over each token's d_model values: LayerNorm (GPT-2: (x - mean) / sqrt(var + eps) w + b),
/// RMSNorm (w x / sqrt(mean(x²) + eps)) or Gemma's RMSNorm with (1 + w).
template <class Scalar>
struct Norm {
  enum class Kind { layer_norm, rms, rms_offset };
  Kind kind = Kind::rms;
  double eps = 1e-6;
  RowVector<Scalar> weight, bias;  ///< (1, d); bias: LayerNorm only

  /// Row by row, from each row's moments (norms.hpp: summed in index order, so a row gets the same
  /// bits alone as among others).
  Matrix<Scalar> apply(const Matrix<Scalar>& x) const {
    Matrix<Scalar> y(x.rows(), x.cols());
    for (Index t = 0; t < x.rows(); ++t) {
      const headwise::detail::RowMoments m = headwise::detail::row_moments(x.row(t).data(), x.cols(), kind == Kind::layer_norm, eps);
      for (Index c = 0; c < x.cols(); ++c) {
        const double w = double(weight(c)) + (kind == Kind::rms_offset ? 1.0 : 0.0);
        y(t, c) = static_cast<Scalar>((double(x(t, c)) - m.mean) * m.inverse * w + (bias.size() ? double(bias(c)) : 0.0));
      }
    }
    return y;
  }
};

/// The MLP's activation: gelu_new / gelu_pytorch_tanh (the tanh approximation), or SiLU.
enum class Activation { gelu_tanh, silu };

/// A B by the deterministic product (a row of the result never depends on the other rows: what
/// decoding token by token needs to equal the forward bit for bit).
template <class Scalar>
Matrix<Scalar> times(const Eigen::Ref<const Matrix<Scalar>>& a, const Eigen::Ref<const Matrix<Scalar>>& b) {
  Matrix<Scalar> c;
  headwise::detail::product<Scalar>(a, b, c, headwise::detail::thread_count(0, "DecoderModel"));  // (any count: the same bits)
  return c;
}

template <class Scalar>
Scalar activate(Activation a, Scalar u) {
  if (a == Activation::silu) return u / (Scalar(1) + std::exp(-u));
  const Scalar c = static_cast<Scalar>(std::sqrt(2.0 / std::acos(-1.0)));
  return Scalar(0.5) * u * (Scalar(1) + std::tanh(c * (u + Scalar(0.044715) * u * u * u)));
}

/// A dense MLP: gated (SwiGLU, GeGLU: act(m W_gate) ∘ (m W_up) W_down) when w_gate is set, else
/// GPT-2's act(m W_up + b_up) W_down + b_down. Weights [in, out].
template <class Scalar>
struct FeedForward {
  Activation activation = Activation::silu;
  Matrix<Scalar> w_gate, w_up, w_down;
  RowVector<Scalar> b_up, b_down;

  Matrix<Scalar> forward(const Matrix<Scalar>& m) const {
    Matrix<Scalar> h = times<Scalar>(m, w_up);
    if (b_up.size()) h.rowwise() += b_up;
    const Activation a = activation;
    if (w_gate.size()) {
      const Matrix<Scalar> g = times<Scalar>(m, w_gate);
      h.array() *= g.unaryExpr([a](Scalar u) { return activate(a, u); }).array();
    } else {
      h = h.unaryExpr([a](Scalar u) { return activate(a, u); });
    }
    Matrix<Scalar> out = times<Scalar>(h, w_down);
    if (b_down.size()) out.rowwise() += b_down;
    return out;
  }
};

/// What a sparse block chose, per token: the router's logits, the experts (most probable first)
/// and their weights.
template <class Scalar>
struct Routing {
  Matrix<Scalar> logits;                                                         ///< (n, experts)
  Eigen::Matrix<Index, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> experts;  ///< (n, top_k)
  Matrix<Scalar> weights;                                                        ///< (n, top_k)
};

/// Qwen3-MoE's sparse block: per token p = softmax(m W_router) over all experts, the top_k largest
/// (ties: the lower expert first), weights p_top / Σ p_top when normalise_top_k, else p_top; the
/// output Σ_j w_j expert_j(m).
template <class Scalar>
struct MixtureOfExperts {
  Matrix<Scalar> router;  ///< (d_model, experts)
  std::vector<FeedForward<Scalar>> experts;
  Index top_k = 1;
  bool normalise_top_k = true;

  Matrix<Scalar> forward(const Matrix<Scalar>& m, Routing<Scalar>* routing = nullptr) const {
    const Matrix<Scalar> logits = times<Scalar>(m, router);
    const Index E = logits.cols(), n = m.rows();
    Matrix<Scalar> out = Matrix<Scalar>::Zero(n, m.cols());
    if (routing) routing->logits = logits, routing->experts.resize(n, top_k), routing->weights.resize(n, top_k);
    std::vector<Index> order(static_cast<std::size_t>(E));
    for (Index t = 0; t < n; ++t) {
      const RowVector<Scalar> p = (logits.row(t).array() - logits.row(t).maxCoeff()).exp().matrix();
      std::iota(order.begin(), order.end(), Index(0));
      std::stable_sort(order.begin(), order.end(), [&](Index a, Index b) { return p(a) > p(b); });
      Scalar chosen = 0;
      for (Index j = 0; j < top_k; ++j) chosen += p(order[static_cast<std::size_t>(j)]);
      const Scalar total = p.sum();
      for (Index j = 0; j < top_k; ++j) {
        const Index e = order[static_cast<std::size_t>(j)];
        const Scalar w = normalise_top_k ? p(e) / chosen : p(e) / total;
        out.row(t) += w * experts[static_cast<std::size_t>(e)].forward(Matrix<Scalar>(m.row(t)));
        if (routing) routing->experts(t, j) = e, routing->weights(t, j) = w;
      }
    }
    return out;
  }
};

/// One block: x += post_attention(attention(attention_norm(x))); x += post_mlp(mlp(mlp_norm(x))),
/// where an absent norm passes its input through.
template <class Scalar>
struct Block {
  std::optional<Norm<Scalar>> attention_norm;       ///< absent in OLMo 2
  MultiHeadAttention<Scalar> attention;
  std::optional<Norm<Scalar>> post_attention_norm;  ///< Gemma 2 and 3, OLMo 2
  std::optional<Norm<Scalar>> mlp_norm;             ///< absent in OLMo 2
  FeedForward<Scalar> mlp;                          ///< the dense MLP, unless `experts` is set
  std::optional<MixtureOfExperts<Scalar>> experts;  ///< Qwen3-MoE's sparse blocks
  std::optional<Norm<Scalar>> post_mlp_norm;        ///< Gemma 2 and 3, OLMo 2
};

/// x through `norm`, or x itself where the block has no norm there.
template <class Scalar>
Matrix<Scalar> normed(const std::optional<Norm<Scalar>>& norm, Matrix<Scalar> x) {
  return norm ? norm->apply(x) : x;
}

/// What a run records and changes.
template <class Scalar>
struct RunOptions {
  /// Hook names to record (see DecoderModel::hook_names); an unknown name is refused.
  std::set<std::string> hooks;
  /// Per layer, interventions on its heads' Z inside the W_O sum (HeadInterventions).
  std::map<Index, HeadInterventions<Scalar>> interventions;
  /// Per hook name, a value that replaces the stream there (the same shape), e.g. another run's.
  std::map<std::string, Matrix<Scalar>> patches;
};

template <class Scalar>
struct ModelRun {
  Matrix<Scalar> logits;                         ///< (n, vocab)
  std::map<std::string, Matrix<Scalar>> hooks;   ///< what RunOptions::hooks asked for
  std::map<Index, Routing<Scalar>> routing;      ///< sparse blocks, when "blocks.L.mlp.routing" is asked for
  std::map<Index, RowStatistics<Scalar>> statistics;  ///< per layer, the fused kernel's, when "blocks.L.attn.statistics" is asked for
};

/// The mean cross-entropy of next tokens (nats): row t of logits (n, vocab) predicts ids[t + 1],
/// -log softmax(logits_t)[ids[t + 1]] averaged over t < n - 1 (the loss a language model trains on).
template <class Scalar>
double next_token_loss(const Matrix<Scalar>& logits, const std::vector<Index>& ids) {
  if (logits.rows() != static_cast<Index>(ids.size()) || ids.size() < 2)
    detail::invalid("next_token_loss", "logits for ", logits.rows(), " tokens and ", ids.size(), " ids (at least 2, one row each)");
  double total = 0;
  for (Index t = 0; t + 1 < logits.rows(); ++t) {
    const Index next = ids[static_cast<std::size_t>(t) + 1];
    if (next < 0 || next >= logits.cols()) detail::invalid("next_token_loss", "id ", next, " is not in [0, ", logits.cols(), ")");
    const double top = double(logits.row(t).maxCoeff());
    const double lse = top + std::log((logits.row(t).template cast<double>().array() - top).exp().sum());
    total += lse - double(logits(t, next));
  }
  return total / double(logits.rows() - 1);
}

template <class Scalar>
class HEADWISE_ISA_TAG DecoderModel {
 public:
  Matrix<Scalar> embedding;        ///< (vocab, d_model)
  Matrix<Scalar> positions;        ///< (n_positions, d_model): GPT-2's learned positions; empty: none
  double embedding_scale = 1.0;    ///< Gemma: sqrt(d_model), rounded to Scalar
  double logit_softcap = 0.0;      ///< Gemma 2: logits = cap tanh(logits / cap); 0: none
  std::vector<Block<Scalar>> blocks;
  Norm<Scalar> final_norm;
  /// W_U, (d_model, vocab): logits = x W_U. The LM head transposed, or the embedding's transpose
  /// where they are tied (a second copy, kept so that a decoding step reads W_U row by row).
  Matrix<Scalar> unembedding;

  Index vocab_size() const { return embedding.rows(); }
  Index d_model() const { return embedding.cols(); }
  Index n_layers() const { return static_cast<Index>(blocks.size()); }

  /// Every hook a run can record: per layer L "blocks.L." + hook_resid_pre, attn_in, attn.q,
  /// attn.k, attn.v (after norms and RoPE, (n, heads d_head) side by side), attn.hook_pattern
  /// ((n, heads n): head h's pattern in columns [h n, (h+1) n)), attn.hook_z, attn.output,
  /// hook_attn_out, hook_resid_mid, mlp_in, mlp.output, hook_mlp_out, hook_resid_post; and
  /// "ln_final.out". Besides these, "blocks.L.attn.statistics" (the fused kernel's per-row
  /// statistics, into ModelRun::statistics) and, on sparse blocks, "blocks.L.mlp.routing".
  std::vector<std::string> hook_names() const {
    static const char* per_layer[] = {"hook_resid_pre", "attn_in", "attn.q", "attn.k", "attn.v", "attn.hook_pattern",
                                      "attn.hook_z", "attn.output", "hook_attn_out", "hook_resid_mid", "mlp_in",
                                      "mlp.output", "hook_mlp_out", "hook_resid_post"};
    std::vector<std::string> names;
    for (Index l = 0; l < n_layers(); ++l)
      for (const char* h : per_layer) names.push_back("blocks." + std::to_string(l) + "." + h);
    names.push_back("ln_final.out");
    return names;
  }

  /// The model on token ids (positions 0 .. n - 1): logits and the hooks asked for.
  ModelRun<Scalar> run(const std::vector<Index>& ids, const RunOptions<Scalar>& options = {}) const {
    check_options(options);
    ModelRun<Scalar> out;
    Matrix<Scalar> x = embed(ids);
    for (Index l = 0; l < n_layers(); ++l) x = run_block(l, std::move(x), options, out);
    Matrix<Scalar> last = at("ln_final.out", final_norm.apply(x), options, out);
    out.logits = head_of(last);
    return out;
  }
  Matrix<Scalar> logits(const std::vector<Index>& ids) const { return run(ids).logits; }

  // ---- Decoding and generation ----
  /// One KV cache per layer, with room for `capacity` tokens.
  std::vector<KvCache<Scalar>> make_caches(Index capacity) const {
    std::vector<KvCache<Scalar>> caches;
    for (const Block<Scalar>& b : blocks) caches.push_back(b.attention.make_cache(capacity));
    return caches;
  }
  /// The logits of the tokens ids that follow the caches' tokens (appended to every cache): bitwise
  /// the matching rows of logits() on the whole sequence, for any split into chunks.
  Matrix<Scalar> decode(const std::vector<Index>& ids, std::vector<KvCache<Scalar>>& caches) const {
    if (static_cast<Index>(caches.size()) != n_layers())
      detail::invalid("DecoderModel::decode", caches.size(), " caches for ", n_layers(), " layers (make_caches)");
    const Index first = caches.empty() ? 0 : caches.front().size();
    Matrix<Scalar> x = embed(ids, first);
    for (Index l = 0; l < n_layers(); ++l) {
      const Block<Scalar>& b = blocks[static_cast<std::size_t>(l)];
      if (caches[static_cast<std::size_t>(l)].size() != first)
        detail::invalid("DecoderModel::decode", "the caches hold different numbers of tokens (layer ", l, ")");
      Matrix<Scalar> attn = b.attention.forward_incremental(normed(b.attention_norm, x), caches[static_cast<std::size_t>(l)]);
      x = finish_block(b, std::move(x), std::move(attn));
    }
    return head_of(final_norm.apply(x));
  }
  /// Greedy decoding (temperature 0), or sampling from softmax(logits / temperature) over the
  /// top_k most likely tokens (0: all) with a seeded generator; `count` new tokens after the prompt.
  struct Sampling {
    double temperature = 0.0;
    Index top_k = 0;
    unsigned seed = 0;
  };
  std::vector<Index> generate(const std::vector<Index>& prompt, Index count, const Sampling& sampling = {}) const {
    if (prompt.empty()) detail::invalid("DecoderModel::generate", "the prompt is empty");
    if (count < 0 || !(sampling.temperature >= 0.0) || sampling.top_k < 0)
      detail::invalid("DecoderModel::generate", "count, temperature and top_k must be >= 0");
    std::vector<KvCache<Scalar>> caches = make_caches(static_cast<Index>(prompt.size()) + count);
    std::mt19937_64 rng(sampling.seed);
    std::vector<Index> out;
    Matrix<Scalar> logits = decode(prompt, caches);
    for (Index i = 0; i < count; ++i) {
      out.push_back(choose(logits.row(logits.rows() - 1), sampling, rng));
      if (i + 1 < count) logits = decode({out.back()}, caches);
    }
    return out;
  }

  /// The residual stream entering layer 0: embedding rows (scaled), plus positions first ...
  Matrix<Scalar> embed(const std::vector<Index>& ids, Index first = 0) const {
    constexpr const char* where = "DecoderModel::run";
    const auto n = static_cast<Index>(ids.size());
    if (positions.size() && first + n > positions.rows())
      detail::invalid(where, "the text has ", first + n, " tokens, more than the model's ", positions.rows(), " positions (n_positions)");
    Matrix<Scalar> x(n, d_model());
    for (Index t = 0; t < n; ++t) {
      const Index id = ids[static_cast<std::size_t>(t)];
      if (id < 0 || id >= vocab_size()) detail::invalid(where, "token ", t, " has id ", id, ", not in [0, ", vocab_size(), ")");
      x.row(t) = embedding.row(id) * static_cast<Scalar>(embedding_scale);
      if (positions.size()) x.row(t) += positions.row(first + t);
    }
    return x;
  }

 private:
  /// x + post(attn), then the MLP half of the block (decoding's path; run_block records hooks).
  Matrix<Scalar> finish_block(const Block<Scalar>& b, Matrix<Scalar> x, Matrix<Scalar> attn) const {
    x += normed(b.post_attention_norm, std::move(attn));
    const Matrix<Scalar> m = normed(b.mlp_norm, x);
    return x + normed(b.post_mlp_norm, b.experts ? b.experts->forward(m) : b.mlp.forward(m));
  }
  /// The LM head: x W_U, soft-capped where the model says so.
  Matrix<Scalar> head_of(const Matrix<Scalar>& x) const {
    if (unembedding.rows() != d_model() || unembedding.cols() != vocab_size())
      detail::invalid("DecoderModel::run", "unembedding is ", unembedding.rows(), "x", unembedding.cols(), ", expected ", d_model(), "x",
                      vocab_size(), " (d_model, vocab)");
    if (!(logit_softcap >= 0.0 && std::isfinite(logit_softcap)))
      detail::invalid("DecoderModel::run", "logit_softcap is ", logit_softcap, " (0: none, or a positive cap)");
    Matrix<Scalar> logits = times<Scalar>(x, unembedding);
    if (logit_softcap > 0.0) {
      const auto cap = static_cast<Scalar>(logit_softcap);
      logits = logits.unaryExpr([cap](Scalar u) { return std::tanh(u / cap) * cap; });
    }
    return logits;
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

  Matrix<Scalar> run_block(Index l, Matrix<Scalar> x, const RunOptions<Scalar>& options, ModelRun<Scalar>& out) const {
    const Block<Scalar>& b = blocks[static_cast<std::size_t>(l)];
    const std::string p = "blocks." + std::to_string(l) + ".";
    x = at(p + "hook_resid_pre", std::move(x), options, out);
    const Matrix<Scalar> a = at(p + "attn_in", normed(b.attention_norm, x), options, out);
    record_attention(l, b.attention, a, p, options, out);
    const auto iv = options.interventions.find(l);
    Matrix<Scalar> attn = at(p + "attn.output", b.attention.forward(a, {}, iv == options.interventions.end() ? nullptr : &iv->second),
                             options, out);
    attn = normed(b.post_attention_norm, std::move(attn));
    x = at(p + "hook_resid_mid", x + at(p + "hook_attn_out", std::move(attn), options, out), options, out);
    const Matrix<Scalar> m = at(p + "mlp_in", normed(b.mlp_norm, x), options, out);
    Routing<Scalar> routing;
    Matrix<Scalar> mlp = b.experts ? b.experts->forward(m, &routing) : b.mlp.forward(m);
    if (b.experts && options.hooks.count(p + "mlp.routing")) out.routing[l] = std::move(routing);
    mlp = at(p + "mlp.output", std::move(mlp), options, out);
    mlp = normed(b.post_mlp_norm, std::move(mlp));
    return at(p + "hook_resid_post", x + at(p + "hook_mlp_out", std::move(mlp), options, out), options, out);
  }

  /// The attention hooks that need the layer's intermediates. Z, q, k, v and the statistics come
  /// from one fused run (O(n d_model)); only hook_pattern runs the trace and holds (n, n) matrices.
  void record_attention(Index l, const MultiHeadAttention<Scalar>& attention, const Matrix<Scalar>& a, const std::string& p,
                        const RunOptions<Scalar>& options, ModelRun<Scalar>& out) const {
    const auto asked = [&](const char* name) { return options.hooks.count(p + name) != 0; };
    if (asked("attn.hook_z") || asked("attn.q") || asked("attn.k") || asked("attn.v") || asked("attn.statistics")) {
      Matrix<Scalar> q, k, v;
      PackedKeysValues<Scalar> kv(0, 1, 1, 1);
      HeadOutputExtras<Scalar> extras;
      extras.statistics = asked("attn.statistics");
      if (asked("attn.q")) extras.q = &q;
      if (asked("attn.k") || asked("attn.v")) extras.keys_values = &kv;
      AttentionResult<Scalar> r = attention.attend_heads(a, {}, extras);
      if (extras.keys_values) headwise::detail::unpack(kv, k, v);
      if (extras.statistics) out.statistics[l] = std::move(r.statistics);
      const std::pair<const char*, Matrix<Scalar>*> parts[] = {{"attn.hook_z", &r.z}, {"attn.q", &q}, {"attn.k", &k}, {"attn.v", &v}};
      for (const auto& [name, m] : parts)
        if (asked(name)) out.hooks[p + name] = std::move(*m);
    }
    if (!asked("attn.hook_pattern")) return;
    const MultiHeadTrace<Scalar> t = attention.trace(a);
    const Index n = a.rows();
    Matrix<Scalar> pattern(n, attention.n_heads() * n);
    for (Index h = 0; h < attention.n_heads(); ++h) pattern.middleCols(h * n, n) = t.heads[static_cast<std::size_t>(h)].weights;
    out.hooks[p + "attn.hook_pattern"] = std::move(pattern);
  }

  /// The stream at hook `name`: patched if asked, recorded if asked; returned for the next step.
  Matrix<Scalar> at(const std::string& name, Matrix<Scalar> value, const RunOptions<Scalar>& options, ModelRun<Scalar>& out) const {
    const auto patch = options.patches.find(name);
    if (patch != options.patches.end()) {
      if (patch->second.rows() != value.rows() || patch->second.cols() != value.cols())
        detail::invalid("DecoderModel::run", "the patch for ", name, " is ", patch->second.rows(), "x", patch->second.cols(),
                        ", the stream there is ", value.rows(), "x", value.cols());
      value = patch->second;
    }
    if (options.hooks.count(name)) out.hooks[name] = value;
    return value;
  }

  void check_options(const RunOptions<Scalar>& options) const {
    const std::vector<std::string> known = hook_names();
    const auto is_known = [&](const std::string& name) {
      if (std::find(known.begin(), known.end(), name) != known.end()) return true;
      for (Index l = 0; l < n_layers(); ++l)
        if ((name == "blocks." + std::to_string(l) + ".mlp.routing" && blocks[static_cast<std::size_t>(l)].experts) ||
            name == "blocks." + std::to_string(l) + ".attn.statistics")
          return true;
      return false;
    };
    for (const std::string& h : options.hooks)
      if (!is_known(h)) detail::invalid("DecoderModel::run", "no hook \"", h, "\" in this model (hook_names() lists them)");
    for (const auto& [name, value] : options.patches)
      if (!is_known(name) || name.find("attn.q") != std::string::npos || name.find("attn.k") != std::string::npos ||
          name.find("attn.v") != std::string::npos || name.find("hook_pattern") != std::string::npos ||
          name.find("hook_z") != std::string::npos || name.find("statistics") != std::string::npos || name.find("routing") != std::string::npos)
        detail::invalid("DecoderModel::run", "cannot patch \"", name, "\": patch the residual stream's hooks, or a head's Z through interventions");
    for (const auto& [l, iv] : options.interventions)
      if (l < 0 || l >= n_layers()) detail::invalid("DecoderModel::run", "interventions for layer ", l, ", the model has ", n_layers());
  }
};

/// The compiled mode's instantiations of the whole model (detail/compiled.hpp).
#define HEADWISE_DECODER_MODEL_INSTANTIATIONS(PREFIX, S) \
  PREFIX template class DecoderModel<S>;
#if HEADWISE_EXTERN_TEMPLATES
HEADWISE_DECODER_MODEL_INSTANTIATIONS(extern, float)
HEADWISE_DECODER_MODEL_INSTANTIATIONS(extern, double)
#endif

}  // namespace headwise::model
