// libFuzzer target: the config reader of io/llama.hpp (every family of its table) on arbitrary text. Every
// input must end in a config whose sizes are in range and whose rotary settings a RotaryEmbedding
// accepts, or in a headwise::io::SafetensorsError; anything else (another exception, a crash, a
// sanitizer report, an allocation past the fuzzer's limit) is a finding.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "headwise/io/llama.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using headwise::io::max_config_value;
  try {
    const auto c = headwise::io::parse_llama_config(std::string(data, data + size), "fuzz");
    for (const headwise::Index value : {c.hidden_size, c.n_heads, c.n_kv_heads, c.head_dim, c.n_layers})
      if (value <= 0 || value > max_config_value) std::abort();  // a size the reader should have refused
    if (c.n_heads % c.n_kv_heads != 0 || c.rope.d_head != (c.full_head_dim ? c.full_head_dim : c.head_dim)) std::abort();
    if (c.sliding_window && (*c.sliding_window <= 0 || *c.sliding_window > max_config_value)) std::abort();
    headwise::RotaryEmbedding::check(c.rope);  // throws std::invalid_argument (a finding) if out of range
    if (c.sliding_rope) headwise::RotaryEmbedding::check(*c.sliding_rope);
    for (const headwise::Index layer : {headwise::Index(0), c.n_layers - 1}) {  // a layer's settings, as the loader takes them
      if (c.type_of(layer) == headwise::io::LayerType::linear) continue;
      const headwise::LayerConfig l = c.layer(layer);
      if (l.rope) headwise::RotaryEmbedding::check(*l.rope);
      if ((l.window && *l.window <= 0) || (l.chunk && *l.chunk <= 0)) std::abort();
      if (l.query_scale) l.query_scale->check("fuzz");
    }
  } catch (const headwise::io::SafetensorsError&) {
  }
  return 0;
}
