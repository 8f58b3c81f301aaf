// headwise::compiled: the readers' own code (config.json, safetensors, checkpoint indexes), compiled
// once, here, with nlohmann/json.hpp; a file compiled against the library sees their declarations
// only. See include/headwise/detail/compiled.hpp.
#define HEADWISE_COMPILING_IO
#include "headwise/io/checkpoint.hpp"
#include "headwise/io/config_reader.hpp"
#include "headwise/io/llama_config.hpp"
#include "headwise/io/rope_config.hpp"
#include "headwise/io/safetensors.hpp"
