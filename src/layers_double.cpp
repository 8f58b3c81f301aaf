// headwise::compiled: the double attention layers (multi-head with grouped-query heads, and latent
// attention). See include/headwise/detail/compiled.hpp.
#include "headwise/multi_head_attention.hpp"
#include "headwise/multi_head_latent_attention.hpp"

namespace headwise {
HEADWISE_MULTI_HEAD_ATTENTION_INSTANTIATIONS(, double)
HEADWISE_LATENT_ATTENTION_INSTANTIATIONS(, double)
}  // namespace headwise
