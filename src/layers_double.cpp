// headwise::compiled: the double attention layers (multi-head with grouped-query heads, and latent
// attention), and the layer's backward (attention_backward.hpp). See include/headwise/detail/compiled.hpp.
#include "headwise/attention_backward.hpp"
#include "headwise/multi_head_attention.hpp"
#include "headwise/multi_head_latent_attention.hpp"

namespace headwise {
HEADWISE_MULTI_HEAD_ATTENTION_INSTANTIATIONS(, double)
HEADWISE_LATENT_ATTENTION_INSTANTIATIONS(, double)
HEADWISE_LAYER_BACKWARD_INSTANTIATIONS(, double)
}  // namespace headwise
