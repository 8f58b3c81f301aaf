// headwise: causal multi-head self-attention on Eigen. This umbrella header only includes the
// one-concept headers; io/safetensors.hpp (which needs nlohmann_json) is included on its own.
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
#include "headwise/kv_cache.hpp"
#include "headwise/multi_head_attention.hpp"
