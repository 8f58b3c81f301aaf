// ALiBi (Press et al., 2022; BLOOM, MPT): no position embedding; each head h adds
// slope_h (j - i) to the score of query position i and key position j (<= 0 on the keys a causal
// query sees), so distant keys are penalised linearly, more steeply in some heads than others.
#pragma once

#include <cmath>

#include "headwise/detail/errors.hpp"
#include "headwise/types.hpp"

namespace headwise {

/// The slopes of n_heads heads as BLOOM builds them: for the largest power of two m <= n_heads,
/// 2^(-8h/m) for h = 1..m; then, if n_heads is not a power of two, every other slope of 2m
/// (2^(-8(2h-1)/(2m)) for h = 1..n_heads - m). Throws unless n_heads > 0.
inline Vector<double> alibi_slopes(Index n_heads) {
  if (n_heads <= 0) detail::invalid("alibi_slopes", "n_heads must be > 0, got ", n_heads);
  Index m = 1;
  while (m * 2 <= n_heads) m *= 2;
  Vector<double> slopes(n_heads);
  for (Index h = 0; h < m; ++h) slopes(h) = std::exp2(-8.0 * double(h + 1) / double(m));
  for (Index h = m; h < n_heads; ++h) slopes(h) = std::exp2(-8.0 * double(2 * (h - m) + 1) / double(2 * m));
  return slopes;
}

/// row[j] += slope (first_key + j - position) for j in [begin, end): the scores of the query at
/// `position` against keys at first_key + j.
template <class Scalar>
void add_alibi(Scalar* row, Index begin, Index end, double slope, Index first_key, Index position) {
  const Scalar s = static_cast<Scalar>(slope);
  for (Index j = begin; j < end; ++j) row[j] += s * static_cast<Scalar>(first_key + j - position);
}

}  // namespace headwise
