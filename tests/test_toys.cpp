// The toys: the toy heads and the QK playground's computation against closed forms, their bad
// input refused by name, and the numbers the browser test expects to see in the pages
// (tests/browser/toy_scenarios.json's states, computed here by the native library, written to
// toys-expected.json for tests/browser/toys.test.mjs to compare the WebAssembly build with).
#include <cmath>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "headwise/headwise.hpp"
#include "headwise/interpret.hpp"
#include "support/catch.hpp"

using namespace headwise;
namespace interpret = headwise::interpret;
using nlohmann::json;

namespace {

const std::string mary = "When Mary and John went to the store, John gave a drink to";

// Closed forms: a row that scores toy_high_score on `hits` of its `keys` keys and 0 on the rest.
double hit_weight(int hits, int keys) { return std::exp(10.0) / (hits * std::exp(10.0) + (keys - hits)); }
double miss_weight(int hits, int keys) { return 1.0 / (hits * std::exp(10.0) + (keys - hits)); }
double entropy_of(int hits, int keys) {
  const double h = hit_weight(hits, keys), m = miss_weight(hits, keys);
  return -(hits * h * std::log(h) + (keys - hits) * (m > 0 ? m * std::log(m) : 0.0));
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

json rows_of(const Matrix<double>& m) {
  json rows = json::array();
  for (Index i = 0; i < m.rows(); ++i) rows.push_back(std::vector<double>(m.row(i).data(), m.row(i).data() + m.cols()));
  return rows;
}

// The statistics the pages show: each row's entropy, largest weight and its key, the mean entropy.
void statistics_into(json& e, const RowStatistics<double>& s) {
  std::vector<double> entropy, largest;
  std::vector<Index> at;
  for (Index i = 0; i < s.entropy.cols(); ++i)
    entropy.push_back(s.entropy(0, i)), largest.push_back(s.max_weight(0, i)), at.push_back(s.argmax(0, i));
  e["entropy"] = entropy, e["largest"] = largest, e["largest_at"] = at;
  e["mean_entropy"] = s.entropy.mean();
}

Matrix<double> points(const json& list) {
  Matrix<double> m(static_cast<Index>(list.size()), 2);
  for (Index i = 0; i < m.rows(); ++i) m(i, 0) = list[i][0].get<double>(), m(i, 1) = list[i][1].get<double>();
  return m;
}

// The playground's pattern written out: softmax over the visible keys of (length q_i) . k_j / divisor.
Matrix<double> playground_by_hand(const Matrix<double>& q, const Matrix<double>& k, double divisor, double length, bool causal) {
  Matrix<double> a = Matrix<double>::Zero(q.rows(), k.rows());
  for (Index i = 0; i < q.rows(); ++i) {
    const Index visible = causal ? i + 1 : k.rows();
    double total = 0;
    for (Index j = 0; j < visible; ++j) total += a(i, j) = std::exp(length * q.row(i).dot(k.row(j)) / divisor);
    a.row(i) /= total;
  }
  return a;
}

}  // namespace

TEST_CASE("toy heads: words and punctuation are tokens", "[toys]") {
  CHECK(interpret::word_tokens("the store, John!") == std::vector<std::string>{"the", "store", ",", "John", "!"});
  CHECK(interpret::word_tokens(" \t\n").empty());
  CHECK(interpret::first_occurrence_ids({"a", "b", "a", "c", "b"}) == std::vector<Index>{0, 1, 0, 2, 1});
  // UTF-8: letters of any script in words, curly quotes and dashes tokens of their own, Unicode spaces.
  CHECK(interpret::word_tokens("caf\u00e9 na\u00efve") == std::vector<std::string>{"caf\u00e9", "na\u00efve"});
  CHECK(interpret::word_tokens("John\u2019s \u201cdog\u201d\u2014ok\u00a0\u00bfs\u00ed?") ==
        std::vector<std::string>{"John", "\u2019", "s", "\u201c", "dog", "\u201d", "\u2014", "ok", "\u00bf", "s\u00ed", "?"});
  CHECK(interpret::word_tokens("\u732b\u304c\u5ea7\u3063\u305f\u3002") == std::vector<std::string>{"\u732b\u304c\u5ea7\u3063\u305f", "\u3002"});
  CHECK(interpret::word_tokens("\u4f60\u597d\uff0c\u4e16\u754c\uff01") ==
        std::vector<std::string>{"\u4f60\u597d", "\uff0c", "\u4e16\u754c", "\uff01"});  // fullwidth punctuation
  CHECK(interpret::word_tokens("\U0001F469\u200D\U0001F4BB x\u00b2 \u00bd") ==
        std::vector<std::string>{"\U0001F469\u200D\U0001F4BB", "x\u00b2", "\u00bd"});  // a joined emoji, x², ½: words
  CHECK(interpret::word_tokens("a\x01" "b\x7f" "c\u0085" "d") == std::vector<std::string>{"a", "b", "c", "d"});  // controls separate
  CHECK(interpret::word_tokens("\U0001F600!") == std::vector<std::string>{"\U0001F600", "!"});     // four bytes
  // ’ and ” share their first two bytes: they must not be the same token to the duplicate head.
  const auto quotes = interpret::toy_head_pattern(interpret::ToyHead::duplicate_token, "a\u2019 b\u201d", true);
  CHECK(quotes.ids == std::vector<Index>{0, 1, 2, 3});
}

TEST_CASE("toy heads: text that is not UTF-8 is refused by name", "[toys][errors]") {
  CHECK_THROWS_WITH(interpret::word_tokens("ab\x80"), Catch::Contains("byte 2 is not UTF-8"));
  CHECK_THROWS_WITH(interpret::word_tokens("\xc3"), Catch::Contains("byte 0 is not UTF-8"));       // truncated
  CHECK_THROWS_WITH(interpret::word_tokens("\xc3\x28"), Catch::Contains("byte 1 is not UTF-8"));  // not a continuation
  CHECK_THROWS_WITH(interpret::word_tokens("\xe0\x80\xaf"), Catch::Contains("bytes 0 to 2 are not UTF-8"));  // overlong
  CHECK_THROWS_WITH(interpret::word_tokens("\xed\xa0\x80"), Catch::Contains("bytes 0 to 2 are not UTF-8"));  // a surrogate
  CHECK_THROWS_WITH(interpret::word_tokens("\xf5\x80\x80\x80"), Catch::Contains("byte 0 is not UTF-8"));
  CHECK_THROWS_WITH(interpret::word_tokens("\xf4\x90\x80\x80"), Catch::Contains("bytes 0 to 3 are not UTF-8"));  // past U+10FFFF
  CHECK_THROWS_WITH(interpret::word_tokens("x\xc0\xaf"), Catch::Contains("byte 1 is not UTF-8"));  // an overlong "/"
  CHECK_THROWS_WITH(interpret::word_tokens("ok \xf0\x9f\x98"), Catch::Contains("byte 3 is not UTF-8"));  // four bytes cut short
}

TEST_CASE("toy heads: each pattern is the softmax of its rule, in closed form", "[toys]") {
  // Tokens: When0 Mary1 and2 John3 went4 to5 the6 store7 ,8 John9 gave10 a11 drink12 to13.
  const auto dup = interpret::toy_head_pattern(interpret::ToyHead::duplicate_token, mary, true);
  REQUIRE(dup.tokens.size() == 14);
  CHECK(dup.weights(9, 3) == Approx(hit_weight(1, 10)).epsilon(1e-14));  // the second John sees the first
  CHECK(dup.weights(9, 0) == Approx(miss_weight(1, 10)).epsilon(1e-14));
  CHECK(dup.weights(9, 10) == 0.0);                                      // the future, exactly 0
  CHECK(dup.weights(13, 5) == Approx(hit_weight(1, 14)).epsilon(1e-14));  // the second "to"
  CHECK(dup.statistics.entropy(0, 9) == Approx(entropy_of(1, 10)).epsilon(1e-12));
  CHECK(dup.statistics.entropy(0, 2) == Approx(std::log(3.0)).epsilon(1e-14));           // "and": nothing to find, uniform
  CHECK(dup.statistics.entropy(0, 0) == 0.0);

  const auto open = interpret::toy_head_pattern(interpret::ToyHead::duplicate_token, mary, false);
  CHECK(open.weights(9, 3) == Approx(hit_weight(1, 14)).epsilon(1e-14));
  CHECK(open.weights(3, 9) == Approx(hit_weight(1, 14)).epsilon(1e-14));  // mask off: the first John finds the later one
  CHECK(open.statistics.entropy(0, 2) == Approx(std::log(14.0)).epsilon(1e-14));
  CHECK(open.statistics.entropy.mean() > dup.statistics.entropy.mean() + 0.4);  // 1.89 against 1.45 nats

  const auto previous = interpret::toy_head_pattern(interpret::ToyHead::previous_token, mary, true);
  for (Index i = 1; i < 14; ++i) CHECK(previous.weights(i, i - 1) == Approx(hit_weight(1, int(i) + 1)).epsilon(1e-14));
  const auto sink = interpret::toy_head_pattern(interpret::ToyHead::first_token_sink, mary, true);
  CHECK(sink.weights(0, 0) == 1.0);
  CHECK(sink.weights(13, 0) == Approx(hit_weight(1, 14)).epsilon(1e-14));
  // induction on "the cat sat on the mat and the cat saw the hat": the second "the" (4) looks at
  // "cat" (1), the token after the first "the".
  const auto induction = interpret::toy_head_pattern(interpret::ToyHead::induction, "the cat sat on the mat and the cat saw the hat", true);
  CHECK(induction.weights(4, 1) == Approx(hit_weight(1, 5)).epsilon(1e-14));
  CHECK(interpret::induction_score(induction.weights, induction.ids) > 0.99);
}

TEST_CASE("toy heads: bad input refused by name", "[toys][errors]") {
  CHECK_THROWS_WITH(interpret::toy_head_named("induction-head"), Catch::Contains("no toy head is called \"induction-head\""));
  CHECK_THROWS_WITH(interpret::toy_head_pattern(interpret::ToyHead::induction, "  \t ", true), Catch::Contains("the sentence has no tokens"));
  std::string long_text;
  for (int i = 0; i < 257; ++i) long_text += "w ";
  CHECK_THROWS_WITH(interpret::toy_head_pattern(interpret::ToyHead::induction, long_text, true),
                    Catch::Contains("257 tokens; a toy takes at most 256"));
  CHECK_THROWS_WITH(interpret::toy_head_pattern(interpret::ToyHead::induction, std::string(70000, 'a'), true),
                    Catch::Contains("70000 bytes; a toy takes at most 65536"));
  // A pattern's statistics: an even row has entropy log n; a NaN (overflowed scores) is refused.
  const auto even = interpret::pattern_statistics(Matrix<double>(Matrix<double>::Constant(4, 4, 0.25)));
  CHECK(even.entropy.isApprox(Matrix<double>::Constant(1, 4, std::log(4.0))));
  Matrix<double> broken = Matrix<double>::Identity(3, 3);
  broken(2, 1) = NAN;
  CHECK_THROWS_WITH(interpret::pattern_statistics(broken), Catch::Contains("pattern(2, 1) = nan is not a weight in [0, 1]"));
}

TEST_CASE("toys: the numbers the browser test expects, from the native library", "[toys][browser]") {
  std::ifstream in(HEADWISE_TOY_SCENARIOS);
  REQUIRE(in);
  const json scenarios = json::parse(in);
  json expected = {{"heads", json::array()}, {"playground", json::array()}};

  for (const json& s : scenarios["heads"]) {
    const auto p = interpret::toy_head_pattern(interpret::toy_head_named(s["head"]), s["text"], s["causal"]);
    json e = s;
    e["tokens"] = p.tokens;
    e["weights"] = rows_of(p.weights);
    statistics_into(e, p.statistics);
    e["scores"] = {{"previous_token", interpret::previous_token_score(p.weights)},
                   {"duplicate_token", interpret::duplicate_token_score(p.weights, p.ids)},
                   {"induction", interpret::induction_score(p.weights, p.ids)},
                   {"first_token", interpret::first_token_score(p.weights)}};
    expected["heads"].push_back(e);
  }
  REQUIRE(expected["heads"].size() == 2);
  CHECK(expected["heads"][0]["weights"][9][3].get<double>() == Approx(hit_weight(1, 10)).epsilon(1e-14));

  for (const json& s : scenarios["playground"]) {
    const Matrix<double> q = points(s["queries"]), k = points(s["keys"]);
    AttentionOptions options;
    options.causal = s["causal"];
    options.divisor = s["divisor"].get<double>();
    const Matrix<double> longer = q * s["length"].get<double>();
    const Matrix<double> a = attention_weights(longer, k, options);
    const Matrix<double> by_hand = playground_by_hand(q, k, *options.divisor, s["length"], options.causal);
    CHECK((a - by_hand).cwiseAbs().maxCoeff() < 1e-14);
    json e = s;
    e["weights"] = rows_of(a);
    statistics_into(e, interpret::pattern_statistics(a));
    if (options.causal) CHECK(e["entropy"][0].get<double>() == 0.0);  // the first query sees one key
    expected["playground"].push_back(e);
  }
  REQUIRE(expected["playground"].size() == 6);
  // What the page promises the reader: divisor 8 flattens the last query's row towards uniform
  // (0.25 each); queries x8 sharpen it back, past where it was at sqrt(d_head).
  const auto largest_of = [&](int state) { return expected["playground"][state]["largest"][3].get<double>(); };
  CHECK(largest_of(2) < 0.35);
  CHECK(largest_of(3) > largest_of(1));

  // The bad input the browser test types, with the library's message for it.
  const json& refusals = scenarios["refusals"];
  const std::string empty_sentence = message_of([&] {
    interpret::toy_head_pattern(interpret::ToyHead::duplicate_token, refusals["empty sentence"], true);
  });
  const std::string zero_divisor = message_of([&] {
    AttentionOptions options;
    options.divisor = refusals["divisor typed"].get<double>();
    attention_weights(points(scenarios["playground"][0]["queries"]), points(scenarios["playground"][0]["keys"]), options);
  });
  const std::string negative_divisor = message_of([&] {
    AttentionOptions options;
    options.divisor = refusals["negative divisor typed"].get<double>();
    attention_weights(points(scenarios["playground"][0]["queries"]), points(scenarios["playground"][0]["keys"]), options);
  });
  CHECK_THAT(negative_divisor, Catch::Contains("got -3"));
  CHECK_THAT(empty_sentence, Catch::Contains("no tokens"));
  CHECK_THAT(zero_divisor, Catch::Contains("divisor must be finite and > 0"));
  expected["refusals"] = {{"empty sentence", {{"input", refusals["empty sentence"]}, {"message", empty_sentence}}},
                          {"divisor typed", {{"input", refusals["divisor typed"]}, {"message", zero_divisor}}},
                          {"negative divisor typed", {{"input", refusals["negative divisor typed"]}, {"message", negative_divisor}}}};

  std::ofstream out(std::string(HEADWISE_TEST_TMP_DIR) + "/toys-expected.json");
  out << expected.dump(1) << "\n";
  REQUIRE(out.good());
}
