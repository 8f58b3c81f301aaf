// The definitions of headwise/io/model_families.hpp, included at its end where the
// readers' definitions are compiled: header-only, or in src/io.cpp (detail/compiled.hpp).
#pragma once

#include "headwise/io/model_families.hpp"

#include <nlohmann/json.hpp>

namespace headwise::io::detail {

/// A config's `layer_types` (transformers 4.5x and v5 write them): one entry per layer, each one
/// of `allowed` (the types the family has); any other entry is refused by name.
HEADWISE_IO_INLINE std::vector<LayerType> parse_layer_types(const ConfigReader& r, Index n_layers, std::initializer_list<LayerType> allowed) {
  const nlohmann::json& t = r.json().at("layer_types");
  if (!t.is_array() || t.size() != static_cast<std::size_t>(n_layers))
    r.fail("\"layer_types\" must be a list of num_hidden_layers = " + std::to_string(n_layers) + " entries, got " +
           (t.is_array() ? std::to_string(t.size()) + " entries" : t.dump()));
  const char* names[] = {"full_attention", "sliding_attention", "chunked_attention", "linear_attention"};
  std::string known;
  for (const LayerType a : allowed) known += std::string(known.empty() ? "" : ", ") + names[static_cast<int>(a)];
  std::vector<LayerType> types;
  for (std::size_t i = 0; i < t.size(); ++i) {
    const std::string type = t[i].is_string() ? t[i].get<std::string>() : "";
    const auto found = std::find_if(allowed.begin(), allowed.end(), [&](LayerType a) { return type == names[static_cast<int>(a)]; });
    if (found == allowed.end())
      r.fail("layer_types[" + std::to_string(i) + "] = " + t[i].dump() + " is not a layer this model_type has (" + known + ")");
    types.push_back(*found);
  }
  return types;
}

/// The layer types from `layer_types` (each one of `allowed`) if the config lists them (true); the
/// family derives them otherwise. Sliding layers need a `sliding_window`.
HEADWISE_IO_INLINE bool read_layer_types(const ConfigReader& r, LlamaConfig& c, std::initializer_list<LayerType> allowed) {
  if (!r.has("layer_types")) return false;
  c.layer_types = parse_layer_types(r, c.n_layers, allowed);
  const bool any = std::find(c.layer_types.begin(), c.layer_types.end(), LayerType::sliding) != c.layer_types.end();
  if (any && !r.has("sliding_window")) r.fail("\"layer_types\" has sliding_attention layers but there is no \"sliding_window\"");
  if (any) c.sliding_window = r.integer("sliding_window");
  return true;
}
/// Derived: layer i is full iff (i + 1) % every == 0, else `other` (a sliding one needs the window).
HEADWISE_IO_INLINE void derive_periodic(const ConfigReader& r, LlamaConfig& c, Index every, LayerType other) {
  c.full_every = every, c.other_type = other;
  if (other == LayerType::sliding && every != 1) c.sliding_window = r.integer("sliding_window");
}
HEADWISE_IO_INLINE bool has_type(const LlamaConfig& c, LayerType t) { return std::find(c.layer_types.begin(), c.layer_types.end(), t) != c.layer_types.end(); }

/// From `no_rope_layers` (Llama 4, SmolLM3: 1 = the layer has RoPE, 0 = NoPE), else every
/// `interval`-th layer is NoPE (the config classes' default).
HEADWISE_IO_INLINE void read_nope_layers(const ConfigReader& r, LlamaConfig& c, Index interval) {
  if (!r.has("no_rope_layers") || r.json().at("no_rope_layers") == nlohmann::json::array()) {  // [] is the default too
    c.nope_every = interval;
    return;
  }
  const nlohmann::json& j = r.json().at("no_rope_layers");
  if (!j.is_array() || j.size() != static_cast<std::size_t>(c.n_layers))
    r.fail("\"no_rope_layers\" must be a list of num_hidden_layers = " + std::to_string(c.n_layers) + " entries of 0 or 1");
  for (std::size_t i = 0; i < j.size(); ++i) {
    if (j[i] != 0 && j[i] != 1) r.fail("no_rope_layers[" + std::to_string(i) + "] = " + j[i].dump() + " is not 0 or 1");
    c.nope_layers.push_back(j[i] == 0);
  }
}

/// The family's QK-norm form, its eps from rms_norm_eps; `weighted`: its weights are the
/// checkpoint's q_norm / k_norm (read by the loader).
HEADWISE_IO_INLINE void set_qk_norm(const ConfigReader& r, LlamaConfig& c, RmsNorm::Over over, bool zero_centred, bool weighted,
                        double eps_default) {
  QkNorm n;
  n.query.over = n.key.over = over;
  n.query.zero_centred = n.key.zero_centred = zero_centred;
  n.query.eps = n.key.eps = r.number(r.json(), "rms_norm_eps", eps_default);
  c.qk_norm = n, c.qk_norm_weighted = weighted;
}

/// A flag Hugging Face tests for truth (a boolean, or a number: nonzero is true); absent or null:
/// `fallback`.
HEADWISE_IO_INLINE bool truthy(const ConfigReader& r, const char* key, bool fallback) {
  if (!r.has(key)) return fallback;
  const nlohmann::json& v = r.json().at(key);
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_number()) return v.get<double>() != 0.0;
  r.fail(std::string("\"") + key + "\" = " + v.dump() + " is not true, false or a number");
}

/// Where only some families read a key that changes attention, the others refuse it by name.
HEADWISE_IO_INLINE void refuse_unread(const ConfigReader& r, const char* key, const std::string& model_type) {
  if (r.has(key) && r.json().at(key) != false)
    r.fail("\"" + std::string(key) + "\" = " + r.json().at(key).dump() + " changes attention, and headwise does not read it for " + model_type);
}

// ---- What each family reads beyond hidden_size, the head counts, head_dim and RoPE ----

HEADWISE_IO_INLINE void read_llama(const ConfigReader& r, LlamaConfig& c) { read_layer_types(r, c, {LayerType::full}); }

/// Qwen2, Qwen3, SmolLM3: a window only with use_sliding_window, from max_window_layers on.
HEADWISE_IO_INLINE void read_qwen2(const ConfigReader& r, LlamaConfig& c) {
  const bool windowed = r.boolean("use_sliding_window", false);
  if (!read_layer_types(r, c, {LayerType::full, LayerType::sliding})) {
    if (windowed && r.has("sliding_window")) c.sliding_window = r.integer("sliding_window");
    c.first_window_layer = r.integer("max_window_layers", c.n_layers);
  }
  if (!windowed) {  // Hugging Face sets sliding_window to None without use_sliding_window
    c.sliding_window.reset();
    std::replace(c.layer_types.begin(), c.layer_types.end(), LayerType::sliding, LayerType::full);
  }
}

HEADWISE_IO_INLINE void read_qwen3(const ConfigReader& r, LlamaConfig& c) {
  read_qwen2(r, c);
  set_qk_norm(r, c, RmsNorm::Over::head, false, true, 1e-6);
}

HEADWISE_IO_INLINE void read_smollm3(const ConfigReader& r, LlamaConfig& c) {
  read_qwen2(r, c);
  read_nope_layers(r, c, r.integer("no_rope_layer_interval", 4));
}

/// Mistral, Ministral: every layer slides when sliding_window is set.
HEADWISE_IO_INLINE void read_mistral(const ConfigReader& r, LlamaConfig& c) {
  const bool windowed = r.has("sliding_window");
  if (!read_layer_types(r, c, {LayerType::full, LayerType::sliding}) && windowed) c.sliding_window = r.integer("sliding_window");
  if (windowed && has_type(c, LayerType::full))
    r.fail("\"layer_types\" has full_attention layers, but " + c.model_type + " slides every layer when sliding_window is set");
}

/// Ministral 3: Mistral's attention, and after RoPE q *= 1 + llama_4_scaling_beta ln(1 + floor(p /
/// original_max_position_embeddings)), both read from rope_parameters.
HEADWISE_IO_INLINE void read_ministral3(const ConfigReader& r, LlamaConfig& c) {
  read_mistral(r, c);
  const nlohmann::json& p = r.has("rope_parameters") ? r.json().at("rope_parameters")
                            : r.has("rope_scaling")   ? r.json().at("rope_scaling")
                                                      : r.json();  // where parse_rope read it
  if (p.contains("llama_4_scaling_beta") && !p.at("llama_4_scaling_beta").is_null()) {
    QueryScale s;
    s.beta = r.number(p, "llama_4_scaling_beta", 0.0);
    s.period = c.rope.scaling.type == RopeScaling::Type::none ? r.integer("original_max_position_embeddings")
                                                                : c.rope.scaling.original_max_position;
    c.query_scale = s;
  }
}

HEADWISE_IO_INLINE void read_phi3(const ConfigReader& r, LlamaConfig& c) {
  c.fused_qkv = true;
  if (r.has("full_attn_mod") && r.integer("full_attn_mod") != 1) r.fail("\"full_attn_mod\" is not 1: only every layer alike is read");
  if (r.number(r.json(), "interpolate_factor", 1.0) != 1.0) r.fail("\"interpolate_factor\" is not 1, which headwise does not apply");
  if (r.boolean("lm_head_bias", false)) r.fail("\"lm_head_bias\" = true: the model code reads an LM head without a bias");
  // Phi-3 applies sliding_window to every layer.
  if (!read_layer_types(r, c, {LayerType::full, LayerType::sliding}) && r.has("sliding_window"))
    c.sliding_window = r.integer("sliding_window");
}

HEADWISE_IO_INLINE void read_olmo2(const ConfigReader& r, LlamaConfig& c) {
  read_layer_types(r, c, {LayerType::full});
  set_qk_norm(r, c, RmsNorm::Over::projection, false, true, 1e-6);
}

/// Gemma 2 and 3: scores times query_pre_attn_scalar^-1/2 (absent: the config classes' 256),
/// soft-capping where set (absent: Gemma 2's class default 50, Gemma 3's none; null: none).
HEADWISE_IO_INLINE void read_gemma_scores(const ConfigReader& r, LlamaConfig& c, std::optional<double> default_softcap) {
  c.divisor = std::sqrt(r.number(r.json(), "query_pre_attn_scalar", 256.0));
  if (!(*c.divisor > 0.0) || !std::isfinite(*c.divisor)) r.fail("\"query_pre_attn_scalar\" must be finite and > 0");
  if (r.has("attn_logit_softcapping")) c.softcap = r.number(r.json(), "attn_logit_softcapping", 0.0);
  else if (!r.json().contains("attn_logit_softcapping")) c.softcap = default_softcap;
  refuse_unread(r, "use_bidirectional_attention", c.model_type);
}

HEADWISE_IO_INLINE void read_gemma2(const ConfigReader& r, LlamaConfig& c) {
  read_gemma_scores(r, c, 50.0);
  if (!read_layer_types(r, c, {LayerType::full, LayerType::sliding})) derive_periodic(r, c, 2, LayerType::sliding);
}

/// Gemma 3: (1 + w) QK-norm, local layers at rope_local_base_freq unscaled (v4) or their own
/// rope_parameters entry (v5), global layers at rope_theta with its scaling.
HEADWISE_IO_INLINE void read_gemma3(const ConfigReader& r, LlamaConfig& c) {
  read_gemma_scores(r, c, std::nullopt);
  if (!read_layer_types(r, c, {LayerType::full, LayerType::sliding}))
    derive_periodic(r, c, r.integer("sliding_window_pattern", 6), LayerType::sliding);
  set_qk_norm(r, c, RmsNorm::Over::head, true, true, 1e-6);
  if (r.has("rope_parameters")) {
    c.rope = parse_rope(r, c.head_dim, "full_attention");
    c.sliding_rope = parse_rope(r, c.head_dim, "sliding_attention");
  } else {
    c.rope = parse_rope(r, c.head_dim);
    RopeConfig local;
    local.d_head = c.head_dim;
    local.theta = r.number(r.json(), "rope_local_base_freq", 10000.0);
    c.sliding_rope = local;
  }
}

/// Gemma 4: scale 1, QK-norm w (no + 1), weightless value norm, full layers with their own
/// head_dim, key/value heads and K = V, proportional RoPE, KV shared by the last layers.
HEADWISE_IO_INLINE void read_gemma4(const ConfigReader& r, LlamaConfig& c) {
  c.divisor = 1.0;
  if (r.has("attn_logit_softcapping")) c.softcap = r.number(r.json(), "attn_logit_softcapping", 0.0);
  refuse_unread(r, "use_bidirectional_attention", c.model_type);
  if (!r.has("layer_types")) r.fail("no \"layer_types\": gemma4_text configs list them");
  read_layer_types(r, c, {LayerType::full, LayerType::sliding});
  set_qk_norm(r, c, RmsNorm::Over::head, false, true, 1e-6);
  RmsNorm v;
  v.eps = r.number(r.json(), "rms_norm_eps", 1e-6);
  c.value_norm = v;
  c.full_head_dim = r.integer("global_head_dim", c.head_dim);
  c.full_keys_are_values = r.boolean("attention_k_eq_v", false);
  c.full_kv_heads = c.full_keys_are_values ? r.integer("num_global_key_value_heads", c.n_kv_heads) : c.n_kv_heads;
  if (c.n_heads % c.full_kv_heads != 0) r.fail("num_attention_heads is not divisible by num_global_key_value_heads");
  c.rope = parse_rope(r, c.full_head_dim, "full_attention");
  c.sliding_rope = parse_rope(r, c.head_dim, "sliding_attention");
  if (r.number(r.json(), "num_kv_shared_layers", 0.0) != 0) c.kv_shared_layers = r.integer("num_kv_shared_layers");  // (0: none)
  if (c.kv_shared_layers >= c.n_layers) r.fail("\"num_kv_shared_layers\" must be below num_hidden_layers");
  for (Index l = c.n_layers - c.kv_shared_layers; l < c.n_layers; ++l)  // (layer_types bounds n_layers here)
    if (!c.kv_source_of(l))
      r.fail("layer " + std::to_string(l) + " shares keys and values (num_kv_shared_layers), but no earlier layer is of its type");
}

/// gpt-oss: sinks, alternating windows (layer i slides iff i is even, unless layer_types say).
HEADWISE_IO_INLINE void read_gpt_oss(const ConfigReader& r, LlamaConfig& c) {
  c.sinks = true;
  if (!read_layer_types(r, c, {LayerType::full, LayerType::sliding})) derive_periodic(r, c, 2, LayerType::sliding);
}

/// Llama 4 (text): interleaved RoPE on the RoPE layers, which are chunked and L2-normed after RoPE;
/// NoPE layers full causal with the attention temperature.
HEADWISE_IO_INLINE void read_llama4(const ConfigReader& r, LlamaConfig& c) {
  c.rope.layout = RopeLayout::interleaved;
  read_nope_layers(r, c, r.integer("no_rope_layer_interval", 4));
  // attention_chunk_size: absent means the config class's 8192; null means no chunks.
  const bool chunked = !r.json().contains("attention_chunk_size") || r.has("attention_chunk_size");
  if (!read_layer_types(r, c, {LayerType::full, LayerType::chunked})) c.chunked_rope_layers = chunked;
  if (has_type(c, LayerType::chunked) && !chunked) r.fail("\"layer_types\" has chunked_attention layers but attention_chunk_size is null");
  if (has_type(c, LayerType::chunked) || c.chunked_rope_layers) c.chunk = r.integer("attention_chunk_size", 8192);
  if (r.boolean("use_qk_norm", true)) {  // (the config class's default)
    set_qk_norm(r, c, RmsNorm::Over::head, false, false, 1e-5);
    c.qk_norm->after_rope = true, c.qk_norm_on_rope_layers_only = true;
  }
  if (truthy(r, "attn_temperature_tuning", true)) {
    QueryScale s;
    s.beta = r.number(r.json(), "attn_scale", 0.1), s.period = r.integer("floor_scale", 8192), s.shift = 1;
    c.query_scale = s, c.query_scale_on_nope_layers_only = true;
  }
}

/// Qwen3-Next: its full-attention layers (every full_attention_interval-th unless layer_types say)
/// with a (1 + w) QK-norm and an output gate.
HEADWISE_IO_INLINE void read_qwen3_next(const ConfigReader& r, LlamaConfig& c) {
  if (!read_layer_types(r, c, {LayerType::full, LayerType::linear}))
    derive_periodic(r, c, r.integer("full_attention_interval", 4), LayerType::linear);
  set_qk_norm(r, c, RmsNorm::Over::head, true, true, 1e-6);
  c.output_gate = true;
  const bool fraction_given = r.has("partial_rotary_factor") ||
                              (r.has("rope_parameters") && r.json().at("rope_parameters").contains("partial_rotary_factor"));
  if (!fraction_given) c.rope.rotary_fraction = 0.25;  // the config class's default
  refuse_unread(r, "use_sliding_window", c.model_type);
}


/// DeepSeek-V3 (and Kimi K2, the same layer): multi-head latent attention. RoPE over the
/// qk_rope_head_dim rotated components; the divisor sqrt(qk_nope + qk_rope) over YaRN's
/// mscale(factor, mscale_all_dim)² where the config gives mscale_all_dim, as Hugging Face scales.
HEADWISE_IO_INLINE void read_deepseek_v3(const ConfigReader& r, LlamaConfig& c) {
  LlamaConfig::Latent l;
  l.q_lora_rank = r.has("q_lora_rank") ? r.integer("q_lora_rank") : 0;
  l.kv_lora_rank = r.integer("kv_lora_rank"), l.qk_nope_head_dim = r.integer("qk_nope_head_dim");
  l.qk_rope_head_dim = r.integer("qk_rope_head_dim"), l.v_head_dim = r.integer("v_head_dim");
  l.rope_interleave = r.boolean("rope_interleave", true);
  for (const Index size : {l.kv_lora_rank, l.qk_rope_head_dim, l.v_head_dim})
    if (size <= 0 || size > (Index(1) << 30)) r.fail("kv_lora_rank, qk_rope_head_dim and v_head_dim must be in [1, 2^30]");
  if (l.q_lora_rank < 0 || l.q_lora_rank > (Index(1) << 30) || l.qk_nope_head_dim < 0 || l.qk_nope_head_dim > (Index(1) << 30))
    r.fail("q_lora_rank and qk_nope_head_dim must be in [0, 2^30]");
  if (r.boolean("attention_bias", false)) r.fail("\"attention_bias\" = true: the latent projections' biases are not read");
  if (double(c.n_heads) * double(l.qk_nope_head_dim + std::max(l.qk_rope_head_dim, l.v_head_dim)) > double(Index(1) << 62))
    r.fail("the latent projections (heads x (qk_nope + qk_rope or v_head_dim)) are wider than 2^62 columns");
  c.rope = parse_rope(r, l.qk_rope_head_dim);
  c.head_dim = l.qk_nope_head_dim + l.qk_rope_head_dim;
  double divisor = std::sqrt(double(c.head_dim));
  const RopeScaling& s = c.rope.scaling;
  if (s.type != RopeScaling::Type::none && s.mscale_all_dim && *s.mscale_all_dim != 0 && s.factor > 1) {
    const double mscale = 0.1 * *s.mscale_all_dim * std::log(s.factor) + 1;
    divisor /= mscale * mscale;
  }
  c.divisor = divisor;
  c.latent = l;
}

// The key lists are Hugging Face's: each family's config class's parameters (transformers' main
// branch, commit 008e574, src/transformers/models/<family>/configuration_<family>.py), the keys
// older releases wrote (v4.4x-4.5x) and its Hub files hold that its class no longer names (noted
// where so), and PretrainedConfig's (configuration_utils.py, v4 and v5).
/// Keys any config.json may have: what PretrainedConfig writes or takes (its __init__ and
/// to_dict in v4; its fields in v5), the generation settings older files carry
/// (_get_global_generation_defaults, and cache_implementation), and older releases' own
/// (output_past, _num_labels, xla_device, gradient_checkpointing, _attn_implementation_autoset).
HEADWISE_IO_INLINE std::vector<const char*> pretrained_config_keys() {
  return {
      "architectures", "model_type", "transformers_version", "_name_or_path", "auto_map", "torch_dtype", "dtype",
      "use_bfloat16", "torchscript", "tf_legacy_loss", "return_dict", "output_hidden_states", "output_attentions",
      "use_cache", "output_past", "pruned_heads", "tie_word_embeddings", "chunk_size_feed_forward", "is_encoder_decoder",
      "is_decoder", "cross_attention_hidden_size", "add_cross_attention", "tie_encoder_decoder", "finetuning_task",
      "id2label", "label2id", "num_labels", "_num_labels", "problem_type", "tokenizer_class", "prefix", "bos_token_id",
      "pad_token_id", "eos_token_id", "sep_token_id", "decoder_start_token_id", "task_specific_params", "xla_device",
      "gradient_checkpointing", "_attn_implementation_autoset",
      // generation settings
      "max_length", "min_length", "do_sample", "early_stopping", "num_beams", "num_beam_groups", "diversity_penalty",
      "temperature", "top_k", "top_p", "typical_p", "repetition_penalty", "length_penalty", "no_repeat_ngram_size",
      "encoder_no_repeat_ngram_size", "bad_words_ids", "num_return_sequences", "output_scores", "return_dict_in_generate",
      "forced_bos_token_id", "forced_eos_token_id", "remove_invalid_values", "exponential_decay_length_penalty",
      "suppress_tokens", "begin_suppress_tokens", "cache_implementation"};
}

/// Keys every Llama-style family has: the sizes llama_config_of reads, RoPE in its v4 and v5
/// forms (partial_rotary_factor and original_max_position_embeddings too: Hugging Face's RoPE
/// code and io/rope_config.hpp read them from any config), quantization_config (FP8 blocks or
/// refused), and what each of their config classes takes besides.
HEADWISE_IO_INLINE std::vector<const char*> llama_style_keys() {
  return {
      "hidden_size", "num_attention_heads", "num_key_value_heads", "num_hidden_layers", "head_dim", "attention_bias",
      "vocab_size", "intermediate_size", "max_position_embeddings", "rms_norm_eps", "initializer_range",
      "attention_dropout", "rope_theta", "rope_scaling", "rope_parameters", "partial_rotary_factor",
      "original_max_position_embeddings", "quantization_config"};
}

/// A row's keys: PretrainedConfig's, the Llama-style families' (unless GPT-2's), and its own lists.
HEADWISE_IO_INLINE std::vector<const char*> family_keys(std::initializer_list<std::vector<const char*>> own, bool llama_like = true) {
  std::vector<const char*> k = pretrained_config_keys();
  if (llama_like) {
    const std::vector<const char*> shared = llama_style_keys();
    k.insert(k.end(), shared.begin(), shared.end());
  }
  for (const auto& list : own) k.insert(k.end(), list.begin(), list.end());
  return k;
}

/// Keys several rows share: Qwen2's (Qwen3, Qwen3 MoE, SmolLM3), Mistral's (Ministral), Gemma's
/// (Gemma 2, 3, 4), and DeepSeek-V3's class's with the keys of DeepSeek's own
/// configuration_deepseek.py that the Hub's DeepSeek-V3 and Kimi K2 files carry (ep_size ...
/// num_nextn_predict_layers).
HEADWISE_IO_INLINE std::vector<const char*> qwen2_keys() { return {"hidden_act", "use_sliding_window", "sliding_window", "max_window_layers", "layer_types"}; }
HEADWISE_IO_INLINE std::vector<const char*> mistral_keys() { return {"hidden_act", "sliding_window", "layer_types"}; }
HEADWISE_IO_INLINE std::vector<const char*> gemma_keys() {
  return {"hidden_activation", "query_pre_attn_scalar", "sliding_window", "layer_types", "final_logit_softcapping",
          "attn_logit_softcapping", "use_bidirectional_attention"};
}
HEADWISE_IO_INLINE std::vector<const char*> deepseek_keys() {
  return {"hidden_act", "moe_intermediate_size", "n_shared_experts", "n_routed_experts", "routed_scaling_factor", "kv_lora_rank",
          "q_lora_rank", "qk_rope_head_dim", "v_head_dim", "qk_nope_head_dim", "n_group", "topk_group", "num_experts_per_tok",
          "first_k_dense_replace", "norm_topk_prob", "pretraining_tp", "rope_interleave", "ep_size", "topk_method", "moe_layer_freq",
          "scoring_func", "aux_loss_alpha", "seq_aux", "num_nextn_predict_layers"};
}

/// The table's rows of the Llama, Qwen, Mistral and Gemma families, in the table's order.
HEADWISE_IO_INLINE std::vector<Family> llama_qwen_mistral_gemma_rows() {
  using N = WholeModel::Norms;
  return {
    {"llama", read_llama, nullptr, false, {N::before}, family_keys({{"hidden_act", "pretraining_tp", "mlp_bias", "layer_types"}})},
    // (use_mrope: false in Qwen2.5's Hub files; Qwen2's model has no multimodal RoPE to turn on)
    {"qwen2", read_qwen2, nullptr, false, {N::before}, family_keys({qwen2_keys(), {"use_mrope"}})},
    {"qwen3", read_qwen3, nullptr, false, {N::before}, family_keys({qwen2_keys()})},
    {"qwen3_moe", read_qwen3, nullptr, false, {N::before},
     family_keys({qwen2_keys(), {"decoder_sparse_step", "moe_intermediate_size", "num_experts_per_tok", "num_experts", "norm_topk_prob",
                   "output_router_logits", "router_aux_loss_coef", "mlp_only_layers"}})},
    {"mistral", read_mistral, nullptr, false, {N::before}, family_keys({mistral_keys()})},
    {"ministral", read_mistral, nullptr, false, {N::before}, family_keys({mistral_keys()})},
    {"ministral3", read_ministral3, "llama_4_scaling_beta", false, {N::before}, family_keys({mistral_keys()})},
    // (hidden_act: Gemma 2's Hub files carry it beside hidden_activation, which is the one read)
    {"gemma2", read_gemma2, nullptr, false, {N::before_and_after, true, true, false, nullptr, true}, family_keys({gemma_keys(), {"hidden_act", "sliding_window_size"}})},
    // (_sliding_window_pattern: what transformers 4.53 and later write beside layer_types)
    {"gemma3_text", read_gemma3, nullptr, true, {N::before_and_after, true, true, false, nullptr, true},
     family_keys({gemma_keys(), {"rope_local_base_freq", "sliding_window_pattern", "_sliding_window_pattern"}})},
    {"gemma4_text", read_gemma4, nullptr, true, {N::before_and_after, true, true},
     family_keys({gemma_keys(), {"vocab_size_per_layer_input", "hidden_size_per_layer_input", "attention_k_eq_v", "num_kv_shared_layers",
                   "enable_moe_block", "use_double_wide_mlp", "num_experts", "top_k_experts", "moe_intermediate_size",
                   "global_head_dim", "num_global_key_value_heads"}})},
  };
}

/// The table's other rows, in its order: gpt-oss, Phi-3, Llama 4, SmolLM3, OLMo 2, Qwen3-Next,
/// DeepSeek-V3, Kimi K2, GPT-2.
HEADWISE_IO_INLINE std::vector<Family> other_rows() {
  using N = WholeModel::Norms;
  return {
    // (experts_per_token, initial_context_length: in gpt-oss's Hub files, not its class)
    {"gpt_oss", read_gpt_oss, nullptr, false, {N::before},
     family_keys({{"hidden_act", "sliding_window", "layer_types", "num_local_experts", "num_experts_per_tok", "experts_per_token",
            "swiglu_alpha", "swiglu_limit", "router_aux_loss_coef", "output_router_logits", "initial_context_length"}})},
    {"phi3", read_phi3, nullptr, false, {N::before, false, false, true},
     family_keys({{"hidden_act", "resid_pdrop", "embd_pdrop", "sliding_window", "layer_types", "mlp_bias",
            // (Phi-4-mini's files, for its own configuration_phi3.py: read where they change nothing)
            "full_attn_mod", "interpolate_factor", "lm_head_bias"}})},
    // (for_llm_compressor: in Llama 4's Hub files)
    {"llama4_text", read_llama4, nullptr, false,
     {N::before},
     family_keys({{"hidden_act", "intermediate_size_mlp", "num_experts_per_tok", "num_local_experts", "moe_layers",
            "interleave_moe_layer_step", "use_qk_norm", "output_router_logits", "router_aux_loss_coef", "router_jitter_noise",
            "no_rope_layers", "no_rope_layer_interval", "attention_chunk_size", "layer_types", "attn_temperature_tuning",
            "floor_scale", "attn_scale", "for_llm_compressor"}})},
    // (max_window_layers, pretraining_tp: in SmolLM3's Hub files)
    {"smollm3", read_smollm3, nullptr, false, {N::before, false, true},
     family_keys({qwen2_keys(), {"no_rope_layers", "no_rope_layer_interval", "mlp_bias", "pretraining_tp"}})},
    {"olmo2", read_olmo2, nullptr, false, {N::after}, family_keys({{"hidden_act", "layer_types"}})},
    // (full_attention_interval, use_sliding_window: in Qwen3-Next's Hub files; the latter is refused if true)
    {"qwen3_next", read_qwen3_next, nullptr, false,
     {N::before, false, false, false, nullptr, /*zero_centred=*/true},
     family_keys({{"hidden_act", "layer_types", "full_attention_interval", "linear_conv_kernel_dim", "linear_key_head_dim",
            "linear_value_head_dim", "linear_num_key_heads", "linear_num_value_heads", "decoder_sparse_step",
            "moe_intermediate_size", "shared_expert_intermediate_size", "num_experts_per_tok", "num_experts", "norm_topk_prob",
            "output_router_logits", "router_aux_loss_coef", "mlp_only_layers", "use_sliding_window"}})},
    {"deepseek_v3", read_deepseek_v3, nullptr, true, {N::before},
     family_keys({deepseek_keys()})},
    // (Kimi K2 ships DeepSeek's configuration_deepseek.py with model_type "kimi_k2")
    {"kimi_k2", read_deepseek_v3, nullptr, true, {N::before},
     family_keys({deepseek_keys()})},
    // GPT-2: GPT2Config's parameters, and n_ctx, n_special, predict_special_tokens that its Hub
    // files (gpt2-medium, distilgpt2) carry; its attribute_map's aliases (hidden_size for
    // n_embd, ...) are refused: io/gpt2.hpp reads n_embd, n_head and n_layer only.
    {"gpt2", nullptr, nullptr, false, {},
     family_keys({{"vocab_size", "n_positions", "n_embd", "n_layer", "n_head", "n_inner", "activation_function", "resid_pdrop",
            "embd_pdrop", "attn_pdrop", "layer_norm_epsilon", "initializer_range", "summary_type", "summary_use_proj",
            "summary_activation", "summary_proj_to_labels", "summary_first_dropout", "scale_attn_weights",
            "scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn", "n_ctx", "n_special", "predict_special_tokens"}},
          /*llama_like=*/false)},
  };
}

HEADWISE_IO_INLINE const std::vector<Family>& families() {
  static const std::vector<Family> table = [] {
    std::vector<Family> rows = llama_qwen_mistral_gemma_rows(), others = other_rows();
    rows.insert(rows.end(), std::make_move_iterator(others.begin()), std::make_move_iterator(others.end()));
    return rows;
  }();
  return table;
}

HEADWISE_IO_INLINE const Family* family_of(const std::string& model_type) {
  for (const Family& f : families())
    if (model_type == f.model_type) return &f;
  return nullptr;
}

}  // namespace headwise::io::detail
