// The definitions of headwise/io/llama_config.hpp, included at its end where the
// readers' definitions are compiled: header-only, or in src/io.cpp (detail/compiled.hpp).
#pragma once

#include "headwise/io/llama_config.hpp"

#include <nlohmann/json.hpp>

#include "headwise/io/model_families.hpp"  // (the table and each family's reader)

namespace headwise::io {
namespace detail {

/// quantization_config as DeepSeek-V3 and Hugging Face's FineGrainedFP8Config write it: quant_method
/// "fp8", fmt "e4m3" (or "e5m2"), activation_scheme "dynamic", weight_block_size [rows, cols],
/// modules_to_not_convert (those tensors are stored unquantized and read as they are). Anything
/// else (another method, per-tensor scales, a key it does not know) is refused by name.
HEADWISE_IO_INLINE LlamaConfig::Fp8Blocks parse_fp8_blocks(const ConfigReader& r) {
  const nlohmann::json& q = r.json().at("quantization_config");
  const auto refuse = [&](const std::string& what) { r.fail("quantization_config: " + what + " (" + q.dump() + ")"); };
  if (!q.is_object()) refuse("not an object");
  for (const auto& item : q.items())
    if (item.key() != "quant_method" && item.key() != "fmt" && item.key() != "activation_scheme" && item.key() != "weight_block_size" &&
        item.key() != "modules_to_not_convert")
      refuse("\"" + item.key() + "\" is not a key headwise reads");
  if (!q.contains("quant_method") || q.at("quant_method") != "fp8")
    refuse("quant_method is not \"fp8\": only FP8 block-scaled weights are read");
  LlamaConfig::Fp8Blocks b;
  if (q.contains("fmt") && q.at("fmt") != "e4m3" && q.at("fmt") != "e5m2") refuse("fmt is neither \"e4m3\" nor \"e5m2\"");
  b.e5m2 = q.contains("fmt") && q.at("fmt") == "e5m2";
  if (q.contains("activation_scheme") && q.at("activation_scheme") != "dynamic")
    refuse("activation_scheme is not \"dynamic\": static activation scales are not read");
  const auto it = q.find("weight_block_size");
  const auto positive = [](const nlohmann::json& v) { return v.is_number_integer() && v.get<Index>() > 0 && v.get<Index>() <= (Index(1) << 30); };
  if (it == q.end() || !it->is_array() || it->size() != 2 || !positive((*it)[0]) || !positive((*it)[1]))
    refuse("weight_block_size is not two integers [rows, cols] in [1, 2^30] (per-tensor FP8 scales are not read)");
  b.rows = (*it)[0].get<Index>(), b.cols = (*it)[1].get<Index>();
  return b;
}

/// quantization_config: FP8 blocks (parse_fp8_blocks), or gpt-oss's MXFP4 experts (quant_method
/// "mxfp4", modules_to_not_convert: the tensors left unquantized, which are read as they are).
HEADWISE_IO_INLINE void parse_quantization(const ConfigReader& r, LlamaConfig& c) {
  const nlohmann::json& q = r.json().at("quantization_config");
  if (!q.is_object() || !q.contains("quant_method") || q.at("quant_method") != "mxfp4") {
    c.fp8 = parse_fp8_blocks(r);
    return;
  }
  for (const auto& item : q.items())
    if (item.key() != "quant_method" && item.key() != "modules_to_not_convert")
      r.fail("quantization_config: \"" + item.key() + "\" is not a key headwise reads with quant_method \"mxfp4\" (" + q.dump() + ")");
  if (c.model_type != "gpt_oss") r.fail("quantization_config: quant_method \"mxfp4\" is read for gpt-oss's experts, not " + c.model_type);
  c.mxfp4_experts = true;
}

/// The number of single-character edits between a and b, or more than `most` (then `most + 1`).
HEADWISE_IO_INLINE std::size_t edits_between(const std::string& a, const std::string& b, std::size_t most) {
  if ((a.size() > b.size() ? a.size() - b.size() : b.size() - a.size()) > most) return most + 1;
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return std::min(row[b.size()], most + 1);
}

HEADWISE_IO_INLINE void refuse_unknown_keys(const ConfigReader& r, const Family& family) {
  const auto has = [](const Family& f, const std::string& key) {
    return std::any_of(f.keys.begin(), f.keys.end(), [&](const char* k) { return key == k; });
  };
  for (const auto& item : r.json().items()) {
    const std::string& key = item.key();
    // (a tool's own bookkeeping: a transformers-private key, unsloth's version stamps)
    if (has(family, key) || key.rfind('_', 0) == 0 || key.rfind("unsloth_", 0) == 0) continue;
    std::string hint;  // the families that have it, or the key it may be a misspelling of
    std::vector<std::string> others;
    for (const Family& f : families())
      if (has(f, key)) others.push_back(f.model_type);
    const std::size_t named = others.size() > 4 ? 3 : others.size();
    for (std::size_t i = 0; i < named; ++i) hint += (i == 0 ? "; " : i + 1 == others.size() ? " and " : ", ") + others[i];
    if (named < others.size()) hint += " and " + std::to_string(others.size() - named) + " more";
    if (!others.empty()) hint += others.size() == 1 ? " has it" : " have it";
    std::size_t closest = 3;
    if (others.empty() && key.size() <= 64)  // (a longer key is no misspelling of these; and edits cost |key| x |k|)
      for (const char* k : family.keys)
        if (const std::size_t d = edits_between(key, k, 2); d < closest) closest = d, hint = std::string("; did you mean \"") + k + "\"?";
    r.fail("\"" + (key.size() > 80 ? key.substr(0, 80) + "..." : key) + "\" is not a key of a " + family.model_type +
           " config.json (headwise refuses keys it does not know, rather than ignore one that may matter)" + hint);
  }
}

HEADWISE_IO_INLINE LlamaConfig llama_config_of(const ConfigReader& r) {
  LlamaConfig c;
  c.model_type = r.string("model_type");
  const detail::Family* family = detail::family_of(c.model_type);
  if (!family || !family->read)  // (GPT-2's row has no reader here: io/gpt2.hpp reads its config)
    r.fail("model_type \"" + c.model_type + "\" is not one this loader reads (llama, qwen2, qwen3, qwen3_moe, mistral, ministral, ministral3, "
           "gemma2, gemma3_text, gemma4_text, gpt_oss, phi3, llama4_text, smollm3, olmo2, qwen3_next, deepseek_v3, kimi_k2)");
  detail::refuse_unknown_keys(r, *family);
  if (r.has("quantization_config")) detail::parse_quantization(r, c);
  c.hidden_size = r.integer("hidden_size");
  c.n_heads = r.integer("num_attention_heads");
  c.n_kv_heads = r.integer("num_key_value_heads", c.n_heads);
  c.n_layers = r.integer("num_hidden_layers");
  if (r.has("attention_bias")) c.attention_bias = r.boolean("attention_bias", false);
  if (!r.has("head_dim") && c.hidden_size % c.n_heads != 0)
    r.fail("hidden_size = " + std::to_string(c.hidden_size) + " is not divisible by num_attention_heads = " +
           std::to_string(c.n_heads) + " and no head_dim is given");
  c.head_dim = r.integer("head_dim", c.hidden_size / c.n_heads);
  if (c.n_heads % c.n_kv_heads != 0)
    r.fail("num_attention_heads = " + std::to_string(c.n_heads) + " is not divisible by num_key_value_heads = " +
           std::to_string(c.n_kv_heads));
  if (!family->rope_by_layer_type) c.rope = detail::parse_rope(r, c.head_dim, nullptr, family->rope_key);
  family->read(r, c);
  const double widest = double(std::max(c.head_dim, c.full_head_dim)) * (2.0 * double(c.n_heads) + 2.0 * double(std::max(c.n_kv_heads, c.full_kv_heads)));
  if (widest > double(Index(1) << 62)) r.fail("the projections (heads x head_dim) are wider than 2^62 columns");
  try {  // a theta or scaling out of range is refused here, by name (each rotary embedding once)
    RopeConfig full = c.rope;
    full.d_head = c.latent ? c.latent->qk_rope_head_dim : c.full_head_dim ? c.full_head_dim : c.head_dim;
    RotaryEmbedding::check(full);
    if (c.sliding_rope) RotaryEmbedding::check(*c.sliding_rope);
  } catch (const std::invalid_argument& e) {
    r.fail(e.what());
  }
  return c;
}
}  // namespace detail

HEADWISE_IO_INLINE LlamaConfig parse_llama_config(const std::string& text, const std::string& name) {
  return detail::llama_config_of(detail::ConfigReader(text, "llama config", name));
}

HEADWISE_IO_INLINE LlamaConfig read_llama_config(const std::string& path) { return parse_llama_config(read_text_file(path, "llama config"), path); }

}  // namespace headwise::io
