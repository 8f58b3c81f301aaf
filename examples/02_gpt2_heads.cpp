// Example 2: load the attention of a GPT-2 checkpoint and describe each head in one line.
//
//   02_gpt2_heads [checkpoint folder] [layer]
//
// The folder holds model.safetensors and config.json as Hugging Face saves them (by default the
// GPT-2-small-shaped fixture of the tests). The input is the layer's recorded input when the
// folder has attention-reference.safetensors, else 64 random tokens. Per head: the mean entropy of
// its attention rows (nats), the mean mass it puts on the first token, and the mean distance
// between a query and the keys it attends to (Σ_j a_ij (i - j)).
#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>

#include <headwise/headwise.hpp>
#include <headwise/io/gpt2.hpp>

using headwise::Index;
using headwise::Matrix;

int main(int argc, char** argv) {
  const std::string folder = argc > 1 ? argv[1] : HEADWISE_EXAMPLE_DATA_DIR "/gpt2-small-1layer";
  const Index layer = argc > 2 ? std::stoi(argv[2]) : 0;
  try {
    const auto config = headwise::io::read_gpt2_config(folder + "/config.json");
    const auto mha = headwise::io::load_gpt2_attention<float>(folder, layer);

    Matrix<float> x;
    const std::string reference = folder + "/attention-reference.safetensors";
    if (std::ifstream(reference).good()) {
      x = headwise::io::SafetensorsFile::open(reference).matrix<float>("h." + std::to_string(layer) + ".attn.input");
    } else {
      std::mt19937 rng(0);
      std::normal_distribution<float> normal(0.0f, 1.0f);
      x.resize(64, config.n_embd);
      for (Index i = 0; i < x.size(); ++i) x.data()[i] = normal(rng);
    }
    std::printf("%s: layer %ld of %ld, d_model %ld, %ld heads of %ld, %ld tokens\n\n", folder.c_str(), long(layer),
                long(config.n_layer), long(mha.d_model()), long(mha.n_heads()), long(mha.d_head()), long(x.rows()));
    std::printf("%-9s %14s %18s %16s\n", "head", "mean entropy", "mass on token 0", "mean distance");

    const auto trace = mha.trace(x);
    for (Index h = 0; h < mha.n_heads(); ++h) {
      const Matrix<float>& a = trace.heads[h].weights;  // (n, n), rows sum to 1
      double entropy = 0, first = 0, distance = 0;
      for (Index i = 0; i < a.rows(); ++i) {
        for (Index j = 0; j <= i; ++j) {
          const double p = a(i, j);
          if (p > 0) entropy -= p * std::log(p);
          distance += p * double(i - j);
        }
        first += a(i, 0);
      }
      const double n = double(a.rows());
      std::printf("head %ld.%-3ld %14.4f %18.4f %16.3f\n", long(layer), long(h), entropy / n, first / n, distance / n);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
