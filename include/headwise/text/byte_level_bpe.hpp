// Byte-level BPE, as GPT-2, Llama 3 and gpt-oss tokenize text: split the text into pieces
// with a regular expression (PCRE2, with Unicode properties), map each piece's UTF-8 bytes to
// characters (GPT-2's bytes_to_unicode), merge adjacent symbols by rank inside each piece, look the
// symbols up in the vocabulary. Read from GPT-2's vocab.json + merges.txt, or from a Hugging Face
// tokenizer.json whose model is BPE with a ByteLevel (or Split + ByteLevel) pre-tokenizer; special
// tokens (added_tokens) are cut out of the text before splitting. Anything else a tokenizer.json
// asks for (another model, a normalizer, another pre-tokenizer or decoder, dropout, byte fallback)
// is refused by name: Qwen2/3's files (an NFC normalizer), Gemma's and SentencePiece-style files
// (byte fallback) and DeepSeek-V3's (a Sequence of Splits) among them. The merge loop follows Hugging Face's Rust library: the lowest rank first,
// leftmost among equals, with a heap, so a piece of n symbols costs O(n log n).
//
//   auto bpe = headwise::text::BpeTokenizer::from_tokenizer_json("gpt2/tokenizer.json");
//   std::vector<headwise::Index> ids = bpe.encode("the cat sat");   // {1169, 3797, 3332}
//   std::string text = bpe.decode(ids);
#pragma once

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <memory>
#include <queue>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "headwise/detail/compiled.hpp"
#include "headwise/text/unicode.hpp"  // (TokenizerError)
#include "headwise/types.hpp"

namespace headwise::text {

namespace detail {

/// GPT-2's pre-tokenizer regex (ByteLevel with use_regex true).
inline constexpr const char* gpt2_pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

class Regex;  // a compiled PCRE2 pattern (in the definitions below)

}  // namespace detail

/// A byte-level BPE tokenizer. encode() adds no special tokens (no post-processor template).
class BpeTokenizer {
 public:
  /// GPT-2's own files: vocab.json ({token: id}) and merges.txt ("#version" line, then "left right").
  static BpeTokenizer from_files(const std::string& vocab_json, const std::string& merges_txt);

  /// A Hugging Face tokenizer.json with a BPE model (see the top of this file for what is read).
  static BpeTokenizer from_tokenizer_json(const std::string& path);
  static BpeTokenizer from_tokenizer_json_text(const std::string& text, const std::string& name);

  Index vocab_size() const { return static_cast<Index>(tokens_.size()); }
  /// The token string of id (byte-level characters, or a special token's text); throws if unknown.
  const std::string& token(Index id) const;
  /// The id of a token string, or -1.
  Index id(const std::string& token) const {
    const auto it = ids_.find(token);
    return it == ids_.end() ? -1 : it->second;
  }

  /// The ids of text (UTF-8), special tokens cut out first. Throws on invalid UTF-8, naming the byte.
  std::vector<Index> encode(std::string_view text) const;

  /// The text of ids: token strings concatenated, byte-level characters back to bytes. Throws on
  /// an unknown id. (Ids that split a UTF-8 character give its bytes as they are.)
  std::string decode(const std::vector<Index>& ids) const;

 private:
  explicit BpeTokenizer(std::string name);
  [[noreturn]] void fail(const std::string& what) const { throw TokenizerError("headwise: tokenizer: " + name_ + ": " + what); }
  nlohmann::json parse(const std::string& text) const;
  bool has_id(Index id) const { return id >= 0 && id < vocab_size() && present_[static_cast<std::size_t>(id)]; }

  /// {token: id}: ids in [0, 2^31), each once.
  void read_vocab(const nlohmann::json& vocab);
  void add_token(const std::string& token, Index id);
  /// Rank r for the r-th pair; both sides and their concatenation must be tokens of the vocabulary.
  void read_merges(const std::vector<std::pair<std::string, std::string>>& pairs);
  std::vector<std::pair<std::string, std::string>> merges_of(const nlohmann::json& model) const;
  void check_model(const nlohmann::json& model) const;
  /// ByteLevel (use_regex: GPT-2's regex), or Sequence [Split(Regex, Isolated), ByteLevel(use_regex false)].
  void read_pre_tokenizer(const nlohmann::json& p);
  void read_added_tokens(const nlohmann::json& added);

  /// The first special token at or after `at` (its offset and id; id -1 and text.size() if none).
  std::pair<std::size_t, Index> next_special(std::string_view text, std::size_t at) const;

  /// Text without special tokens: pieces by the regex, then BPE inside each.
  void encode_ordinary(std::string_view text, std::vector<Index>& out) const;

  struct Merge {
    Index rank, merged;
  };
  static std::uint64_t key(Index a, Index b) { return (std::uint64_t(a) << 32) | std::uint64_t(b); }

  /// BPE inside one piece, as Hugging Face's word.rs merges: a heap of (rank, position), the
  /// lowest rank first, leftmost among equals; a popped pair is skipped if either side changed.
  void merge_piece(std::string_view piece, std::vector<Index>& out) const;

  std::string name_;
  std::vector<std::string> tokens_;
  std::vector<bool> present_;
  std::unordered_map<std::string, Index> ids_;
  std::unordered_map<std::uint64_t, Merge> merges_;
  std::unordered_map<std::string, unsigned char> byte_of_;
  std::set<Index> special_;
  std::shared_ptr<const detail::Regex> regex_;
  bool ignore_merges_ = false, add_prefix_space_ = false;
};

}  // namespace headwise::text

// ---- Definitions (detail/compiled.hpp: header-only, or src/text.cpp) ----
#if HEADWISE_TEXT_DEFINITIONS
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <nlohmann/json.hpp>

namespace headwise::text {
namespace detail {

/// The UTF-8 encoding of code point c.
HEADWISE_TEXT_INLINE std::string utf8(char32_t c) {
  std::string s;
  if (c < 0x80) s += char(c);
  else if (c < 0x800) s += char(0xC0 | (c >> 6)), s += char(0x80 | (c & 0x3F));
  else s += char(0xE0 | (c >> 12)), s += char(0x80 | ((c >> 6) & 0x3F)), s += char(0x80 | (c & 0x3F));
  return s;
}

/// GPT-2's bytes_to_unicode: bytes 33-126, 161-172 and 174-255 stand for themselves, the other 68
/// in increasing order become U+0100, U+0101, ...; as UTF-8 strings, one per byte.
HEADWISE_TEXT_INLINE const std::vector<std::string>& byte_characters() {
  static const std::vector<std::string> table = [] {
    std::vector<std::string> t(256);
    char32_t next = 0x100;
    for (int b = 0; b < 256; ++b) {
      const bool self = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      t[static_cast<std::size_t>(b)] = utf8(self ? char32_t(b) : next++);
    }
    return t;
  }();
  return table;
}

/// The offset of the first byte of text that does not start a valid UTF-8 character (overlong
/// forms, surrogates and code points past U+10FFFF are invalid), or npos.
HEADWISE_TEXT_INLINE std::size_t first_invalid_utf8(std::string_view text) {
  std::size_t i = 0;
  while (i < text.size()) {
    const auto b = static_cast<unsigned char>(text[i]);
    const std::size_t n = b < 0x80 ? 1 : (b >> 5) == 0x6 ? 2 : (b >> 4) == 0xE ? 3 : (b >> 3) == 0x1E ? 4 : 0;
    if (n == 0 || i + n > text.size()) return i;
    char32_t c = n == 1 ? b : n == 2 ? (b & 0x1F) : n == 3 ? (b & 0x0F) : (b & 0x07);
    for (std::size_t k = 1; k < n; ++k) {
      const auto t = static_cast<unsigned char>(text[i + k]);
      if ((t & 0xC0) != 0x80) return i;
      c = (c << 6) | (t & 0x3F);
    }
    const char32_t least[] = {0, 0, 0x80, 0x800, 0x10000};
    if (c < least[n] || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) return i;
    i += n;
  }
  return std::string_view::npos;
}

HEADWISE_TEXT_INLINE std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw TokenizerError("headwise: tokenizer: cannot open " + path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

/// A compiled PCRE2 pattern (UTF, Unicode properties), JIT-compiled where PCRE2 can.
class Regex {
 public:
  Regex(const std::string& pattern, const std::string& where) {
    int error = 0;
    PCRE2_SIZE offset = 0;
    code_.reset(pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), PCRE2_UTF | PCRE2_UCP, &error,
                              &offset, nullptr));
    if (!code_) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(error, message, sizeof message);
      throw TokenizerError("headwise: tokenizer: " + where + ": the pre-tokenizer regex does not compile at offset " +
                           std::to_string(offset) + ": " + reinterpret_cast<const char*>(message));
    }
    pcre2_jit_compile(code_.get(), PCRE2_JIT_COMPLETE);  // (the interpreter matches the same where JIT is unavailable)
  }
  /// Calls piece(begin, end) for each match in text, in order (text between matches too: Split's
  /// Isolated behaviour). Throws, naming the byte, if text is not valid UTF-8.
  template <class Piece>
  void split(std::string_view text, Piece&& piece) const {
    const std::size_t bad = first_invalid_utf8(text);  // checked once here: PCRE2 then skips its own check
    if (bad != std::string_view::npos)
      throw TokenizerError("headwise: tokenizer: the text is not valid UTF-8 (at byte " + std::to_string(bad) + ")");
    std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> md(
        pcre2_match_data_create_from_pattern(code_.get(), nullptr), &pcre2_match_data_free);
    PCRE2_SIZE at = 0;
    while (at < text.size()) {
      const int rc = pcre2_match(code_.get(), reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), at, PCRE2_NO_UTF_CHECK,
                                 md.get(), nullptr);
      if (rc == PCRE2_ERROR_NOMATCH) {
        piece(at, text.size());
        return;
      }
      if (rc < 0) throw TokenizerError("headwise: tokenizer: the pre-tokenizer regex failed (PCRE2 error " + std::to_string(rc) + ")");
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
      if (ov[0] > at) piece(at, ov[0]);
      if (ov[1] == ov[0]) {  // an empty match: step one character on
        std::size_t step = 1;
        while (ov[0] + step < text.size() && (static_cast<unsigned char>(text[ov[0] + step]) & 0xC0) == 0x80) ++step;
        piece(ov[0], ov[0] + step), at = ov[0] + step;
      } else {
        piece(ov[0], ov[1]), at = ov[1];
      }
    }
  }

 private:
  struct Free {
    void operator()(pcre2_code* c) const { pcre2_code_free(c); }
  };
  std::unique_ptr<pcre2_code, Free> code_;
};

}  // namespace detail

HEADWISE_TEXT_INLINE BpeTokenizer BpeTokenizer::from_files(const std::string& vocab_json, const std::string& merges_txt) {
  BpeTokenizer t(vocab_json);
  const nlohmann::json vocab = t.parse(detail::read_file(vocab_json));
  t.read_vocab(vocab);
  std::istringstream merges(detail::read_file(merges_txt));
  std::string line;
  std::vector<std::pair<std::string, std::string>> pairs;
  for (Index n = 1; std::getline(merges, line); ++n) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || (n == 1 && line.rfind("#version", 0) == 0)) continue;
    const std::size_t space = line.find(' ');
    if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos)
      t.fail(merges_txt + ": line " + std::to_string(n) + " is not \"left right\"");
    pairs.emplace_back(line.substr(0, space), line.substr(space + 1));
  }
  t.read_merges(pairs);
  t.regex_ = std::make_shared<detail::Regex>(detail::gpt2_pattern, vocab_json);
  return t;
}

HEADWISE_TEXT_INLINE BpeTokenizer BpeTokenizer::from_tokenizer_json(const std::string& path) { return from_tokenizer_json_text(detail::read_file(path), path); }

HEADWISE_TEXT_INLINE BpeTokenizer BpeTokenizer::from_tokenizer_json_text(const std::string& text, const std::string& name) {
  BpeTokenizer t(name);
  const nlohmann::json j = t.parse(text);
  if (!j.contains("model") || !j.at("model").is_object()) t.fail("no \"model\" object");
  const nlohmann::json& model = j.at("model");
  const std::string type = model.value("type", std::string());
  if (type != "BPE") t.fail("model type \"" + type + "\" is not one headwise reads (BPE; SentencePiece-Unigram and WordPiece are not)");
  t.check_model(model);
  t.read_vocab(model.at("vocab"));
  t.read_merges(t.merges_of(model));
  t.ignore_merges_ = model.value("ignore_merges", false);
  if (j.contains("normalizer") && !j.at("normalizer").is_null())
    t.fail("normalizer " + j.at("normalizer").dump().substr(0, 80) + " is not one headwise applies (only none)");
  t.read_pre_tokenizer(j.contains("pre_tokenizer") ? j.at("pre_tokenizer") : nlohmann::json());
  if (j.contains("decoder") && !j.at("decoder").is_null() && j.at("decoder").value("type", std::string()) != "ByteLevel")
    t.fail("decoder " + j.at("decoder").dump().substr(0, 80) + " is not one headwise applies (ByteLevel)");
  if (j.contains("added_tokens")) t.read_added_tokens(j.at("added_tokens"));
  return t;
}

HEADWISE_TEXT_INLINE const std::string& BpeTokenizer::token(Index id) const {
  if (!has_id(id))
    fail("id " + std::to_string(id) + " is not in the vocabulary (0 .. " + std::to_string(vocab_size() - 1) + ")");
  return tokens_[static_cast<std::size_t>(id)];
}

HEADWISE_TEXT_INLINE std::vector<Index> BpeTokenizer::encode(std::string_view text) const {
  std::vector<Index> out;
  std::size_t at = 0;
  while (at < text.size()) {
    const auto [begin, special] = next_special(text, at);
    encode_ordinary(text.substr(at, begin - at), out);
    if (special < 0) break;
    out.push_back(special);
    at = begin + tokens_[static_cast<std::size_t>(special)].size();
  }
  return out;
}

HEADWISE_TEXT_INLINE std::string BpeTokenizer::decode(const std::vector<Index>& ids) const {
  std::string out;
  for (const Index i : ids) {
    const std::string& t = token(i);
    if (special_.count(i)) {
      out += t;
      continue;
    }
    for (std::size_t c = 0; c < t.size();) {
      std::size_t len = 1;
      while (c + len < t.size() && (static_cast<unsigned char>(t[c + len]) & 0xC0) == 0x80) ++len;
      const auto b = byte_of_.find(t.substr(c, len));
      if (b == byte_of_.end()) fail("token " + std::to_string(i) + " holds a character that is not a byte-level one");
      out += char(b->second);
      c += len;
    }
  }
  return out;
}

HEADWISE_TEXT_INLINE BpeTokenizer::BpeTokenizer(std::string name) : name_(std::move(name)) {
  const auto& chars = detail::byte_characters();
  for (int b = 0; b < 256; ++b) byte_of_[chars[static_cast<std::size_t>(b)]] = static_cast<unsigned char>(b);
}

HEADWISE_TEXT_INLINE nlohmann::json BpeTokenizer::parse(const std::string& text) const {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) fail("is not a JSON object");
  return j;
}

HEADWISE_TEXT_INLINE void BpeTokenizer::read_vocab(const nlohmann::json& vocab) {
  if (!vocab.is_object()) fail("the vocabulary is not a {token: id} object");
  for (const auto& item : vocab.items()) {
    const auto& v = item.value();
    if (!v.is_number_unsigned() || v.get<std::uint64_t>() >= (std::uint64_t(1) << 31))
      fail("the vocabulary gives \"" + item.key() + "\" the id " + v.dump() + ", not an integer in [0, 2^31)");
    add_token(item.key(), static_cast<Index>(v.get<std::uint64_t>()));
  }
}

HEADWISE_TEXT_INLINE void BpeTokenizer::add_token(const std::string& token, Index id) {
  if (static_cast<std::size_t>(id) >= tokens_.size()) tokens_.resize(static_cast<std::size_t>(id) + 1), present_.resize(tokens_.size());
  if (present_[static_cast<std::size_t>(id)] && tokens_[static_cast<std::size_t>(id)] != token)
    fail("id " + std::to_string(id) + " is given to two tokens");
  if (!ids_.emplace(token, id).second && ids_.at(token) != id) fail("token \"" + token + "\" has two ids");
  tokens_[static_cast<std::size_t>(id)] = token, present_[static_cast<std::size_t>(id)] = true;
}

HEADWISE_TEXT_INLINE void BpeTokenizer::read_merges(const std::vector<std::pair<std::string, std::string>>& pairs) {
  for (std::size_t r = 0; r < pairs.size(); ++r) {
    const Index a = id(pairs[r].first), b = id(pairs[r].second), merged = id(pairs[r].first + pairs[r].second);
    if (a < 0 || b < 0 || merged < 0)
      fail("merge " + std::to_string(r) + " (\"" + pairs[r].first + " " + pairs[r].second + "\") joins tokens the vocabulary lacks");
    merges_.emplace(key(a, b), Merge{static_cast<Index>(r), merged});  // (a repeated pair keeps its first rank)
  }
}

HEADWISE_TEXT_INLINE std::vector<std::pair<std::string, std::string>> BpeTokenizer::merges_of(const nlohmann::json& model) const {
  std::vector<std::pair<std::string, std::string>> pairs;
  if (!model.contains("merges") || !model.at("merges").is_array()) fail("the BPE model has no \"merges\" list");
  for (const auto& m : model.at("merges")) {
    if (m.is_string()) {  // "left right"
      const std::string s = m.get<std::string>();
      const std::size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) fail("merge \"" + s + "\" is not \"left right\"");
      pairs.emplace_back(s.substr(0, space), s.substr(space + 1));
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {  // ["left", "right"]
      pairs.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    } else {
      fail("merge " + m.dump().substr(0, 60) + " is neither \"left right\" nor [\"left\", \"right\"]");
    }
  }
  return pairs;
}

HEADWISE_TEXT_INLINE void BpeTokenizer::check_model(const nlohmann::json& model) const {
  const auto unset = [&](const char* key) { return !model.contains(key) || model.at(key).is_null(); };
  for (const char* key : {"dropout", "unk_token", "continuing_subword_prefix", "end_of_word_suffix"})
    if (!unset(key)) fail(std::string("the BPE model's \"") + key + "\" = " + model.at(key).dump() + " is not read by headwise (only null)");
  for (const char* key : {"fuse_unk", "byte_fallback"})
    if (!unset(key) && model.at(key) != false) fail(std::string("the BPE model's \"") + key + "\" = true is not read by headwise");
  if (!model.contains("vocab")) fail("the BPE model has no \"vocab\"");
}

HEADWISE_TEXT_INLINE void BpeTokenizer::read_pre_tokenizer(const nlohmann::json& p) {
  const auto byte_level = [&](const nlohmann::json& b, bool regex_allowed) {
    if (b.value("type", std::string()) != "ByteLevel") fail("pre-tokenizer " + b.dump().substr(0, 80) + " is not one headwise reads");
    add_prefix_space_ = b.value("add_prefix_space", false);
    const bool use_regex = b.value("use_regex", true);
    if (use_regex && !regex_allowed) fail("a ByteLevel pre-tokenizer with use_regex after a Split would split twice: not read");
    return use_regex;
  };
  if (p.is_null()) fail("no pre_tokenizer: byte-level BPE needs ByteLevel");
  if (p.value("type", std::string()) == "Sequence") {
    const nlohmann::json& list = p.contains("pretokenizers") ? p.at("pretokenizers") : nlohmann::json();
    if (!list.is_array() || list.size() != 2) fail("a Sequence pre-tokenizer other than [Split, ByteLevel] is not read");
    const nlohmann::json& split = list[0];
    if (split.value("type", std::string()) != "Split" || split.value("behavior", std::string()) != "Isolated" ||
        split.value("invert", false) || !split.contains("pattern") || !split.at("pattern").contains("Regex"))
      fail("pre-tokenizer " + split.dump().substr(0, 120) + ": only a Split by Regex, Isolated, not inverted, is read");
    byte_level(list[1], false);
    regex_ = std::make_shared<detail::Regex>(split.at("pattern").at("Regex").get<std::string>(), name_);
    return;
  }
  if (!byte_level(p, true)) fail("a ByteLevel pre-tokenizer without use_regex and without a Split would not split: not read");
  regex_ = std::make_shared<detail::Regex>(detail::gpt2_pattern, name_);
}

HEADWISE_TEXT_INLINE void BpeTokenizer::read_added_tokens(const nlohmann::json& added) {
  if (!added.is_array()) fail("\"added_tokens\" is not a list");
  for (const auto& a : added) {
    if (!a.is_object() || !a.contains("id") || !a.at("id").is_number_unsigned() || !a.contains("content") || !a.at("content").is_string())
      fail("added token " + a.dump().substr(0, 80) + " has no id and content");
    for (const char* key : {"single_word", "lstrip", "rstrip"})
      if (a.value(key, false)) fail("added token " + a.at("content").dump() + " sets \"" + key + "\", which headwise does not apply");
    const std::string content = a.at("content").get<std::string>();
    if (content.empty()) fail("an added token has empty content");
    add_token(content, static_cast<Index>(a.at("id").get<std::uint64_t>()));
    special_.emplace(static_cast<Index>(a.at("id").get<std::uint64_t>()));
  }
}

HEADWISE_TEXT_INLINE std::pair<std::size_t, Index> BpeTokenizer::next_special(std::string_view text, std::size_t at) const {
  std::pair<std::size_t, Index> best{text.size(), -1};
  for (const Index s : special_) {
    const std::string& t = tokens_[static_cast<std::size_t>(s)];
    const std::size_t found = text.find(t, at);
    if (found == std::string_view::npos) continue;
    if (found < best.first || (found == best.first && t.size() > tokens_[static_cast<std::size_t>(best.second)].size()))
      best = {found, s};
  }
  return best;
}

HEADWISE_TEXT_INLINE void BpeTokenizer::encode_ordinary(std::string_view text, std::vector<Index>& out) const {
  if (text.empty()) return;
  std::string prefixed;
  if (add_prefix_space_ && text.front() != ' ') prefixed = " " + std::string(text), text = prefixed;
  regex_->split(text, [&](std::size_t begin, std::size_t end) { merge_piece(text.substr(begin, end - begin), out); });
}

HEADWISE_TEXT_INLINE void BpeTokenizer::merge_piece(std::string_view piece, std::vector<Index>& out) const {
  const auto& chars = detail::byte_characters();
  std::string mapped;
  for (const char c : piece) mapped += chars[static_cast<unsigned char>(c)];
  if (ignore_merges_ && id(mapped) >= 0) {
    out.push_back(id(mapped));
    return;
  }
  struct Symbol {
    Index id, prev, next;
  };
  std::vector<Symbol> s;
  for (const char c : piece) {
    const Index i = id(chars[static_cast<unsigned char>(c)]);
    if (i < 0) fail("the vocabulary has no token for byte " + std::to_string(static_cast<unsigned char>(c)));
    s.push_back({i, Index(s.size()) - 1, Index(s.size()) + 1});
  }
  s.back().next = -1;
  struct Candidate {
    Index rank, pos, merged;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> heap;
  const auto offer = [&](Index pos) {
    if (pos < 0 || s[static_cast<std::size_t>(pos)].next < 0) return;
    const auto m = merges_.find(key(s[static_cast<std::size_t>(pos)].id, s[static_cast<std::size_t>(s[static_cast<std::size_t>(pos)].next)].id));
    if (m != merges_.end()) heap.push({m->second.rank, pos, m->second.merged});
  };
  for (Index p = 0; p < Index(s.size()); ++p) offer(p);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    Symbol& left = s[static_cast<std::size_t>(c.pos)];
    if (left.id < 0 || left.next < 0) continue;  // merged away, or now the last
    const auto m = merges_.find(key(left.id, s[static_cast<std::size_t>(left.next)].id));
    if (m == merges_.end() || m->second.merged != c.merged) continue;  // a side changed since
    Symbol& right = s[static_cast<std::size_t>(left.next)];
    left.id = c.merged, left.next = right.next, right.id = -1;
    if (left.next >= 0) s[static_cast<std::size_t>(left.next)].prev = c.pos;
    offer(left.prev), offer(c.pos);
  }
  for (Index p = 0; p >= 0; p = s[static_cast<std::size_t>(p)].next) out.push_back(s[static_cast<std::size_t>(p)].id);
}


}  // namespace headwise::text
#endif  // HEADWISE_TEXT_DEFINITIONS
