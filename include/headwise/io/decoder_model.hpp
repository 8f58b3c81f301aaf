// Loading whole decoder models (model/decoder_model.hpp) from Hugging Face checkpoint folders:
// GPT-2 (GPT2LMHeadModel), and every family of the attention loader's table (io/llama_config.hpp,
// Family::model says how its blocks are arranged). The attention layers come from io/gpt2.hpp,
// io/llama.hpp and io/latent_attention.hpp; here the embeddings, norms, MLPs and experts (each
// family's routing: Qwen3-MoE's, gpt-oss's dense or MXFP4, Llama 4's, DeepSeek-V3's, Qwen3-Next's,
// Gemma 4's beside the MLP), Qwen3-Next's Gated DeltaNet layers, Gemma 4's per-layer inputs and
// layer scalars, and the LM head. An activation or a setting the model code does not cover is
// refused by name.
#pragma once

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "headwise/detail/compiled.hpp"
#include "headwise/io/checkpoint.hpp"
#include "headwise/io/config_reader.hpp"
#include "headwise/io/gpt2.hpp"
#include "headwise/io/latent_attention.hpp"
#include "headwise/io/llama.hpp"
#include "headwise/io/tensor_reader.hpp"
#include "headwise/model/decoder_model.hpp"

namespace headwise::io {

namespace detail {

template <class Scalar>
model::Norm<Scalar> norm_of(const TensorReader& t, const std::string& prefix, std::uint64_t d, typename model::Norm<Scalar>::Kind kind,
                            double eps) {
  model::Norm<Scalar> n;
  n.kind = kind, n.eps = eps;
  n.weight = t.vector<Scalar>(prefix + ".weight", d);
  if (kind == model::Norm<Scalar>::Kind::layer_norm) n.bias = t.vector<Scalar>(prefix + ".bias", d);
  return n;
}

/// GPT-2: wte + wpe, LayerNorms, gelu_new MLPs (Conv1D weights [in, out]), tied LM head.
template <class Scalar>
model::DecoderModel<Scalar> load_gpt2_model(const std::string& folder, const ConfigReader& r) {
  const Gpt2Config c = gpt2_config_of(r);
  if (r.has("activation_function") && r.string("activation_function") != "gelu_new")
    r.fail("activation_function \"" + r.string("activation_function") + "\" is not one the model code has (gelu_new)");
  for (const char* key : {"scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn"})
    if (r.boolean(key, false)) r.fail(std::string("\"") + key + "\" = true changes attention, and headwise does not read it");
  if (r.has("scale_attn_weights") && !r.boolean("scale_attn_weights", true)) r.fail("\"scale_attn_weights\" = false is not read");
  const Checkpoint checkpoint = Checkpoint::open(folder);
  const SafetensorsFile& file = checkpoint.file_of(checkpoint.contains("transformer.wte.weight") ? "transformer.wte.weight" : "wte.weight");
  const TensorReader t(checkpoint, "headwise: gpt2 model: " + folder + ": ");
  const std::string p = checkpoint.contains("transformer.wte.weight") ? "transformer." : "";
  const auto d = static_cast<std::uint64_t>(c.n_embd), inner = static_cast<std::uint64_t>(r.integer("n_inner", 4 * c.n_embd));
  const double eps = r.number(r.json(), "layer_norm_epsilon", 1e-5);
  model::DecoderModel<Scalar> m;
  m.embedding = t.stored<Scalar>(p + "wte.weight", static_cast<std::uint64_t>(r.integer("vocab_size", 50257)), d);
  m.positions = t.matrix<Scalar>(p + "wpe.weight", static_cast<std::uint64_t>(r.integer("n_positions", 1024)), d);
  using Kind = typename model::Norm<Scalar>::Kind;
  for (Index l = 0; l < c.n_layer; ++l) {
    const std::string h = p + "h." + std::to_string(l) + ".";
    model::FeedForward<Scalar> mlp;
    mlp.activation = model::Activation::gelu_tanh;
    // (GPT-2's Conv1D weights are stored [in, out]: transposed once, in their stored type)
    mlp.w_up = t.stored_transposed<Scalar>(h + "mlp.c_fc.weight", d, inner), mlp.b_up = t.vector<Scalar>(h + "mlp.c_fc.bias", inner);
    mlp.w_down = t.stored_transposed<Scalar>(h + "mlp.c_proj.weight", inner, d), mlp.b_down = t.vector<Scalar>(h + "mlp.c_proj.bias", d);
    m.blocks.push_back({norm_of<Scalar>(t, h + "ln_1", d, Kind::layer_norm, eps), load_gpt2_attention<Scalar>(file, c, l), std::nullopt,
                        norm_of<Scalar>(t, h + "ln_2", d, Kind::layer_norm, eps), std::move(mlp), std::nullopt, std::nullopt,
                        std::nullopt});
  }
  m.final_norm = norm_of<Scalar>(t, p + "ln_f", d, Kind::layer_norm, eps);
  m.unembedding = m.embedding;  // tied: the same bytes
  m.names.style = model::CheckpointNames::Style::gpt2, m.names.prefix = p;
  return m;
}

/// A dense gated MLP under `prefix`: {gate,up,down}_proj, or Phi-3's gate_up_proj (the gate's
/// rows first) and down_proj.
template <class Scalar>
model::FeedForward<Scalar> gated_mlp(const TensorReader& t, const std::string& prefix, std::uint64_t d, std::uint64_t inner,
                                     model::Activation a, bool fused_gate_up = false) {
  model::FeedForward<Scalar> f;
  f.activation = a;
  if (fused_gate_up) {
    const StoredMatrix gate_up = t.stored<Scalar>(prefix + "gate_up_proj.weight", 2 * inner, d);
    f.w_gate = gate_up.middle_rows(0, static_cast<Index>(inner));
    f.w_up = gate_up.middle_rows(static_cast<Index>(inner), static_cast<Index>(inner));
  } else {
    f.w_gate = t.stored<Scalar>(prefix + "gate_proj.weight", inner, d);
    f.w_up = t.stored<Scalar>(prefix + "up_proj.weight", inner, d);
  }
  f.w_down = t.stored<Scalar>(prefix + "down_proj.weight", d, inner);
  return f;
}

/// gpt-oss's sparse block under p (model.layers.L.mlp.): the biased router, num_local_experts
/// experts of interleaved gate_up [2 inner, d] and down [d, inner] with biases and the clamped
/// SwiGLU (swiglu_limit; swiglu_alpha, 1.702 where the config leaves it out, as in the released
/// ones); the experts dense (`experts.gate_up_proj` [E, d, 2 inner], input-major: transposed once)
/// or in MXFP4 as released (`*_blocks`, `*_scales`, with quantization_config mxfp4) kept as stored.
template <class Scalar>
model::MixtureOfExperts<Scalar> gpt_oss_experts(const ConfigReader& r, const LlamaConfig& c, const TensorReader& t, const std::string& p,
                                                std::uint64_t d) {
  const Index experts = r.integer("num_local_experts");
  const auto E = static_cast<std::uint64_t>(experts), inner = static_cast<std::uint64_t>(r.integer("intermediate_size"));
  model::MixtureOfExperts<Scalar> moe;
  moe.router = t.stored<Scalar>(p + "router.weight", E, d), moe.router_bias = t.vector<Scalar>(p + "router.bias", E);
  moe.top_k = r.integer("num_experts_per_tok");
  if (r.has("experts_per_token") && r.integer("experts_per_token") != moe.top_k) r.fail("experts_per_token differs from num_experts_per_tok");
  if (moe.top_k < 1 || moe.top_k > experts) r.fail("num_experts_per_tok must be in [1, num_local_experts]");
  moe.normalise_top_k = true;  // (a softmax over the top_k logits)
  const double alpha = r.number(r.json(), "swiglu_alpha", 1.702), limit = r.number(r.json(), "swiglu_limit", 7.0);
  if (!(std::isfinite(alpha) && std::isfinite(limit) && limit > 0)) r.fail("swiglu_alpha and swiglu_limit must be finite, swiglu_limit > 0");
  const bool blocks = t.has(p + "experts.gate_up_proj_blocks");
  if (blocks != c.mxfp4_experts)
    t.fail(blocks ? "\"" + t.prefix() + p + "experts.gate_up_proj_blocks\" is MXFP4, but the config has no quantization_config mxfp4"
                  : "the config's quantization_config says mxfp4, but \"" + t.prefix() + p + "experts.gate_up_proj_blocks\" is missing");
  const Matrix<Scalar> gate_up_bias = t.matrix<Scalar>(p + "experts.gate_up_proj_bias", E, 2 * inner);
  const Matrix<Scalar> down_bias = t.matrix<Scalar>(p + "experts.down_proj_bias", E, d);
  for (Index e = 0; e < experts; ++e) {
    model::FeedForward<Scalar> f;
    f.activation = model::Activation::clamped_swiglu, f.swiglu_alpha = alpha, f.swiglu_limit = limit;
    f.w_up = blocks ? t.stored_mxfp4<Scalar>(p + "experts.gate_up_proj", e, E, 2 * inner, d)
                    : t.stored_slice_transposed<Scalar>(p + "experts.gate_up_proj", e, E, d, 2 * inner);
    f.w_down = blocks ? t.stored_mxfp4<Scalar>(p + "experts.down_proj", e, E, d, inner)
                      : t.stored_slice_transposed<Scalar>(p + "experts.down_proj", e, E, inner, d);
    f.b_up = gate_up_bias.row(e), f.b_down = down_bias.row(e);
    moe.experts.push_back(std::move(f));
  }
  return moe;
}

/// Llama 4's feed-forward under p (model.layers.L.feed_forward.): on the layers in moe_layers (or,
/// without that list, every interleave_moe_layer_step-th from step - 1) its sparse block, the top
/// num_experts_per_tok of num_local_experts by their sigmoid scores, each score multiplying its
/// expert's input, and the shared expert; the experts' gate_up_proj [E, d, 2 inner] input-major,
/// the gate's half first. Elsewhere the dense MLP of intermediate_size_mlp.
template <class Scalar>
void llama4_feed_forward(const ConfigReader& r, const TensorReader& t, Index l, std::uint64_t d, model::Block<Scalar>& b) {
  const std::string p = "model.layers." + std::to_string(l) + ".feed_forward.";
  const std::vector<Index> listed = r.integers("moe_layers");
  const Index step = r.integer("interleave_moe_layer_step", 1);
  if (step < 1) r.fail("interleave_moe_layer_step must be >= 1");
  const bool sparse = r.has("moe_layers") ? std::find(listed.begin(), listed.end(), l) != listed.end() : (l + 1) % step == 0;
  if (!sparse) {
    b.mlp = gated_mlp<Scalar>(t, p, d, static_cast<std::uint64_t>(r.integer("intermediate_size_mlp")), model::Activation::silu);
    return;
  }
  if (r.number(r.json(), "router_jitter_noise", 0.0) != 0.0) r.fail("router_jitter_noise is not 0: it perturbs training's routing, which headwise does not model");
  const Index experts = r.integer("num_local_experts");
  const auto E = static_cast<std::uint64_t>(experts), inner = static_cast<std::uint64_t>(r.integer("intermediate_size"));
  model::MixtureOfExperts<Scalar> moe;
  moe.router = t.stored<Scalar>(p + "router.weight", E, d);
  moe.top_k = r.integer("num_experts_per_tok");
  if (moe.top_k < 1 || moe.top_k > experts) r.fail("num_experts_per_tok must be in [1, num_local_experts]");
  moe.score = model::MixtureOfExperts<Scalar>::Score::sigmoid, moe.normalise_top_k = false, moe.scales_input = true;
  for (Index e = 0; e < experts; ++e) {
    model::FeedForward<Scalar> f;
    const StoredMatrix gate_up = t.stored_slice_transposed<Scalar>(p + "experts.gate_up_proj", e, E, d, 2 * inner);
    f.w_gate = gate_up.middle_rows(0, static_cast<Index>(inner)), f.w_up = gate_up.middle_rows(static_cast<Index>(inner), static_cast<Index>(inner));
    f.w_down = t.stored_slice_transposed<Scalar>(p + "experts.down_proj", e, E, inner, d);
    moe.experts.push_back(std::move(f));
  }
  moe.shared_expert = gated_mlp<Scalar>(t, p + "shared_expert.", d, inner, model::Activation::silu);
  b.experts = std::move(moe);
}

/// DeepSeek-V3's (and Kimi K2's) feed-forward under model.layers.L.mlp.: from layer
/// first_k_dense_replace on (every moe_layer_freq-th) its sparse block: sigmoid scores, the choice
/// by score + e_score_correction_bias among the topk_group best of n_group groups (each ranked by
/// its two best), the weights the scores alone (normalised where norm_topk_prob) times
/// routed_scaling_factor, n_routed_experts SwiGLU experts of moe_intermediate_size and the shared
/// experts as one MLP of n_shared_experts times that; dense SwiGLU layers before. FP8 weights are
/// kept as stored (the reader's block scales).
/// A count that may be 0 (first_k_dense_replace, n_shared_experts): absent or null is 0.
inline Index count_from_zero(const ConfigReader& r, const char* key) {
  const double v = r.number(r.json(), key, 0.0);
  if (!(v >= 0 && v <= 4294967296.0 && v == std::floor(v))) r.fail(std::string("\"") + key + "\" must be an integer in [0, 4294967296]");
  return static_cast<Index>(v);
}

template <class Scalar>
void deepseek_feed_forward(const ConfigReader& r, const TensorReader& t, Index l, std::uint64_t d, model::Block<Scalar>& b) {
  const std::string p = "model.layers." + std::to_string(l) + ".mlp.";
  if (r.has("scoring_func") && r.string("scoring_func") != "sigmoid") r.fail("scoring_func \"" + r.string("scoring_func") + "\" is not sigmoid");
  if (r.has("topk_method") && r.string("topk_method") != "noaux_tc") r.fail("topk_method \"" + r.string("topk_method") + "\" is not noaux_tc");
  const Index freq = r.integer("moe_layer_freq", 1);
  if (freq < 1) r.fail("moe_layer_freq must be >= 1");
  if (l < count_from_zero(r, "first_k_dense_replace") || l % freq != 0) {
    b.mlp = gated_mlp<Scalar>(t, p, d, static_cast<std::uint64_t>(r.integer("intermediate_size")), model::Activation::silu);
    return;
  }
  const Index experts = r.integer("n_routed_experts");
  const auto E = static_cast<std::uint64_t>(experts), inner = static_cast<std::uint64_t>(r.integer("moe_intermediate_size"));
  model::MixtureOfExperts<Scalar> moe;
  moe.router = t.stored<Scalar>(p + "gate.weight", E, d), moe.choice_bias = t.vector<Scalar>(p + "gate.e_score_correction_bias", E);
  moe.top_k = r.integer("num_experts_per_tok"), moe.groups = r.integer("n_group", 1), moe.top_groups = r.integer("topk_group", 1);
  if (moe.groups < 1 || experts % moe.groups != 0 || moe.top_groups < 1 || moe.top_groups > moe.groups)
    r.fail("n_group must divide n_routed_experts, and topk_group be in [1, n_group]");
  if (moe.top_k < 1 || moe.top_k > moe.top_groups * (experts / moe.groups)) r.fail("num_experts_per_tok must be in [1, the kept groups' experts]");
  moe.score = model::MixtureOfExperts<Scalar>::Score::sigmoid, moe.normalise_top_k = r.boolean("norm_topk_prob", false);
  moe.routed_scaling = r.number(r.json(), "routed_scaling_factor", 1.0);
  if (!(std::isfinite(moe.routed_scaling) && moe.routed_scaling > 0)) r.fail("routed_scaling_factor must be finite and > 0");
  for (Index e = 0; e < experts; ++e) moe.experts.push_back(gated_mlp<Scalar>(t, p + "experts." + std::to_string(e) + ".", d, inner, model::Activation::silu));
  const Index shared = count_from_zero(r, "n_shared_experts");
  if (shared > 0) moe.shared_expert = gated_mlp<Scalar>(t, p + "shared_experts.", d, inner * static_cast<std::uint64_t>(shared), model::Activation::silu);
  b.experts = std::move(moe);
}

/// Qwen3-Next's linear-attention layer L (model.layers.L.linear_attn.): the sizes from the
/// config's linear_* keys (its config class's defaults where absent), eps the model's rms_norm_eps.
template <class Scalar>
GatedDeltaNet<Scalar> load_gated_delta_net(const ConfigReader& r, const TensorReader& t, Index l, std::uint64_t d, double eps) {
  const std::string p = "model.layers." + std::to_string(l) + ".linear_attn.";
  GatedDeltaNet<Scalar> g;
  GatedDeltaNetShape& s = g.shape;
  s.key_heads = r.integer("linear_num_key_heads", 16), s.value_heads = r.integer("linear_num_value_heads", 32);
  s.d_key = r.integer("linear_key_head_dim", 128), s.d_value = r.integer("linear_value_head_dim", 128);
  s.kernel = r.integer("linear_conv_kernel_dim", 4), s.eps = eps;
  for (const Index size : {s.key_heads, s.value_heads, s.d_key, s.d_value, s.kernel})
    if (size < 1 || size > (Index(1) << 20)) r.fail("linear_num_key_heads, linear_num_value_heads, linear_key_head_dim, linear_value_head_dim and linear_conv_kernel_dim must be in [1, 2^20]");
  if (s.value_heads % s.key_heads != 0) r.fail("linear_num_value_heads must be a multiple of linear_num_key_heads");
  const auto nv = static_cast<std::uint64_t>(s.value_heads), dv = static_cast<std::uint64_t>(s.d_value);
  const auto wide = static_cast<std::uint64_t>(2 * s.key_heads * s.d_key) + 2 * nv * dv;
  g.in_qkvz = t.stored<Scalar>(p + "in_proj_qkvz.weight", wide, d);
  g.in_ba = t.stored<Scalar>(p + "in_proj_ba.weight", 2 * nv, d);
  g.conv = t.depthwise_conv<Scalar>(p + "conv1d.weight", static_cast<std::uint64_t>(s.channels()), static_cast<std::uint64_t>(s.kernel));
  g.dt_bias = t.vector<Scalar>(p + "dt_bias", nv), g.a_log = t.vector<Scalar>(p + "A_log", nv);
  g.norm = t.vector<Scalar>(p + "norm.weight", dv);
  g.out = t.stored<Scalar>(p + "out_proj.weight", d, nv * dv);
  g.check(static_cast<Index>(d));
  return g;
}

/// Gemma 4's experts beside the dense MLP of layer L (enable_moe_block): the router
/// (router.proj, router.scale, router.per_expert_scale), top_k_experts of num_experts GeGLU
/// experts of moe_intermediate_size from the stacks experts.gate_up_proj [E, 2 I, d] (the gate's
/// rows first) and experts.down_proj [E, d, I], and their three norms.
template <class Scalar>
model::SideExperts<Scalar> gemma4_experts(const ConfigReader& r, const TensorReader& t, Index l, std::uint64_t d, double eps) {
  const std::string p = "model.layers." + std::to_string(l) + ".";
  const Index experts = r.integer("num_experts");
  const auto E = static_cast<std::uint64_t>(experts), inner = static_cast<std::uint64_t>(r.integer("moe_intermediate_size"));
  model::MixtureOfExperts<Scalar> moe;
  moe.router = t.stored<Scalar>(p + "router.proj.weight", E, d);
  moe.router_scale = t.vector<Scalar>(p + "router.scale", d), moe.expert_scale = t.vector<Scalar>(p + "router.per_expert_scale", E);
  moe.router_eps = eps;
  moe.top_k = r.integer("top_k_experts");
  if (moe.top_k > experts) r.fail("top_k_experts exceeds num_experts");
  for (Index e = 0; e < experts; ++e) {
    model::FeedForward<Scalar> f;
    f.activation = model::Activation::gelu_tanh;
    const StoredMatrix gate_up = t.stored_slice<Scalar>(p + "experts.gate_up_proj", e, E, 2 * inner, d);
    f.w_gate = gate_up.middle_rows(0, static_cast<Index>(inner)), f.w_up = gate_up.middle_rows(static_cast<Index>(inner), static_cast<Index>(inner));
    f.w_down = t.stored_slice<Scalar>(p + "experts.down_proj", e, E, d, inner);
    moe.experts.push_back(std::move(f));
  }
  using Kind = typename model::Norm<Scalar>::Kind;
  const auto norm = [&](const char* name) { return norm_of<Scalar>(t, p + name, d, Kind::rms, eps); };
  return {std::move(moe), norm("pre_feedforward_layernorm_2"), norm("post_feedforward_layernorm_1"), norm("post_feedforward_layernorm_2")};
}

/// Gemma 4's per-layer inputs (hidden_size_per_layer_input p > 0): the model's table and
/// projection, and each layer's gate, projection and norm; every layer's layer_scalar.
template <class Scalar>
void read_gemma4_extras(const ConfigReader& r, const TensorReader& t, std::uint64_t d, double eps, model::DecoderModel<Scalar>& m) {
  const Index p = r.number(r.json(), "hidden_size_per_layer_input", 0.0) == 0 ? 0 : r.integer("hidden_size_per_layer_input");  // (0: none)
  using Kind = typename model::Norm<Scalar>::Kind;
  const auto norm = [&](const std::string& name, std::uint64_t size) { return norm_of<Scalar>(t, name, size, Kind::rms, eps); };
  const auto n = static_cast<std::uint64_t>(m.n_layers()), width = static_cast<std::uint64_t>(p);
  if (p > 0) {
    if (r.integer("vocab_size_per_layer_input", r.integer("vocab_size")) != r.integer("vocab_size"))
      r.fail("vocab_size_per_layer_input differs from vocab_size: per-layer inputs for only some ids are not read");
    model::PerLayerEmbedding<Scalar> e;
    e.table = t.stored<Scalar>("model.embed_tokens_per_layer.weight", static_cast<std::uint64_t>(m.vocab_size()), n * width);
    e.projection = t.stored<Scalar>("model.per_layer_model_projection.weight", n * width, d);
    e.norm = norm("model.per_layer_projection_norm", width), e.width = p;
    m.per_layer_embedding = std::move(e);
  }
  for (Index l = 0; l < m.n_layers(); ++l) {
    const std::string q = "model.layers." + std::to_string(l) + ".";
    model::Block<Scalar>& b = m.blocks[static_cast<std::size_t>(l)];
    b.layer_scalar = t.vector<Scalar>(q + "layer_scalar", 1)(0);
    if (p > 0)
      b.per_layer_input = model::PerLayerInput<Scalar>{t.stored<Scalar>(q + "per_layer_input_gate.weight", width, d),
                                                      t.stored<Scalar>(q + "per_layer_projection.weight", d, width),
                                                      norm(q + "post_per_layer_input_norm", d)};
  }
}

/// What a latent block's `attention` holds (Block::latent): one head one wide.
template <class Scalar>
MultiHeadAttention<Scalar> placeholder_attention() {
  MultiHeadWeights<Scalar> w;
  w.w_q = w.w_k = w.w_v = w.w_o = Matrix<Scalar>::Zero(1, 1);
  return MultiHeadAttention<Scalar>(1, std::move(w));
}

/// Layer L's MLP: gpt-oss's or Qwen3-MoE's sparse block where L is sparse, else the dense gated MLP.
template <class Scalar>
void read_mlp(const ConfigReader& r, const LlamaConfig& c, const TensorReader& t, const WholeModel& shape, Index l, std::uint64_t d,
              model::Activation a, model::Block<Scalar>& b) {
  const std::string p = "model.layers." + std::to_string(l) + ".mlp.";
  if (c.model_type == "gpt_oss") {
    b.experts = gpt_oss_experts<Scalar>(r, c, t, p, d);
    return;
  }
  if (c.model_type == "llama4_text") return llama4_feed_forward<Scalar>(r, t, l, d, b);
  if (c.latent) return deepseek_feed_forward<Scalar>(r, t, l, d, b);
  const bool gemma4 = c.model_type == "gemma4_text";
  const Index experts = r.has("num_experts") && !gemma4 ? r.integer("num_experts") : 0;  // (Gemma 4's sit beside the dense MLP)
  const std::vector<Index> dense = r.integers("mlp_only_layers");
  const bool sparse = experts > 0 && (l + 1) % r.integer("decoder_sparse_step", 1) == 0 && std::find(dense.begin(), dense.end(), l) == dense.end();
  if (!sparse) {
    auto inner = static_cast<std::uint64_t>(r.integer("intermediate_size"));
    if (c.kv_source_of(l) && r.boolean("use_double_wide_mlp", false)) inner *= 2;  // (Gemma 4's KV-shared layers)
    b.mlp = gated_mlp<Scalar>(t, p, d, inner, a, shape.fused_gate_up);
    if (gemma4 && r.boolean("enable_moe_block", false)) b.side_experts = gemma4_experts<Scalar>(r, t, l, d, r.number(r.json(), "rms_norm_eps", 1e-6));
    return;
  }
  model::MixtureOfExperts<Scalar> moe;
  moe.router = t.stored<Scalar>(p + "gate.weight", static_cast<std::uint64_t>(experts), d);
  moe.top_k = r.integer("num_experts_per_tok");
  if (moe.top_k > experts) r.fail("num_experts_per_tok exceeds num_experts");
  moe.normalise_top_k = r.boolean("norm_topk_prob", false);
  const auto inner = static_cast<std::uint64_t>(r.integer("moe_intermediate_size"));
  for (Index e = 0; e < experts; ++e) moe.experts.push_back(gated_mlp<Scalar>(t, p + "experts." + std::to_string(e) + ".", d, inner, a));
  if (c.model_type == "qwen3_next") {  // the shared expert, its output scaled by sigmoid(m · shared_expert_gate)
    const auto shared = static_cast<std::uint64_t>(r.integer("shared_expert_intermediate_size"));
    moe.shared_expert = gated_mlp<Scalar>(t, p + "shared_expert.", d, shared, a);
    moe.shared_gate = t.stored<Scalar>(p + "shared_expert_gate.weight", 1, d);
  }
  b.experts = std::move(moe);
}

/// The settings of a Llama-style family's config that the model code reads or refuses.
inline void check_model_config(const ConfigReader& r, const std::string& type, const WholeModel& shape) {
  if (shape.norms == WholeModel::Norms::none)
    r.fail("model_type \"" + type + "\" has attention headwise loads, but the model code lacks " + shape.missing +
           ": load its attention layers (io/llama.hpp)");
  const char* act_key = shape.gemma ? "hidden_activation" : "hidden_act";
  const std::string act = r.string(act_key);
  if (act != (shape.gemma ? "gelu_pytorch_tanh" : "silu"))  // (gpt-oss's says silu: its clamped SwiGLU)
    r.fail(std::string(act_key) + " \"" + act + "\" is not one the model code has for " + type);
  if (r.boolean("mlp_bias", false)) r.fail("\"mlp_bias\" = true: the model code reads MLPs without biases");
}

/// The Llama-style families, arranged as the loader table (io/llama_config.hpp, WholeModel) says: RMSNorms
/// before, before and after, or after the attention and the MLP (Gemma's (1 + w) form), gated MLPs
/// or Qwen3-MoE's experts, an LM head or the tied embedding, Gemma 2's final soft-cap.
template <class Scalar>
model::DecoderModel<Scalar> load_llama_style_model(const std::string& folder, const ConfigReader& r) {
  const LlamaConfig config = llama_config_of(r);
  const WholeModel& shape = family_of(config.model_type)->model;
  check_model_config(r, config.model_type, shape);
  const Checkpoint checkpoint = Checkpoint::open(folder);
  const TensorReader t(checkpoint, "headwise: model: " + folder + ": ", {"", config.fp8, ""});  // (FP8 MLPs scaled by their blocks)
  const auto d = static_cast<std::uint64_t>(config.hidden_size), vocab = static_cast<std::uint64_t>(r.integer("vocab_size"));
  if (!r.has("rms_norm_eps")) r.fail("no \"rms_norm_eps\": the config classes' defaults differ (1e-6, 1e-5), and the model code takes none");
  const double eps = r.number(r.json(), "rms_norm_eps", 0.0);
  if (!(eps > 0.0 && std::isfinite(eps))) r.fail("rms_norm_eps must be finite and > 0");
  using Kind = typename model::Norm<Scalar>::Kind;
  using N = WholeModel::Norms;
  const Kind kind = shape.zero_centred ? Kind::rms_offset : Kind::rms;
  const model::Activation a = shape.gemma ? model::Activation::gelu_tanh : model::Activation::silu;
  const auto norm = [&](const std::string& name) { return norm_of<Scalar>(t, name, d, kind, eps); };
  model::DecoderModel<Scalar> m;
  m.embedding = t.stored<Scalar>("model.embed_tokens.weight", vocab, d);
  if (shape.gemma) m.embedding_scale = static_cast<double>(static_cast<Scalar>(std::sqrt(double(config.hidden_size))));
  if (shape.gemma && r.has("final_logit_softcapping")) m.logit_softcap = r.number(r.json(), "final_logit_softcapping", 0.0);
  for (Index l = 0; l < config.n_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    const bool linear = config.type_of(l) == LayerType::linear, placeholder = config.latent || linear;
    model::Block<Scalar> b{std::nullopt, placeholder ? placeholder_attention<Scalar>() : load_llama_attention<Scalar>(checkpoint, config, l),
                           std::nullopt, std::nullopt, {}, std::nullopt, std::nullopt, std::nullopt};
    if (config.latent) b.latent = load_latent_attention<Scalar>(checkpoint, config, l);
    if (linear) b.delta_net = load_gated_delta_net<Scalar>(r, t, l, d, eps);
    if (shape.norms != N::after) b.attention_norm = norm(p + "input_layernorm");
    if (shape.norms == N::before) b.mlp_norm = norm(p + "post_attention_layernorm");  // (Llama's name for its MLP's norm)
    if (shape.norms == N::before_and_after) b.mlp_norm = norm(p + "pre_feedforward_layernorm");
    if (shape.norms != N::before) {
      b.post_attention_norm = norm(p + "post_attention_layernorm");
      b.post_mlp_norm = norm(p + "post_feedforward_layernorm");
    }
    read_mlp<Scalar>(r, config, t, shape, l, d, a, b);
    m.blocks.push_back(std::move(b));
  }
  m.final_norm = norm("model.norm");
  if (config.model_type == "gemma4_text") read_gemma4_extras<Scalar>(r, t, d, eps, m);
  const bool tied = r.boolean("tie_word_embeddings", shape.tied);
  m.unembedding = tied ? m.embedding : t.stored<Scalar>("lm_head.weight", vocab, d);  // (tied: the same bytes)
  m.names.fused_qkv = config.fused_qkv, m.names.fused_gate_up = shape.fused_gate_up;
  m.names.attention_biases = checkpoint.contains("model.layers.0.self_attn.q_proj.bias") || checkpoint.contains("model.layers.0.self_attn.qkv_proj.bias");
  m.names.output_bias = checkpoint.contains("model.layers.0.self_attn.o_proj.bias");
  if (config.model_type == "llama4_text") m.names.mlp = "feed_forward";
  return m;
}

}  // namespace detail

/// A whole model from a checkpoint folder (config.json, model.safetensors or shards).
///   auto model = io::load_decoder_model<float>("gpt2/");   // model.run(ids).logits
template <class Scalar>
model::DecoderModel<Scalar> load_decoder_model(const std::string& folder) {
  // config.json parsed once: the attention's keys and the model's read from one reader
  const detail::ConfigReader r(read_text_file(folder + "/config.json", "model config"), "model config", folder + "/config.json");
  if (r.string("model_type") == "gpt2") return detail::load_gpt2_model<Scalar>(folder, r);
  return detail::load_llama_style_model<Scalar>(folder, r);
}

/// The compiled mode's instantiations of the whole-model loader (detail/compiled.hpp).
#define HEADWISE_MODEL_LOADER_INSTANTIATIONS(PREFIX, S) \
  PREFIX template model::DecoderModel<S> load_decoder_model<S>(const std::string&);
HEADWISE_EXTERN_INSTANTIATIONS(HEADWISE_MODEL_LOADER_INSTANTIATIONS)

}  // namespace headwise::io
