// A consumer of headwise: one causal layer on the worked example's input, checked by hand (or,
// with HEADWISE_CONSUMER_STEPS, the same attention by the step-by-step core).
#include <cmath>
#include <cstdio>
#include <vector>

#ifdef HEADWISE_CONSUMER_STEPS
#include <headwise/attention_core.hpp>  // the step-by-step core alone: the targets and include paths work
#include <headwise/version.hpp>
#else
#include <headwise/headwise.hpp>
#endif
#include <headwise/io/safetensors.hpp>  // through headwise::io, which brings nlohmann_json
#ifdef HEADWISE_CONSUMER_MODEL
#include <headwise/io/decoder_model.hpp>
#include <headwise/text/tokenizer.hpp>  // through headwise::text, which brings PCRE2 and utf8proc

/// Tokenizes a sentence with GPT-2's tokenizer and runs the tests' tiny GPT-2 on it: true if the
/// ids are GPT-2's (tests/data/gpt2-tokenizer/tokenization-reference.json has them) and every
/// logit is finite.
bool whole_model_runs() {
  const auto bpe = headwise::text::Tokenizer::from_tokenizer_json(HEADWISE_CONSUMER_MODEL "/gpt2-tokenizer/tokenizer.json");
  const auto model = headwise::io::load_decoder_model<float>(HEADWISE_CONSUMER_MODEL "/gpt2-model-tiny");
  const std::vector<headwise::Index> ids = bpe.encode("Hello, world!");
  const headwise::Matrix<float> logits = model.logits(ids);
  std::printf("\"Hello, world!\" is %zu tokens; logits %ld x %ld\n", ids.size(), long(logits.rows()), long(logits.cols()));
  return ids == std::vector<headwise::Index>{15496, 11, 995, 0} && logits.allFinite() && logits.cols() == model.vocab_size();
}
#endif

int main() {
  using headwise::Matrix;
  Matrix<double> w_q(4, 2), w_k(4, 2), w_v(4, 2);
  w_q << 1, 0, 0, 1, 0, 1, 1, 0;
  w_k << 1, 0, 1, 1, 0, 1, 0, 0;
  w_v << 0, 1, 1, 0, 1, 1, 0, -1;
  Matrix<double> x(3, 4);
  x << 1, 0, 1, 0, 0, 1, 1, 0, 1, 1, 0, 1;
#ifdef HEADWISE_CONSUMER_STEPS
  // The attention core step by step, from its own header (no fused kernel, no umbrella: a second
  // and third consumer build only need to show the targets work): Z = A V is the layer's out.
  const Matrix<double> out = headwise::attention(Matrix<double>(x * w_q), Matrix<double>(x * w_k), Matrix<double>(x * w_v)).z;
#else
  headwise::MultiHeadWeights<double> w;
  w.w_q = w_q, w.w_k = w_k, w.w_v = w_v;
  w.w_o = Matrix<double>::Identity(2, 4);  // W_O copies Z into the first two columns
  const headwise::MultiHeadAttention<double> mha(/*n_heads=*/1, w);
  const Matrix<double> out = mha.forward(x);
#endif
  std::printf("headwise %s: out row 3 = (%.5f, %.5f)\n", HEADWISE_VERSION_STRING, out(2, 0), out(2, 1));
  // The worked example: row 1 is exactly v1 = (1, 2); row 3 is (1.28400, 0.56405).
  const bool ok = out(0, 0) == 1 && out(0, 1) == 2 && std::abs(out(2, 0) - 1.28400) < 5e-6 &&
                  std::abs(out(2, 1) - 0.56405) < 5e-6;
  bool refused = false;  // the reader is there: an empty file is refused by name
  try {
    headwise::io::SafetensorsFile(std::vector<unsigned char>{}, "empty");
  } catch (const headwise::io::SafetensorsError&) {
    refused = true;
  }
#ifdef HEADWISE_CONSUMER_MODEL
  if (!whole_model_runs()) return 1;
#endif
  return ok && refused ? 0 : 1;
}
