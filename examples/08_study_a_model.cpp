// Example 8: a whole model from text. Tokenize a sentence, run the model, print the most likely
// next tokens, score every head of every layer (previous-token, duplicate-token, induction on a
// repeated random sequence, first-token, sink mass), measure two signed effects of every head (how
// zero-ablating it changes the loss of the next tokens; its direct attribution to the top next
// token's logit against the runner-up's) and write a page of layer x head heatmaps.
//
//   08_study_a_model [checkpoint folder] ["text"] [tokenizer folder] [page.html]
//
// The checkpoint folder holds config.json and model.safetensors (GPT-2, Llama, Qwen2/3,
// Qwen3-MoE, Mistral, Ministral 3, SmolLM3, Phi-3, Gemma 2/3, OLMo 2); the tokenizer folder its
// tokenizer.json or GPT-2's vocab.json and merges.txt (io/tokenizer.hpp says how the folder is
// read), by default the checkpoint folder itself. Without arguments: the tests' tiny GPT-2 with
// GPT-2's real tokenizer, on "When Mary and John went to the store, John gave a drink to".
#include <algorithm>
#include <cstdio>
#include <numeric>
#include <string>
#include <vector>

#include <headwise/interpret/model_head_scores.hpp>
#include <headwise/io/decoder_model.hpp>
#include <headwise/io/tokenizer.hpp>

using headwise::Index;

int main(int argc, char** argv) {
  const std::string folder = argc > 1 ? argv[1] : HEADWISE_EXAMPLE_DATA_DIR "/gpt2-model-tiny";
  const std::string text = argc > 2 ? argv[2] : "When Mary and John went to the store, John gave a drink to";
  const std::string tokenizer_folder = argc > 3 ? argv[3] : argc > 1 ? folder : HEADWISE_EXAMPLE_DATA_DIR "/gpt2-tokenizer";
  const std::string page = argc > 4 ? argv[4] : "heads.html";
  try {
    const auto tokenizer = headwise::io::load_tokenizer(tokenizer_folder);
    const auto model = headwise::io::load_decoder_model<float>(folder);
    const std::vector<Index> ids = tokenizer.encode(text);
    std::printf("%s: %ld layers, d_model %ld, vocabulary %ld; \"%s\" is %zu tokens\n", folder.c_str(), long(model.n_layers()),
                long(model.d_model()), long(model.vocab_size()), text.c_str(), ids.size());
    if (ids.size() < 2) throw std::invalid_argument("the text must be at least 2 tokens");
    const headwise::Matrix<float> logits = model.logits(ids);
    std::vector<Index> order(static_cast<std::size_t>(logits.cols()));
    std::iota(order.begin(), order.end(), Index(0));
    const auto last = logits.row(logits.rows() - 1);
    std::partial_sort(order.begin(), order.begin() + 5, order.end(), [&](Index a, Index b) { return last(a) > last(b); });
    std::printf("most likely next tokens:");
    for (int i = 0; i < 5; ++i) std::printf(" \"%s\" (%.3f)", tokenizer.decode({order[static_cast<std::size_t>(i)]}).c_str(), double(last(order[static_cast<std::size_t>(i)])));
    std::printf("\n\n");
    namespace hi = headwise::interpret;
    const auto scores = hi::score_model_heads(model, ids, /*induction_length=*/20, /*seed=*/0);
    const auto loss = [&](const headwise::Matrix<float>& l) { return headwise::model::next_token_loss(l, ids); };
    std::vector<hi::HeadEffect> effects{{"ablation: loss change", hi::head_ablation_effects(model, ids, loss)}};
    hi::LogitDirection top;  // the top next token's logit against the runner-up's
    top.token = order[0], top.baseline = order[1];
    try {
      effects.push_back({"direct logit attr.", hi::direct_logit_attribution(model, ids, top)});
    } catch (const std::invalid_argument& e) {
      std::printf("(no direct logit attribution: %s)\n", e.what());
    }
    std::printf("%s\n", hi::head_score_table(scores, effects).c_str());
    hi::write_file(page, hi::head_score_page(scores, folder + ": \"" + text + "\"", effects));
    std::printf("wrote %s\n", page.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
