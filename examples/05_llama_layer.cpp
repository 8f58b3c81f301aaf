// Example 5: one attention layer of a Hugging Face checkpoint of any family the loader reads
// (Llama, Qwen2/3, Mistral, Ministral 3, Gemma 2/3/4, gpt-oss, Phi-3, Llama 4, SmolLM3, OLMo 2,
// Qwen3-Next): run its attention on a prompt, decode a few more tokens through the KV cache, and
// describe each head.
//
//   05_llama_layer [checkpoint folder] [layer]
//
// The folder holds config.json and model.safetensors (or shards with
// model.safetensors.index.json), by default the tiny Llama of the tests. Its config gives the
// grouped-query heads, the rotary embedding (or none), the QK-norm, a window or chunks, sinks and
// the divisor. The prompt is the layer's recorded input when the folder has
// attention-reference.safetensors, else random. Per head, from the fused kernel's statistics (no
// pattern is held): the mean entropy of its rows, the mean mass on the first token, on the
// previous one, and on the sink where the layer has sinks.
#include <cstdio>
#include <fstream>
#include <random>
#include <string>

#include <headwise/headwise.hpp>
#include <headwise/interpret.hpp>
#include <headwise/io/llama.hpp>

using headwise::Index;
using headwise::Matrix;

int main(int argc, char** argv) {
  const std::string folder = argc > 1 ? argv[1] : HEADWISE_EXAMPLE_DATA_DIR "/llama-tiny";
  const Index layer = argc > 2 ? std::stoi(argv[2]) : 0;
  try {
    const auto config = headwise::io::read_llama_config(folder + "/config.json");
    const auto mha = headwise::io::load_llama_attention<float>(folder, layer);
    std::printf("%s: %s, layer %ld of %ld, d_model %ld, %ld query heads and %ld key/value heads of %ld\n", folder.c_str(),
                config.model_type.c_str(), long(layer), long(config.n_layers), long(mha.d_model()), long(mha.n_heads()),
                long(mha.n_kv_heads()), long(mha.d_head()));
    const headwise::LayerConfig& c = mha.config();
    if (mha.rope())
      std::printf("RoPE theta %g over %ld of %ld dimensions", mha.rope()->config().theta, long(mha.rope()->rotary_dims()), long(mha.d_head()));
    else
      std::printf("no rotary embedding (NoPE)");
    std::printf("; %s%s%s%s%s%s\n", c.window ? ("sliding window " + std::to_string(*c.window)).c_str() : c.chunk ? ("chunks of " + std::to_string(*c.chunk)).c_str() : "full causal",
                c.qk_norm ? "; QK-norm" : "", c.query_scale ? "; query scale by position" : "", c.sinks.size() ? "; sinks" : "",
                mha.gated() ? "; output gate" : "", c.divisor ? ("; divisor " + std::to_string(*c.divisor)).c_str() : "");

    Matrix<float> x;
    const std::string reference = folder + "/attention-reference.safetensors";
    if (std::ifstream(reference).good()) {
      x = headwise::io::SafetensorsFile::open(reference).matrix<float>("layers." + std::to_string(layer) + ".attn.input");
    } else {
      std::mt19937 rng(0);
      std::normal_distribution<float> normal(0.0f, 1.0f);
      x.resize(33, mha.d_model());
      for (Index i = 0; i < x.size(); ++i) x.data()[i] = normal(rng);
    }

    // The prompt in one call, then the last 4 tokens one at a time through the cache.
    const Index n = x.rows(), prompt = n - 4;
    auto cache = mha.make_cache(n);
    Matrix<float> decoded(n, mha.d_model());
    decoded.topRows(prompt) = mha.forward_incremental(x.topRows(prompt), cache);
    for (Index t = prompt; t < n; ++t) decoded.row(t) = mha.forward_incremental(x.row(t), cache);
    const bool same = decoded == mha.forward(x);
    std::printf("prompt of %ld tokens, then %ld decoded one by one: the cache holds %ld rotated keys; equal to the "
                "full forward bit for bit: %s\n\n", long(prompt), long(n - prompt), long(cache.size()), same ? "yes" : "no");

    std::printf("%-9s %8s %14s %18s %20s %14s\n", "head", "kv head", "mean entropy", "mass on token 0", "mass on previous",
                "mass on sink");
    const auto run = headwise::interpret::inspect(mha, x);
    const auto& stats = run.attention.statistics;
    for (Index h = 0; h < mha.n_heads(); ++h)
      std::printf("head %ld.%-3ld %8ld %14.4f %18.4f %20.4f %14.4f\n", long(layer), long(h), long(mha.kv_head_of(h)),
                  stats.entropy.row(h).mean(), stats.first_token_mass.row(h).mean(), stats.previous_token_mass.row(h).mean(),
                  stats.sink_mass.row(h).mean());
    return same ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
