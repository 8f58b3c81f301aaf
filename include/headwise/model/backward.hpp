// Gradients through a whole model (model/decoder_model.hpp): of one scalar metric of the logits
// (the mean next-token cross-entropy, a logit difference, or any direction on the logits) with
// respect to every hook's activation, by TransformerLens's names, and every parameter, by its
// checkpoint name (model/parameters.hpp). One forward keeps what the backward reads (each layer's
// queries, keys, values, Z and logsumexp: O(n d) a layer, no (n, n) pattern); the backward goes
// through the LM head and its soft-cap, the norms (LayerNorm, RMSNorm, Gemma's 1 + w), the MLPs
// and experts (the chosen experts held fixed, the gradient through the router's softmax and the
// renormalised top-k weights, or Llama 4's sigmoid scores on the experts' inputs, gpt-oss's
// clamped SwiGLU, shared experts, as autograd does), each attention layer by the fused backward
// (layer_backward_from_z: RoPE of every kind, QK-norms, GQA, windows, soft-caps) and the
// embeddings (tied ones summed with the LM head's). Stored weights (BF16, FP8) are differentiated
// at their stored values, widened. Every product is the deterministic one: the same bits on any
// number of threads.
//
//   auto g = headwise::model::gradients(model, ids, model::Metric<float>::logit_difference(a, b),
//                                       {{"blocks.3.attn.hook_z"}});
//   g.metric; g.activations.at("blocks.3.attn.hook_z"); g.parameters.at("model.norm.weight");
#pragma once

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "headwise/attention_backward.hpp"
#include "headwise/detail/errors.hpp"
#include "headwise/detail/tile_product.hpp"
#include "headwise/model/decoder_model.hpp"
#include "headwise/model/metric.hpp"
#include "headwise/model/parameters.hpp"

namespace headwise::model {

/// What a whole-model backward returns.
template <class Scalar>
struct ModelGradients {
  double metric = 0;              ///< the metric's value on the run
  /// The forward the backward read: its logits and, per layer, the hooks it recorded (hook_resid_pre,
  /// attn_in, attn.hook_q, hook_k, hook_v, hook_z, attn.logsumexp, hook_resid_mid, mlp_in,
  /// mlp.hook_pre, hook_pre_linear, hook_post; attn.output and mlp.output where a post-norm reads
  /// them; mlp.routing; the last block's hook_resid_post, ln_final.out), and those
  /// GradientOptions::record asks.
  ModelRun<Scalar> run;
  /// ∂metric/∂activation for the names asked (GradientOptions::activations), each shaped as the
  /// hook's value: the per-head hooks side by side (attn.hook_k, hook_v per key/value head: the sum
  /// over the query heads reading it; attn.hook_pattern (n, heads n), masked entries included:
  /// dZ_i · v_j); plus hook_embed (the embedding rows before any scale), hook_pos_embed (GPT-2),
  /// and on sparse blocks mlp.router_logits (n, experts) and mlp.topk_weights (n, top_k).
  std::map<std::string, Matrix<Scalar>> activations;
  Parameters<Scalar> parameters;  ///< ∂metric/∂parameter by checkpoint name (GradientOptions::parameters)
  /// The prefixes of the parameters the metric did not reach (experts no token chose): their
  /// gradients are 0 here, where autograd leaves them None (and PyTorch's optimisers skip them).
  std::set<std::string> unreached;
};

struct GradientOptions {
  std::set<std::string> activations;  ///< gradient_names() lists them
  std::set<std::string> record;       ///< hooks the forward records besides its own (into ModelGradients::run)
  bool parameters = true;             ///< every parameter's gradient, by checkpoint name
  int threads = 0;                    ///< for every product and attention call; the bits do not depend on it
};

/// The names a backward can return activation gradients for.
template <class Scalar>
std::vector<std::string> gradient_names(const DecoderModel<Scalar>& model) {
  std::vector<std::string> names = {"hook_embed"};
  if (model.positions.size()) names.push_back("hook_pos_embed");
  for (const std::string& h : model.hook_names()) {
    if (h.find("attn.statistics") != std::string::npos || h.find("attn.logsumexp") != std::string::npos ||
        h.find("mlp.routing") != std::string::npos || h.find("mlp.shared_output") != std::string::npos)
      continue;
    names.push_back(h);
  }
  for (Index l = 0; l < model.n_layers(); ++l)
    if (model.blocks[static_cast<std::size_t>(l)].experts)
      for (const char* h : {"mlp.router_logits", "mlp.topk_weights"}) names.push_back("blocks." + std::to_string(l) + "." + h);
  return names;
}

namespace internal {

/// x w, w [out, in] as stored: read in place where it is stored in Scalar, else widened once.
template <class Scalar>
Matrix<Scalar> times_stored(const Matrix<Scalar>& x, const StoredMatrix& w, int threads) {
  constexpr WeightType own = std::is_same_v<Scalar, double> ? WeightType::f64 : WeightType::f32;
  if (w.type() == own)  // (F32, F64: no block scales)
    return headwise::detail::product_of<Scalar>(x, Eigen::Map<const Matrix<Scalar>>(static_cast<const Scalar*>(w.data()), w.rows(), w.cols()), threads);
  return headwise::detail::product_of<Scalar>(x, w.template to_matrix<Scalar>(), threads);
}

/// The activation at u and its slope, entry by entry, in one pass (Eigen's packet exp and tanh):
/// SiLU u σ(u), σ(u) (1 + u (1 - σ(u))); gelu_tanh 0.5 u (1 + t), 0.5 (1 + t) + 0.5 u (1 - t²) c (1 + 3 k u²),
/// t = tanh(c (u + k u³)).
template <class Scalar>
void activation_and_slope(Activation a, const Matrix<Scalar>& u, Matrix<Scalar>& value, Matrix<Scalar>& slope) {
  const auto x = u.array();
  if (a == Activation::silu) {
    const Eigen::Array<Scalar, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> s = ((-x).exp() + Scalar(1)).inverse();
    value = (x * s).matrix(), slope = (s * (Scalar(1) + x * (Scalar(1) - s))).matrix();
    return;
  }
  const Scalar c = static_cast<Scalar>(std::sqrt(2.0 / std::acos(-1.0))), k = Scalar(0.044715);
  const Eigen::Array<Scalar, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> t = (c * (x + k * x.cube())).tanh();
  value = (Scalar(0.5) * x * (Scalar(1) + t)).matrix();
  slope = (Scalar(0.5) * (Scalar(1) + t) + Scalar(0.5) * x * (Scalar(1) - t.square()) * c * (Scalar(1) + Scalar(3) * k * x.square())).matrix();
}

/// A norm's backward over rows: dx from dy at x, the weight's (and bias's) gradient added. The
/// rows split over the threads, then the weight's columns: each column's gradient sums its rows'
/// terms in row order, whatever the number of threads.
template <class Scalar>
Matrix<Scalar> norm_backward(const Norm<Scalar>& norm, const Matrix<Scalar>& x, const Matrix<Scalar>& dy, Parameters<Scalar>* grads,
                             const std::string& name, int threads) {
  namespace hd = headwise::detail;
  const bool centred = norm.kind == Norm<Scalar>::Kind::layer_norm;
  const double offset = norm.kind == Norm<Scalar>::Kind::rms_offset ? 1.0 : 0.0;
  const auto w = [&](Index i) { return double(norm.weight(i)) + offset; };
  const Index n = x.rows(), d = x.cols();
  threads = hd::threads_for(16.0 * double(n) * double(d), threads);
  Matrix<Scalar> dx(n, d);
  std::vector<hd::RowMoments> moments(static_cast<std::size_t>(grads ? n : 0));
  hd::parallel_for<hd::Schedule::by_part>(threads, n, [&](Index t) {
    hd::norm_backward(x.row(t).data(), dy.row(t).data(), d, centred, norm.eps, w, dx.row(t).data());
    if (grads) moments[static_cast<std::size_t>(t)] = hd::row_moments(x.row(t).data(), d, centred, norm.eps);
  });
  if (!grads) return dx;
  constexpr Index columns = 64;  // (a column range's sums per task)
  Vector<double> dw = Vector<double>::Zero(d);
  hd::parallel_for<hd::Schedule::by_part>(threads, (d + columns - 1) / columns, [&](Index c) {
    for (Index t = 0; t < n; ++t) {
      const hd::RowMoments& m = moments[static_cast<std::size_t>(t)];
      for (Index i = c * columns; i < std::min(d, (c + 1) * columns); ++i)
        dw(i) += double(dy(t, i)) * ((double(x(t, i)) - m.mean) * m.inverse);
    }
  });
  (*grads)[name + ".weight"] = dw.transpose().template cast<Scalar>();
  if (centred && norm.bias.size()) (*grads)[name + ".bias"] = dy.colwise().sum();
  return dx;
}

/// The gradients of a dense MLP's intermediates, as FeedForward::Record names them.
template <class Scalar>
struct MlpGradients {
  Matrix<Scalar> dm, pre, pre_linear, post;
};

/// gpt-oss's clamped SwiGLU backward: from g.post (∂/∂h) the gates' and ups' gradients into g.pre
/// and g.pre_linear, and ∂/∂(m W_upᵀ + b_up) with its columns interleaved as they are. A clamp
/// passes the gradient where its input is within it (limits included), as PyTorch's does.
template <class Scalar>
Matrix<Scalar> clamped_swiglu_backward(const FeedForward<Scalar>& f, const typename FeedForward<Scalar>::Record& kept, MlpGradients<Scalar>& g) {
  const Index n = kept.pre.rows(), inner = kept.pre.cols();
  const double alpha = f.swiglu_alpha, limit = f.swiglu_limit;
  g.pre.resize(n, inner), g.pre_linear.resize(n, inner);
  Matrix<Scalar> d_g(n, 2 * inner);
  for (Index t = 0; t < n; ++t)
    for (Index u = 0; u < inner; ++u) {
      const double gate = double(kept.pre(t, u)), up = double(kept.pre_linear(t, u)), dh = double(g.post(t, u));
      const double gc = std::min(gate, limit), uc = std::clamp(up, -limit, limit), s = 1.0 / (1.0 + std::exp(-alpha * gc));
      g.pre(t, u) = static_cast<Scalar>(gate <= limit ? dh * (uc + 1.0) * (s + gc * alpha * s * (1.0 - s)) : 0.0);
      g.pre_linear(t, u) = static_cast<Scalar>(up >= -limit && up <= limit ? dh * gc * s : 0.0);
      d_g(t, 2 * u) = g.pre(t, u), d_g(t, 2 * u + 1) = g.pre_linear(t, u);
    }
  return d_g;
}

/// A dense MLP's backward at m from dy: dm and the intermediates' gradients, and (with grads) its
/// parameters' under prefix p. `kept`: the forward's intermediates (recomputed when null, as for
/// an expert, whose output `out` then gets: the routing weights' gradient needs it).
template <class Scalar>
MlpGradients<Scalar> mlp_backward(const FeedForward<Scalar>& f, const ParameterNames& names, const std::string& p, const Matrix<Scalar>& m,
                                  const Matrix<Scalar>& dy, Parameters<Scalar>* grads, const typename FeedForward<Scalar>::Record* kept,
                                  Matrix<Scalar>* out, int threads) {
  typename FeedForward<Scalar>::Record recomputed;
  if (!kept) {
    Matrix<Scalar> y = f.forward(m, threads, &recomputed);
    if (out) *out = std::move(y);
    kept = &recomputed;
  }
  const bool gated = f.w_gate.rows() != 0;
  MlpGradients<Scalar> g;
  g.post = times_stored<Scalar>(dy, f.w_down, threads);  // (n, inner)
  if (f.activation == Activation::clamped_swiglu) {
    if (grads) headwise::detail::invalid("gradients", "gpt-oss's experts' parameters are not named (their stacks [E, ...] by expert)");
    const Matrix<Scalar> d_g = clamped_swiglu_backward(f, *kept, g);
    g.dm = times_stored<Scalar>(d_g, f.w_up, threads);
    return g;
  }
  Matrix<Scalar> value, slope;
  activation_and_slope(f.activation, kept->pre, value, slope);
  if (gated) {
    g.pre_linear = g.post.array() * value.array();
    g.pre = g.post.array() * kept->pre_linear.array() * slope.array();
  } else {
    g.pre = g.post.array() * slope.array();
  }
  const Matrix<Scalar>& d_up = gated ? g.pre_linear : g.pre;
  g.dm = times_stored<Scalar>(d_up, f.w_up, threads);
  if (gated) g.dm += times_stored<Scalar>(g.pre, f.w_gate, threads);
  if (grads) {
    Matrix<Scalar> dw_down = headwise::detail::product_of<Scalar>(dy, kept->post, threads, /*transpose_a=*/true);
    Matrix<Scalar> dw_up = headwise::detail::product_of<Scalar>(d_up, m, threads, /*transpose_a=*/true);
    Matrix<Scalar> dw_gate = gated ? headwise::detail::product_of<Scalar>(g.pre, m, threads, /*transpose_a=*/true) : Matrix<Scalar>();
    add_mlp(names, p, std::move(dw_gate), std::move(dw_up), std::move(dw_down), f.b_up.size() ? RowVector<Scalar>(d_up.colwise().sum()) : RowVector<Scalar>(),
            f.b_down.size() ? RowVector<Scalar>(dy.colwise().sum()) : RowVector<Scalar>(), *grads);
  }
  return g;
}

/// One backward through a model: the forward's run (every hook the backward reads), then block
/// by block from the logits down, keeping the gradients asked for.
template <class Scalar>
class ModelBackward {
 public:
  ModelBackward(const DecoderModel<Scalar>& model, const GradientOptions& options)
      : model_(model), names_(model.names), options_(options), threads_(headwise::detail::thread_count(options.threads, "gradients")) {}

  ModelGradients<Scalar> operator()(const std::vector<Index>& ids, const Metric<Scalar>& metric) {
    model_.check_attention_layers("gradients");
    check_names();
    if (options_.parameters) check_named(model_, "gradients");
    run_ = model_.run(ids, forward_options());
    Matrix<Scalar> dx = head_backward(metric, ids);
    for (Index l = model_.n_layers() - 1; l >= 0; --l) dx = block_backward(l, std::move(dx));
    embedding_backward(ids, dx);
    out_.run = std::move(run_);
    return std::move(out_);
  }

 private:
  static std::string at(Index l, const char* hook) { return "blocks." + std::to_string(l) + "." + hook; }
  const Matrix<Scalar>& hook(Index l, const char* name) const { return run_.hooks.at(at(l, name)); }
  void keep(const std::string& name, const Matrix<Scalar>& g) {
    if (options_.activations.count(name)) out_.activations[name] = g;
  }
  Parameters<Scalar>* params() { return options_.parameters ? &out_.parameters : nullptr; }
  /// An optional norm's backward at block l's recorded input (an absent norm passes dy through,
  /// and its input is not read: a post-norm's input is recorded only where the norm is).
  Matrix<Scalar> through(const std::optional<Norm<Scalar>>& norm, Index l, const char* input, Matrix<Scalar> dy, const std::string& name) {
    return norm ? norm_backward(*norm, hook(l, input), dy, params(), name, threads_) : dy;
  }

  void check_names() const {
    for (Index l = 0; l < model_.n_layers(); ++l)
      if (const auto& e = model_.blocks[static_cast<std::size_t>(l)].experts;
          e && (e->choice_bias.size() || e->groups > 1 || e->routed_scaling != 1.0 ||
                (e->score == MixtureOfExperts<Scalar>::Score::sigmoid && e->normalise_top_k)))
        headwise::detail::invalid("gradients", "layer ", l, "'s sparse block routes as DeepSeek-V3 does (a choice bias, groups, ",
                                  "normalised sigmoid scores, a scaling): no backward in headwise yet");
    for (Index l = 0; l < model_.n_layers(); ++l) {
      const Block<Scalar>& b = model_.blocks[static_cast<std::size_t>(l)];
      if (b.per_layer_input || b.layer_scalar != Scalar(1) || b.attention.config().shares_keys_values_of || b.side_experts ||
          (b.experts && b.experts->shared_gate.rows()))
        headwise::detail::invalid("gradients", "layer ", l, " has ",
                                  b.per_layer_input ? "a per-layer input (Gemma 4)" : b.layer_scalar != Scalar(1) ? "a layer scalar (Gemma 4)"
                                  : b.side_experts                             ? "experts beside its MLP (Gemma 4)"
                                  : b.attention.config().shares_keys_values_of ? "no keys and values of its own (Gemma 4's KV sharing)"
                                                                              : "a gated shared expert (Qwen3-Next)",
                                  ": no backward in headwise yet");
    }
    const std::vector<std::string> known = gradient_names(model_);
    for (const std::string& name : options_.activations)
      if (std::find(known.begin(), known.end(), name) == known.end())
        headwise::detail::invalid("gradients", "no activation \"", name, "\" to differentiate (gradient_names lists them)");
  }
  RunOptions<Scalar> forward_options() const {
    RunOptions<Scalar> o;
    o.threads = options_.threads;
    for (Index l = 0; l < model_.n_layers(); ++l) {
      for (const char* h : {"hook_resid_pre", "attn_in", "attn.hook_q", "attn.hook_k", "attn.hook_v", "attn.hook_z", "attn.logsumexp",
                            "hook_resid_mid", "mlp_in"})
        o.hooks.insert(at(l, h));
      // (a block's output is the next one's hook_resid_pre: recorded for the last block only; a
      // sublayer's output only where a post-norm reads it)
      if (l == model_.n_layers() - 1) o.hooks.insert(at(l, "hook_resid_post"));
      const Block<Scalar>& b = model_.blocks[static_cast<std::size_t>(l)];
      if (b.post_attention_norm) o.hooks.insert(at(l, "attn.output"));
      if (b.post_mlp_norm) o.hooks.insert(at(l, "mlp.output"));
      if (b.experts) o.hooks.insert(at(l, "mlp.routing"));
      if (!b.experts && b.has_mlp()) o.hooks.insert({at(l, "mlp.hook_pre"), at(l, "mlp.hook_post")});
      if (!b.experts && b.mlp.w_gate.rows()) o.hooks.insert(at(l, "mlp.hook_pre_linear"));
    }
    o.hooks.insert("ln_final.out");
    o.hooks.insert(options_.record.begin(), options_.record.end());
    return o;
  }

  /// From the metric to the residual stream after the last block: the LM head (its soft-cap), the final norm.
  Matrix<Scalar> head_backward(const Metric<Scalar>& metric, const std::vector<Index>& ids) {
    Matrix<Scalar> d_logits;
    out_.metric = metric.value(run_.logits, &d_logits, threads_);
    if (model_.logit_softcap > 0.0) {
      const auto cap = static_cast<Scalar>(model_.logit_softcap);
      d_logits.array() *= Scalar(1) - (run_.logits.array() / cap).square();
    }
    const Matrix<Scalar>& ln = run_.hooks.at("ln_final.out");
    const Matrix<Scalar> d_ln = times_stored<Scalar>(d_logits, model_.unembedding, threads_);
    if (params()) d_unembedding_ = headwise::detail::product_of<Scalar>(d_logits, ln, threads_, /*transpose_a=*/true);
    keep("ln_final.out", d_ln);
    const Matrix<Scalar> last = model_.n_layers() ? hook(model_.n_layers() - 1, "hook_resid_post") : model_.embed(ids);
    return norm_backward(model_.final_norm, last, d_ln, params(), names_.final_norm(), threads_);
  }

  /// From ∂/∂hook_resid_post of block l to ∂/∂hook_resid_pre.
  Matrix<Scalar> block_backward(Index l, Matrix<Scalar> dx) {
    const Block<Scalar>& b = model_.blocks[static_cast<std::size_t>(l)];
    keep(at(l, "hook_resid_post"), dx), keep(at(l, "hook_mlp_out"), dx);
    const Matrix<Scalar> d_mlp = through(b.post_mlp_norm, l, "mlp.output", dx, names_.norm(l, b, b.post_mlp_norm));
    keep(at(l, "mlp.output"), d_mlp);
    const Matrix<Scalar>& m = hook(l, "mlp_in");
    Matrix<Scalar> dm = b.experts ? experts_backward(l, *b.experts, m, d_mlp) : b.has_mlp() ? dense_backward(l, b, m, d_mlp)
                                                                                           : Matrix<Scalar>::Zero(m.rows(), m.cols());
    keep(at(l, "mlp_in"), dm);
    dx += through(b.mlp_norm, l, "hook_resid_mid", std::move(dm), names_.norm(l, b, b.mlp_norm));
    keep(at(l, "hook_resid_mid"), dx), keep(at(l, "hook_attn_out"), dx);
    const Matrix<Scalar> d_attn = through(b.post_attention_norm, l, "attn.output", dx, names_.norm(l, b, b.post_attention_norm));
    keep(at(l, "attn.output"), d_attn);
    Matrix<Scalar> da = attention_backward(l, d_attn);
    keep(at(l, "attn_in"), da);
    dx += through(b.attention_norm, l, "hook_resid_pre", std::move(da), names_.norm(l, b, b.attention_norm));
    keep(at(l, "hook_resid_pre"), dx);
    return dx;
  }

  /// A dense MLP's backward from its kept intermediates, their gradients kept as asked.
  Matrix<Scalar> dense_backward(Index l, const Block<Scalar>& b, const Matrix<Scalar>& m, const Matrix<Scalar>& dy) {
    typename FeedForward<Scalar>::Record kept;
    kept.pre = std::move(run_.hooks.at(at(l, "mlp.hook_pre"))), kept.post = std::move(run_.hooks.at(at(l, "mlp.hook_post")));
    if (b.mlp.w_gate.rows()) kept.pre_linear = std::move(run_.hooks.at(at(l, "mlp.hook_pre_linear")));
    MlpGradients<Scalar> g = mlp_backward<Scalar>(b.mlp, names_, names_.mlp(l), m, dy, params(), &kept, nullptr, threads_);
    keep(at(l, "mlp.hook_pre"), g.pre), keep(at(l, "mlp.hook_post"), g.post);
    if (b.mlp.w_gate.rows()) keep(at(l, "mlp.hook_pre_linear"), g.pre_linear);
    // (the intermediates go back to the run, which ModelGradients returns)
    run_.hooks[at(l, "mlp.hook_pre")] = std::move(kept.pre), run_.hooks[at(l, "mlp.hook_post")] = std::move(kept.post);
    if (b.mlp.w_gate.rows()) run_.hooks[at(l, "mlp.hook_pre_linear")] = std::move(kept.pre_linear);
    return std::move(g.dm);
  }

  /// From ∂/∂attn.output of layer l to ∂/∂attn_in: W_O's sum, then the layer's fused backward.
  Matrix<Scalar> attention_backward(Index l, const Matrix<Scalar>& d_out) {
    const MultiHeadAttention<Scalar>& layer = model_.blocks[static_cast<std::size_t>(l)].attention;
    ForwardRecord<Scalar> record;  // (moved from the run and back: ModelGradients::run returns them)
    record.q = std::move(run_.hooks.at(at(l, "attn.hook_q"))), record.k = std::move(run_.hooks.at(at(l, "attn.hook_k")));
    record.v = std::move(run_.hooks.at(at(l, "attn.hook_v"))), record.attention.logsumexp = std::move(run_.logsumexp.at(l));
    record.attention.z = std::move(run_.hooks.at(at(l, "attn.hook_z")));
    Matrix<Scalar> dz = times_stored<Scalar>(d_out, layer.stored_w_o(), threads_);
    keep(at(l, "attn.hook_z"), dz);
    if (options_.activations.count(at(l, "attn.hook_pattern"))) keep(at(l, "attn.hook_pattern"), pattern_gradient(layer, dz, record.v));
    AttentionOptions o;
    o.threads = options_.threads;
    MultiHeadGradients<Scalar> g = layer_backward_from_z(layer, hook(l, "attn_in"), std::move(dz), record, o);
    run_.hooks[at(l, "attn.hook_q")] = std::move(record.q), run_.hooks[at(l, "attn.hook_k")] = std::move(record.k);
    run_.hooks[at(l, "attn.hook_v")] = std::move(record.v), run_.logsumexp[l] = std::move(record.attention.logsumexp);
    keep(at(l, "attn.hook_q"), g.dq), keep(at(l, "attn.hook_k"), g.dk), keep(at(l, "attn.hook_v"), g.dv);
    if (params()) {
      const QkvLayout lay = layer.layout();
      Matrix<Scalar> dw_qkv(layer.d_model(), lay.width());
      RowVector<Scalar> db_qkv(lay.width());
      dw_qkv << g.dw_q, g.dw_k, g.dw_v;
      db_qkv << g.db_q, g.db_k, g.db_v;
      const Matrix<Scalar> dw_o = headwise::detail::product_of<Scalar>(record.attention.z, d_out, threads_, /*transpose_a=*/true);
      const RowVector<Scalar> db_o = d_out.colwise().sum();
      add_attention(names_, l, lay, {dw_qkv, db_qkv, dw_o, db_o, as_row<Scalar>(g.dq_norm), as_row<Scalar>(g.dk_norm)}, *params());
    }
    run_.hooks[at(l, "attn.hook_z")] = std::move(record.attention.z);
    return std::move(g.dx);
  }

  /// ∂/∂P of every head, (n, heads n): dZ_h[i] · v_g[j] for every (i, j), masked ones included.
  static Matrix<Scalar> pattern_gradient(const MultiHeadAttention<Scalar>& layer, const Matrix<Scalar>& dz, const Matrix<Scalar>& v) {
    const Index n = dz.rows(), d = layer.d_head();
    Matrix<Scalar> out(n, layer.n_heads() * n);
    for (Index h = 0; h < layer.n_heads(); ++h)
      out.middleCols(h * n, n) = dz.middleCols(h * d, d) * v.middleCols(layer.kv_head_of(h) * d, d).transpose();
    return out;
  }

  /// A sparse block's backward at m from dy: each expert on the tokens that chose it (its output
  /// scaled by the routing weight, or, Llama 4, its input), the shared expert on every token, then
  /// the router through the scores (the renormalised top-k softmax, or each chosen sigmoid).
  Matrix<Scalar> experts_backward(Index l, const MixtureOfExperts<Scalar>& moe, const Matrix<Scalar>& m, const Matrix<Scalar>& dy) {
    const Routing<Scalar>& routing = run_.routing.at(l);
    const Index n = m.rows(), k = routing.experts.cols();
    Matrix<Scalar> dm = Matrix<Scalar>::Zero(n, m.cols()), d_weights(n, k);
    for (Index e = 0; e < Index(moe.experts.size()); ++e) {
      std::vector<std::pair<Index, Index>> chosen;  // (token, slot), in token order
      for (Index t = 0; t < n; ++t)
        for (Index j = 0; j < k; ++j)
          if (routing.experts(t, j) == e) chosen.emplace_back(t, j);
      if (chosen.empty() && params()) out_.unreached.insert(names_.mlp(l, e));  // (its gradient 0, as autograd's None)
      Matrix<Scalar> m_e(Index(chosen.size()), m.cols()), dy_e(Index(chosen.size()), m.cols()), out_e;
      for (std::size_t i = 0; i < chosen.size(); ++i) {
        const auto [t, j] = chosen[i];
        const Scalar w = routing.weights(t, j);
        m_e.row(Index(i)) = moe.scales_input ? Matrix<Scalar>(w * m.row(t)) : Matrix<Scalar>(m.row(t));
        dy_e.row(Index(i)) = moe.scales_input ? Matrix<Scalar>(dy.row(t)) : Matrix<Scalar>(dy.row(t) * w);
      }
      const Matrix<Scalar> dm_e =
          mlp_backward<Scalar>(moe.experts[std::size_t(e)], names_, names_.mlp(l, e), m_e, dy_e, params(), nullptr, &out_e, threads_).dm;
      for (std::size_t i = 0; i < chosen.size(); ++i) {
        const auto [t, j] = chosen[i];
        dm.row(t) += moe.scales_input ? Matrix<Scalar>(routing.weights(t, j) * dm_e.row(Index(i))) : Matrix<Scalar>(dm_e.row(Index(i)));
        d_weights(t, j) = moe.scales_input ? dm_e.row(Index(i)).dot(m.row(t)) : dy.row(t).dot(out_e.row(Index(i)));
      }
    }
    if (moe.shared_expert) dm += mlp_backward<Scalar>(*moe.shared_expert, names_, "", m, dy, nullptr, nullptr, nullptr, threads_).dm;
    keep(at(l, "mlp.topk_weights"), d_weights);
    const Matrix<Scalar> d_logits = router_backward(moe, routing, d_weights);
    keep(at(l, "mlp.router_logits"), d_logits);
    if (params()) (*params())[names_.router(l)] = headwise::detail::product_of<Scalar>(d_logits, m, threads_, /*transpose_a=*/true);
    dm += times_stored<Scalar>(d_logits, moe.router, threads_);
    return dm;
  }

  /// ∂/∂router logits (after any router bias) from ∂/∂(top-k weights): w_j = p_j / Σ_chosen p
  /// (renormalised) or p_j, p = softmax; or w_j = σ(r_j) (Llama 4).
  static Matrix<Scalar> router_backward(const MixtureOfExperts<Scalar>& moe, const Routing<Scalar>& routing, const Matrix<Scalar>& d_weights) {
    const Index n = routing.logits.rows(), E = routing.logits.cols(), k = routing.experts.cols();
    Matrix<Scalar> d_logits = Matrix<Scalar>::Zero(n, E);
    for (Index t = 0; t < n; ++t) {
      if (moe.score == MixtureOfExperts<Scalar>::Score::sigmoid) {  // (unnormalised: check_names)
        for (Index j = 0; j < k; ++j) {
          const double s = 1.0 / (1.0 + std::exp(-double(routing.logits(t, routing.experts(t, j)))));
          d_logits(t, routing.experts(t, j)) = static_cast<Scalar>(double(d_weights(t, j)) * s * (1.0 - s));
        }
        continue;
      }
      const RowVector<double> e = (routing.logits.row(t).template cast<double>().array() - double(routing.logits.row(t).maxCoeff())).exp();
      const RowVector<double> p = e / e.sum();
      RowVector<double> dp = RowVector<double>::Zero(E);
      double chosen = 0, weighted = 0;
      for (Index j = 0; j < k; ++j) chosen += p(routing.experts(t, j)), weighted += double(d_weights(t, j)) * p(routing.experts(t, j));
      for (Index j = 0; j < k; ++j)
        dp(routing.experts(t, j)) = moe.normalise_top_k ? double(d_weights(t, j)) / chosen - weighted / (chosen * chosen) : double(d_weights(t, j));
      d_logits.row(t) = (p.array() * (dp.array() - dp.dot(p))).template cast<Scalar>();
    }
    return d_logits;
  }

  /// The embeddings: hook_embed (before the scale), GPT-2's positions, the (tied) embedding's rows.
  void embedding_backward(const std::vector<Index>& ids, const Matrix<Scalar>& dx) {
    const Matrix<Scalar> d_embed = dx * static_cast<Scalar>(model_.embedding_scale);
    keep("hook_embed", d_embed);
    if (model_.positions.size()) keep("hook_pos_embed", dx);
    if (!params()) return;
    Matrix<Scalar> d_table = model_.tied() ? std::move(d_unembedding_) : Matrix<Scalar>::Zero(model_.vocab_size(), model_.d_model());
    if (!model_.tied()) (*params())[names_.unembedding()] = std::move(d_unembedding_);
    for (std::size_t t = 0; t < ids.size(); ++t) d_table.row(ids[t]) += d_embed.row(Index(t));
    (*params())[names_.embedding()] = std::move(d_table);
    if (model_.positions.size()) {
      Matrix<Scalar> d_positions = Matrix<Scalar>::Zero(model_.positions.rows(), model_.positions.cols());
      d_positions.topRows(dx.rows()) = dx;
      (*params())[names_.positions()] = std::move(d_positions);
    }
  }

  const DecoderModel<Scalar>& model_;
  ParameterNames names_;
  const GradientOptions& options_;
  int threads_;
  ModelRun<Scalar> run_;
  ModelGradients<Scalar> out_;
  Matrix<Scalar> d_unembedding_;
};

}  // namespace internal

/// ∂metric/∂(activations, parameters) of `model` on ids (positions 0 ..), by one forward and one
/// backward. Refuses a layer its backward cannot differentiate by name (value norms, output gates:
/// check_differentiable); through sinks it differentiates, and refuses parameter gradients of a
/// model with sinks (theirs is not computed).
template <class Scalar>
ModelGradients<Scalar> gradients(const DecoderModel<Scalar>& model, const std::vector<Index>& ids, const Metric<Scalar>& metric,
                                 const GradientOptions& options = {}) {
  return internal::ModelBackward<Scalar>(model, options)(ids, metric);
}

}  // namespace headwise::model
