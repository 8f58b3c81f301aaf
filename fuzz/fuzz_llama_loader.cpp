// libFuzzer target: the whole Llama-family loader on arbitrary bytes. The input is a config.json's
// text, a NUL byte, then a model.safetensors file; every layer the config names is loaded from it
// (float and double) and run on two tokens. Every input must end in layers whose outputs are
// finite, or in a headwise::io::SafetensorsError or a std::invalid_argument that names the
// problem; anything else (another exception, a crash, a sanitizer report, NaN) is a finding.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "headwise/io/latent_attention.hpp"
#include "headwise/io/llama.hpp"

namespace {

/// Layer `layer` as the config's family loads it: multi-head latent attention (DeepSeek-V3) or not.
template <class Scalar>
auto load_layer(const headwise::io::Checkpoint& model, const headwise::io::LlamaConfig& config, headwise::Index layer,
                std::true_type /*latent*/) {
  return headwise::io::load_latent_attention<Scalar>(model, config, layer);
}
template <class Scalar>
auto load_layer(const headwise::io::Checkpoint& model, const headwise::io::LlamaConfig& config, headwise::Index layer,
                std::false_type /*latent*/) {
  return headwise::io::load_llama_attention<Scalar>(model, config, layer);
}

template <class Scalar, class Latent>
void load_and_run(const headwise::io::Checkpoint& model, const headwise::io::LlamaConfig& config, Latent latent) {
  for (headwise::Index layer = 0; layer < config.n_layers; ++layer) {
    const auto attention = load_layer<Scalar>(model, config, layer, latent);
    const headwise::Matrix<Scalar> x = headwise::Matrix<Scalar>::Constant(2, attention.d_model(), Scalar(0.5));
    try {
      if (!attention.forward(x).allFinite()) std::abort();  // a non-finite output must be refused, not returned
    } catch (const std::invalid_argument&) {  // an overflow, named
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::uint8_t* split = std::find(data, data + size, std::uint8_t(0));
  if (split == data + size) return 0;
  try {
    const auto config = headwise::io::parse_llama_config(std::string(data, split), "config.json");
    if (config.hidden_size > 4096) return 0;  // the fuzzer's memory limit, not the loader's
    const auto model = headwise::io::Checkpoint::of_file(
        "fuzz", headwise::io::SafetensorsFile(std::vector<unsigned char>(split + 1, data + size), "model.safetensors"));
    if (config.latent) {
      load_and_run<float>(model, config, std::true_type{});
      load_and_run<double>(model, config, std::true_type{});
    } else {
      load_and_run<float>(model, config, std::false_type{});
      load_and_run<double>(model, config, std::false_type{});
    }
  } catch (const headwise::io::SafetensorsError&) {
  }
  return 0;
}
