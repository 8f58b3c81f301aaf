// Loading multi-head latent attention layers (multi_head_latent_attention.hpp) from Hugging Face
// checkpoint folders of the families the loader table (io/llama_config.hpp) marks latent: deepseek_v3 and
// kimi_k2 (the same layer; v4 `rope_scaling` and v5 `rope_parameters` configs). Per layer the
// self_attn tensors q_a_proj, q_a_layernorm, q_b_proj (or q_proj where q_lora_rank is null),
// kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj and o_proj; FP8 weights (F8_E4M3 / F8_E5M2 with
// weight_scale_inv block scales, as DeepSeek-V3 ships them) are dequantized exactly as they are
// read. Layers only: DeepSeek's mixture of experts is not attention.
#pragma once

#include <string>
#include <vector>

#include "headwise/detail/compiled.hpp"
#include "headwise/io/checkpoint.hpp"
#include "headwise/io/llama.hpp"
#include "headwise/multi_head_latent_attention.hpp"

namespace headwise::io {

/// The layer config of a latent family's layers, from its LlamaConfig.
inline LatentAttentionConfig latent_attention_config(const LlamaConfig& config) {
  if (!config.latent)
    throw std::invalid_argument("headwise: latent_attention_config: model_type \"" + config.model_type +
                                "\" is not multi-head latent attention (load it with io::load_llama_attention)");
  const LlamaConfig::Latent& l = *config.latent;
  LatentAttentionConfig c;
  c.n_heads = config.n_heads;
  c.qk_nope_head_dim = l.qk_nope_head_dim, c.qk_rope_head_dim = l.qk_rope_head_dim, c.v_head_dim = l.v_head_dim;
  c.rope = config.rope;
  c.rope_interleave = l.rope_interleave;
  c.norm_eps = 1e-6;  // DeepseekV3RMSNorm's default for q_a_layernorm and kv_a_layernorm
  c.divisor = config.divisor;
  return c;
}

/// Layer `layer` from a checkpoint already open, with its config.
template <class Scalar>
MultiHeadLatentAttention<Scalar> load_latent_attention(const Checkpoint& model, const LlamaConfig& config, Index layer) {
  const detail::TensorReader t = detail::layer_tensors(model, layer, config.fp8);
  if (!config.latent)
    throw SafetensorsError(t.where() + "model_type \"" + config.model_type +
                           "\" is not multi-head latent attention (load it with io::load_llama_attention)");
  const LatentAttentionConfig c = latent_attention_config(config);
  if (layer < 0 || layer >= config.n_layers)
    throw SafetensorsError(t.where() + "layer " + std::to_string(layer) + " is out of range [0, " + std::to_string(config.n_layers) + ")");
  const LlamaConfig::Latent& l = *config.latent;
  const auto u = [](Index x) { return static_cast<std::uint64_t>(x); };
  const std::uint64_t d = u(config.hidden_size), H = u(c.n_heads), q_width = H * u(l.qk_nope_head_dim + l.qk_rope_head_dim);
  LatentAttentionWeights<Scalar> w;
  if (l.q_lora_rank == 0) {
    w.w_q = t.linear<Scalar>("q_proj.weight", q_width, d);
  } else {
    w.w_q_a = t.linear<Scalar>("q_a_proj.weight", u(l.q_lora_rank), d);
    w.q_a_norm = t.vector<Scalar>("q_a_layernorm.weight", u(l.q_lora_rank));
    w.w_q_b = t.linear<Scalar>("q_b_proj.weight", q_width, u(l.q_lora_rank));
  }
  w.w_kv_a = t.linear<Scalar>("kv_a_proj_with_mqa.weight", u(l.kv_lora_rank + l.qk_rope_head_dim), d);
  w.kv_a_norm = t.vector<Scalar>("kv_a_layernorm.weight", u(l.kv_lora_rank));
  w.w_kv_b = t.linear<Scalar>("kv_b_proj.weight", H * u(l.qk_nope_head_dim + l.v_head_dim), u(l.kv_lora_rank));
  w.w_o = t.linear<Scalar>("o_proj.weight", d, H * u(l.v_head_dim));
  // (kept as the checkpoint stores them where a product in Scalar reads that type: FP8 with its scales)
  w.kept_as = t.kept_type<Scalar>({"q_proj.weight", "q_a_proj.weight", "q_b_proj.weight", "kv_a_proj_with_mqa.weight", "o_proj.weight"});
  if (is_fp8(w.kept_as)) {
    typename LatentAttentionWeights<Scalar>::Fp8Scales s;
    if (l.q_lora_rank == 0) {
      s.q = t.fp8_scales("q_proj.weight", q_width, d);
    } else {
      s.q_a = t.fp8_scales("q_a_proj.weight", u(l.q_lora_rank), d);
      s.q_b = t.fp8_scales("q_b_proj.weight", q_width, u(l.q_lora_rank));
    }
    s.kv_a = t.fp8_scales("kv_a_proj_with_mqa.weight", u(l.kv_lora_rank + l.qk_rope_head_dim), d);
    s.o = t.fp8_scales("o_proj.weight", d, H * u(l.v_head_dim));
    w.fp8_scales = std::move(s);
  }
  try {
    return MultiHeadLatentAttention<Scalar>(std::move(w), c);
  } catch (const std::invalid_argument& e) {  // non-finite weights, a setting the layer refuses
    throw SafetensorsError(t.where() + "layer " + std::to_string(layer) + ": " + e.what());
  }
}

/// Every layer's latent attention from a checkpoint folder (each file opened once).
///   auto layers = io::load_latent_attention_layers<float>("DeepSeek-V3/");   // layers[0].forward(x)
template <class Scalar>
std::vector<MultiHeadLatentAttention<Scalar>> load_latent_attention_layers(const std::string& folder) {
  const LlamaConfig config = read_llama_config(folder + "/config.json");
  if (!config.latent)
    throw SafetensorsError("headwise: latent attention: " + folder + ": model_type \"" + config.model_type +
                           "\" is not multi-head latent attention (load it with io::load_llama_attention_layers)");
  const Checkpoint model = Checkpoint::open(folder);
  std::vector<MultiHeadLatentAttention<Scalar>> layers;  // not reserved: a config may claim 2^32 layers the file lacks
  for (Index layer = 0; layer < config.n_layers; ++layer) layers.push_back(load_latent_attention<Scalar>(model, config, layer));
  return layers;
}

/// The compiled mode's instantiations of the latent-attention loaders (detail/compiled.hpp).
#define HEADWISE_LATENT_LOADER_INSTANTIATIONS(PREFIX, S) \
  PREFIX template MultiHeadLatentAttention<S> load_latent_attention<S>(const Checkpoint&, const LlamaConfig&, Index); \
  PREFIX template std::vector<MultiHeadLatentAttention<S>> load_latent_attention_layers<S>(const std::string&);
HEADWISE_EXTERN_INSTANTIATIONS(HEADWISE_LATENT_LOADER_INSTANTIATIONS)

}  // namespace headwise::io
