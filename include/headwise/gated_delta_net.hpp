// GatedDeltaNet: Qwen3-Next's linear-attention layer (Hugging Face's Qwen3NextGatedDeltaNet). Its
// heads keep a fixed-size state rather than every token's keys and values (delta_rule.hpp); with
// n_k key heads of d_k, n_v value heads of d_v (r = n_v / n_k), C = 2 n_k d_k + n_v d_v channels
// and a kernel of K taps, on the normed stream a (n, d_model):
//   1. in_qkvz(a), grouped by key head g: q_g (d_k), k_g (d_k), the values of value heads
//      g r .. g r + r - 1 (r d_v) and their gates z (r d_v); in_ba(a) per group: b then a of those
//      heads (r each).
//   2. mixed = [q of every group | k of every group | v of every head] (n, C); a causal depthwise
//      convolution over each channel (the K - 1 earlier tokens' inputs from the cache, zeros before
//      the first), then SiLU.
//   3. q and k divided by sqrt(Σ x² + 1e-6) per key head, q times d_k^-1/2; value head h reads key
//      head h / r. β = sigmoid(b); g = -exp(A_log) softplus(a + dt_bias).
//   4. The gated delta rule per value head (delta_rule.hpp), from the cache's state.
//   5. Per value head, the gated RMSNorm w ∘ o / sqrt(mean(o²) + eps) ∘ silu(z) (w a plain
//      multiplier); out_proj of the heads side by side. out = Σ_h y_h W_out[h]: a sum of heads,
//      as attention's.
// The cache (GatedDeltaNetCache) is the conv inputs of the last K - 1 tokens and each head's
// DeltaRuleState: a forward from a fresh cache, then tokens one at a time, give the bits of one
// forward over all of them.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include "headwise/delta_rule.hpp"
#include "headwise/detail/errors.hpp"
#include "headwise/detail/parallel.hpp"
#include "headwise/stored_matrix.hpp"
#include "headwise/types.hpp"

namespace headwise {

/// The layer's sizes (config.json: linear_num_key_heads, linear_num_value_heads,
/// linear_key_head_dim, linear_value_head_dim, linear_conv_kernel_dim; rms_norm_eps), and the
/// chunk of the delta rule (a speed setting: the bits do not depend on how tokens are split
/// into calls, but they do on the chunk). 16, not Hugging Face's 64: on a CPU the intra-chunk
/// terms grow with the chunk and the products with the state do not shrink (bench/RESULTS.md,
/// issue 58 second part).
struct GatedDeltaNetShape {
  Index key_heads = 0, value_heads = 0, d_key = 0, d_value = 0, kernel = 4;
  double eps = 1e-6;
  Index chunk = 16;
  Index channels() const { return 2 * key_heads * d_key + value_heads * d_value; }
};

/// What a layer keeps between calls: the conv inputs of the last K - 1 tokens (K - 1, C), oldest
/// first, and each value head's delta-rule state.
template <class Scalar>
struct GatedDeltaNetCache {
  Index tokens = 0;
  Matrix<Scalar> conv_inputs;
  std::vector<DeltaRuleState<Scalar>> heads;
};

/// Every step's value, for hooks (n rows each): mixed (n, C), conv_out (n, C), q and k (n, n_k d_k;
/// unit length, q before d_k^-1/2), v and z (n, n_v d_v), beta and g (n, n_v), core_out (n, n_v d_v:
/// the delta rule's outputs).
template <class Scalar>
struct GatedDeltaNetRecord {
  Matrix<Scalar> mixed_qkv, conv_out, q, k, v, z, beta, g, core_out;
};

template <class Scalar>
class HEADWISE_ISA_TAG GatedDeltaNet {
 public:
  GatedDeltaNetShape shape;
  StoredMatrix in_qkvz;  ///< [2 n_k d_k + 2 n_v d_v, d_model], grouped by key head
  StoredMatrix in_ba;    ///< [2 n_v, d_model], grouped by key head
  Matrix<Scalar> conv;   ///< (C, K): conv1d.weight [C, 1, K]
  RowVector<Scalar> dt_bias, a_log;  ///< (n_v)
  RowVector<Scalar> norm;            ///< (d_v): the gated norm's weight
  StoredMatrix out;      ///< [d_model, n_v d_v]

  /// Throws naming the first tensor whose shape does not fit `shape` (d_model: the stream's width).
  void check(Index d_model) const {
    const GatedDeltaNetShape& s = shape;
    if (s.key_heads <= 0 || s.value_heads <= 0 || s.d_key <= 0 || s.d_value <= 0 || s.kernel <= 0 || s.chunk <= 0 ||
        s.value_heads % s.key_heads != 0 || !(s.eps > 0))
      detail::invalid("GatedDeltaNet", "key heads ", s.key_heads, ", value heads ", s.value_heads, ", d_key ", s.d_key, ", d_value ", s.d_value,
                      ", kernel ", s.kernel, ", chunk ", s.chunk, ", eps ", s.eps, ": each must be >= 1 (eps > 0), and the value heads a multiple of the key heads");
    const Index wide = 2 * s.key_heads * s.d_key + 2 * s.value_heads * s.d_value;
    const auto expect = [](const char* what, Index rows, Index cols, Index want_rows, Index want_cols) {
      if (rows != want_rows || cols != want_cols)
        detail::invalid("GatedDeltaNet", what, " is ", rows, "x", cols, ", expected ", want_rows, "x", want_cols);
    };
    expect("in_proj_qkvz", in_qkvz.rows(), in_qkvz.cols(), wide, d_model);
    expect("in_proj_ba", in_ba.rows(), in_ba.cols(), 2 * s.value_heads, d_model);
    expect("conv1d", conv.rows(), conv.cols(), s.channels(), s.kernel);
    expect("dt_bias", 1, dt_bias.size(), 1, s.value_heads);
    expect("A_log", 1, a_log.size(), 1, s.value_heads);
    expect("norm", 1, norm.size(), 1, s.d_value);
    expect("out_proj", out.rows(), out.cols(), d_model, s.value_heads * s.d_value);
  }

  GatedDeltaNetCache<Scalar> make_cache() const {
    GatedDeltaNetCache<Scalar> c;
    c.conv_inputs = Matrix<Scalar>::Zero(shape.kernel - 1, shape.channels());
    c.heads.assign(static_cast<std::size_t>(shape.value_heads), DeltaRuleState<Scalar>(shape.d_key, shape.d_value, shape.chunk));
    return c;
  }

  /// Steps 1-5 but out_proj on a (n, d_model), after the cache's tokens (advanced past these):
  /// the heads' gated outputs side by side (n, n_v d_v), what out_proj reads.
  Matrix<Scalar> mix(const Matrix<Scalar>& a, GatedDeltaNetCache<Scalar>& cache, int threads, GatedDeltaNetRecord<Scalar>* record = nullptr) const {
    check(a.cols());
    if (static_cast<Index>(cache.heads.size()) != shape.value_heads || cache.conv_inputs.rows() != shape.kernel - 1 ||
        cache.conv_inputs.cols() != shape.channels())
      detail::invalid("GatedDeltaNet::mix", "the cache holds ", cache.heads.size(), " heads and ", cache.conv_inputs.cols(),
                      " channels; this layer ", shape.value_heads, " and ", shape.channels(), " (make_cache gives its own)");
    const Matrix<Scalar> qkvz = times_transposed<Scalar>(a, in_qkvz, threads), ba = times_transposed<Scalar>(a, in_ba, threads);
    GatedDeltaNetRecord<Scalar> r;
    ungroup(qkvz, ba, r);
    convolve(cache, r);
    normalise_keys(r);
    Matrix<Scalar> gated = delta_rule(r, cache, threads);
    cache.tokens += a.rows();
    if (record) *record = std::move(r);
    return gated;
  }
  /// Each value head's mixing matrix on a text its record (a mix from a fresh cache) holds: the
  /// delta rule is linear in the values once q, k, β and g are fixed, o_t = Σ_{j<=t} M_tj v_j,
  /// and M (n, n) is what a head's attention pattern is to softmax attention (lower triangular;
  /// its rows need not sum to 1). The rule run on one-hot values, with the same arithmetic:
  /// (n, n_v n), head h in columns [h n, (h + 1) n); O(n² (d_k + n)) a head, for short texts.
  Matrix<Scalar> mixing(const GatedDeltaNetRecord<Scalar>& r) const {
    const Index n = r.q.rows(), dk = shape.d_key, nv = shape.value_heads, per = nv / shape.key_heads;
    const Matrix<Scalar> q = r.q * static_cast<Scalar>(1.0 / std::sqrt(double(dk)));
    const Matrix<Scalar> one_hot = Matrix<Scalar>::Identity(n, n);
    Matrix<Scalar> mixed(n, nv * n);
    DeltaRuleScratch<Scalar> scratch;
    for (Index h = 0; h < nv; ++h) {
      const Index key = (h / per) * dk;
      const DeltaRuleInputs<Scalar> in{{q.data() + key, q.cols()}, {r.k.data() + key, r.k.cols()}, {one_hot.data(), n},
                                       {r.beta.data() + h, nv}, {r.g.data() + h, nv}, n};
      DeltaRuleState<Scalar> state(dk, std::max<Index>(n, 1), shape.chunk);
      state.advance(in, mixed.data() + h * n, mixed.cols(), scratch);
    }
    return mixed;
  }
  /// out_proj: (n, n_v d_v) -> (n, d_model).
  Matrix<Scalar> project(const Matrix<Scalar>& gated, int threads) const { return times_transposed<Scalar>(gated, out, threads); }

 private:
  static Scalar silu(Scalar u) { return u / (Scalar(1) + std::exp(-u)); }

  /// Step 1: the key-head groups of in_qkvz and in_ba into mixed (q, k, v), z, b (into beta) and a (into g).
  void ungroup(const Matrix<Scalar>& qkvz, const Matrix<Scalar>& ba, GatedDeltaNetRecord<Scalar>& r) const {
    const Index nk = shape.key_heads, dk = shape.d_key, dv = shape.d_value, per = shape.value_heads / nk, n = qkvz.rows();
    const Index group = 2 * dk + 2 * per * dv;
    r.mixed_qkv.resize(n, shape.channels()), r.z.resize(n, shape.value_heads * dv);
    r.beta.resize(n, shape.value_heads), r.g.resize(n, shape.value_heads);
    for (Index g = 0; g < nk; ++g) {
      r.mixed_qkv.middleCols(g * dk, dk) = qkvz.middleCols(g * group, dk);
      r.mixed_qkv.middleCols(nk * dk + g * dk, dk) = qkvz.middleCols(g * group + dk, dk);
      r.mixed_qkv.middleCols(2 * nk * dk + g * per * dv, per * dv) = qkvz.middleCols(g * group + 2 * dk, per * dv);
      r.z.middleCols(g * per * dv, per * dv) = qkvz.middleCols(g * group + 2 * dk + per * dv, per * dv);
      r.beta.middleCols(g * per, per) = ba.middleCols(g * 2 * per, per);
      r.g.middleCols(g * per, per) = ba.middleCols(g * 2 * per + per, per);
    }
    for (Index t = 0; t < n; ++t)
      for (Index h = 0; h < shape.value_heads; ++h) {
        const double b = double(r.beta(t, h)), x = double(r.g(t, h)) + double(dt_bias(h));
        const double softplus = std::max(x, 0.0) + std::log1p(std::exp(-std::abs(x)));
        r.beta(t, h) = static_cast<Scalar>(1.0 / (1.0 + std::exp(-b)));
        r.g(t, h) = static_cast<Scalar>(-std::exp(double(a_log(h))) * softplus);
      }
  }

  /// Step 2: the causal conv over [the cache's K - 1 inputs; mixed], then SiLU, into conv_out and
  /// q, k, v; the cache keeps the last K - 1 inputs.
  void convolve(GatedDeltaNetCache<Scalar>& cache, GatedDeltaNetRecord<Scalar>& r) const {
    const Index n = r.mixed_qkv.rows(), C = shape.channels(), K = shape.kernel;
    Matrix<Scalar> inputs(K - 1 + n, C);
    inputs.topRows(K - 1) = cache.conv_inputs, inputs.bottomRows(n) = r.mixed_qkv;
    r.conv_out.resize(n, C);
    for (Index t = 0; t < n; ++t)
      for (Index c = 0; c < C; ++c) {
        Scalar sum = 0;
        for (Index j = 0; j < K; ++j) sum += conv(c, j) * inputs(t + j, c);
        r.conv_out(t, c) = silu(sum);
      }
    cache.conv_inputs = inputs.bottomRows(K - 1);
    const Index width = shape.key_heads * shape.d_key;
    r.q = r.conv_out.leftCols(width), r.k = r.conv_out.middleCols(width, width), r.v = r.conv_out.rightCols(shape.value_heads * shape.d_value);
  }

  /// Step 3's norms: each key head's q and k to unit length (eps 1e-6 inside the root).
  void normalise_keys(GatedDeltaNetRecord<Scalar>& r) const {
    for (Matrix<Scalar>* m : {&r.q, &r.k})
      for (Index t = 0; t < m->rows(); ++t)
        for (Index g = 0; g < shape.key_heads; ++g) {
          auto x = m->row(t).segment(g * shape.d_key, shape.d_key);
          double squares = 0;
          for (Index i = 0; i < shape.d_key; ++i) squares += double(x(i)) * double(x(i));
          x *= static_cast<Scalar>(1.0 / std::sqrt(squares + 1e-6));
        }
  }

  /// Steps 4 and 5: each value head's delta rule from its state (heads split over the threads),
  /// then its gated norm: (n, n_v d_v).
  Matrix<Scalar> delta_rule(GatedDeltaNetRecord<Scalar>& r, GatedDeltaNetCache<Scalar>& cache, int threads) const {
    const Index n = r.q.rows(), dk = shape.d_key, dv = shape.d_value, nv = shape.value_heads, per = nv / shape.key_heads;
    const Matrix<Scalar> q = r.q * static_cast<Scalar>(1.0 / std::sqrt(double(dk)));
    r.core_out.resize(n, nv * dv);
    Matrix<Scalar> gated(n, nv * dv);
    const double work = double(n) * double(nv) * double(dk) * double(dv) * 4;
    const int parts = static_cast<int>(std::min<Index>(nv, detail::threads_for(work, detail::thread_count(threads, "GatedDeltaNet::mix"))));
    detail::parallel_region(parts, [&](int part) {
      DeltaRuleScratch<Scalar> scratch;
      for (Index h = nv * part / parts; h < nv * (part + 1) / parts; ++h) {
        const Index key = (h / per) * dk;
        const DeltaRuleInputs<Scalar> in{{q.data() + key, q.cols()}, {r.k.data() + key, r.k.cols()}, {r.v.data() + h * dv, r.v.cols()},
                                         {r.beta.data() + h, nv}, {r.g.data() + h, nv}, n};
        cache.heads[static_cast<std::size_t>(h)].advance(in, r.core_out.data() + h * dv, r.core_out.cols(), scratch);
        for (Index t = 0; t < n; ++t) {
          const auto o = r.core_out.row(t).segment(h * dv, dv);
          double squares = 0;
          for (Index c = 0; c < dv; ++c) squares += double(o(c)) * double(o(c));
          const double inverse = 1.0 / std::sqrt(squares / double(dv) + shape.eps);
          for (Index c = 0; c < dv; ++c)
            gated(t, h * dv + c) = static_cast<Scalar>(double(norm(c)) * double(o(c)) * inverse) * silu(r.z(t, h * dv + c));
        }
      }
    });
    return gated;
  }
};

/// The compiled mode's instantiations (detail/compiled.hpp).
#define HEADWISE_GATED_DELTA_NET_INSTANTIATIONS(PREFIX, S) PREFIX template class GatedDeltaNet<S>;
HEADWISE_EXTERN_INSTANTIATIONS(HEADWISE_GATED_DELTA_NET_INSTANTIATIONS)

}  // namespace headwise
