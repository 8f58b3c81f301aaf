// Example 3: four hand-designed heads (scoring rules, not learned weights: interpret/toy_heads.hpp)
// over three sentences: previous-token, duplicate-token, induction and first-token sink. Each
// pattern is drawn as an SVG heatmap, all of them on one HTML page; each head is scored by the
// head-type scores; and each row's entropy is printed with the causal mask on and off. The same
// heads run live in the browser: docs/toys/heads.html.
//
//   03_toy_heads [output folder]      (default: the current folder)
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include <headwise/headwise.hpp>
#include <headwise/interpret.hpp>

using headwise::Index;
namespace interpret = headwise::interpret;

namespace {

struct Sentence {
  const char* name;
  const char* text;
};

const Sentence sentences[] = {
    {"mary", "When Mary and John went to the store, John gave a drink to"},
    {"repeat", "the quick brown fox jumps over the lazy dog the quick brown fox jumps over"},
    {"cat", "the cat sat on the mat and the cat saw the hat"},
};

void print_entropies(const char* label, const interpret::ToyHeadPattern& pattern) {
  std::printf("   entropy per row, %-12s", label);
  for (Index i = 0; i < pattern.statistics.entropy.cols(); ++i) std::printf(" %.2f", pattern.statistics.entropy(0, i));
  std::printf("\n");
}

}  // namespace

int main(int argc, char** argv) try {
  const std::string folder = argc > 1 ? argv[1] : ".";
  std::vector<std::pair<std::string, std::string>> figures;

  for (const Sentence& sentence : sentences) {
    std::printf("== \"%s\" (%zu tokens)\n", sentence.text, interpret::word_tokens(sentence.text).size());
    for (const interpret::ToyHeadName& head : interpret::toy_heads()) {
      const interpret::ToyHeadPattern causal = interpret::toy_head_pattern(head.head, sentence.text, /*causal=*/true);
      const interpret::ToyHeadPattern open = interpret::toy_head_pattern(head.head, sentence.text, /*causal=*/false);
      std::printf("-- %-16s previous %.2f  duplicate %.2f  induction %.2f  first-token %.2f\n", head.name,
                  interpret::previous_token_score(causal.weights), interpret::duplicate_token_score(causal.weights, causal.ids),
                  interpret::induction_score(causal.weights, causal.ids), interpret::first_token_score(causal.weights));
      print_entropies("causal:", causal);
      print_entropies("mask off:", open);
      std::printf("   mean entropy %.3f nats with the mask, %.3f without\n", causal.statistics.entropy.mean(),
                  open.statistics.entropy.mean());

      const std::string title = std::string(head.name) + " head: \"" + sentence.name + "\"";
      const std::string svg = interpret::svg_heatmap(causal.weights, causal.tokens, causal.tokens, title, 30);
      const std::string file = std::string(head.id) + "-" + sentence.name + ".svg";
      interpret::write_file(folder + "/" + file, svg);
      figures.emplace_back(title + " (" + file + ")", svg);
    }
    std::printf("\n");
  }
  interpret::write_file(folder + "/toy-heads.html", interpret::html_page("headwise: four toy heads", figures));
  std::printf("wrote %zu heatmaps and toy-heads.html to %s\n", figures.size(), folder.c_str());
  return 0;
} catch (const std::exception& e) {  // a folder that does not exist, say: no "wrote" without the files
  std::fprintf(stderr, "%s\n", e.what());
  return 1;
}
