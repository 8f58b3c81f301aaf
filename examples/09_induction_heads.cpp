// Example 9: tiny models trained in the library until their heads are real, then studied with the
// same calls as a downloaded model.
//
//   09_induction_heads [steps scale, default 1] [folder for the page, default .]
//
// Part 1, in-context Markov chains (Edelman et al., NeurIPS 2024): every sequence is drawn from a
// Markov chain of its own over k = 3 symbols (each transition row ~ Dirichlet(1), the first symbol
// from the chain's stationary distribution), 100 symbols long. The best any model can do is the
// Bayes predictor, in closed form from the counts so far: p(j | i) = (c(i -> j) + 1) / (c(i -> .) + k).
// A 2-layer attention-only model, one head a layer, width 16, trained with AdamW, first learns the
// in-context unigram statistics, then reaches the Bayes bigram loss; its layer-0 head becomes a
// previous-token head and its layer-1 head attends to the positions whose previous symbol is the
// current one (the prefix-matching score).
//
// Part 2, induction heads: random sequences x of 12 to 24 tokens from 512, each shown twice,
// [x; x] (lengths vary, so that no fixed offset finds the repeat). The loss on the second half falls
// through a phase change as a 2-layer attention-only model (one head a layer, learned positions)
// forms an induction head; the library's induction score of that head is then near 1 (the mean
// over 20 sequences of 16 random tokens repeated, as TransformerLens measures on a batch: one
// 16-token sequence is a noisy measure, the worst of 20 scoring some 0.1 below the mean), and
// zero-ablating it sends the second half's loss to chance (ln 512) or beyond.
//
// Prints the losses as they fall and the head scores; writes induction_heads.html (loss curves and
// the layer x head heatmaps). Deterministic: the same numbers on any thread count.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <headwise/interpret/model_head_scores.hpp>
#include <headwise/interpret/svg_heatmap.hpp>
#include <headwise/model/model_shape.hpp>
#include <headwise/model/training.hpp>

namespace hm = headwise::model;
namespace hi = headwise::interpret;
using headwise::Index;
using Sequences = std::vector<std::vector<Index>>;

// ---- Part 1: the Markov chains and their Bayes loss ----
constexpr Index symbols = 3, chain_length = 100;

std::vector<Index> markov_sequence(std::mt19937_64& rng) {
  std::gamma_distribution<double> dirichlet_part(1.0, 1.0);
  double p[symbols][symbols];
  for (auto& row : p) {
    double total = 0;
    for (double& v : row) total += (v = dirichlet_part(rng));
    for (double& v : row) v /= total;
  }
  double pi[symbols] = {1.0 / symbols, 1.0 / symbols, 1.0 / symbols};  // the stationary distribution, by power iteration
  for (int it = 0; it < 200; ++it) {
    double next[symbols] = {0, 0, 0};
    for (Index i = 0; i < symbols; ++i)
      for (Index j = 0; j < symbols; ++j) next[j] += pi[i] * p[i][j];
    std::copy(next, next + symbols, pi);
  }
  std::uniform_real_distribution<double> u(0.0, 1.0);
  const auto draw = [&](const double* row) {
    double r = u(rng);
    for (Index j = 0; j < symbols - 1; ++j)
      if ((r -= row[j]) < 0) return j;
    return symbols - 1;
  };
  std::vector<Index> s{draw(pi)};
  while (Index(s.size()) < chain_length) s.push_back(draw(p[s.back()]));
  return s;
}

/// The mean over positions t < n - 1 of -log p(x[t+1]) under the Bayes bigram predictor of the
/// counts in x[0..t] (add-one: the Dirichlet(1) prior's posterior mean).
double bayes_bigram_loss(const Sequences& sequences) {
  double total = 0, terms = 0;
  for (const auto& x : sequences) {
    double c[symbols][symbols] = {};
    for (std::size_t t = 0; t + 1 < x.size(); ++t) {
      if (t > 0) c[x[t - 1]][x[t]] += 1;
      double row = 0;
      for (Index j = 0; j < symbols; ++j) row += c[x[t]][j];
      total -= std::log((c[x[t]][x[t + 1]] + 1) / (row + symbols)), terms += 1;
    }
  }
  return total / terms;
}

// ---- Part 2: repeated random tokens ----
constexpr Index induction_vocab = 512, shortest = 12, longest = 24, measured = 16;
constexpr unsigned scored_sequences = 20;  // the induction score is their mean

/// [x; x], x of a random length (so that no fixed offset finds the repeat: only an induction head does).
std::vector<Index> repeated_sequence(std::mt19937_64& rng) {
  std::uniform_int_distribution<Index> token(0, induction_vocab - 1), length(shortest, longest);
  std::vector<Index> x(static_cast<std::size_t>(length(rng)));
  for (Index& t : x) t = token(rng);
  x.insert(x.end(), x.begin(), x.end());
  return x;
}

/// The mean loss on the second half (rows n/2 .. n - 2 predicting the repeat).
template <class Scalar>
double second_half_loss(const hm::DecoderModel<Scalar>& model, const Sequences& batch, const hm::RunOptions<Scalar>& options = {}) {
  double total = 0, terms = 0;
  for (const auto& x : batch) {
    const headwise::Matrix<Scalar> logits = model.run(x, options).logits;
    for (Index t = Index(x.size()) / 2; t + 1 < Index(x.size()); ++t) {
      const double top = double(logits.row(t).maxCoeff());
      total += top + std::log((logits.row(t).template cast<double>().array() - top).exp().sum()) - double(logits(t, x[std::size_t(t) + 1]));
      terms += 1;
    }
  }
  return total / terms;
}

// ---- Training, and a loss curve ----
struct Curve {
  std::string name;
  std::vector<std::pair<Index, double>> points;
};

template <class Make>
Curve train(hm::DecoderModel<float>& model, hm::AdamW<float>& adamw, Index steps, Index batch_size, std::mt19937_64& rng, const Make& make,
            const char* name, Index print_every) {
  Curve curve{name, {}};
  hm::Parameters<float> weights = hm::parameters_of(model);
  const double peak = adamw.options().learning_rate;
  for (Index step = 0; step < steps; ++step) {
    adamw.set_learning_rate(peak * (0.1 + 0.45 * (1 + std::cos(3.141592653589793 * double(step) / double(steps)))));  // cosine, to a tenth
    Sequences batch;
    for (Index b = 0; b < batch_size; ++b) batch.push_back(make(rng));
    const double loss = hm::train_step(model, weights, adamw, batch, 1);
    if (step % 10 == 0) curve.points.emplace_back(step, loss);
    if (step % print_every == 0 || step + 1 == steps) std::printf("  step %5lld  loss %.4f\n", static_cast<long long>(step), loss);
  }
  return curve;
}

std::string svg_curve(const Curve& c, double reference, const std::string& reference_name) {
  const int w = 520, h = 260, left = 50, bottom = 30;
  double top = reference;
  for (const auto& p : c.points) top = std::max(top, p.second);
  const double last = c.points.empty() ? 1.0 : double(c.points.back().first) + 1;
  const auto x = [&](double s) { return left + (w - left - 10) * s / last; };
  const auto y = [&](double v) { return (h - bottom) * (1.0 - v / (top * 1.05)) + 5; };
  std::ostringstream svg;
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << w << "\" height=\"" << h << "\" font-family=\"sans-serif\" font-size=\"11\">\n"
      << "<text x=\"" << left << "\" y=\"14\" font-weight=\"bold\">" << c.name << " (loss against step)</text>\n<polyline fill=\"none\" stroke=\"#2a5db0\" points=\"";
  for (const auto& p : c.points) svg << x(double(p.first)) << ',' << y(p.second) << ' ';
  svg << "\"/>\n<line x1=\"" << left << "\" x2=\"" << w - 10 << "\" y1=\"" << y(reference) << "\" y2=\"" << y(reference)
      << "\" stroke=\"#c33\" stroke-dasharray=\"4 3\"/>\n<text x=\"" << left + 4 << "\" y=\"" << y(reference) - 4 << "\" fill=\"#c33\">"
      << reference_name << " " << reference << "</text>\n<text x=\"4\" y=\"" << y(top) + 10 << "\">" << top << "</text>\n<text x=\"4\" y=\""
      << h - bottom + 5 << "\">0</text>\n<text x=\"" << w - 60 << "\" y=\"" << h - 8 << "\">step " << last << "</text>\n</svg>\n";
  return svg.str();
}

int main(int argc, char** argv) try {
  const double scale = argc > 1 ? std::stod(argv[1]) : 1.0;
  const std::string folder = argc > 2 ? argv[2] : ".";
  std::mt19937_64 rng(2024);
  std::vector<std::pair<std::string, std::string>> figures;

  // Part 1.
  hm::ModelShape shape;
  shape.vocab = symbols, shape.d_model = 16, shape.layers = 2, shape.heads = 1, shape.init = 0.2;
  hm::DecoderModel<float> markov = hm::make_model<float>(shape, 1);
  hm::AdamW<float> adamw({3e-3, 0.9, 0.98, 1e-8, 0.0});
  std::printf("Part 1: in-context Markov chains over %lld symbols, 2 attention-only layers of 1 head, width 16\n", static_cast<long long>(symbols));
  const Curve markov_curve = train(markov, adamw, Index(4000 * scale), 16, rng, markov_sequence, "Markov chains", 250);
  Sequences held_out;
  std::mt19937_64 test_rng(7);
  for (int i = 0; i < 200; ++i) held_out.push_back(markov_sequence(test_rng));
  const double bayes = bayes_bigram_loss(held_out), model_loss = hm::batch_loss_gradients(markov, held_out, 1).first;
  std::printf("held-out loss %.4f, Bayes bigram %.4f: %.4f nats above it\n", model_loss, bayes, model_loss - bayes);
  const hi::ModelHeadScores m = hi::score_model_heads(markov, held_out.front());
  std::printf("layer-0 head: previous-token score %.3f; layer-1 head: prefix-matching score %.3f (mass on positions after the current symbol)\n",
              m.previous_token(0, 0), m.prefix_matching(1, 0));
  figures.emplace_back("Part 1: the training loss and the Bayes bigram loss", svg_curve(markov_curve, bayes, "Bayes bigram"));

  // Part 2.
  hm::ModelShape s2;
  s2.context = 2 * longest;  // (learned positions: the layer-0 head finds the previous token by them)
  s2.vocab = induction_vocab, s2.d_model = 32, s2.layers = 2, s2.heads = 1, s2.init = 0.1;
  hm::DecoderModel<float> copying = hm::make_model<float>(s2, 2);
  std::mt19937_64 rng2(2);
  hm::AdamW<float> adamw2({5e-3, 0.9, 0.98, 1e-8, 0.0});
  std::printf("\nPart 2: [x; x], x of %lld to %lld random tokens from %lld, 2 attention-only layers of 1 head, width 32\n",
              static_cast<long long>(shortest), static_cast<long long>(longest), static_cast<long long>(induction_vocab));
  const Curve induction_curve = train(copying, adamw2, Index(6000 * scale), 16, rng2, repeated_sequence, "Repeated tokens", 250);
  Sequences test;
  for (int i = 0; i < 50; ++i) test.push_back(repeated_sequence(test_rng));
  hi::ModelHeadScores r = hi::score_model_heads(copying, test.front(), measured, 0);
  Eigen::ArrayXXd lowest = r.induction.array(), highest = lowest;
  for (unsigned seed = 1; seed < scored_sequences; ++seed) {
    const Eigen::ArrayXXd one = hi::score_model_heads(copying, test.front(), measured, seed).induction.array();
    r.induction += one.matrix(), lowest = lowest.min(one), highest = highest.max(one);
  }
  r.induction /= double(scored_sequences);
  Index best = 0;
  r.induction.row(1).maxCoeff(&best);
  const double clean = second_half_loss(copying, test);
  hm::RunOptions<float> ablate;
  ablate.hook_functions["blocks.1.attn.hook_z"] = headwise::ablate_head(best);
  std::printf("second-half loss %.4f; head 1.%lld: induction score %.3f (mean of %u sequences, %.3f to %.3f); ablated, the second-half loss is %.4f "
              "(chance: ln %lld = %.4f)\n",
              clean, static_cast<long long>(best), r.induction(1, best), scored_sequences, lowest(1, best), highest(1, best),
              second_half_loss(copying, test, ablate), static_cast<long long>(induction_vocab), std::log(double(induction_vocab)));
  std::printf("\n%s", hi::head_score_table(r).c_str());
  figures.emplace_back("Part 2: the training loss (both halves)", svg_curve(induction_curve, std::log(double(induction_vocab)) / 2, "half of ln 512"));
  std::vector<std::string> layers = {"layer 0", "layer 1"}, heads = {"head 0"};
  figures.emplace_back("Part 2: the induction score of every head", hi::svg_heatmap(r.induction, layers, heads, "induction"));
  figures.emplace_back("Part 2: the previous-token score of every head", hi::svg_heatmap(r.previous_token, layers, heads, "previous token"));
  std::ofstream(folder + "/induction_heads.html") << hi::html_page("Tiny models trained in headwise", figures);
  std::printf("wrote %s/induction_heads.html\n", folder.c_str());
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 1;
}
