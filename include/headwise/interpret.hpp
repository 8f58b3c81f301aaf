// headwise's tools for studying heads: inspection from the fast path, attribution patching,
// head-type scores (of one pattern, and of every head of a whole model), SVG heatmaps and the toy
// heads. Interventions are hook functions for a layer's Z (head_interventions.hpp).
#pragma once

#include "headwise/interpret/attribution.hpp"
#include "headwise/interpret/head_scores.hpp"
#include "headwise/interpret/inspection.hpp"
#include "headwise/interpret/model_head_scores.hpp"
#include "headwise/interpret/svg_heatmap.hpp"
#include "headwise/interpret/toy_heads.hpp"
