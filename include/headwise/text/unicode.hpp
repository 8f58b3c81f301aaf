// What the tokenizer needs to know about Unicode text, defined the way Hugging Face's Rust library
// defines it: UTF-8 code points (decoded, encoded, validated), white space (Rust's
// char::is_whitespace, the Unicode White_Space property: U+180E is not white space), word and
// numeric characters (by Unicode 16.0's General_Category, unicode_categories.hpp, the one table
// the regexes read too), the four normalization forms and lower case (from utf8proc, Debian's
// libutf8proc-dev, a library made for it; the canonical order of marks is ours, n log n), and
// GPT-2's byte-to-character table.
//
//   std::string nfc = headwise::text::normalize("e\u0301", headwise::text::NormalForm::nfc);  // "é"
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "headwise/detail/compiled.hpp"

namespace headwise::text {

/// A tokenizer file or text headwise cannot use: the message names the file and the problem.
class TokenizerError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {
/// The one form of a tokenizer's errors: "headwise: tokenizer: <where>: <what>" (where: the file,
/// and the step in it).
inline TokenizerError tokenizer_error(const std::string& where, const std::string& what) {
  return TokenizerError("headwise: tokenizer: " + where + ": " + what);
}
}  // namespace detail

enum class NormalForm { nfc, nfd, nfkc, nfkd };

/// The code point starting at text[at] (valid UTF-8 assumed) and its length in bytes.
struct CodePoint {
  char32_t value;
  std::size_t length;
};
inline CodePoint code_point_at(std::string_view text, std::size_t at) {
  const auto b = static_cast<unsigned char>(text[at]);
  const std::size_t n = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
  char32_t c = n == 1 ? b : n == 2 ? (b & 0x1F) : n == 3 ? (b & 0x0F) : (b & 0x07);
  for (std::size_t k = 1; k < n; ++k) c = (c << 6) | (static_cast<unsigned char>(text[at + k]) & 0x3F);
  return {c, n};
}
/// The length in bytes of the UTF-8 character that starts with byte b.
inline std::size_t utf8_length(unsigned char b) { return b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4; }

/// The UTF-8 encoding of code point c.
std::string utf8(char32_t c);

/// The offset of the first byte of text that does not start a valid UTF-8 character (overlong
/// forms, surrogates and code points past U+10FFFF are invalid), or npos.
std::size_t first_invalid_utf8(std::string_view text);

/// Unicode White_Space (Rust's char::is_whitespace).
inline bool is_white_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) ||
         c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}
/// A word character, as the regex crate's `\\w`: letters, marks, decimal digits, connector punctuation.
bool is_word_character(char32_t c);
/// A numeric character, as Rust's char::is_numeric (categories Nd, Nl, No).
bool is_numeric(char32_t c);

/// text in normal form `form` (valid UTF-8 assumed; ASCII comes back as it is).
std::string normalize(std::string_view text, NormalForm form);
/// text in lower case, code point by code point, as Rust's char::to_lowercase.
std::string lowercase(std::string_view text);

/// GPT-2's bytes_to_unicode: bytes 33-126, 161-172 and 174-255 stand for themselves, the other 68
/// in increasing order become U+0100, U+0101, ...; as UTF-8 strings, one per byte.
const std::vector<std::string>& byte_characters();

}  // namespace headwise::text

// This header's definitions, where they are compiled (detail/compiled.hpp):
#include HEADWISE_TEXT_DEFINITIONS_OF("headwise/text/definitions/unicode.hpp")
