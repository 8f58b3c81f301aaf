// headwise::compiled: the kernel's double instantiations (the three ways into it, the backward) and
// those of the stores and rules it reads. See include/headwise/detail/compiled.hpp.
#include "headwise/attend.hpp"
#include "headwise/attend_batch.hpp"
#include "headwise/attend_backward.hpp"
#include "headwise/kv_cache.hpp"
#include "headwise/paged_kv_cache.hpp"
#include "headwise/stored_matrix.hpp"

namespace headwise {
HEADWISE_ATTEND_INSTANTIATIONS(, double)
HEADWISE_ATTEND_BATCH_INSTANTIATIONS(, double)
HEADWISE_BACKWARD_INSTANTIATIONS(, double)
HEADWISE_PACKED_KEYS_VALUES_INSTANTIATIONS(, double)
HEADWISE_PAGED_KV_CACHE_INSTANTIATIONS(, double)
HEADWISE_KV_CACHE_INSTANTIATIONS(, double)
HEADWISE_SCORE_RULE_INSTANTIATIONS(, double)
HEADWISE_PRODUCT_INSTANTIATIONS(, double)
HEADWISE_STORED_MATRIX_INSTANTIATIONS(, double)
}  // namespace headwise
