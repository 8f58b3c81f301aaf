// headwise::compiled: the double whole model and the loaders (io/). See
// include/headwise/detail/compiled.hpp.
#include "headwise/io/decoder_model.hpp"
#include "headwise/io/gpt2.hpp"
#include "headwise/io/latent_attention.hpp"
#include "headwise/io/llama.hpp"
#include "headwise/model/decoder_model.hpp"

namespace headwise {
namespace model {
HEADWISE_DECODER_MODEL_INSTANTIATIONS(, double)
}  // namespace model
namespace io {
HEADWISE_MODEL_LOADER_INSTANTIATIONS(, double)
HEADWISE_LLAMA_LOADER_INSTANTIATIONS(, double)
HEADWISE_GPT2_LOADER_INSTANTIATIONS(, double)
HEADWISE_LATENT_LOADER_INSTANTIATIONS(, double)
}  // namespace io
}  // namespace headwise
