// libFuzzer target: the safetensors reader and the GPT-2 loader on arbitrary bytes.
// Every input must end in a value or a headwise::io::SafetensorsError: any other exception, a
// crash, or an AddressSanitizer / UBSan report is a finding (libFuzzer stops and saves the input).
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "headwise/io/gpt2.hpp"

namespace {

using headwise::io::SafetensorsError;
using headwise::io::SafetensorsFile;

/// Reads every tensor every way the reader offers; errors that name the problem are fine.
void read_every_tensor(const SafetensorsFile& file) {
  for (const std::string& name : file.names()) {
    const auto& info = file.info(name);
    if (info.elements > (1u << 20)) continue;  // the fuzzer's memory limit, not the reader's
    try {
      (void)file.values<double>(name);
    } catch (const SafetensorsError&) {
    }
    try {
      (void)file.matrix<float>(name);
    } catch (const SafetensorsError&) {
    }
    try {
      (void)file.matrix<double>(name, headwise::io::Fp8::as_stored);  // FP8 as stored, as the loaders read it
    } catch (const SafetensorsError&) {
    }
    try {
      (void)file.row_vector<double>(name);
    } catch (const SafetensorsError&) {
    }
    try {
      (void)file.slice<float>(name, 0);
      (void)file.slice<float>(name, 1);
    } catch (const SafetensorsError&) {
    }
  }
}

/// The GPT-2 loader on the file, with the small configs the seeds are written for.
void load_layers(const SafetensorsFile& file) {
  for (const headwise::io::Gpt2Config config : {headwise::io::Gpt2Config{4, 2, 1}, headwise::io::Gpt2Config{4, 1, 2},
                                                headwise::io::Gpt2Config{4, 2, 0}}) {
    try {
      if (config.n_layer > 0) (void)headwise::io::load_gpt2_attention_layers<float>(file, config);
      else (void)headwise::io::load_gpt2_attention<double>(file, config, 0);
    } catch (const SafetensorsError&) {
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const SafetensorsFile file(std::vector<unsigned char>(data, data + size), "fuzz");
    (void)file.metadata();
    read_every_tensor(file);
    load_layers(file);
  } catch (const SafetensorsError&) {
  }
  return 0;
}
