// libFuzzer target: the GPT-2 config reader on arbitrary text. Every input must end in a config
// whose fields are in range or in a headwise::io::SafetensorsError; anything else is a finding.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "headwise/io/gpt2.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const auto config = headwise::io::parse_gpt2_config(std::string(data, data + size), "fuzz");
    const bool in_range = config.n_embd > 0 && config.n_head > 0 && config.n_layer > 0 &&
                          config.n_embd <= headwise::io::max_config_value &&
                          config.n_head <= headwise::io::max_config_value &&
                          config.n_layer <= headwise::io::max_config_value && config.n_embd % config.n_head == 0;
    if (!in_range) std::abort();  // a config the reader should have refused
  } catch (const headwise::io::SafetensorsError&) {
  }
  return 0;
}
