// headwise: causal multi-head self-attention on Eigen. This umbrella header only includes the
// one-concept headers; io/ (which needs nlohmann_json) and interpret.hpp are included on their own.
#pragma once

#include "headwise/version.hpp"
#include "headwise/types.hpp"
#include "headwise/options.hpp"
#include "headwise/linear.hpp"
#include "headwise/scores.hpp"
#include "headwise/causal_mask.hpp"
#include "headwise/softmax.hpp"
#include "headwise/attention_core.hpp"
#include "headwise/attention_head.hpp"
#include "headwise/kernels/fused_attention.hpp"
#include "headwise/head_interventions.hpp"
#include "headwise/kernels/row_statistics.hpp"
#include "headwise/kv_cache.hpp"
#include "headwise/multi_head_attention.hpp"
#include "headwise/layer_config.hpp"
#include "headwise/rotary_embedding.hpp"
#include "headwise/score_rule.hpp"
#include "headwise/head_sum.hpp"
#include "headwise/kernels/fused_attention_backward.hpp"
#include "headwise/attention_backward.hpp"
