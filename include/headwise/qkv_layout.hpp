// QkvLayout: the columns of a layer's fused projection X [W_Q | W_K | W_V]: n_heads query heads,
// then n_kv_heads key heads, then n_kv_heads value heads, d_head columns each. The one place that
// knows where head h of Q, K or V lies, for the layer, its backward and ring attention.
#pragma once

#include "headwise/types.hpp"

namespace headwise {

/// Q, K or V.
enum class QkvPart { query = 0, key = 1, value = 2 };

struct QkvLayout {
  Index n_heads = 0, n_kv_heads = 0, d_head = 0;

  /// Columns of all of Q; of K and of V (n_kv_heads d_head each); of the whole [Q | K | V].
  Index query_width() const { return n_heads * d_head; }
  Index key_value_width() const { return n_kv_heads * d_head; }
  Index width() const { return query_width() + 2 * key_value_width(); }
  /// The first column of part p, and of head h of part p (a key/value head for K and V).
  Index first_column(QkvPart p) const {
    return p == QkvPart::query ? 0 : p == QkvPart::key ? query_width() : query_width() + key_value_width();
  }
  Index first_column(QkvPart p, Index h) const { return first_column(p) + h * d_head; }
  Index part_width(QkvPart p) const { return p == QkvPart::query ? query_width() : key_value_width(); }
  /// Which part column c (of the whole) belongs to, and the head within that part.
  QkvPart part_of(Index c) const {
    return c < query_width() ? QkvPart::query : c < query_width() + key_value_width() ? QkvPart::key : QkvPart::value;
  }
  Index head_of(Index c) const { return (c - first_column(part_of(c))) / d_head; }

  /// Part p of a (rows, width()) matrix or its gradient; head h of part p; Q and K side by side
  /// (what the rotary embedding rotates in one pass).
  template <class Derived>
  auto part(Derived&& m, QkvPart p) const {
    return m.middleCols(first_column(p), part_width(p));
  }
  template <class Derived>
  auto head(Derived&& m, QkvPart p, Index h) const {
    return m.middleCols(first_column(p, h), d_head);
  }
  template <class Derived>
  auto queries_and_keys(Derived&& m) const {
    return m.leftCols(query_width() + key_value_width());
  }
};

}  // namespace headwise
