// headwise::compiled: the double attention layers (multi-head with grouped-query heads, and latent
// attention, the gated delta rule and Gated DeltaNet). See include/headwise/detail/compiled.hpp.
#include "headwise/gated_delta_net.hpp"
#include "headwise/multi_head_attention.hpp"
#include "headwise/multi_head_latent_attention.hpp"
#include "headwise/paged_decoding.hpp"

namespace headwise {
HEADWISE_MULTI_HEAD_ATTENTION_INSTANTIATIONS(, double)
HEADWISE_PAGED_DECODING_INSTANTIATIONS(, double)
HEADWISE_LATENT_ATTENTION_INSTANTIATIONS(, double)
HEADWISE_DELTA_RULE_INSTANTIATIONS(, double)
HEADWISE_GATED_DELTA_NET_INSTANTIATIONS(, double)
}  // namespace headwise
