// A pre-tokenizer's regular expression, matched the way Hugging Face's Rust library matches it
// (Oniguruma's find_iter): PCRE2 with Unicode properties, JIT-compiled where it can be, \s and \S
// meaning Unicode White_Space as Oniguruma means it (PCRE2's own \s also counts U+180E), and an
// empty match right after a match skipped. Matching has bounds: a match limit, a heap limit and a
// JIT stack, each reported by name with the pattern when a text exceeds it.
//
//   headwise::text::Regex digits(R"(\p{N}{1,3})", "tokenizer.json");
//   auto pieces = digits.find_matches("abc12345");  // (0,3) no, (3,6) match, (6,8) match
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "headwise/text/unicode.hpp"

namespace headwise::text {

/// A byte range of a text and whether a pattern matched it.
struct Match {
  std::size_t begin, end;
  bool matched;
};

class Regex {
 public:
  /// How much work one match may take before it is refused (PCRE2's match and heap limits).
  static constexpr std::uint32_t match_limit = 100'000'000, heap_limit_kib = 1'048'576;
  /// The largest JIT stack a match may grow (the machine stack's 32 KiB are tried first).
  static constexpr std::size_t jit_stack_bytes = std::size_t(256) << 20;

  /// pattern: PCRE2 syntax (Oniguruma's, as tokenizer.json writes it); where: the file, for messages.
  Regex(const std::string& pattern, const std::string& where);
  /// The pattern that matches `literal` and nothing else.
  static Regex literal(const std::string& literal, const std::string& where);

  /// text cut at every match, in order, as Hugging Face's Pattern::find_matches: non-matched
  /// ranges between the matches, empty matches kept (they are where a split happens).
  std::vector<Match> find_matches(std::string_view text) const;

  const std::string& pattern() const { return pattern_; }

 private:
  struct Compiled;
  std::string pattern_, where_;
  std::shared_ptr<const Compiled> compiled_;
};

}  // namespace headwise::text

// ---- Definitions (detail/compiled.hpp: header-only, or src/text.cpp) ----
#if HEADWISE_TEXT_DEFINITIONS
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

namespace headwise::text {
namespace detail {

/// Unicode White_Space as a PCRE2 class body.
inline constexpr const char* white_space_class = R"(\t\n\x0B\f\r \x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";

// pattern with \s and \S spelled as White_Space (inside a class, \s becomes its members; \S
// inside a class has no such spelling and is refused by name).
HEADWISE_TEXT_INLINE std::string with_white_space(const std::string& pattern, const std::string& where) {
  std::string out;
  bool in_class = false;
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char e = pattern[++i];
      if (e == 's') out += in_class ? std::string(white_space_class) : "[" + std::string(white_space_class) + "]";
      else if (e == 'S' && !in_class) out += "[^" + std::string(white_space_class) + "]";
      else if (e == 'S') throw TokenizerError("headwise: tokenizer: " + where + ": the regex " + pattern + " has \\S inside a class, which headwise cannot spell as Unicode White_Space");
      else out += c, out += e;
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true, out += c;
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out += pattern[++i];  // (a leading ] is a member)
      continue;
    }
    if (c == '[' && in_class && i + 1 < pattern.size() && pattern[i + 1] == ':') {  // [:alpha:]
      const std::size_t close = pattern.find(":]", i + 2);
      if (close != std::string::npos) {
        out += pattern.substr(i, close + 2 - i), i = close + 1;
        continue;
      }
    }
    if (c == ']' && in_class) in_class = false;
    out += c;
  }
  return out;
}

}  // namespace detail

struct Regex::Compiled {
  struct FreeCode {
    void operator()(pcre2_code* c) const { pcre2_code_free(c); }
  };
  std::unique_ptr<pcre2_code, FreeCode> code;
};

HEADWISE_TEXT_INLINE Regex::Regex(const std::string& pattern, const std::string& where) : pattern_(pattern), where_(where) {
  const std::string spelled = detail::with_white_space(pattern, where);
  int error = 0;
  PCRE2_SIZE offset = 0;
  auto compiled = std::make_shared<Compiled>();
  compiled->code.reset(pcre2_compile(reinterpret_cast<PCRE2_SPTR>(spelled.data()), spelled.size(), PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr));
  if (!compiled->code) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof message);
    throw TokenizerError("headwise: tokenizer: " + where + ": the regex " + pattern + " does not compile (at offset " + std::to_string(offset) +
                         " of " + spelled + "): " + reinterpret_cast<const char*>(message));
  }
  pcre2_jit_compile(compiled->code.get(), PCRE2_JIT_COMPLETE);  // (the interpreter matches the same where JIT is unavailable)
  compiled_ = std::move(compiled);
}

HEADWISE_TEXT_INLINE Regex Regex::literal(const std::string& literal, const std::string& where) {
  std::string quoted;
  for (const char c : literal) {
    if (std::string_view("\\^$.|?*+()[]{}-#&~ \t\n\r\f\v").find(c) != std::string_view::npos) quoted += '\\';
    quoted += c;
  }
  return Regex(quoted, where);
}

HEADWISE_TEXT_INLINE std::vector<Match> Regex::find_matches(std::string_view text) const {
  std::vector<Match> out;
  if (text.empty()) return {{0, 0, false}};
  pcre2_code* code = compiled_->code.get();
  const std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> data(pcre2_match_data_create_from_pattern(code, nullptr),
                                                                               &pcre2_match_data_free);
  const std::unique_ptr<pcre2_match_context, decltype(&pcre2_match_context_free)> context(pcre2_match_context_create(nullptr),
                                                                                        &pcre2_match_context_free);
  std::unique_ptr<pcre2_jit_stack, decltype(&pcre2_jit_stack_free)> stack(nullptr, &pcre2_jit_stack_free);
  pcre2_set_match_limit(context.get(), match_limit);
  pcre2_set_heap_limit(context.get(), heap_limit_kib);
  std::size_t at = 0, previous = 0, last_match_end = std::string_view::npos;
  while (at <= text.size()) {
    int rc = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), at, PCRE2_NO_UTF_CHECK, data.get(), context.get());
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT && !stack) {  // grow the JIT stack once, and match again
      stack.reset(pcre2_jit_stack_create(32 * 1024, jit_stack_bytes, nullptr));
      if (!stack) throw TokenizerError("headwise: tokenizer: cannot reserve a JIT stack of " + std::to_string(jit_stack_bytes >> 20) + " MiB");
      pcre2_jit_stack_assign(context.get(), nullptr, stack.get());
      continue;
    }
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(rc, message, sizeof message);
      const std::string limit = rc == PCRE2_ERROR_MATCHLIMIT ? " (" + std::to_string(match_limit) + " steps)"
                                : rc == PCRE2_ERROR_HEAPLIMIT ? " (" + std::to_string(heap_limit_kib >> 10) + " MiB of heap)"
                                : rc == PCRE2_ERROR_JIT_STACKLIMIT ? " (a JIT stack of " + std::to_string(jit_stack_bytes >> 20) + " MiB)"
                                                                   : "";
      throw TokenizerError("headwise: tokenizer: " + where_ + ": the regex " + pattern_ + " failed on a piece of " + std::to_string(text.size()) +
                           " bytes: " + reinterpret_cast<const char*>(message) + limit);
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(data.get());
    const std::size_t begin = ov[0], end = ov[1];
    if (begin == end && at == last_match_end) {  // an empty match right after a match: skipped, one character on
      if (at == text.size()) break;
      at += utf8_length(static_cast<unsigned char>(text[at]));
      continue;
    }
    if (previous != begin) out.push_back({previous, begin, false});
    out.push_back({begin, end, true});
    previous = end, at = end, last_match_end = end;
  }
  if (previous != text.size()) out.push_back({previous, text.size(), false});
  return out;
}

}  // namespace headwise::text
#endif  // HEADWISE_TEXT_DEFINITIONS
