// libFuzzer target: the index of a sharded checkpoint (model.safetensors.index.json) on arbitrary
// text, over two shards held in memory that split a tiny Llama layer, then the layer loaded from
// whatever the index makes of them. Every input must end in a layer or a
// headwise::io::SafetensorsError; anything else is a finding.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "headwise/io/llama.hpp"
#include "support/safetensors_writer.hpp"

namespace {

using headwise::io::SafetensorsError;
using headwise::io::SafetensorsFile;

/// A tiny Llama layer (hidden 8, 2 query heads and 1 key/value head of 4) split over two shards.
const SafetensorsFile& shard(int which) {
  static const SafetensorsFile first(headwise_test::write_safetensors(
                                         {{"model.layers.0.self_attn.q_proj.weight", {{8, 8}, 0.25f}},
                                          {"model.layers.0.self_attn.k_proj.weight", {{4, 8}, -0.5f}}}),
                                     "model-00001-of-00002.safetensors");
  static const SafetensorsFile second(headwise_test::write_safetensors(
                                          {{"model.layers.0.self_attn.v_proj.weight", {{4, 8}, 0.125f}},
                                           {"model.layers.0.self_attn.o_proj.weight", {{8, 8}, 1.0f}}}),
                                      "model-00002-of-00002.safetensors");
  return which == 1 ? first : second;
}

headwise::io::LlamaConfig tiny_config() {
  return headwise::io::parse_llama_config(
      R"({"model_type": "llama", "hidden_size": 8, "num_attention_heads": 2, "num_key_value_heads": 1,
          "head_dim": 4, "num_hidden_layers": 1})",
      "tiny");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const headwise::io::LlamaConfig config = tiny_config();
  try {
    const auto model = headwise::io::Checkpoint::of_index("fuzz", "fuzz.index.json", std::string(data, data + size),
                                                          [](const std::string& file) {
                                                            if (file == shard(1).name()) return shard(1);
                                                            if (file == shard(2).name()) return shard(2);
                                                            throw SafetensorsError("headwise: fuzz: no shard " + file);
                                                          });
    (void)headwise::io::load_llama_attention<float>(model, config, 0);
  } catch (const SafetensorsError&) {
  }
  return 0;
}
