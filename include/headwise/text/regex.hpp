// A pre-tokenizer's regular expression, matched the way Hugging Face's Rust library matches it
// (Oniguruma's find_iter): PCRE2 with Unicode properties, JIT-compiled where it can be, and an
// empty match right after a match skipped. \p{..}, \P{..}, \d and \D name General_Category by
// Unicode 16.0 (unicode_categories.hpp, as Hugging Face's Oniguruma does), \s and \S Unicode
// White_Space as Oniguruma means it (PCRE2's own \s also counts U+180E), whatever the Unicode
// version of PCRE2's tables (asked at run time, spelled_for_pcre2): of 14.0.0 (Debian 12's PCRE2
// 10.42), PCRE2's own \p{X} or the few code points Unicode 16 added to X since, a class of their
// own; of 16.0.0, \p{X}; of another version, or where PCRE2's \p{X} matches what X no longer holds
// (\p{Mn}, \p{C}) or cannot be combined exactly (\P{X} inside a class, a class that folds case),
// every code point of X, hundreds of ranges that PCRE2 tries in turn. A property it does not know
// is refused by name. Matching has bounds: the work of a whole piece (a match limit that grows with
// the piece, so that a regex that backtracks to the end of the piece from every position is
// refused in time linear in the piece, not quadratic), a heap limit and a JIT stack, each reported
// by name with the pattern and the piece's size when a text exceeds it.
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
  /// The work a piece of n bytes may take, in steps of PCRE2's match limit: work_floor +
  /// work_per_byte * n. A search that takes at most free_steps is not counted (each moves on by a
  /// character at least, so those cost at most ~2 n free_steps); a longer one is retried with twice
  /// the limit until it ends, and all its tries are counted. Real tokenizers' regexes take under
  /// 30 steps a search, and 1-2 a byte of a long run (of spaces, capitals), JIT or not.
  static constexpr std::uint64_t work_floor = 1'000'000, work_per_byte = 32;
  static constexpr std::uint32_t free_steps = 256;
  /// The heap one search may take (PCRE2's heap limit, where it runs without JIT).
  static constexpr std::uint32_t heap_limit_kib = 1'048'576;
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

namespace detail {
/// The Unicode version of the linked PCRE2's tables (PCRE2_CONFIG_UNICODE_VERSION: "14.0.0" for 10.42).
std::string pcre2_unicode_version();
/// pattern as headwise gives it to a PCRE2 whose tables are of Unicode pcre2_unicode (Regex gives
/// pcre2_unicode_version(); any other version than 14.0.0 and 16.0.0, "" too, spells every class as
/// code points). See its definition.
std::string spelled_for_pcre2(const std::string& pattern, const std::string& where, const std::string& pcre2_unicode);
}  // namespace detail

}  // namespace headwise::text

// This header's definitions, where they are compiled (detail/compiled.hpp):
#include HEADWISE_TEXT_DEFINITIONS_OF("headwise/text/definitions/regex.hpp")
