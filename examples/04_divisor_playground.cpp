// Example 4: what the divisor and the length of the queries do to a pattern. Fixed random q and k
// (d_head 64, 16 tokens); the divisor runs over 1, sqrt(d_head), 8, 16 and the queries are scaled
// by 1, 2, 4, 8. For each: the mean entropy of the rows and the mean largest weight. A large
// divisor flattens the pattern; longer queries sharpen it. Patterns drawn as SVG heatmaps.
//
//   04_divisor_playground [output folder]      (default: the current folder)
#include <cmath>
#include <cstdio>
#include <exception>
#include <random>
#include <string>
#include <vector>

#include <headwise/headwise.hpp>
#include <headwise/interpret.hpp>

using headwise::Index;
using headwise::Matrix;

int main(int argc, char** argv) try {
  const std::string folder = argc > 1 ? argv[1] : ".";
  const Index n = 16, d_head = 64;
  std::mt19937 rng(42);
  std::normal_distribution<double> normal(0.0, 1.0);
  Matrix<double> q(n, d_head), k(n, d_head);
  for (Index i = 0; i < q.size(); ++i) q.data()[i] = normal(rng) * 0.25;
  for (Index i = 0; i < k.size(); ++i) k.data()[i] = normal(rng) * 0.25;
  std::vector<std::string> labels;
  for (Index i = 0; i < n; ++i) labels.push_back("t" + std::to_string(i));

  // sqrt(d_head) is 8 here: the two columns agree, as they should.
  const double divisors[] = {1.0, std::sqrt(double(d_head)), 8.0, 16.0};
  const char* divisor_names[] = {"1", "sqrt", "8", "16"};
  const double scales[] = {1.0, 2.0, 4.0, 8.0};
  std::printf("%-10s %-8s %14s %16s\n", "divisor", "q scale", "mean entropy", "largest weight");
  std::vector<std::pair<std::string, std::string>> figures;
  for (int d = 0; d < 4; ++d) {
    const double divisor = divisors[d];
    for (const double scale : scales) {
      headwise::AttentionOptions options;
      options.divisor = divisor;
      const Matrix<double> scaled_q = q * scale;
      const Matrix<double> a = headwise::attention_weights(scaled_q, k, options);
      double entropy = 0, largest = 0;
      for (Index i = 0; i < n; ++i) {
        for (Index j = 0; j <= i; ++j)
          if (a(i, j) > 0) entropy -= a(i, j) * std::log(a(i, j)) / n;
        largest += a.row(i).maxCoeff() / n;
      }
      std::printf("%-10.3f %-8.0f %14.4f %16.4f\n", divisor, scale, entropy, largest);
      char name[64], title[96];
      std::snprintf(name, sizeof name, "divisor-%s-scale-%g.svg", divisor_names[d], scale);
      std::snprintf(title, sizeof title, "divisor %s = %.3g, queries x%g", divisor_names[d], divisor, scale);
      const std::string svg = headwise::interpret::svg_heatmap(a, labels, labels, title, 22);
      headwise::interpret::write_file(folder + "/" + name, svg);
      figures.emplace_back(std::string(title) + " (mean entropy " + std::to_string(entropy) + " nats)", svg);
    }
  }
  headwise::interpret::write_file(folder + "/divisor-playground.html", headwise::interpret::html_page("headwise: the divisor playground", figures));
  std::printf("wrote %zu heatmaps and divisor-playground.html to %s\n", figures.size(), folder.c_str());
  return 0;
} catch (const std::exception& e) {  // a folder that does not exist, say: no "wrote" without the files
  std::fprintf(stderr, "%s\n", e.what());
  return 1;
}
