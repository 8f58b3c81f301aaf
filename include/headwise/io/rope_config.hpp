// How config.json describes a rotary embedding, for every family the loaders read: transformers
// v5's `rope_parameters` (one object, or one per layer type) and v4's `rope_theta`, `rope_scaling`
// and `partial_rotary_factor`, each rope_type's keys (linear, llama3, yarn, longrope, dynamic,
// proportional) checked, any other key refused by name (it would change the rotation).
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include "headwise/detail/compiled.hpp"
#include "headwise/io/config_reader.hpp"
#include "headwise/rotary_embedding.hpp"

// (Only the config readers' definitions call these: detail/compiled.hpp.)

// This header's definitions, where they are compiled (detail/compiled.hpp):
#include HEADWISE_IO_DEFINITIONS_OF("headwise/io/definitions/rope_config.hpp")
