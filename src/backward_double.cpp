// headwise::compiled: the double layer's backward (attention_backward.hpp: layer_backward,
// forward_for_backward, backward_step_by_step), a translation unit of its own so that the library's
// build spreads over the cores. See include/headwise/detail/compiled.hpp.
#include "headwise/attention_backward.hpp"

namespace headwise {
HEADWISE_LAYER_BACKWARD_INSTANTIATIONS(, double)
}  // namespace headwise
