// Example 3: four hand-designed heads (scoring rules, not learned weights) over three sentences:
// previous-token, duplicate-token, induction and first-token sink. Each pattern is drawn as an SVG
// heatmap, all of them on one HTML page; each head is scored by the head-type scores; and each
// row's entropy is printed with the causal mask on and off.
//
//   03_toy_heads [output folder]      (default: the current folder)
#include <cctype>
#include <cmath>
#include <cstdio>
#include <exception>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <headwise/headwise.hpp>
#include <headwise/interpret.hpp>

using headwise::Index;
using headwise::Matrix;

namespace {

// Words and punctuation marks, each a token.
std::vector<std::string> tokenize(const std::string& text) {
  std::vector<std::string> tokens;
  std::string word;
  for (const char c : text) {
    if (std::isalnum(static_cast<unsigned char>(c))) {
      word += c;
      continue;
    }
    if (!word.empty()) tokens.push_back(word), word.clear();
    if (!std::isspace(static_cast<unsigned char>(c))) tokens.emplace_back(1, c);
  }
  if (!word.empty()) tokens.push_back(word);
  return tokens;
}

// A scoring rule gives the score of query i for key j; a high score (10) where the head looks.
// The rules know nothing of order: the causal mask alone keeps a head from looking ahead, so with
// the mask off the duplicate-token and induction heads also find later copies, and rows with
// nothing to find spread over the whole sentence, future included.
using Rule = std::function<double(const std::vector<int>& ids, Index i, Index j)>;

struct Head {
  const char* name;
  const char* file;
  Rule rule;
};

const Head heads[] = {
    {"previous token", "previous-token", [](const std::vector<int>&, Index i, Index j) { return j == i - 1 ? 10.0 : 0.0; }},
    {"duplicate token", "duplicate-token",  // another occurrence of the same token
     [](const std::vector<int>& ids, Index i, Index j) { return j != i && ids[j] == ids[i] ? 10.0 : 0.0; }},
    {"induction", "induction",  // [A][B] ... [A] -> the [B] that followed another [A]
     [](const std::vector<int>& ids, Index i, Index j) { return j >= 1 && j - 1 != i && ids[j - 1] == ids[i] ? 10.0 : 0.0; }},
    {"first-token sink", "first-token-sink", [](const std::vector<int>&, Index, Index j) { return j == 0 ? 10.0 : 0.0; }},
};

struct Sentence {
  const char* name;
  const char* text;
};

const Sentence sentences[] = {
    {"mary", "When Mary and John went to the store, John gave a drink to"},
    {"repeat", "the quick brown fox jumps over the lazy dog the quick brown fox jumps over"},
    {"cat", "the cat sat on the mat and the cat saw the hat"},
};

double entropy(const Matrix<double>& a, Index i) {
  double h = 0;
  for (Index j = 0; j < a.cols(); ++j)
    if (a(i, j) > 0) h -= a(i, j) * std::log(a(i, j));
  return h;
}

}  // namespace

int main(int argc, char** argv) try {
  const std::string folder = argc > 1 ? argv[1] : ".";
  std::vector<std::pair<std::string, std::string>> figures;

  for (const Sentence& sentence : sentences) {
    const std::vector<std::string> tokens = tokenize(sentence.text);
    const Index n = static_cast<Index>(tokens.size());
    std::map<std::string, int> vocabulary;
    std::vector<int> ids;
    for (const auto& t : tokens) ids.push_back(vocabulary.emplace(t, int(vocabulary.size())).first->second);
    std::printf("== \"%s\" (%ld tokens)\n", sentence.text, long(n));

    for (const Head& head : heads) {
      Matrix<double> scores(n, n);
      for (Index i = 0; i < n; ++i)
        for (Index j = 0; j < n; ++j) scores(i, j) = head.rule(ids, i, j);
      Matrix<double> causal = scores, open = scores;
      headwise::softmax_rows(causal, /*causal=*/true);
      headwise::softmax_rows(open, /*causal=*/false);

      std::printf("-- %-16s previous %.2f  duplicate %.2f  induction %.2f  first-token %.2f\n", head.name,
                  headwise::interpret::previous_token_score(causal),
                  headwise::interpret::duplicate_token_score(causal, ids),
                  headwise::interpret::induction_score(causal, ids), headwise::interpret::first_token_score(causal));
      std::printf("   entropy per row, causal:     ");
      double mean_causal = 0, mean_open = 0;
      for (Index i = 0; i < n; ++i) std::printf(" %.2f", entropy(causal, i)), mean_causal += entropy(causal, i) / n;
      std::printf("\n   entropy per row, mask off:   ");
      for (Index i = 0; i < n; ++i) std::printf(" %.2f", entropy(open, i)), mean_open += entropy(open, i) / n;
      std::printf("\n   mean entropy %.3f nats with the mask, %.3f without\n", mean_causal, mean_open);

      const std::string title = std::string(head.name) + " head: \"" + sentence.name + "\"";
      const std::string svg = headwise::interpret::svg_heatmap(causal, tokens, tokens, title, 30);
      const std::string file = std::string(head.file) + "-" + sentence.name + ".svg";
      headwise::interpret::write_file(folder + "/" + file, svg);
      figures.emplace_back(title + " (" + file + ")", svg);
    }
    std::printf("\n");
  }
  headwise::interpret::write_file(folder + "/toy-heads.html", headwise::interpret::html_page("headwise: four toy heads", figures));
  std::printf("wrote %zu heatmaps and toy-heads.html to %s\n", figures.size(), folder.c_str());
  return 0;
} catch (const std::exception& e) {  // a folder that does not exist, say: no "wrote" without the files
  std::fprintf(stderr, "%s\n", e.what());
  return 1;
}
