// The definitions of headwise/io/tokenizer.hpp, included at its end where the
// tokenizer's definitions are compiled: header-only, or in src/text.cpp (detail/compiled.hpp).
#pragma once

#include "headwise/io/tokenizer.hpp"

#include <filesystem>
#include <map>
#include <set>
#include <system_error>

#include <nlohmann/json.hpp>

namespace headwise::io {
namespace detail {

/// True if anything is at path: a file of any type, or a link, even a broken one (never opened:
/// what it is, is for the reader to check and refuse by name).
HEADWISE_TEXT_INLINE bool is_present(const std::string& path) {
  std::error_code ec;
  return std::filesystem::exists(std::filesystem::symlink_status(path, ec));
}

/// A JSON object from path, or null if there is no such file; throws if it is there but not an object.
HEADWISE_TEXT_INLINE nlohmann::json json_object_if_present(const std::string& path) {
  if (!is_present(path)) return nullptr;
  nlohmann::json j = nlohmann::json::parse(text::detail::read_text_file(path), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) throw text::TokenizerError("headwise: load_tokenizer: " + path + ": is not a JSON object");
  return j;
}

/// The special tokens a tokenizer_config.json or special_tokens_map.json names, by role ("bos_token"
/// -> "<s>"; a null role: none); additional_special_tokens under their own names.
HEADWISE_TEXT_INLINE void read_special_token_names(const nlohmann::json& j, const std::string& path, std::map<std::string, std::string>& names) {
  const auto content = [&](const std::string& key, const nlohmann::json& v) {
    if (v.is_string()) return v.get<std::string>();
    if (v.is_object() && v.contains("content") && v.at("content").is_string()) return v.at("content").get<std::string>();
    throw text::TokenizerError("headwise: load_tokenizer: " + path + ": \"" + key + "\" is neither a string nor {\"content\": string}");
  };
  for (const char* role : {"bos_token", "eos_token", "unk_token", "pad_token", "sep_token", "cls_token", "mask_token"}) {
    if (!j.contains(role)) continue;
    if (j.at(role).is_null()) names[role] = std::string();
    else names[role] = content(role, j.at(role));
  }
  if (j.contains("additional_special_tokens")) {
    if (!j.at("additional_special_tokens").is_array()) throw text::TokenizerError("headwise: load_tokenizer: " + path + ": \"additional_special_tokens\" is not a list");
    for (const auto& v : j.at("additional_special_tokens")) {
      const std::string s = content("additional_special_tokens", v);
      names[s] = s;
    }
  }
}

/// tokenizer_config.json's own options, checked the same way beside tokenizer.json and beside
/// vocab.json + merges.txt: refuses the keys headwise does not know, and those that would change the
/// ids in a way headwise does not apply (see the top of this file).
HEADWISE_TEXT_INLINE void check_tokenizer_config(const nlohmann::json& config, const std::string& path, bool beside_tokenizer_json) {
  const auto fail = [&](const std::string& what) { throw text::TokenizerError("headwise: load_tokenizer: " + path + ": " + what); };
  // Keys for padding, truncation, chat templates, multimodal token names, the slow (SentencePiece)
  // classes and bookkeeping, which do not change the ids a tokenizer.json or GPT-2's files give.
  static const std::set<std::string> known = {
      "tokenizer_class", "added_tokens_decoder", "bos_token", "eos_token", "unk_token", "pad_token", "sep_token", "cls_token",
      "mask_token", "additional_special_tokens", "extra_special_tokens", "boi_token", "eoi_token", "image_token",
      "add_prefix_space", "add_bos_token", "add_eos_token", "errors", "split_special_tokens", "do_lower_case", "model_max_length",
      "padding_side", "truncation_side", "clean_up_tokenization_spaces", "spaces_between_special_tokens", "chat_template",
      "use_default_system_prompt", "model_input_names", "name_or_path", "special_tokens_map_file", "tokenizer_file",
      "processor_class", "use_fast", "max_length", "legacy", "sp_model_kwargs", "backend", "is_local"};
  for (const auto& item : config.items())
    if (!known.count(item.key())) fail("the key \"" + item.key() + "\" is not one headwise knows");
  const auto flag = [&](const char* key) {
    if (!config.contains(key) || config.at(key).is_null()) return false;
    if (!config.at(key).is_boolean()) fail(std::string("\"") + key + "\" is not true or false");
    return config.at(key).get<bool>();
  };
  for (const char* key : {"add_prefix_space", "add_bos_token", "add_eos_token"}) flag(key);
  if (config.contains("tokenizer_class") && !config.at("tokenizer_class").is_string()) fail("\"tokenizer_class\" is not a string");
  const std::string cls = config.value("tokenizer_class", std::string("GPT2Tokenizer"));
  // Beside tokenizer.json: the classes that take the file as it is (transformers 5's name of its
  // plain class is TokenizersBackend); beside vocab.json: GPT-2's.
  static const std::set<std::string> json_classes = {
      "PreTrainedTokenizerFast", "TokenizersBackend", "GPT2Tokenizer", "GPT2TokenizerFast", "Qwen2Tokenizer", "Qwen2TokenizerFast",
      "LlamaTokenizer", "LlamaTokenizerFast", "GemmaTokenizer", "GemmaTokenizerFast"};
  if (beside_tokenizer_json && !json_classes.count(cls))
    fail("\"tokenizer_class\" is \"" + cls + "\": beside tokenizer.json headwise reads the classes that take the file as it is "
         "(PreTrainedTokenizerFast, TokenizersBackend, GPT2Tokenizer, Qwen2Tokenizer, LlamaTokenizer, GemmaTokenizer and their "
         "Fast variants); another class changes what the file says");
  if (!beside_tokenizer_json && cls != "GPT2Tokenizer" && cls != "GPT2TokenizerFast")
    fail("\"tokenizer_class\" is \"" + cls + "\": beside vocab.json + merges.txt headwise reads GPT-2's tokenizer only (GPT2Tokenizer); "
         "another class splits the text its own way (a tokenizer.json says how)");
  if (config.contains("backend") && config.at("backend") != "tokenizers")
    fail("\"backend\" = " + config.at("backend").dump() + ": headwise is the \"tokenizers\" backend only");
  if (config.contains("errors") && config.at("errors") != "replace")
    fail("\"errors\" = " + config.at("errors").dump() + ": headwise decodes invalid UTF-8 as U+FFFD (\"replace\") only");
  if (flag("split_special_tokens")) fail("\"split_special_tokens\" = true (special tokens as ordinary text) is not one headwise applies");
  if (flag("do_lower_case")) fail("\"do_lower_case\" = true is not one headwise applies");
  std::map<std::string, std::string> names;  // (the special tokens' types)
  read_special_token_names(config, path, names);
}

/// added_tokens_decoder: {"50256": {"content": "<|endoftext|>", "special": true, ...}, ...}.
HEADWISE_TEXT_INLINE std::vector<text::AddedToken> read_added_tokens_decoder(const nlohmann::json& decoder, const std::string& path) {
  const auto fail = [&](const std::string& what) { throw text::TokenizerError("headwise: load_tokenizer: " + path + ": added_tokens_decoder: " + what); };
  if (!decoder.is_object()) fail("is not an {id: token} object");
  static const std::set<std::string> known = {"content", "lstrip", "normalized", "rstrip", "single_word", "special", "__type"};
  std::vector<text::AddedToken> tokens;
  for (const auto& item : decoder.items()) {
    const std::string& key = item.key();
    if (key.empty() || key.size() > 10 || key.find_first_not_of("0123456789") != std::string::npos || std::stoull(key) >= (1ull << 31))
      fail("the id \"" + key.substr(0, 40) + "\" is not an integer in [0, 2^31)");
    const nlohmann::json& a = item.value();
    if (!a.is_object() || !a.contains("content") || !a.at("content").is_string()) fail("the token " + key + " has no \"content\"");
    for (const auto& field : a.items())
      if (!known.count(field.key())) fail("the token " + key + " has the key \"" + field.key() + "\", which headwise does not know");
    const auto flag = [&](const char* name, bool fallback) {
      if (!a.contains(name)) return fallback;
      if (!a.at(name).is_boolean()) fail("the token " + key + ": \"" + name + "\" is not true or false");
      return a.at(name).get<bool>();
    };
    text::AddedToken t{a.at("content").get<std::string>(), static_cast<Index>(std::stoull(key))};
    t.special = flag("special", false), t.single_word = flag("single_word", false), t.lstrip = flag("lstrip", false);
    t.rstrip = flag("rstrip", false), t.normalized = flag("normalized", !t.special);
    tokens.push_back(std::move(t));
  }
  return tokens;
}

/// added_tokens.json: {"<|im_start|>": 151644, ...}; special if one of the named special tokens.
HEADWISE_TEXT_INLINE std::vector<text::AddedToken> read_added_tokens_json(const nlohmann::json& added, const std::string& path,
                                                                        const std::set<std::string>& special) {
  std::vector<text::AddedToken> tokens;
  for (const auto& item : added.items()) {
    if (!item.value().is_number_unsigned() || item.value().get<std::uint64_t>() >= (1ull << 31))
      throw text::TokenizerError("headwise: load_tokenizer: " + path + ": \"" + item.key().substr(0, 40) + "\" has the id " +
                                 item.value().dump() + ", not an integer in [0, 2^31)");
    text::AddedToken t{item.key(), static_cast<Index>(item.value().get<std::uint64_t>())};
    t.special = special.count(item.key()) > 0;
    t.normalized = !t.special;
    tokens.push_back(std::move(t));
  }
  return tokens;
}

HEADWISE_TEXT_INLINE text::VocabMergesOptions vocab_merges_options(const std::string& folder) {
  const std::string config_path = folder + "/tokenizer_config.json", map_path = folder + "/special_tokens_map.json",
                    added_path = folder + "/added_tokens.json";
  const nlohmann::json config = json_object_if_present(config_path), map = json_object_if_present(map_path),
                       added = json_object_if_present(added_path);
  // GPT-2's tokenizer classes: bos, eos and unk are <|endoftext|> unless the files say otherwise.
  std::map<std::string, std::string> names = {{"bos_token", "<|endoftext|>"}, {"eos_token", "<|endoftext|>"}, {"unk_token", "<|endoftext|>"}};
  if (!config.is_null()) check_tokenizer_config(config, config_path, /*beside_tokenizer_json=*/false), read_special_token_names(config, config_path, names);
  if (!map.is_null()) read_special_token_names(map, map_path, names);
  std::set<std::string> special;
  for (const auto& [role, content] : names)
    if (!content.empty()) special.insert(content);

  text::VocabMergesOptions options;
  if (!config.is_null() && config.contains("added_tokens_decoder")) options.added_tokens = read_added_tokens_decoder(config.at("added_tokens_decoder"), config_path);
  else if (!added.is_null()) options.added_tokens = read_added_tokens_json(added, added_path, special);
  else options.added_tokens.clear();
  for (const std::string& s : special) {  // the named ones no list gave an id: from the vocabulary
    bool listed = false;
    for (const text::AddedToken& a : options.added_tokens) listed = listed || a.content == s;
    if (!listed) options.added_tokens.push_back({s, -1, /*special=*/true});
  }
  const auto flag = [&](const char* key) { return !config.is_null() && config.contains(key) && config.at(key).is_boolean() && config.at(key).get<bool>(); };
  options.add_prefix_space = flag("add_prefix_space");
  const auto around = [&](const char* key, const char* role, std::vector<std::string>& to) {
    if (!flag(key)) return;
    if (names[role].empty()) throw text::TokenizerError("headwise: load_tokenizer: " + config_path + ": \"" + key + "\" is true but no " + role + " is named");
    to.push_back(names[role]);
  };
  around("add_bos_token", "bos_token", options.tokens_before);
  around("add_eos_token", "eos_token", options.tokens_after);
  return options;
}

}  // namespace detail

HEADWISE_TEXT_INLINE text::Tokenizer load_tokenizer(const std::string& folder) {
  if (detail::is_present(folder + "/tokenizer.json")) {
    const std::string config_path = folder + "/tokenizer_config.json";
    const nlohmann::json config = detail::json_object_if_present(config_path);
    if (!config.is_null()) detail::check_tokenizer_config(config, config_path, /*beside_tokenizer_json=*/true);
    return text::Tokenizer::from_tokenizer_json(folder + "/tokenizer.json");
  }
  if (detail::is_present(folder + "/vocab.json") && detail::is_present(folder + "/merges.txt"))
    return text::Tokenizer::from_files(folder + "/vocab.json", folder + "/merges.txt", detail::vocab_merges_options(folder));
  if (detail::is_present(folder + "/tokenizer.model"))
    throw text::TokenizerError("headwise: load_tokenizer: " + folder + " holds a SentencePiece tokenizer.model only; headwise reads the "
                               "model's tokenizer.json (transformers writes one: AutoTokenizer.from_pretrained(folder).save_pretrained(folder))");
  throw text::TokenizerError("headwise: load_tokenizer: " + folder + " holds no tokenizer.json and no vocab.json + merges.txt");
}

}  // namespace headwise::io
