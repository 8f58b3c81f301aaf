// The definitions of headwise/text/decoder.hpp, included at its end where the
// tokenizer's definitions are compiled: header-only, or in src/text.cpp (detail/compiled.hpp).
#pragma once

#include "headwise/text/decoder.hpp"

#include <nlohmann/json.hpp>

#include "headwise/text/normalizer.hpp"  // (detail::replace_literal)

namespace headwise::text {
namespace detail {

/// bytes as UTF-8, each maximal invalid subsequence replaced by U+FFFD (Rust's from_utf8_lossy).
HEADWISE_TEXT_INLINE std::string lossy_utf8(const std::string& bytes) {
  std::string out;
  for (std::size_t i = 0; i < bytes.size();) {
    const std::size_t bad = first_invalid_utf8(std::string_view(bytes).substr(i));
    if (bad == std::string_view::npos) {
      out.append(bytes, i, std::string::npos);
      break;
    }
    out.append(bytes, i, bad), i += bad;
    // The maximal prefix of a valid sequence (Unicode's "substitution of maximal subparts").
    const auto b = static_cast<unsigned char>(bytes[i]);
    const std::size_t n = (b >> 5) == 0x6 ? 2 : (b >> 4) == 0xE ? 3 : (b >> 3) == 0x1E ? 4 : 1;
    std::size_t k = 1;
    if (n > 1 && b >= 0xC2 && b <= 0xF4) {
      const auto second_ok = [&](unsigned char t) {
        return b == 0xE0 ? t >= 0xA0 && t <= 0xBF : b == 0xED ? t >= 0x80 && t <= 0x9F : b == 0xF0 ? t >= 0x90 && t <= 0xBF
             : b == 0xF4 ? t >= 0x80 && t <= 0x8F : (t & 0xC0) == 0x80;
      };
      while (k < n && i + k < bytes.size() && (k == 1 ? second_ok(static_cast<unsigned char>(bytes[i + k])) : (static_cast<unsigned char>(bytes[i + k]) & 0xC0) == 0x80)) ++k;
    }
    out += "\xEF\xBF\xBD", i += k;
  }
  return out;
}

}  // namespace detail

HEADWISE_TEXT_INLINE Decoder Decoder::from_json(const nlohmann::json& decoder, const std::string& where) {
  Decoder d;
  if (!decoder.is_null()) d.add(decoder, where);
  return d;
}

HEADWISE_TEXT_INLINE void Decoder::add(const nlohmann::json& step, const std::string& where) {
  const std::string type = detail::type_of(step);
  if (type == "Sequence") {
    if (!step.contains("decoders") || !step.at("decoders").is_array()) throw detail::tokenizer_error(where, "a Sequence decoder without a \"decoders\" list");
    for (const auto& d : step.at("decoders")) add(d, where);
  } else if (type == "ByteLevel") {
    steps_.push_back(ByteLevel{});
  } else if (type == "Replace") {
    const nlohmann::json& p = step.contains("pattern") ? step.at("pattern") : step;
    if (!p.is_object() || !p.contains("String") || !p.at("String").is_string() || p.at("String").get<std::string>().empty())
      throw detail::tokenizer_error(where, "decoder " + step.dump().substr(0, 120) + ": only a Replace of a {\"String\"} pattern is applied");
    steps_.push_back(Replace{p.at("String").get<std::string>(), detail::string_field(step, "content", where)});
  } else if (type == "ByteFallback") {
    steps_.push_back(ByteFallback{});
  } else if (type == "Fuse") {
    steps_.push_back(Fuse{});
  } else if (type == "Strip") {
    steps_.push_back(strip_of(step, where));
  } else if (type == "Metaspace") {
    const std::string replacement = detail::string_field(step, "replacement", where);
    const bool add_prefix_space = detail::flag_field(step, "add_prefix_space", true, where);
    steps_.push_back(Metaspace{replacement, detail::string_field(step, "prepend_scheme", where, add_prefix_space ? "always" : "never") != "never"});
  } else {
    throw detail::tokenizer_error(where, "decoder " + step.dump().substr(0, 120) +
                         " is not one headwise applies (ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace, Sequence)");
  }
}

HEADWISE_TEXT_INLINE Decoder::Strip Decoder::strip_of(const nlohmann::json& step, const std::string& where) {
  Strip s{detail::string_field(step, "content", where)};
  if (first_invalid_utf8(s.content) != std::string::npos || s.content.empty() || code_point_at(s.content, 0).length != s.content.size())
    throw detail::tokenizer_error(where, "the Strip decoder's content is not one character");
  const auto count = [&](const char* key) {
    if (!step.contains(key) || !step.at(key).is_number_unsigned()) throw detail::tokenizer_error(where, std::string("the Strip decoder has no count \"") + key + "\"");
    return static_cast<std::size_t>(step.at(key).get<std::uint64_t>());
  };
  s.start = count("start"), s.stop = count("stop");
  return s;
}

HEADWISE_TEXT_INLINE std::string Decoder::apply(std::vector<std::string> tokens) const {
  if (steps_.empty()) {
    std::string out;
    for (std::size_t i = 0; i < tokens.size(); ++i) out += (i ? " " : "") + tokens[i];
    return out;
  }
  for (const Step& s : steps_) tokens = std::visit([&](const auto& step) { return step(std::move(tokens)); }, s);
  std::string out;
  for (const std::string& t : tokens) out += t;
  return out;
}

/// (a token with a character that is not a byte character stays as it is)
HEADWISE_TEXT_INLINE std::vector<std::string> Decoder::ByteLevel::operator()(std::vector<std::string> tokens) const {
  static const auto byte_of = [] {
    std::unordered_map<std::string, unsigned char> m;
    for (int b = 0; b < 256; ++b) m[byte_characters()[static_cast<std::size_t>(b)]] = static_cast<unsigned char>(b);
    return m;
  }();
  std::string bytes;
  for (const std::string& t : tokens) {
    std::string mine;
    bool all = true;
    for (std::size_t c = 0; c < t.size() && all;) {
      const std::size_t n = utf8_length(static_cast<unsigned char>(t[c]));
      const auto b = byte_of.find(t.substr(c, n));
      all = b != byte_of.end();
      if (all) mine += char(b->second);
      c += n;
    }
    bytes += all ? mine : t;
  }
  return {detail::lossy_utf8(bytes)};
}

HEADWISE_TEXT_INLINE std::vector<std::string> Decoder::Replace::operator()(std::vector<std::string> tokens) const {
  for (std::string& t : tokens) t = detail::replace_literal(t, pattern, content);
  return tokens;
}

HEADWISE_TEXT_INLINE std::vector<std::string> Decoder::ByteFallback::operator()(std::vector<std::string> tokens) const {
  std::vector<std::string> out;
  std::string bytes;
  std::size_t count = 0;
  const auto flush = [&] {
    if (count == 0) return;
    if (first_invalid_utf8(bytes) == std::string::npos) out.push_back(bytes);
    else for (std::size_t k = 0; k < count; ++k) out.emplace_back("\xEF\xBF\xBD");
    bytes.clear(), count = 0;
  };
  for (std::string& t : tokens) {
    const auto hex = [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); };
    if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>' && hex(t[3]) && hex(t[4])) {
      bytes += char(std::stoi(t.substr(3, 2), nullptr, 16)), ++count;
    } else {
      flush(), out.push_back(std::move(t));
    }
  }
  flush();
  return out;
}

HEADWISE_TEXT_INLINE std::vector<std::string> Decoder::Fuse::operator()(std::vector<std::string> tokens) const {
  std::string all;
  for (const std::string& t : tokens) all += t;
  return {all};
}

HEADWISE_TEXT_INLINE std::vector<std::string> Decoder::Strip::operator()(std::vector<std::string> tokens) const {
  for (std::string& t : tokens) {
    std::size_t begin = 0, end = t.size();
    for (std::size_t k = 0; k < start && t.compare(begin, content.size(), content) == 0 && begin < end; ++k) begin += content.size();
    for (std::size_t k = 0; k < stop && end >= begin + content.size() && t.compare(end - content.size(), content.size(), content) == 0; ++k)
      end -= content.size();
    t = t.substr(begin, end - begin);
  }
  return tokens;
}

/// (the first token's replacement characters are dropped, as Hugging Face drops them, not only the first)
HEADWISE_TEXT_INLINE std::vector<std::string> Decoder::Metaspace::operator()(std::vector<std::string> tokens) const {
  for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = detail::replace_literal(tokens[i], replacement, i == 0 && prepend ? "" : " ");
  return tokens;
}

}  // namespace headwise::text
