// The definitions of headwise/text/unicode.hpp, included at its end where the
// tokenizer's definitions are compiled: header-only, or in src/text.cpp (detail/compiled.hpp).
#pragma once

#include "headwise/text/unicode.hpp"

#include <algorithm>
#include <iterator>

#include <utf8proc.h>

#include "headwise/text/unicode_categories.hpp"

namespace headwise::text {
namespace detail {

/// The General_Category of code point c (Unicode 16.0; c past U+10FFFF: Cn).
HEADWISE_TEXT_INLINE GeneralCategory general_category(char32_t c) {
  if (c > 0x10FFFF) return GeneralCategory::Cn;
  const auto after = std::upper_bound(std::begin(category_runs), std::end(category_runs), c,
                                      [](char32_t v, const CategoryRun& r) { return v < r.first; });
  return std::prev(after)->category;
}

}  // namespace detail

HEADWISE_TEXT_INLINE std::string utf8(char32_t c) {
  std::string s;
  if (c < 0x80) {
    s += char(c);
  } else if (c < 0x800) {
    s += char(0xC0 | (c >> 6)), s += char(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    s += char(0xE0 | (c >> 12)), s += char(0x80 | ((c >> 6) & 0x3F)), s += char(0x80 | (c & 0x3F));
  } else {
    s += char(0xF0 | (c >> 18)), s += char(0x80 | ((c >> 12) & 0x3F)), s += char(0x80 | ((c >> 6) & 0x3F));
    s += char(0x80 | (c & 0x3F));
  }
  return s;
}

HEADWISE_TEXT_INLINE std::size_t first_invalid_utf8(std::string_view text) {
  std::size_t i = 0;
  while (i < text.size()) {
    const auto b = static_cast<unsigned char>(text[i]);
    if (b < 0x80) {
      ++i;
      continue;
    }
    const std::size_t n = (b >> 5) == 0x6 ? 2 : (b >> 4) == 0xE ? 3 : (b >> 3) == 0x1E ? 4 : 0;
    if (n == 0 || i + n > text.size()) return i;
    char32_t c = n == 2 ? (b & 0x1F) : n == 3 ? (b & 0x0F) : (b & 0x07);
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

HEADWISE_TEXT_INLINE bool is_word_character(char32_t c) {
  if (c < 0x80) return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
  if (c == 0x200C || c == 0x200D) return true;  // (Join_Control)
  using G = GeneralCategory;
  switch (detail::general_category(c)) {
    case G::Lu: case G::Ll: case G::Lt: case G::Lm: case G::Lo: case G::Mn: case G::Mc: case G::Me: case G::Nd: case G::Nl: case G::Pc:
      return true;
    default:
      return false;
  }
}

HEADWISE_TEXT_INLINE bool is_numeric(char32_t c) {
  if (c < 0x80) return c >= '0' && c <= '9';
  const GeneralCategory k = detail::general_category(c);
  return k == GeneralCategory::Nd || k == GeneralCategory::Nl || k == GeneralCategory::No;
}

// Normalization in three passes, each linear in the text (n log n in a run of marks): 1. each
// code point decomposed on its own (utf8proc_decompose_char, canonically or for compatibility);
// 2. each run of non-starters (canonical combining class > 0) sorted by class, stably: the
// canonical order (utf8proc's own reordering swaps neighbours, O(n^2) in a long run of marks);
// 3. for NFC and NFKC, utf8proc_normalize_utf32 composes (it does not reorder).
HEADWISE_TEXT_INLINE std::string normalize(std::string_view text, NormalForm form) {
  bool ascii = true;
  for (const char c : text) ascii = ascii && static_cast<unsigned char>(c) < 0x80;
  if (ascii) return std::string(text);
  if (const std::size_t bad = first_invalid_utf8(text); bad != std::string_view::npos)  // (utf8proc_map refused it too)
    throw TokenizerError("headwise: tokenizer: Unicode normalization of text that is not valid UTF-8 (at byte " + std::to_string(bad) + ")");
  const bool compose = form == NormalForm::nfc || form == NormalForm::nfkc;
  int options = UTF8PROC_STABLE | (compose ? UTF8PROC_COMPOSE : UTF8PROC_DECOMPOSE);
  if (form == NormalForm::nfkc || form == NormalForm::nfkd) options |= UTF8PROC_COMPAT;
  const auto fail = [](utf8proc_ssize_t n) { return TokenizerError(std::string("headwise: tokenizer: Unicode normalization failed: ") + utf8proc_errmsg(n)); };
  // 1. decompose
  std::vector<utf8proc_int32_t> points;
  points.reserve(text.size());
  utf8proc_int32_t one[32];  // (the longest decomposition, U+FDFA's for compatibility, has 18)
  for (std::size_t i = 0; i < text.size();) {
    const CodePoint c = code_point_at(text, i);
    int boundary = 0;
    const utf8proc_ssize_t n = utf8proc_decompose_char(static_cast<utf8proc_int32_t>(c.value), one, 32, static_cast<utf8proc_option_t>(options), &boundary);
    if (n < 0) throw fail(n);
    if (n > 32) throw fail(UTF8PROC_ERROR_OVERFLOW);
    points.insert(points.end(), one, one + n);
    i += c.length;
  }
  // 2. canonical order
  const auto ccc = [](utf8proc_int32_t c) { return utf8proc_get_property(c)->combining_class; };
  for (std::size_t i = 0; i < points.size();) {
    if (ccc(points[i]) == 0) {
      ++i;
      continue;
    }
    std::size_t end = i + 1;
    while (end < points.size() && ccc(points[end]) != 0) ++end;
    const auto run = points.begin() + static_cast<std::ptrdiff_t>(i);
    if (end - i > 1) std::stable_sort(run, run + static_cast<std::ptrdiff_t>(end - i), [&](utf8proc_int32_t a, utf8proc_int32_t b) { return ccc(a) < ccc(b); });
    i = end;
  }
  // 3. compose
  utf8proc_ssize_t length = static_cast<utf8proc_ssize_t>(points.size());
  if (compose) length = utf8proc_normalize_utf32(points.data(), length, static_cast<utf8proc_option_t>(options));
  if (length < 0) throw fail(length);
  std::string out;
  out.reserve(text.size());
  for (utf8proc_ssize_t k = 0; k < length; ++k) out += utf8(static_cast<char32_t>(points[static_cast<std::size_t>(k)]));
  return out;
}

HEADWISE_TEXT_INLINE std::string lowercase(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    const CodePoint c = code_point_at(text, i);
    if (c.value < 0x80) out += char(c.value >= 'A' && c.value <= 'Z' ? c.value + 32 : c.value);
    else if (c.value == 0x130) out += "i\xCC\x87";  // (the one unconditional lower case of two code points)
    else out += utf8(static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c.value))));
    i += c.length;
  }
  return out;
}

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

}  // namespace headwise::text
