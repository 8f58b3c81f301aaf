// The binding of the two toys (docs/toys/heads.html and docs/toys/playground.html) to the library,
// compiled to WebAssembly by the wasm preset: the pages compute with these headers, not with a
// JavaScript copy of them. Each function takes plain values from JavaScript and returns an object;
// a refused input comes back as {error: "<the library's message>"} for the page to show.
#include <emscripten/bind.h>
#include <emscripten/val.h>

#include <cmath>
#include <exception>
#include <string>

#include <headwise/headwise.hpp>
#include <headwise/interpret.hpp>

namespace {

using emscripten::val;
using headwise::Index;
using headwise::Matrix;
namespace interpret = headwise::interpret;

constexpr Index max_points = 16;  // tokens in the QK playground

val array_of(const headwise::Vector<double>& v) {
  val out = val::array();
  for (Index i = 0; i < v.size(); ++i) out.call<void>("push", v(i));
  return out;
}

val rows_of(const Matrix<double>& m) {
  val out = val::array();
  for (Index i = 0; i < m.rows(); ++i) out.call<void>("push", array_of(m.row(i).transpose()));
  return out;
}

/// Each row's entropy (nats), largest weight and its key, and the mean entropy, of one head's statistics.
void set_statistics(val& out, const headwise::RowStatistics<double>& s) {
  out.set("entropy", array_of(s.entropy.row(0).transpose()));
  out.set("largest", array_of(s.max_weight.row(0).transpose()));
  out.set("largest_at", array_of(s.argmax.row(0).transpose().cast<double>()));
  out.set("mean_entropy", s.entropy.mean());
}

val refusal(const std::exception& e) {
  val out = val::object();
  out.set("error", std::string(e.what()));
  return out;
}

/// The pattern of a toy head over a sentence: {tokens, weights (rows), entropy, largest,
/// largest_at, mean_entropy, scores (the head-type scores)}.
val head_pattern(const std::string& head, const std::string& text, bool causal) try {
  const interpret::ToyHeadPattern p = interpret::toy_head_pattern(interpret::toy_head_named(head), text, causal);
  val tokens = val::array();
  for (const std::string& t : p.tokens) tokens.call<void>("push", t);
  val scores = val::object();
  scores.set("previous_token", interpret::previous_token_score(p.weights));
  scores.set("duplicate_token", interpret::duplicate_token_score(p.weights, p.ids));
  scores.set("induction", interpret::induction_score(p.weights, p.ids));
  scores.set("first_token", interpret::first_token_score(p.weights));
  val out = val::object();
  out.set("tokens", tokens);
  out.set("weights", rows_of(p.weights));
  set_statistics(out, p.statistics);
  out.set("scores", scores);
  return out;
} catch (const std::exception& e) {
  return refusal(e);
}

/// Points [[x, y], ...] from JavaScript as the rows of a matrix; refuses what is not one.
Matrix<double> points_of(const val& points, const char* what) {
  if (!points.isArray()) headwise::detail::invalid("qk_pattern", what, " must be an array of [x, y] points");
  const Index n = points["length"].as<Index>();
  if (n < 1 || n > max_points)
    headwise::detail::invalid("qk_pattern", "there are ", n, " ", what, "; the playground takes 1 to ", max_points);
  Matrix<double> m(n, 2);
  for (Index i = 0; i < n; ++i) {
    const val point = points[static_cast<unsigned>(i)];
    if (!point.isArray() || point["length"].as<Index>() != 2)
      headwise::detail::invalid("qk_pattern", what, " ", i, " is not a point [x, y]");
    for (Index c = 0; c < 2; ++c) {
      const val x = point[static_cast<unsigned>(c)];
      m(i, c) = x.isNumber() ? x.as<double>() : NAN;
      if (!std::isfinite(m(i, c))) headwise::detail::invalid("qk_pattern", what, " ", i, " has a coordinate that is not a finite number");
    }
  }
  return m;
}

/// The QK playground: the pattern of queries (each times `length`) against keys in the plane,
/// scores divided by `divisor`: {weights (rows), entropy, largest, largest_at, mean_entropy}.
val qk_pattern(const val& queries, const val& keys, double divisor, double length, bool causal) try {
  const Matrix<double> q = points_of(queries, "queries"), k = points_of(keys, "keys");
  if (q.rows() != k.rows()) headwise::detail::invalid("qk_pattern", q.rows(), " queries for ", k.rows(), " keys");
  if (!std::isfinite(length) || length <= 0) headwise::detail::invalid("qk_pattern", "the query length multiplier must be a finite number > 0, not ", length);
  headwise::AttentionOptions options;
  options.causal = causal;
  options.divisor = divisor;  // refused by the library unless finite and > 0
  const Matrix<double> longer = q * length;
  const Matrix<double> a = headwise::attention_weights(longer, k, options);
  // A score that overflows double (a divisor of 1e-306, say) makes its row NaN: refused here, by name.
  if (!a.allFinite())
    headwise::detail::invalid("qk_pattern", "the scores q.k / ", divisor, " overflow a double; take a larger divisor");
  val out = val::object();
  out.set("weights", rows_of(a));
  set_statistics(out, interpret::pattern_statistics(a));
  return out;
} catch (const std::exception& e) {
  return refusal(e);
}

/// The four heads: [{id, name}].
val toy_head_list() {
  val out = val::array();
  for (const interpret::ToyHeadName& h : interpret::toy_heads()) {
    val head = val::object();
    head.set("id", std::string(h.id));
    head.set("name", std::string(h.name));
    out.call<void>("push", head);
  }
  return out;
}

}  // namespace

EMSCRIPTEN_BINDINGS(headwise_toys) {
  emscripten::function("toyHeads", &toy_head_list);
  emscripten::function("headPattern", &head_pattern);
  emscripten::function("qkPattern", &qk_pattern);
  emscripten::constant("version", std::string(HEADWISE_VERSION_STRING));
}
