// The definitions of headwise/text/regex.hpp, included at its end where the
// tokenizer's definitions are compiled: header-only, or in src/text.cpp (detail/compiled.hpp).
#pragma once

#include "headwise/text/regex.hpp"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <iterator>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "headwise/text/unicode_categories.hpp"

namespace headwise::text {
namespace detail {

/// Code points as ranges [first, last], in any order until merged() sorts and joins them.
using CodeRanges = std::vector<std::pair<char32_t, char32_t>>;

/// r sorted, overlapping and adjacent ranges joined.
HEADWISE_TEXT_INLINE CodeRanges merged(CodeRanges r) {
  std::sort(r.begin(), r.end());
  CodeRanges out;
  for (const auto& [first, last] : r) {
    if (!out.empty() && first <= out.back().second + 1) out.back().second = std::max(out.back().second, last);
    else out.push_back({first, last});
  }
  return out;
}

/// The code points U+0000..U+10FFFF that r (merged) leaves out.
HEADWISE_TEXT_INLINE CodeRanges complement(const CodeRanges& r) {
  CodeRanges out;
  char32_t next = 0;
  for (const auto& [first, last] : r) {
    if (first > next) out.push_back({next, first - 1});
    next = last + 1;
  }
  if (next <= 0x10FFFF) out.push_back({next, 0x10FFFF});
  return out;
}

/// Unicode White_Space (is_white_space), which `\\s` and `\\S` name.
HEADWISE_TEXT_INLINE CodeRanges white_space_ranges() {
  return {{0x09, 0x0D}, {0x20, 0x20}, {0x85, 0x85}, {0xA0, 0xA0}, {0x1680, 0x1680}, {0x2000, 0x200A}, {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}};
}

constexpr std::uint32_t category_bit(GeneralCategory g) { return std::uint32_t(1) << static_cast<int>(g); }

/// The General_Categories `\\p{name}` names, a category_bit each, or 0: a short name (L, Lu, LC, ...)
/// or a long one (Letter, Uppercase_Letter, Cased_Letter, ...), compared as Oniguruma compares
/// them: case, spaces, '_' and '-' ignored.
HEADWISE_TEXT_INLINE std::uint32_t category_set(std::string_view name) {
  using G = GeneralCategory;
  struct Name {
    const char *short_name, *long_name;
    std::uint32_t set;
  };
  constexpr std::uint32_t lc = category_bit(G::Lu) | category_bit(G::Ll) | category_bit(G::Lt);
  constexpr std::uint32_t l = lc | category_bit(G::Lm) | category_bit(G::Lo);
  constexpr std::uint32_t m = category_bit(G::Mn) | category_bit(G::Mc) | category_bit(G::Me);
  constexpr std::uint32_t n = category_bit(G::Nd) | category_bit(G::Nl) | category_bit(G::No);
  constexpr std::uint32_t p = category_bit(G::Pc) | category_bit(G::Pd) | category_bit(G::Ps) | category_bit(G::Pe) | category_bit(G::Pi) |
                              category_bit(G::Pf) | category_bit(G::Po);
  constexpr std::uint32_t s = category_bit(G::Sm) | category_bit(G::Sc) | category_bit(G::Sk) | category_bit(G::So);
  constexpr std::uint32_t z = category_bit(G::Zs) | category_bit(G::Zl) | category_bit(G::Zp);
  constexpr std::uint32_t c = category_bit(G::Cc) | category_bit(G::Cf) | category_bit(G::Cs) | category_bit(G::Co) | category_bit(G::Cn);
  static constexpr Name names[] = {
      {"l", "letter", l}, {"lc", "casedletter", lc}, {"lu", "uppercaseletter", category_bit(G::Lu)}, {"ll", "lowercaseletter", category_bit(G::Ll)},
      {"lt", "titlecaseletter", category_bit(G::Lt)}, {"lm", "modifierletter", category_bit(G::Lm)}, {"lo", "otherletter", category_bit(G::Lo)},
      {"m", "mark", m}, {"m", "combiningmark", m}, {"mn", "nonspacingmark", category_bit(G::Mn)}, {"mc", "spacingmark", category_bit(G::Mc)},
      {"me", "enclosingmark", category_bit(G::Me)}, {"n", "number", n}, {"nd", "decimalnumber", category_bit(G::Nd)},
      {"nl", "letternumber", category_bit(G::Nl)}, {"no", "othernumber", category_bit(G::No)}, {"p", "punctuation", p},
      {"pc", "connectorpunctuation", category_bit(G::Pc)}, {"pd", "dashpunctuation", category_bit(G::Pd)}, {"ps", "openpunctuation", category_bit(G::Ps)},
      {"pe", "closepunctuation", category_bit(G::Pe)}, {"pi", "initialpunctuation", category_bit(G::Pi)}, {"pf", "finalpunctuation", category_bit(G::Pf)},
      {"po", "otherpunctuation", category_bit(G::Po)}, {"s", "symbol", s}, {"sm", "mathsymbol", category_bit(G::Sm)},
      {"sc", "currencysymbol", category_bit(G::Sc)}, {"sk", "modifiersymbol", category_bit(G::Sk)}, {"so", "othersymbol", category_bit(G::So)},
      {"z", "separator", z}, {"zs", "spaceseparator", category_bit(G::Zs)}, {"zl", "lineseparator", category_bit(G::Zl)},
      {"zp", "paragraphseparator", category_bit(G::Zp)}, {"c", "other", c}, {"cc", "control", category_bit(G::Cc)}, {"cf", "format", category_bit(G::Cf)},
      {"cs", "surrogate", category_bit(G::Cs)}, {"co", "privateuse", category_bit(G::Co)}, {"cn", "unassigned", category_bit(G::Cn)}};
  std::string key;
  for (const char ch : name)
    if (ch != ' ' && ch != '_' && ch != '-') key += static_cast<char>(ch >= 'A' && ch <= 'Z' ? ch + 32 : ch);
  for (const Name& k : names)
    if (key == k.short_name || key == k.long_name) return k.set;
  return 0;
}

/// The code points whose General_Category is in set (category_bit's).
HEADWISE_TEXT_INLINE CodeRanges category_ranges(std::uint32_t set) {
  CodeRanges out;
  const std::size_t count = std::size(category_runs);
  for (std::size_t k = 0; k < count; ++k) {
    if (!(set & category_bit(category_runs[k].category))) continue;
    const char32_t first = category_runs[k].first, last = k + 1 < count ? category_runs[k + 1].first - 1 : 0x10FFFF;
    if (!out.empty() && out.back().second + 1 == first) out.back().second = last;
    else out.push_back({first, last});
  }
  return out;
}

/// r as the members of a PCRE2 class (`\\x{41}-\\x{5A}` ...), surrogates left out (UTF mode refuses them).
HEADWISE_TEXT_INLINE std::string class_members(const CodeRanges& r) {
  std::string out;
  const auto hex = [](char32_t c) {
    char buffer[16];
    std::snprintf(buffer, sizeof buffer, "\\x{%X}", static_cast<unsigned>(c));
    return std::string(buffer);
  };
  const auto add = [&](char32_t first, char32_t last) {
    if (first > last) return;
    out += hex(first);
    if (last > first) out += "-" + hex(last);
  };
  CodeRanges in_order = merged(r);  // (PCRE2 tries a class's ranges in turn: the widest first, CJK's and Hangul's)
  std::stable_sort(in_order.begin(), in_order.end(), [](const auto& a, const auto& b) { return a.second - a.first > b.second - b.first; });
  for (const auto& [first, last] : in_order) {
    if (last < 0xD800 || first > 0xDFFF) add(first, last);
    else add(first, 0xD7FF), add(std::max<char32_t>(first, 0xE000), last);
  }
  return out;
}

/// A set of General_Categories for PCRE2: PCRE2's own `\\p{..}` and code points, members of a class,
/// and the code points Unicode 16 added to those properties since PCRE2's tables (one_character).
struct SpelledSet {
  std::string properties;
  CodeRanges ranges, added;
};

/// The categories of set (category_bit's) by Unicode 16.0.0, for a PCRE2 whose tables are of
/// Unicode pcre2_unicode. 14.0.0 (category_changes' version): PCRE2's \\p{..} of the set, and
/// added, the code points that entered the set since (a row of category_changes whose `is` is in
/// the set and `was` is not), where none left it (a row with `was` in and `is` out: \\p{Mn},
/// U+1171E became Mc; \\p{C} and \\p{Cn}, the code points assigned since; \\p{M} is exact).
/// 16.0.0: PCRE2's \\p{..} alone. Otherwise: ranges, the set's code points.
HEADWISE_TEXT_INLINE SpelledSet spelled_set(std::uint32_t set, const std::string& pcre2_unicode) {
  SpelledSet out;
  if (pcre2_unicode == changes_since_version) {
    for (const CategoryChange& k : category_changes) {
      const bool was = set & category_bit(k.was), is = set & category_bit(k.is);
      if (was && !is) return {"", category_ranges(set), {}};
      if (is && !was) out.added.push_back({k.first, k.last});
    }
  } else if (pcre2_unicode != unicode_version) {
    return {"", category_ranges(set), {}};
  }
  // PCRE2's names: a whole group by its letter (\\p{L}), the rest two letters each (\\p{Lu}\\p{Lt})
  std::uint32_t rest = set;
  for (const char* group : {"L", "M", "N", "P", "S", "Z", "C"}) {
    const std::uint32_t g = category_set(group);
    if ((rest & g) == g) out.properties += "\\p{" + std::string(group) + "}", rest &= ~g;
  }
  for (std::size_t k = 0; k < std::size(category_names); ++k)
    if (rest & (std::uint32_t(1) << k)) out.properties += "\\p{" + std::string(category_names[k]) + "}";
  return out;
}

/// One character in members (PCRE2's class syntax) or in added, or (negated) in neither. added is
/// a class of its own, after the members' (atomic: a character in both is matched once, not again
/// on backtracking) or in a lookahead before them: a class of ranges alone, which PCRE2 passes
/// over in one comparison for a character below them all (added: above U+0800). In the members'
/// class, PCRE2 would try each of them for every character the properties do not match: every
/// space and punctuation mark of an English text.
HEADWISE_TEXT_INLINE std::string one_character(const std::string& members, const CodeRanges& added, bool negated) {
  const std::string in = members.empty() ? "" : "[" + std::string(negated ? "^" : "") + members + "]";
  if (added.empty()) return !in.empty() ? in : negated ? "(?s:.)" : "(?!)";
  const std::string extra = "[" + class_members(added) + "]";
  if (negated) return "(?:(?!" + extra + ")" + (in.empty() ? "(?s:.)" : in) + ")";
  return in.empty() ? extra : "(?>" + in + "|" + extra + ")";
}

HEADWISE_TEXT_INLINE std::string pcre2_unicode_version() {
  char version[64] = {};  // (PCRE2 asks for 24 code units at least)
  pcre2_config(PCRE2_CONFIG_UNICODE_VERSION, version);
  return version;
}

/// The set an escape names: \s's code points, or the categories of \d or \p{..}; negated for \S,
/// \D, \P{..} and \p{^..}; `property` for \p and \P.
struct NamedSet {
  CodeRanges ranges;
  std::uint32_t set = 0;
  bool negated = false, property = false;
};

/// spelled_for_pcre2's walk over a pattern: what it has written, and an open class's parts (its
/// literal members, PCRE2's \p{..} of its escapes, their code points and those added since).
struct Pcre2Spelling {
  const std::string &pattern, &where, &pcre2_unicode;
  std::string out = {}, class_body = {}, class_properties = {};
  CodeRanges class_ranges = {}, class_added = {};
  bool in_class = false, class_negated = false, caseless = false;
  std::vector<bool> caseless_outside = {};  // (one per open group)

  TokenizerError refused(const std::string& why) const { return tokenizer_error(where, "the regex " + pattern + " " + why); }

  std::string spelled() {
    for (std::size_t i = 0; i < pattern.size(); ++i) {
      const char c = pattern[i];
      if (c == '\\' && i + 1 < pattern.size()) i = escape(i + 1);
      else if (in_class) i = class_character(i);
      else if (c == '[') i = open_class(i);
      else if (c == '(') i = open_group(i);
      else {
        if (c == ')' && !caseless_outside.empty()) caseless = caseless_outside.back(), caseless_outside.pop_back();
        out += c;
      }
    }
    if (in_class) out += "[" + std::string(class_negated ? "^" : "") + class_body;  // (unterminated: PCRE2 says so)
    return out;
  }

  /// The \p{..} or \P{..} whose letter is at pattern[i]: its categories; i moved to its }.
  NamedSet property(std::size_t& i) const {
    const char e = pattern[i];
    const std::size_t close = pattern.find('}', i);
    if (i + 1 >= pattern.size() || pattern[i + 1] != '{')
      throw refused(std::string("has \\") + e + " without braces, which Oniguruma (Hugging Face's regex engine) reads as the letter " + e + ": write \\" + e + "{...}");
    if (close == std::string::npos) throw refused(std::string("has \\") + e + "{ without its closing }");
    std::string name = pattern.substr(i + 2, close - i - 2);
    NamedSet named{{}, 0, e == 'P', true};
    if (!name.empty() && name.front() == '^') named.negated = !named.negated, name.erase(0, 1);
    named.set = category_set(name);
    if (named.set == 0)
      throw refused("names the property " + pattern.substr(i - 1, close - i + 2) + ", which headwise does not spell: it knows the General_Category "
                    "names of Unicode " + unicode_version + " (L, LC, Lu, Ll, Lt, Lm, Lo, M, Mn, Mc, Me, N, Nd, Nl, No, P, Pc, Pd, Ps, Pe, Pi, Pf, Po, S, "
                    "Sm, Sc, Sk, So, Z, Zs, Zl, Zp, C, Cc, Cf, Cs, Co, Cn and their long names), no scripts or other properties");
    i = close;
    return named;
  }

  /// The escape whose letter is at pattern[i]; returns the index of its last character.
  std::size_t escape(std::size_t i) {
    std::string& sink = in_class ? class_body : out;
    const char e = pattern[i];
    NamedSet named;
    if (e == 's' || e == 'S') named = {white_space_ranges(), 0, e == 'S', false};
    else if (e == 'd' || e == 'D') named = {{}, category_bit(GeneralCategory::Nd), e == 'D', false};
    else if (e == 'p' || e == 'P') named = property(i);
    else if (e == 'Q') {  // \Q...\E: literal
      const std::size_t end = pattern.find("\\E", i + 1);
      const std::size_t stop = end == std::string::npos ? pattern.size() : end + 2;
      sink += pattern.substr(i - 1, stop - (i - 1));
      return stop - 1;
    } else {
      sink += '\\', sink += e;
      if (e == 'c' && i + 1 < pattern.size()) sink += pattern[++i];  // (\cX: X is the escape's own)
      return i;
    }
    write(named);
    return i;
  }

  /// A named set where it stands: inside a class, PCRE2's \p{..} (with the code points added
  /// since) or code points; outside, one character of it (one_character).
  void write(const NamedSet& named) {
    if (in_class && named.set != 0 && !named.negated && !caseless) {
      const SpelledSet spelled = spelled_set(named.set, pcre2_unicode);
      class_properties += spelled.properties;
      class_ranges.insert(class_ranges.end(), spelled.ranges.begin(), spelled.ranges.end());
      class_added.insert(class_added.end(), spelled.added.begin(), spelled.added.end());
    } else if (in_class) {
      const CodeRanges members = named.set != 0 ? category_ranges(named.set) : named.ranges;
      const CodeRanges add = named.negated ? complement(merged(members)) : members;
      class_ranges.insert(class_ranges.end(), add.begin(), add.end());
    } else {
      const SpelledSet spelled = named.set != 0 ? spelled_set(named.set, pcre2_unicode) : SpelledSet{"", named.ranges, {}};
      const std::string one = one_character(spelled.properties + class_members(spelled.ranges), spelled.added, named.negated);
      out += named.property && caseless ? "(?-i:" + one + ")" : one;
    }
  }

  /// A character of an open class at pattern[i] (not an escape); returns the index of its last.
  std::size_t class_character(std::size_t i) {
    const char c = pattern[i];
    if (c == '[' && i + 1 < pattern.size() && pattern[i + 1] == ':') {  // [:alpha:] (PCRE2's, under PCRE2_UCP)
      if (const std::size_t close = pattern.find(":]", i + 2); close != std::string::npos) {
        class_body += pattern.substr(i, close + 2 - i);
        return close + 1;
      }
    }
    if (c != ']') {
      class_body += c;
      return i;
    }
    // The class closes: its literal members, then its escapes' properties and code points.
    in_class = false;
    std::size_t backslashes = 0;  // (before a closing -: an odd number escape it)
    while (class_body.size() >= backslashes + 2 && class_body[class_body.size() - 2 - backslashes] == '\\') ++backslashes;
    if (!class_body.empty() && class_body.back() == '-' && backslashes % 2 == 0)
      class_body.insert(class_body.size() - 1, "\\");  // (a - before an escape was a literal -)
    out += one_character(class_body + class_properties + class_members(class_ranges), class_added, class_negated);
    return i;
  }

  /// The [ at pattern[i] opens a class; returns the index of the last character read.
  std::size_t open_class(std::size_t i) {
    in_class = true, class_body.clear(), class_properties.clear(), class_ranges.clear(), class_added.clear();
    class_negated = i + 1 < pattern.size() && pattern[i + 1] == '^';
    if (class_negated) ++i;
    if (i + 1 < pattern.size() && pattern[i + 1] == ']') class_body += "\\]", ++i;  // (a leading ] is a member)
    return i;
  }

  /// The ( at pattern[i]: a comment, options, or a group; returns the index of the last character
  /// read. Options: (?i) holds to the end of the group around it, (?i:...) inside its own.
  std::size_t open_group(std::size_t i) {
    if (pattern.compare(i, 3, "(?#") == 0) {  // a comment, copied as it is
      const std::size_t close = pattern.find(')', i);
      const std::size_t stop = close == std::string::npos ? pattern.size() : close + 1;
      out += pattern.substr(i, stop - i);
      return stop - 1;
    }
    bool options = false, now = caseless;
    std::size_t k = i + 1;
    if (pattern.compare(i, 2, "(?") == 0) {
      bool on = true;
      for (k = i + 2; k < pattern.size() && (std::isalpha(static_cast<unsigned char>(pattern[k])) || pattern[k] == '-' || pattern[k] == '^'); ++k) {
        if (pattern[k] == '-') on = false;
        else if (pattern[k] == '^') now = false;
        else if (pattern[k] == 'i') now = on;
      }
      options = k > i + 2 && k < pattern.size() && (pattern[k] == ':' || pattern[k] == ')');
    }
    if (options && pattern[k] == ')') {
      caseless = now, out += pattern.substr(i, k + 1 - i);
      return k;
    }
    caseless_outside.push_back(caseless);
    if (options) caseless = now;
    out += '(';
    return i;
  }
};

// pattern as headwise gives it to PCRE2, whose tables are of Unicode pcre2_unicode: every \p{X}
// and \P{X} (\p{^X}) and \d and \D (Nd) by Unicode 16.0.0 (spelled_set: PCRE2's own \p{X} and
// the code points Unicode 16 added to X, or X's code points), and \s and \S (White_Space, as
// Oniguruma means it: PCRE2's own \s also counts U+180E) as code points, inside classes too: a
// class with added code points becomes (?>[...]|[added]), or negated (?:(?![added])[^...])
// (one_character). Inside a class, \P{X} (the complement of PCRE2's \p{X} and the added code
// points is not a union of members) and \p{X} in a class that folds case (PCRE2's \p{..} do not
// fold, Oniguruma's class does) are code points whatever the version. Outside a class, one under
// (?i) is kept out of case folding ((?-i:...)), as Oniguruma matches it. A property that is not a
// General_Category, an unterminated \p{ and \p without braces (Oniguruma reads \pL as the letters
// pL) are refused by name.
HEADWISE_TEXT_INLINE std::string spelled_for_pcre2(const std::string& pattern, const std::string& where, const std::string& pcre2_unicode) {
  return Pcre2Spelling{pattern, where, pcre2_unicode}.spelled();
}

}  // namespace detail

struct Regex::Compiled {
  struct FreeCode {
    void operator()(pcre2_code* c) const { pcre2_code_free(c); }
  };
  std::unique_ptr<pcre2_code, FreeCode> code;
};

HEADWISE_TEXT_INLINE Regex::Regex(const std::string& pattern, const std::string& where) : pattern_(pattern), where_(where) {
  const std::string spelled = detail::spelled_for_pcre2(pattern, where, detail::pcre2_unicode_version());
  int error = 0;
  PCRE2_SIZE offset = 0;
  auto compiled = std::make_shared<Compiled>();
  compiled->code.reset(pcre2_compile(reinterpret_cast<PCRE2_SPTR>(spelled.data()), spelled.size(), PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr));
  if (!compiled->code) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof message);
    // (where: a few characters of the spelling around the offset; its classes of code points can be long)
    std::size_t from = offset > 40 ? offset - 40 : 0, to = std::min(spelled.size(), std::size_t(offset) + 40);
    while (from > 0 && (static_cast<unsigned char>(spelled[from]) & 0xC0) == 0x80) --from;
    while (to < spelled.size() && (static_cast<unsigned char>(spelled[to]) & 0xC0) == 0x80) ++to;
    throw detail::tokenizer_error(where, "the regex " + pattern + " does not compile: " + reinterpret_cast<const char*>(message) +
                         " (at offset " + std::to_string(offset) + " of the " + std::to_string(spelled.size()) + " bytes headwise gives PCRE2, its \\p{..}, \\d and \\s spelled by Unicode " + detail::unicode_version + ": ..." +
                         spelled.substr(from, to - from) + "..." +
                         (error == PCRE2_ERROR_PATTERN_TOO_LARGE ? "; a class of General_Categories as code points is hundreds of ranges, and PCRE2 built with a link size of 2 compiles at most 64 KiB)" : ")"));
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
  pcre2_set_heap_limit(context.get(), heap_limit_kib);
  const std::uint64_t budget = work_floor + work_per_byte * text.size();
  std::uint64_t spent = 0;  // (by searches longer than free_steps)
  std::uint32_t limit = free_steps;
  bool retried = false;  // (the search under way took more than free_steps)
  std::size_t at = 0, previous = 0, last_match_end = std::string_view::npos;
  while (at <= text.size()) {
    pcre2_set_match_limit(context.get(), limit);
    int rc = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), at, PCRE2_NO_UTF_CHECK, data.get(), context.get());
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT && !stack) {  // grow the JIT stack once, and match again
      stack.reset(pcre2_jit_stack_create(32 * 1024, jit_stack_bytes, nullptr));
      if (!stack) throw TokenizerError("headwise: tokenizer: cannot reserve a JIT stack of " + std::to_string(jit_stack_bytes >> 20) + " MiB");
      pcre2_jit_stack_assign(context.get(), nullptr, stack.get());
      continue;
    }
    if (rc == PCRE2_ERROR_MATCHLIMIT && spent + limit < budget) {  // a long search: again, with twice the limit
      spent += limit, retried = true;
      limit = static_cast<std::uint32_t>(std::min<std::uint64_t>({std::uint64_t(limit) * 2, budget - spent, UINT32_MAX}));
      continue;
    }
    if (retried) spent += limit, limit = free_steps, retried = false;  // (its last try counted too; the next search starts small)
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(rc, message, sizeof message);
      const std::string why = rc == PCRE2_ERROR_MATCHLIMIT ? " (the piece's budget of " + std::to_string(budget) + " steps, " + std::to_string(work_floor) +
                                                                 " + " + std::to_string(work_per_byte) + " a byte, was spent searching from byte " + std::to_string(at) +
                                                                 ": the regex backtracks more than a piece this long allows)"
                              : rc == PCRE2_ERROR_HEAPLIMIT ? " (" + std::to_string(heap_limit_kib >> 10) + " MiB of heap)"
                              : rc == PCRE2_ERROR_JIT_STACKLIMIT ? " (a JIT stack of " + std::to_string(jit_stack_bytes >> 20) + " MiB)"
                                                                 : "";
      throw detail::tokenizer_error(where_, "the regex " + pattern_ + " failed on a piece of " + std::to_string(text.size()) +
                           " bytes: " + reinterpret_cast<const char*>(message) + why);
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
