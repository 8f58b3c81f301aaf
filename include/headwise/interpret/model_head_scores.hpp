// Head studies over a whole model: for every layer and head, the previous-token, duplicate-token,
// first-token and sink-mass scores on a text, and the induction score on a repeated random sequence
// (as the literature measures it: a perfect induction head scores 1), in one call; a table, and an
// HTML page with a layer x head heatmap per score (svg_heatmap.hpp). The patterns come from one
// run of the model that records every layer's (O(layers heads n²) memory for that run).
#pragma once

#include <algorithm>
#include <iomanip>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "headwise/interpret/head_scores.hpp"
#include "headwise/interpret/svg_heatmap.hpp"
#include "headwise/model/decoder_model.hpp"

namespace headwise::detail {
/// Every layer's patterns on ids: per layer (n, heads n), head h in columns [h n, (h+1) n).
template <class Scalar>
std::vector<Matrix<Scalar>> patterns_of(const model::DecoderModel<Scalar>& m, const std::vector<Index>& ids) {
  model::RunOptions<Scalar> o;
  for (Index l = 0; l < m.n_layers(); ++l) o.hooks.insert("blocks." + std::to_string(l) + ".attn.hook_pattern");
  auto run = m.run(ids, o);
  std::vector<Matrix<Scalar>> patterns;
  for (Index l = 0; l < m.n_layers(); ++l) patterns.push_back(std::move(run.hooks.at("blocks." + std::to_string(l) + ".attn.hook_pattern")));
  return patterns;
}
}  // namespace headwise::detail

namespace headwise::interpret {

/// Each score, (layers, heads), in [0, 1].
struct ModelHeadScores {
  Matrix<double> previous_token, duplicate_token, first_token, sink_mass, induction;

  /// The scores by name, in the order of the table and the page.
  std::vector<std::pair<std::string, const Matrix<double>*>> named() const {
    return {{"previous token", &previous_token}, {"duplicate token", &duplicate_token}, {"induction", &induction},
            {"first token", &first_token}, {"sink mass", &sink_mass}};
  }
};


/// The scores of every head of `m` on the text `ids`; induction on `induction_length` random tokens
/// (drawn with `seed` from the vocabulary) repeated twice (0: not measured, left zero).
template <class Scalar>
ModelHeadScores score_model_heads(const model::DecoderModel<Scalar>& m, const std::vector<Index>& ids, Index induction_length = 0,
                                  unsigned seed = 0) {
  if (ids.size() < 2) detail::invalid("score_model_heads", "the text has ", ids.size(), " tokens: at least 2 are needed");
  if (induction_length < 0) detail::invalid("score_model_heads", "induction_length must be >= 0, got ", induction_length);
  const Index L = m.n_layers(), H = L ? m.blocks.front().attention.n_heads() : 0, n = static_cast<Index>(ids.size());
  ModelHeadScores s;
  for (Matrix<double>* score : {&s.previous_token, &s.duplicate_token, &s.first_token, &s.sink_mass, &s.induction})
    *score = Matrix<double>::Zero(L, H);
  const std::vector<int> tokens(ids.begin(), ids.end());
  const auto text = detail::patterns_of(m, ids);
  for (Index l = 0; l < L; ++l)
    for (Index h = 0; h < H; ++h) {
      const Matrix<Scalar> p = text[static_cast<std::size_t>(l)].middleCols(h * n, n);
      s.previous_token(l, h) = previous_token_score(p), s.first_token(l, h) = first_token_score(p);
      s.duplicate_token(l, h) = duplicate_token_score(p, tokens);
      s.sink_mass(l, h) = std::max(0.0, 1.0 - p.template cast<double>().rowwise().sum().mean());  // what sinks took (0 without; no -0.0000 from rounding)
    }
  if (induction_length == 0) return s;
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<Index> draw(0, m.vocab_size() - 1);
  std::vector<Index> repeated(static_cast<std::size_t>(induction_length));
  for (Index& t : repeated) t = draw(rng);
  repeated.insert(repeated.end(), repeated.begin(), repeated.end());
  const std::vector<int> repeated_tokens(repeated.begin(), repeated.end());
  const auto twice = detail::patterns_of(m, repeated);
  const Index r = 2 * induction_length;
  for (Index l = 0; l < L; ++l)
    for (Index h = 0; h < H; ++h)
      s.induction(l, h) = induction_score(Matrix<Scalar>(twice[static_cast<std::size_t>(l)].middleCols(h * r, r)), repeated_tokens);
  return s;
}

/// A plain-text table: one row per layer and head, one column per score.
inline std::string head_score_table(const ModelHeadScores& s) {
  std::ostringstream out;
  out << std::left << std::setw(8) << "head";
  for (const auto& [name, m] : s.named()) out << std::right << std::setw(17) << name;
  out << "\n" << std::fixed << std::setprecision(4);
  for (Index l = 0; l < s.previous_token.rows(); ++l)
    for (Index h = 0; h < s.previous_token.cols(); ++h) {
      out << std::left << std::setw(8) << (std::to_string(l) + "." + std::to_string(h));
      for (const auto& [name, m] : s.named()) out << std::right << std::setw(17) << (*m)(l, h);
      out << "\n";
    }
  return out.str();
}

/// An HTML page with one layer x head heatmap per score.
inline std::string head_score_page(const ModelHeadScores& s, const std::string& title) {
  std::vector<std::string> layers, heads;
  for (Index l = 0; l < s.previous_token.rows(); ++l) layers.push_back("layer " + std::to_string(l));
  for (Index h = 0; h < s.previous_token.cols(); ++h) heads.push_back("head " + std::to_string(h));
  std::vector<std::pair<std::string, std::string>> figures;
  for (const auto& [name, m] : s.named())
    figures.emplace_back(name + " score of every head (rows: layers, columns: heads)", svg_heatmap(*m, layers, heads, name));
  return html_page(title, figures);
}

}  // namespace headwise::interpret
