// Head-type scores: how much a head's attention pattern looks like a known kind of head, from the
// pattern (n, n) and the token ids. Each score is a mean weight in [0, 1]: the mass the head puts
// where that kind of head would, averaged over the rows where the question makes sense. And the
// row statistics of a whole pattern, as the fused kernel gives them.
#pragma once

#include <cstddef>
#include <vector>

#include "headwise/detail/errors.hpp"
#include "headwise/kernels/row_statistics.hpp"
#include "headwise/score_rule.hpp"
#include "headwise/types.hpp"

namespace headwise::detail {
template <class Scalar>
void check_pattern(const char* where, const Matrix<Scalar>& pattern, Index tokens) {
  if (pattern.rows() != pattern.cols())
    invalid(where, "the pattern is ", pattern.rows(), "x", pattern.cols(), ", expected square");
  if (tokens >= 0 && tokens != pattern.rows())
    invalid(where, "there are ", tokens, " tokens for a pattern of ", pattern.rows(), " rows");
}
}  // namespace headwise::detail

namespace headwise::interpret {

/// Previous-token head: mean of A[i, i-1] over rows i >= 1.
template <class Scalar>
double previous_token_score(const Matrix<Scalar>& pattern) {
  detail::check_pattern("previous_token_score", pattern, -1);
  double total = 0;
  for (Index i = 1; i < pattern.rows(); ++i) total += pattern(i, i - 1);
  return pattern.rows() > 1 ? total / double(pattern.rows() - 1) : 0.0;
}

/// First-token sink: mean of A[i, 0] over rows i >= 1 (row 0 can only look at itself).
template <class Scalar>
double first_token_score(const Matrix<Scalar>& pattern) {
  detail::check_pattern("first_token_score", pattern, -1);
  double total = 0;
  for (Index i = 1; i < pattern.rows(); ++i) total += pattern(i, 0);
  return pattern.rows() > 1 ? total / double(pattern.rows() - 1) : 0.0;
}

/// Duplicate-token head: over rows i whose token occurred before, the mean mass on the earlier
/// positions j < i with tokens[j] == tokens[i]. 0 if no token repeats.
template <class Scalar>
double duplicate_token_score(const Matrix<Scalar>& pattern, const std::vector<Index>& tokens) {
  detail::check_pattern("duplicate_token_score", pattern, static_cast<Index>(tokens.size()));
  double total = 0;
  Index rows = 0;
  for (Index i = 0; i < pattern.rows(); ++i) {
    double mass = 0;
    bool repeats = false;
    for (Index j = 0; j < i; ++j)
      if (tokens[static_cast<std::size_t>(j)] == tokens[static_cast<std::size_t>(i)]) repeats = true, mass += pattern(i, j);
    if (repeats) total += mass, ++rows;
  }
  return rows ? total / double(rows) : 0.0;
}

/// Induction head ([A][B] ... [A] -> attends to that [B]): over rows i whose token occurred
/// before at j < i, the mean mass on the positions j + 1 that followed an earlier occurrence
/// (j + 1 < i). Measured on a repeated random sequence, a perfect induction head scores 1 on the
/// second half.
template <class Scalar>
double induction_score(const Matrix<Scalar>& pattern, const std::vector<Index>& tokens) {
  detail::check_pattern("induction_score", pattern, static_cast<Index>(tokens.size()));
  double total = 0;
  Index rows = 0;
  for (Index i = 0; i < pattern.rows(); ++i) {
    double mass = 0;
    bool has_target = false;
    for (Index j = 0; j + 1 < i; ++j)
      if (tokens[static_cast<std::size_t>(j)] == tokens[static_cast<std::size_t>(i)]) has_target = true, mass += pattern(i, j + 1);
    if (has_target) total += mass, ++rows;
  }
  return rows ? total / double(rows) : 0.0;
}

/// The row statistics of a square pattern (n, n) held whole (the toys', a trace's), as the
/// fused kernel records them without it: each row's entropy, first- and previous-token mass,
/// largest weight and its key; one head (row 0 of each matrix; sink_mass 0: a pattern held whole
/// has no sink). Every entry must be a weight in
/// [0, 1]: a NaN (a row whose scores overflowed) is refused by name, not counted as 0.
template <class Scalar>
RowStatistics<Scalar> pattern_statistics(const Matrix<Scalar>& pattern) {
  detail::check_pattern("pattern_statistics", pattern, -1);
  for (Index i = 0; i < pattern.rows(); ++i)
    for (Index j = 0; j < pattern.cols(); ++j)
      if (!(pattern(i, j) >= Scalar(0) && pattern(i, j) <= Scalar(1)))
        detail::invalid("pattern_statistics", "pattern(", i, ", ", j, ") = ", pattern(i, j), " is not a weight in [0, 1]");
  RowStatistics<Scalar> out;
  out.resize(1, pattern.rows());
  detail::record_statistics_of_weights(pattern, ScoreRule<Scalar>({}, pattern.rows(), pattern.cols(), 1, "pattern_statistics"), 0, out);
  return out;
}

}  // namespace headwise::interpret
