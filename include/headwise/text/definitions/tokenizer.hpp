// The definitions of headwise/text/tokenizer.hpp, included at its end where the
// tokenizer's definitions are compiled: header-only, or in src/text.cpp (detail/compiled.hpp).
#pragma once

#include "headwise/text/tokenizer.hpp"

#include <set>

#include <nlohmann/json.hpp>

#include "headwise/detail/regular_file.hpp"

namespace headwise::text {
namespace detail {

/// The text of a tokenizer file: a directory, a named pipe, a device or a file over
/// max_tokenizer_file_bytes is refused by name before it is read (detail/regular_file.hpp).
HEADWISE_TEXT_INLINE std::string read_text_file(const std::string& path) {
  return headwise::detail::read_regular_text<TokenizerError>(path, "headwise: tokenizer: ", max_tokenizer_file_bytes);
}

}  // namespace detail

HEADWISE_TEXT_INLINE void Tokenizer::fail(const std::string& what) const { throw detail::tokenizer_error(name_, what); }

HEADWISE_TEXT_INLINE Tokenizer Tokenizer::from_tokenizer_json(const std::string& path) { return from_tokenizer_json_text(detail::read_text_file(path), path); }

HEADWISE_TEXT_INLINE Tokenizer Tokenizer::from_tokenizer_json_text(const std::string& text, const std::string& name) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) throw detail::tokenizer_error(name, "is not a JSON object");
  static const std::set<std::string> known = {"version", "truncation", "padding", "added_tokens", "normalizer",
                                              "pre_tokenizer", "post_processor", "decoder", "model"};
  for (const auto& item : j.items())
    if (!known.count(item.key())) throw detail::tokenizer_error(name, "the key \"" + item.key() + "\" is not one headwise knows");
  for (const char* key : {"truncation", "padding"})
    if (j.contains(key) && !j.at(key).is_null())
      throw detail::tokenizer_error(name, std::string("\"") + key + "\" is set; headwise encodes one text whole (only null)");
  if (!j.contains("model")) throw detail::tokenizer_error(name, "no \"model\" object");
  try {  // (each part checks the types of the fields it reads; this names any it missed)
    Tokenizer t(name, BpeModel::from_json(j.at("model"), name));
    const auto part = [&](const char* key) { return j.contains(key) ? j.at(key) : nlohmann::json(); };
    t.normalizer_ = Normalizer::from_json(part("normalizer"), name);
    t.pre_tokenizer_ = PreTokenizer::from_json(part("pre_tokenizer"), name);
    t.post_processor_ = PostProcessor::from_json(part("post_processor"), name);
    t.decoder_ = Decoder::from_json(part("decoder"), name);
    t.read_added_tokens(j.contains("added_tokens") ? j.at("added_tokens") : nlohmann::json::array());
    return t;
  } catch (const nlohmann::json::exception& e) {
    throw detail::tokenizer_error(name, std::string("a field has the wrong type (") + e.what() + ")");
  }
}

HEADWISE_TEXT_INLINE Tokenizer Tokenizer::from_files(const std::string& vocab_json, const std::string& merges_txt, const VocabMergesOptions& options) {
  Tokenizer t(vocab_json, BpeModel::from_files(detail::read_text_file(vocab_json), detail::read_text_file(merges_txt), vocab_json));
  const nlohmann::json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", options.add_prefix_space}, {"trim_offsets", true}, {"use_regex", true}};
  t.pre_tokenizer_ = PreTokenizer::from_json(byte_level, vocab_json);
  t.decoder_ = Decoder::from_json(byte_level, vocab_json);
  nlohmann::json added = nlohmann::json::array();
  for (const AddedToken& a : options.added_tokens) {
    const Index i = a.id >= 0 ? a.id : t.model_.id(a.content);
    if (i < 0) t.fail("the added token \"" + a.content + "\" has no id and is not in the vocabulary");
    added.push_back({{"id", static_cast<std::uint64_t>(i)}, {"content", a.content}, {"special", a.special}, {"single_word", a.single_word},
                     {"lstrip", a.lstrip}, {"rstrip", a.rstrip}, {"normalized", a.normalized}});
  }
  t.read_added_tokens(added);
  // The tokens around a text, as a TemplateProcessing post-processor holds them.
  nlohmann::json single = nlohmann::json::array(), specials = nlohmann::json::object();
  const auto special = [&](const std::string& content) {
    const Index i = t.id(content);
    if (i < 0) t.fail("the token \"" + content + "\" to put around a text is neither an added token nor in the vocabulary");
    specials[content] = {{"id", content}, {"ids", nlohmann::json::array({static_cast<std::uint64_t>(i)})}, {"tokens", nlohmann::json::array({content})}};
    single.push_back({{"SpecialToken", {{"id", content}, {"type_id", 0}}}});
  };
  for (const std::string& s : options.tokens_before) special(s);
  single.push_back({{"Sequence", {{"id", "A"}, {"type_id", 0}}}});
  for (const std::string& s : options.tokens_after) special(s);
  if (single.size() > 1)
    t.post_processor_ = PostProcessor::from_json({{"type", "TemplateProcessing"}, {"single", single}, {"special_tokens", specials}}, vocab_json);
  return t;
}

HEADWISE_TEXT_INLINE void Tokenizer::read_added_tokens(const nlohmann::json& added) {
  if (!added.is_array()) fail("\"added_tokens\" is not a list");
  static const std::set<std::string> known = {"id", "content", "single_word", "lstrip", "rstrip", "normalized", "special"};
  std::vector<std::pair<AddedToken, std::string>> tokens;
  Index largest = model_.vocab_size() - 1;
  const auto limit = std::uint64_t(model_.vocab_size()) + 4 * std::uint64_t(added.size()) + 4096;
  for (const auto& a : added) {
    if (!a.is_object() || !a.contains("id") || !a.contains("content") || !a.at("content").is_string())
      fail("added token " + a.dump().substr(0, 80) + " has no id and content");
    for (const auto& item : a.items())
      if (!known.count(item.key())) fail("added token " + a.at("content").dump() + " has the key \"" + item.key() + "\", which headwise does not know");
    if (!a.at("id").is_number_unsigned() || a.at("id").get<std::uint64_t>() >= limit)
      fail("added token " + a.at("content").dump() + " has the id " + a.at("id").dump() + ", not an integer below " + std::to_string(limit) +
           " (the vocabulary's size + 4 x the added tokens + 4096)");
    AddedToken token{a.at("content").get<std::string>(), static_cast<Index>(a.at("id").get<std::uint64_t>())};
    const auto flag = [&](const char* key, bool fallback) {
      if (!a.contains(key)) return fallback;
      if (!a.at(key).is_boolean()) fail("added token " + a.at("content").dump() + ": \"" + key + "\" is not true or false");
      return a.at(key).get<bool>();
    };
    token.special = flag("special", false), token.single_word = flag("single_word", false), token.lstrip = flag("lstrip", false);
    token.rstrip = flag("rstrip", false), token.normalized = flag("normalized", !token.special);
    if (first_invalid_utf8(token.content) != std::string::npos) fail("added token " + std::to_string(token.id) + " is not valid UTF-8");
    const Index in_model = model_.id(token.content);
    if (in_model >= 0 && in_model != token.id)
      fail("added token " + a.at("content").dump() + " has the id " + std::to_string(token.id) + " but the vocabulary gives it " + std::to_string(in_model));
    if (in_model < 0 && model_.has_id(token.id))
      fail("added token " + a.at("content").dump() + " has the id " + std::to_string(token.id) + ", which the vocabulary gives \"" +
           model_.token(token.id).substr(0, 40) + "\"");
    largest = std::max(largest, token.id);
    const std::string pattern = token.normalized ? normalizer_.apply(token.content) : token.content;
    tokens.emplace_back(std::move(token), pattern);
  }
  added_ = AddedTokens(std::move(tokens), name_);
  vocab_size_ = largest + 1;
}

HEADWISE_TEXT_INLINE const std::string& Tokenizer::token(Index id) const {
  if (const AddedToken* a = added_.find(id)) return a->content;
  if (!model_.has_id(id)) fail("id " + std::to_string(id) + " is not in the vocabulary (0 .. " + std::to_string(vocab_size_ - 1) + ")");
  return model_.token(id);
}

HEADWISE_TEXT_INLINE Index Tokenizer::id(std::string_view token) const {
  for (const AddedToken& a : added_.tokens())
    if (a.content == token) return a.id;
  return model_.id(token);
}

HEADWISE_TEXT_INLINE std::vector<Index> Tokenizer::encode(std::string_view text, EncodeOptions options) const {
  if (text.size() >= (std::size_t(1) << 31)) fail("the text is " + std::to_string(text.size()) + " bytes long (at most 2^31 - 1)");
  const std::size_t bad = first_invalid_utf8(text);
  if (bad != std::string_view::npos) fail("the text is not valid UTF-8 (at byte " + std::to_string(bad) + ")");
  std::vector<Index> out;
  for (const TextCut& cut : added_.split(text, /*normalized=*/false)) {
    if (cut.id >= 0) out.push_back(cut.id);
    else if (cut.end > cut.begin) encode_piece(text.substr(cut.begin, cut.end - cut.begin), cut.begin == 0, out);
  }
  return options.add_special_tokens ? post_processor_.apply(out) : out;
}

HEADWISE_TEXT_INLINE void Tokenizer::encode_piece(std::string_view piece, bool at_start, std::vector<Index>& out) const {
  const std::string normalized = normalizer_.empty() ? std::string(piece) : normalizer_.apply(piece);
  for (const TextCut& cut : added_.split(normalized, /*normalized=*/true)) {
    if (cut.id >= 0) {
      out.push_back(cut.id);
      continue;
    }
    if (cut.end == cut.begin) continue;
    for (const Piece& word : pre_tokenizer_.apply({{normalized.substr(cut.begin, cut.end - cut.begin), at_start && cut.begin == 0}}))
      model_.tokenize(word.text, out);
  }
}

HEADWISE_TEXT_INLINE std::string Tokenizer::decode(const std::vector<Index>& ids) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (const Index i : ids) tokens.push_back(token(i));
  return decoder_.apply(std::move(tokens));
}

}  // namespace headwise::text
