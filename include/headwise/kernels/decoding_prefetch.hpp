// What a decoding step asks memory for while it computes (detail::PanelPrefetch): a piece of what
// the step reads later, into L2, and (the widened products, the BF16 and F16 value products) each
// product's own panels a little ahead, into L1. A decoding step reads a key tile's keys (its
// scores), computes the softmax, then reads the tile's values: left to itself, memory would idle
// while the scores and the softmax are computed. Every arithmetic's panel loops are
// kernels/panel_tiles.hpp's, and its walk says what they ask for: PanelWalk (widened, BF16, F16;
// F16's asks unmeasured) the next phase's bytes (score_phase_prefetch, value_phase_prefetch);
// Int8Walk (kernels/int8_tiles.hpp) the value panels one key tile later (next_tile_value_panel)
// and keys in another block 512 tokens ahead (key_panel_ahead). Measured in bench/RESULTS.md,
// "Tuning constants".
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "headwise/detail/tile_product.hpp"
#include "headwise/types.hpp"
#include "headwise/variants/key_range.hpp"

namespace headwise::detail {

/// How far ahead of each panel row a decoding step's BF16 (and F16) value products ask for their own panels,
/// into L1 (the next phase's bytes already wait in L2; the widened products ask by rows, the int8
/// ones not at all, below): 4 KiB, the fastest of 2, 4 and 16; with key tiles of 1024
/// (default_key_tile) the key products ask for nothing into L1 (bench/RESULTS.md, "Tuning constants").
constexpr Index decoding_value_prefetch_bytes = 4096;

/// Score product `part` of `parts` of a decoding step's key tile (entries of `Stored`): its piece
/// of the values the tile's rows read next, tokens `tokens` of head g
/// (cut at the first token's block end): a region per value panel, value_panel_stride() entries
/// apart, each cut into parts / regions pieces, a piece per product. Values inside the keys (a
/// latent) have no bytes of their own: none.
template <class Stored, class Call>
PanelPrefetch score_phase_prefetch(const Call& call, Index g, KeyRange tokens, Index part, Index parts) {
  constexpr Index W = std::decay_t<decltype(call.kv)>::lanes;
  const Index regions = call.dv_padded() / W, pieces = std::max<Index>(1, parts / regions), region = part / pieces;
  const Index held = std::min(tokens.end, call.kv.block_end(tokens.begin)) - tokens.begin;
  const Index piece_bytes = held * W * Index(sizeof(Stored)) / pieces;
  PanelPrefetch prefetch;
  if (call.kv.values_are_keys() || region >= regions || piece_bytes < 64) return prefetch;  // (values inside the keys: read already)
  const Stored* values = call.kv.template value_row<Stored>(g, tokens.begin) + region * call.kv.value_panel_stride();
  prefetch.next_phase = reinterpret_cast<const char*>(values) + part % pieces * piece_bytes;
  return prefetch;
}

/// Value product `part` of `parts` of a decoding step's key tile at j0 (entries of `Stored`): its
/// own panel ahead, and its piece of the next key tile's keys (those in that tile's first block,
/// and held), cut into `parts` pieces.
template <class Stored, class Call>
PanelPrefetch value_phase_prefetch(const Call& call, Index g, Index j0, Index part, Index parts) {
  const Index next = j0 + call.tk, tokens = std::min({call.tk, call.kv.block_end(next) - next, call.kv.size() - next});
  const Index piece_bytes = tokens * call.kv.d_head() * Index(sizeof(Stored)) / parts;
  PanelPrefetch prefetch{decoding_value_prefetch_bytes};
  if (tokens <= 0 || piece_bytes < 64) return prefetch;
  prefetch.next_phase = reinterpret_cast<const char*>(call.kv.template key_panel<Stored>(g, next)) + part * piece_bytes;
  return prefetch;
}

/// The int8 products ask further ahead, into L2, and for nothing into L1 (what they read waits in
/// L2 already; the core's own prefetcher takes it on): the value products each for its own panel
/// one key tile later (next_tile_value_panel), two phases ahead where the others ask one; the key
/// products for the keys int8_key_lead tokens later, only where those lie in another block (a
/// paged cache's; key_panel_ahead). An int8 step computes about as long as its bytes take to
/// arrive, so a phase's lead hides only part of the memory's time; two tiles ahead or more gained
/// nothing. The widened and BF16 products, which take two panels at once, keep one phase. A head's
/// keys in one block are one stream, which the core's own prefetcher follows better than the asks;
/// across paged blocks the keys are asked for 512 tokens ahead (bench/RESULTS.md, "Tuning constants").
constexpr Index int8_key_lead = 512;
template <class Call>
PanelPrefetch key_panel_ahead(const Call& call, Index g, Index j) {
  PanelPrefetch prefetch;
  if (j + int8_key_lead < call.kv.size() && call.kv.block_end(j) <= j + int8_key_lead)
    prefetch.next_phase = reinterpret_cast<const char*>(call.kv.template key_panel<std::int8_t>(g, j + int8_key_lead));
  return prefetch;
}
/// The value panel `panel` (its W columns) over the rows `run` (in one block), one key tile later;
/// nothing where those rows lie in two blocks (blocks that do not divide
/// the key tile: their rows are not together).
template <class Call>
PanelPrefetch next_tile_value_panel(const Call& call, Index g, KeyRange run, Index panel) {
  PanelPrefetch prefetch;
  const Index later = run.begin + call.tk;
  if (later < call.kv.size() && run.end + call.tk <= call.kv.block_end(later))
    prefetch.next_phase =
        reinterpret_cast<const char*>(call.kv.template value_row<std::int8_t>(g, later) + panel * call.kv.value_panel_stride());
  return prefetch;
}

}  // namespace headwise::detail
