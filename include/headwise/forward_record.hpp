// ForwardRecord: what one fused forward of a layer keeps, on request, and what can be read off it
// afterwards without running the layer again. The one record of a forward: a layer's
// attend_heads fills it, interpret::inspect returns it, the whole model's hooks read it, and
// layer_backward reads it (from forward_for_backward, which keeps the queries, keys and values and
// the logsumexp). Every part is O(n d_model); a head's pattern,
// (n, n), is computed from the kept queries, keys and logsumexp only when asked for.
//
//   ForwardRecord<float> record;
//   record.keep_queries = record.keep_keys_values = record.keep_logsumexp = true;
//   layer.attend_heads(x, {}, record);     // record.attention.z: every head's Z, (n, n_heads d_head)
//   Matrix<float> p = record.pattern(3);   // head 3's pattern, exactly the forward's weights
#pragma once

#include <cmath>
#include <vector>

#include "headwise/attend.hpp"
#include "headwise/detail/errors.hpp"
#include "headwise/options.hpp"
#include "headwise/score_rule.hpp"
#include "headwise/types.hpp"

namespace headwise {

template <class Scalar>
struct ForwardRecord {
  // What to keep besides Z (set before the forward).
  bool keep_logsumexp = false;    ///< attention.logsumexp (pattern() needs it)
  bool keep_statistics = false;   ///< attention.statistics: entropy, masses, largest weight per row
  bool keep_queries = false;      ///< q (pattern() needs it)
  bool keep_keys_values = false;  ///< k and v (pattern() needs the keys)

  // What the forward kept.
  /// The attention before W_O, as attend() returns it: every head's Z (n, n_heads d_v) as W_O
  /// reads it (gated by an output gate), and the logsumexp and statistics (n_heads, n) if kept.
  AttentionResult<Scalar> attention;
  Matrix<Scalar> q;                                  ///< (n, n_heads d_head): the queries after norms and RoPE
  /// The keys (after norms and RoPE), (n, n_kv_heads d_head), and values, (n, n_kv_heads d_v), as
  /// the kernel read them (in the layer's kv_storage, widened back); a latent layer's latent keys
  /// [c_kv | RoPE(k_pe)] and its values c_kv, their first kv_lora_rank columns.
  Matrix<Scalar> k, v;
  Matrix<Scalar> output;                             ///< the layer's output, where the forward computed it (inspect)
  AttentionOptions options;                          ///< the options of the run, the layer's own included
  int threads = 1;                                   ///< the threads the run took (options.threads resolved once)
  Index n_heads = 0, n_kv_heads = 0, d_head = 0;
  Index d_v = 0;  ///< the width of a head's Z (d_head, but v_head_dim in a latent attention layer)
  KvArithmetic arithmetic = KvArithmetic::widened;  ///< how the kernel multiplied by the stored keys (layer_config.hpp)

  /// A record that keeps everything.
  static ForwardRecord everything() {
    ForwardRecord r;
    r.keep_logsumexp = r.keep_statistics = r.keep_queries = r.keep_keys_values = true;
    return r;
  }

  /// Head h's Z: (n, d_v).
  Matrix<Scalar> z_head(Index h) const { return attention.z.middleCols(checked(h, "z_head") * d_v, d_v); }

  /// Rows `rows` of head h's attention pattern, exactly, from the kept logsumexp:
  /// p_ij = exp(s_ij - lse_i), s_ij = q_i . k_j / divisor modified by the run's rule (cap, ALiBi,
  /// bias, sink in the lse) over the keys j that query i sees, 0 elsewhere. -> (rows.size(), n).
  Matrix<Scalar> pattern(Index h, const std::vector<Index>& rows) const {
    constexpr const char* where = "ForwardRecord::pattern";
    checked(h, where);
    if (q.rows() != attention.z.rows() || attention.logsumexp.cols() != attention.z.rows() || k.rows() != attention.z.rows())
      detail::invalid(where, "the record kept no queries, keys or logsumexp (keep_queries, keep_keys_values, keep_logsumexp)");
    if (arithmetic == KvArithmetic::stored)
      detail::invalid(where, "the layer multiplied its keys under the stored arithmetic (products of rounded queries): ",
                      "its pattern is not q . k; inspect a widened layer (kv_arithmetic = widened) for the pattern");
    const Index n = q.rows(), g = h / (n_heads / n_kv_heads);
    const Scalar inv_divisor = static_cast<Scalar>(1.0 / resolve_divisor<Scalar>(options, d_head, where));
    const ScoreRule<Scalar> rule(options, n, n, n_heads, where);
    const auto k_g = k.middleCols(g * d_head, d_head);  // head g's keys
    Matrix<Scalar> p = Matrix<Scalar>::Zero(static_cast<Index>(rows.size()), n);
    RowVector<Scalar> s(n);
    for (std::size_t r = 0; r < rows.size(); ++r) {
      const Index i = rows[r];
      if (i < 0 || i >= n) detail::invalid(where, "row ", i, " out of range [0, ", n, ")");
      const KeyRange keys = rule.keys(i);
      const RowVector<Scalar> q_i = q.block(i, h * d_head, 1, d_head) * inv_divisor;
      for (Index j = keys.begin; j < keys.end; ++j) s(j) = q_i.dot(k_g.row(j));
      rule.apply(h, i, /*first_key=*/0, s.data(), keys.begin, keys.end);
      for (Index j = keys.begin; j < keys.end; ++j) p(static_cast<Index>(r), j) = std::exp(s(j) - attention.logsumexp(h, i));
    }
    return p;
  }

  /// All rows of head h's pattern: (n, n).
  Matrix<Scalar> pattern(Index h) const {
    std::vector<Index> rows(static_cast<std::size_t>(q.rows()));
    for (Index i = 0; i < q.rows(); ++i) rows[static_cast<std::size_t>(i)] = i;
    return pattern(h, rows);
  }

 private:
  Index checked(Index h, const char* where) const {
    if (h < 0 || h >= n_heads) detail::invalid(where, "head ", h, " out of range [0, ", n_heads, ")");
    return h;
  }
};

}  // namespace headwise
