// The table of the families the loaders read (detail::families, declared in io/llama_config.hpp),
// and what each family reads of its config.json beyond the keys every family shares: its layer
// types, windows, QK norms, NoPE layers, soft-caps, experts, latent attention. Part of
// io/llama_config.hpp's definitions, which include it: include that header, not this one.
#pragma once

#include <algorithm>
#include <initializer_list>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include "headwise/io/llama_config.hpp"

// This header's definitions, where they are compiled (detail/compiled.hpp):
#include HEADWISE_IO_DEFINITIONS_OF("headwise/io/definitions/model_families.hpp")
