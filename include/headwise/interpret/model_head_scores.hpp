// Head studies over a whole model: for every layer and head, the previous-token, duplicate-token,
// first-token and sink-mass scores on a text, and the induction score on a repeated random sequence
// (as the literature measures it: a perfect induction head scores 1), in one call; signed per-head
// effects: each head's ablation effect on a metric of the logits (a patching effect) and its direct
// logit attribution (a contribution); a table, and an HTML page with a layer x head heatmap per
// score (svg_heatmap.hpp; [0, 1] scores in blue, signed effects on a diverging red-blue scale). The
// scores are read from one run of the model: by default from each layer's fused record as the run
// passes it (the row statistics, and the few weights p_ij a score needs, recomputed from the
// queries, keys and logsumexp: O(n d) memory, any length), or from every layer's recorded pattern
// (O(layers heads n²): short texts; the two agree).
#pragma once

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <map>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "headwise/detail/parallel.hpp"
#include "headwise/head_interventions.hpp"
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

/// The weights p_ij of head h's row i for chosen keys j, exactly as ForwardRecord::pattern gives
/// them (q_i . k_j / divisor, the rule's cap, ALiBi and masks, exp(s - logsumexp_i)), without the
/// rest of the row: O(d) a weight.
template <class Scalar>
class PatternEntries {
 public:
  PatternEntries(const ForwardRecord<Scalar>& r, const char* where)
      : r_(r), rule_(r.options, r.q.rows(), r.k.rows(), r.n_heads, where),
        inv_divisor_(static_cast<Scalar>(1.0 / resolve_divisor<Scalar>(r.options, r.d_head, where))) {
    if (r.arithmetic == KvArithmetic::stored)
      invalid(where, "the layer multiplied its keys under the stored arithmetic: its pattern is not q . k (use kv_arithmetic = widened)");
  }
  /// Σ p_ij over the keys [first, last) + offset (each j once).
  double mass(Index h, Index i, const Index* first, const Index* last, Index offset, std::vector<Scalar>& row) const {
    const KeyRange seen = rule_.keys(i);
    const Index d = r_.d_head, g = h / (r_.n_heads / r_.n_kv_heads);
    row.resize(static_cast<std::size_t>(r_.k.rows()));
    double total = 0;
    for (const Index* key = first; key != last; ++key) {
      const Index j = *key + offset;
      if (j < seen.begin || j >= seen.end) continue;
      row[std::size_t(j)] = r_.q.row(i).segment(h * d, d).dot(r_.k.row(j).segment(g * d, d)) * inv_divisor_;
      rule_.apply(h, i, 0, row.data(), j, j + 1);
      total += std::exp(double(row[std::size_t(j)]) - double(r_.attention.logsumexp(h, i)));
    }
    return total;
  }

 private:
  const ForwardRecord<Scalar>& r_;
  ScoreRule<Scalar> rule_;
  Scalar inv_divisor_;
};

}  // namespace headwise::detail

namespace headwise::interpret {

/// Each score, (layers, heads), in [0, 1].
struct ModelHeadScores {
  Matrix<double> previous_token, duplicate_token, first_token, sink_mass, induction;
  /// Anthropic's prefix matching on the text itself: the induction score's mass (on the positions
  /// after earlier occurrences of the query's token) over the rows where the text repeats one.
  Matrix<double> prefix_matching;

  /// The scores by name, in the order of the table and the page.
  std::vector<std::pair<std::string, const Matrix<double>*>> named() const {
    return {{"previous token", &previous_token}, {"duplicate token", &duplicate_token}, {"induction", &induction},
            {"prefix matching", &prefix_matching}, {"first token", &first_token}, {"sink mass", &sink_mass}};
  }
};

/// Where score_model_heads reads the patterns: each layer's fused record as the run passes it
/// (O(n d) memory), or every layer's recorded (n, n) patterns (short texts).
enum class PatternSource { rows, recorded };

namespace detail_scores {
/// The scores of every head of one layer from its record: row statistics, and the duplicate and
/// prefix-matching masses from the few weights they need. `duplicate`, `prefix`: null to skip.
template <class Scalar>
void score_layer(const ForwardRecord<Scalar>& r, const std::vector<Index>& ids, Index l, int threads, ModelHeadScores& s, bool text) {
  const Index n = r.q.rows(), H = r.n_heads;
  const headwise::detail::PatternEntries<Scalar> entries(r, "score_model_heads");
  // Each token's positions, and each row's rank among its token's: row i's earlier occurrences are
  // the first rank(i) positions of its token's list (O(n) memory however often a token repeats).
  std::map<Index, std::vector<Index>> positions;
  std::vector<Index> rank(static_cast<std::size_t>(n));
  for (Index i = 0; i < n; ++i) {
    std::vector<Index>& at = positions[ids[std::size_t(i)]];
    rank[std::size_t(i)] = Index(at.size());
    at.push_back(i);
  }
  headwise::detail::parallel_for<headwise::detail::Schedule::next_free>(threads, H, [&](Index h) {
    std::vector<Scalar> row;
    double duplicate = 0, prefix = 0, previous = 0, first = 0, sink = 0;
    Index duplicate_rows = 0, prefix_rows = 0;
    for (Index i = 0; i < n; ++i) {
      const Index* begin = positions.at(ids[std::size_t(i)]).data();
      const Index* end = begin + rank[std::size_t(i)];  // the earlier occurrences, ascending
      if (i > 0) previous += double(r.attention.statistics.previous_token_mass(h, i)), first += double(r.attention.statistics.first_token_mass(h, i));
      sink += double(r.attention.statistics.sink_mass(h, i));
      if (begin == end) continue;
      if (text) duplicate += entries.mass(h, i, begin, end, 0, row), ++duplicate_rows;
      const Index* before_last = end[-1] + 1 < i ? end : end - 1;  // (j + 1 < i: a position after it, before i)
      if (begin != before_last) prefix += entries.mass(h, i, begin, before_last, 1, row), ++prefix_rows;
    }
    Matrix<double>& induction = text ? s.prefix_matching : s.induction;
    induction(l, h) = prefix_rows ? prefix / double(prefix_rows) : 0.0;
    if (!text) return;
    s.duplicate_token(l, h) = duplicate_rows ? duplicate / double(duplicate_rows) : 0.0;
    s.previous_token(l, h) = n > 1 ? previous / double(n - 1) : 0.0, s.first_token(l, h) = n > 1 ? first / double(n - 1) : 0.0;
    s.sink_mass(l, h) = std::max(0.0, sink / double(n));
  });
}
}  // namespace detail_scores


/// The scores of every head of `m` on the text `ids`; induction on `induction_length` random tokens
/// (drawn with `seed` from the vocabulary) repeated twice (0: not measured, left zero).
template <class Scalar>
ModelHeadScores score_model_heads(const model::DecoderModel<Scalar>& m, const std::vector<Index>& ids, Index induction_length = 0,
                                  unsigned seed = 0, PatternSource source = PatternSource::rows, int threads = 0) {
  m.check_attention_layers("score_model_heads");
  if (ids.size() < 2) detail::invalid("score_model_heads", "the text has ", ids.size(), " tokens: at least 2 are needed");
  if (induction_length < 0) detail::invalid("score_model_heads", "induction_length must be >= 0, got ", induction_length);
  const Index L = m.n_layers(), H = L ? m.blocks.front().attention.n_heads() : 0, n = static_cast<Index>(ids.size());
  ModelHeadScores s;
  for (Matrix<double>* score : {&s.previous_token, &s.duplicate_token, &s.first_token, &s.sink_mass, &s.induction, &s.prefix_matching})
    *score = Matrix<double>::Zero(L, H);
  std::vector<Index> repeated(static_cast<std::size_t>(induction_length));
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<Index> draw(0, std::max<Index>(m.vocab_size() - 1, 0));
  for (Index& t : repeated) t = draw(rng);
  repeated.insert(repeated.end(), repeated.begin(), repeated.end());
  if (source == PatternSource::rows) {
    const int workers = detail::thread_count(threads, "score_model_heads");
    for (const bool text : {true, false}) {
      if (!text && induction_length == 0) break;
      model::RunOptions<Scalar> o;
      o.threads = threads, o.logits_to_keep = 1;
      o.read_attention = [&](Index l, const ForwardRecord<Scalar>& r) { detail_scores::score_layer(r, text ? ids : repeated, l, workers, s, text); };
      m.run(text ? ids : repeated, o);
    }
    return s;
  }
  const auto text = detail::patterns_of(m, ids);
  for (Index l = 0; l < L; ++l)
    for (Index h = 0; h < H; ++h) {
      const Matrix<Scalar> p = text[static_cast<std::size_t>(l)].middleCols(h * n, n);
      s.previous_token(l, h) = previous_token_score(p), s.first_token(l, h) = first_token_score(p);
      s.duplicate_token(l, h) = duplicate_token_score(p, ids);
      s.sink_mass(l, h) = std::max(0.0, 1.0 - p.template cast<double>().rowwise().sum().mean());  // what sinks took (0 without; no -0.0000 from rounding)
      s.prefix_matching(l, h) = induction_score(p, ids);
    }
  if (induction_length == 0) return s;
  const auto twice = detail::patterns_of(m, repeated);
  const Index r = 2 * induction_length;
  for (Index l = 0; l < L; ++l)
    for (Index h = 0; h < H; ++h)
      s.induction(l, h) = induction_score(Matrix<Scalar>(twice[static_cast<std::size_t>(l)].middleCols(h * r, r)), repeated);
  return s;
}

/// A signed quantity per layer and head, for the table and the page (a diverging colour scale): a
/// patching effect, a direct contribution.
struct HeadEffect {
  std::string name;
  Matrix<double> values;  ///< (layers, heads)
};

/// What an ablated head's Z becomes: zero, or its mean over the text's positions in the clean run.
enum class Ablation { zero, mean };

/// The effect of ablating each head alone on metric(logits) (a callable taking the (n, vocab)
/// logits, returning a double: a logit difference, a loss): metric(ablated) - metric(clean), per
/// layer and head, one run of the model per head.
template <class Scalar, class Metric>
Matrix<double> head_ablation_effects(const model::DecoderModel<Scalar>& m, const std::vector<Index>& ids, const Metric& metric,
                                     Ablation ablation = Ablation::zero) {
  m.check_attention_layers("head_ablation_effects");
  const Index L = m.n_layers(), H = L ? m.blocks.front().attention.n_heads() : 0;
  model::RunOptions<Scalar> record;
  if (ablation == Ablation::mean)
    for (Index l = 0; l < L; ++l) record.hooks.insert("blocks." + std::to_string(l) + ".attn.hook_z");
  const model::ModelRun<Scalar> clean = m.run(ids, record);
  const double baseline = static_cast<double>(metric(clean.logits));
  Matrix<double> effects(L, H);
  for (Index l = 0; l < L; ++l)
    for (Index h = 0; h < H; ++h) {
      model::RunOptions<Scalar> o;
      const std::string at = "blocks." + std::to_string(l) + ".attn.hook_z";
      if (ablation == Ablation::zero) o.hook_functions[at] = ablate_head(h);
      else o.hook_functions[at] = patch_head(h, mean_over_positions(clean.hooks.at(at), m.blocks[static_cast<std::size_t>(l)].attention.n_heads(), h));
      effects(l, h) = static_cast<double>(metric(m.run(ids, o).logits)) - baseline;
    }
  return effects;
}

/// Which logit direct attribution measures: logit(token) - logit(baseline) at `position`
/// (-1: the last; baseline -1: logit(token) alone).
struct LogitDirection {
  Index token = 0;
  Index baseline = -1;
  Index position = -1;
};

/// A norm made linear by freezing its scale at the row `x` it saw: c -> (c - mean(c) for
/// LayerNorm) ∘ w / sigma(x). Its bias belongs to no head and is left out.
struct FrozenNorm {
  bool centred = false;
  Eigen::RowVectorXd scale;  ///< w / sigma(x)

  template <class Scalar>
  FrozenNorm(const model::Norm<Scalar>& f, const Eigen::RowVectorXd& x) : centred(f.kind == model::Norm<Scalar>::Kind::layer_norm) {
    const double mean = centred ? x.mean() : 0.0;
    const double sigma = std::sqrt((x.array() - mean).square().mean() + f.eps);
    scale = f.weight.template cast<double>();
    if (f.kind == model::Norm<Scalar>::Kind::rms_offset) scale.array() += 1.0;
    scale /= sigma;
  }
  Eigen::RowVectorXd operator()(const Eigen::RowVectorXd& c) const {
    return ((c.array() - (centred ? c.mean() : 0.0)) * scale.array()).matrix();
  }
};

/// Direct logit attribution: what each head's output at the position, Z_h W_O[h], adds to the
/// direction's logit difference straight through the final norm, its scale frozen at the clean
/// run's (as TransformerLens's apply_ln_to_stack does): the heads' shares of the logit, without the
/// paths through later layers. Where a block norms its attention output (Gemma 2 and 3, OLMo 2)
/// that norm's scale is frozen the same way at the clean run's attention output, so the shares
/// still sum to the block's normed output; soft-capped logits (Gemma 2) are attributed before the
/// cap (the cap is monotone, and a tanh of a sum has no shares). Gemma 4's layer scalars, which
/// multiply the whole stream after each block, carry a head's output to the last block times the
/// product of its own and every later block's.
template <class Scalar>
Matrix<double> direct_logit_attribution(const model::DecoderModel<Scalar>& m, const std::vector<Index>& ids, const LogitDirection& d) {
  constexpr const char* where = "direct_logit_attribution";
  m.check_attention_layers(where);
  const Index n = static_cast<Index>(ids.size()), L = m.n_layers(), position = d.position == -1 ? n - 1 : d.position;
  if (position < 0 || position >= n) detail::invalid(where, "position ", d.position, " is not one of the ", n, " tokens (or -1: the last)");
  if (d.token < 0 || d.token >= m.vocab_size()) detail::invalid(where, "token ", d.token, " is not in [0, ", m.vocab_size(), ")");
  if (d.baseline < -1 || d.baseline >= m.vocab_size())
    detail::invalid(where, "baseline ", d.baseline, " is not in [0, ", m.vocab_size(), ") (or -1: none)");
  if (L == 0) return Matrix<double>(0, 0);
  const auto name = [](Index l, const char* hook) { return "blocks." + std::to_string(l) + "." + hook; };
  model::RunOptions<Scalar> o;
  for (Index l = 0; l < L; ++l) {
    o.hooks.insert(name(l, "attn.hook_z"));
    if (m.blocks[static_cast<std::size_t>(l)].post_attention_norm) o.hooks.insert(name(l, "attn.output"));
  }
  o.hooks.insert(name(L - 1, "hook_resid_post"));
  const model::ModelRun<Scalar> run = m.run(ids, o);
  const auto row = [&](const std::string& hook) -> Eigen::RowVectorXd { return run.hooks.at(hook).row(position).template cast<double>(); };
  const FrozenNorm final_norm(m.final_norm, row(name(L - 1, "hook_resid_post")));
  Eigen::RowVectorXd u = m.unembedding.template row<double>(d.token);  // (W_U's column: the LM head's row)
  if (d.baseline >= 0) u -= m.unembedding.template row<double>(d.baseline);
  const Index H = m.blocks.front().attention.n_heads();
  std::vector<double> carried(static_cast<std::size_t>(L) + 1, 1.0);  // Π of the layer scalars from l on
  for (Index l = L - 1; l >= 0; --l)
    carried[std::size_t(l)] = carried[std::size_t(l) + 1] * double(m.blocks[static_cast<std::size_t>(l)].layer_scalar);
  Matrix<double> out(L, H);
  for (Index l = 0; l < L; ++l) {
    const model::Block<Scalar>& b = m.blocks[static_cast<std::size_t>(l)];
    const std::optional<FrozenNorm> post =
        b.post_attention_norm ? std::optional<FrozenNorm>(FrozenNorm(*b.post_attention_norm, row(name(l, "attn.output")))) : std::nullopt;
    const Eigen::RowVectorXd z = row(name(l, "attn.hook_z"));
    for (Index h = 0; h < H; ++h) {
      Eigen::RowVectorXd c = z.segment(h * b.attention.d_head(), b.attention.d_head()) * b.attention.w_o_block(h).template cast<double>();
      if (post) c = (*post)(c);
      out(l, h) = final_norm(c * carried[std::size_t(l)]).dot(u);
    }
  }
  return out;
}

/// Each effect is (layers, heads) as the scores are.
inline void check_head_effects(const ModelHeadScores& s, const std::vector<HeadEffect>& effects, const char* where) {
  for (const HeadEffect& e : effects)
    if (e.values.rows() != s.previous_token.rows() || e.values.cols() != s.previous_token.cols())
      detail::invalid(where, "the effect \"", e.name, "\" is ", e.values.rows(), "x", e.values.cols(), ", the scores are ",
                      s.previous_token.rows(), "x", s.previous_token.cols(), " (layers x heads)");
}

/// A plain-text table: one row per layer and head, one column per score, then one per effect.
inline std::string head_score_table(const ModelHeadScores& s, const std::vector<HeadEffect>& effects = {}) {
  check_head_effects(s, effects, "head_score_table");
  const auto width = [](const std::string& name) { return static_cast<int>(std::max<std::size_t>(17, name.size() + 2)); };
  std::ostringstream out;
  out << std::left << std::setw(8) << "head";
  for (const auto& [name, m] : s.named()) out << std::right << std::setw(17) << name;
  for (const HeadEffect& e : effects) out << std::right << std::setw(width(e.name)) << e.name;
  out << "\n" << std::fixed << std::setprecision(4);
  for (Index l = 0; l < s.previous_token.rows(); ++l)
    for (Index h = 0; h < s.previous_token.cols(); ++h) {
      out << std::left << std::setw(8) << (std::to_string(l) + "." + std::to_string(h));
      for (const auto& [name, m] : s.named()) out << std::right << std::setw(17) << (*m)(l, h);
      for (const HeadEffect& e : effects) out << std::right << std::setw(width(e.name)) << std::showpos << e.values(l, h) << std::noshowpos;
      out << "\n";
    }
  return out.str();
}

/// An HTML page with one layer x head heatmap per score ([0, 1], blue), then one per signed effect
/// (red below zero, blue above, symmetric about zero).
inline std::string head_score_page(const ModelHeadScores& s, const std::string& title, const std::vector<HeadEffect>& effects = {}) {
  check_head_effects(s, effects, "head_score_page");
  std::vector<std::string> layers, heads;
  for (Index l = 0; l < s.previous_token.rows(); ++l) layers.push_back("layer " + std::to_string(l));
  for (Index h = 0; h < s.previous_token.cols(); ++h) heads.push_back("head " + std::to_string(h));
  std::vector<std::pair<std::string, std::string>> figures;
  for (const auto& [name, m] : s.named())
    figures.emplace_back(name + " score of every head (rows: layers, columns: heads)", svg_heatmap(*m, layers, heads, name));
  Shading diverging;
  diverging.scale = Shading::Scale::diverging;
  for (const HeadEffect& e : effects)
    figures.emplace_back(e.name + " of every head (rows: layers, columns: heads; red below zero, blue above)",
                         svg_heatmap(e.values, layers, heads, e.name, 34, diverging));
  return html_page(title, figures);
}

}  // namespace headwise::interpret
