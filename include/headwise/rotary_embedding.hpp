// Rotary position embeddings (RoPE; Su et al., 2021): each pair of a query's or key's dimensions is
// rotated by an angle proportional to the token's position, so that q_i . k_j depends on the
// positions only through i - j. Applied to Q and K after the projection, before the scores.
//
//   inv_freq[i] = theta^(-2i / r)               for the r rotary dimensions of a head (r <= d_head)
//   angle       = position inv_freq[i]
//   half        pairs (i, i + r/2): Hugging Face / GPT-NeoX (`rotate_half`), Llama, Qwen2, Mistral
//   interleaved pairs (2i, 2i + 1): GPT-J and Meta's original Llama code
//   x'_a = x_a cos - x_b sin,  x'_b = x_b cos + x_a sin  (times YaRN's attention factor)
// Dimensions past r (partial rotary: GPT-NeoX `rotary_pct`, Phi `partial_rotary_factor`) pass
// through. Frequency scaling as Hugging Face's `rope_scaling` names it: linear, llama3, yarn
// (truncated or not, with DeepSeek's mscale), longrope (Phi-3/4: short factors for sequences up to
// the original context, long factors beyond it, chosen per call by the sequence's length as Hugging
// Face chooses them), and Gemma 4's proportional RoPE (pairs over the whole head, only the first
// fraction of frequencies turning). The frequencies are computed once, when the embedding is made;
// angles in double precision.
#pragma once

#include <algorithm>
#include <cmath>
#include <optional>
#include <vector>

#include "headwise/detail/errors.hpp"
#include "headwise/detail/parallel.hpp"
#include "headwise/types.hpp"

namespace headwise {

/// Which dimensions form a rotated pair.
enum class RopeLayout { half, interleaved };

/// Frequency scaling for contexts longer than training (Hugging Face's `rope_scaling`).
struct RopeScaling {
  enum class Type { none, linear, llama3, yarn, longrope, proportional };
  Type type = Type::none;
  double factor = 1.0;                   ///< linear, llama3, yarn: how much longer the context
  double low_freq_factor = 1.0;          ///< llama3
  double high_freq_factor = 4.0;         ///< llama3
  Index original_max_position = 8192;    ///< llama3, yarn, longrope: the training context
  double beta_fast = 32.0;               ///< yarn: rotations where interpolation ends
  double beta_slow = 1.0;                ///< yarn: rotations where it begins
  bool truncate = true;                  ///< yarn: the correction range rounded to whole dimensions
  std::optional<double> mscale, mscale_all_dim;  ///< yarn (DeepSeek): attention factor mscale(f, m) / mscale(f, m_all)
  /// yarn, longrope: cos and sin scale; unset: yarn 0.1 ln(factor) + 1 (or the mscale ratio),
  /// longrope sqrt(1 + ln(factor) / ln(original_max_position)).
  std::optional<double> attention_factor;
  /// longrope: each frequency divided by short_factor[i] for sequences up to original_max_position
  /// tokens, by long_factor[i] beyond (rotary_dims / 2 entries each); factor is the context ratio.
  std::vector<double> short_factor, long_factor;
};

/// A rotary embedding's settings. Set by name: RopeConfig c; c.d_head = 128; c.theta = 5e5;
struct RopeConfig {
  Index d_head = 0;                  ///< width of one head
  double theta = 10000.0;            ///< the base of the frequencies (`rope_theta`)
  double rotary_fraction = 1.0;      ///< the fraction of each head's dimensions rotated, in (0, 1]
  RopeLayout layout = RopeLayout::half;
  RopeScaling scaling;
};

inline bool operator==(const RopeScaling& a, const RopeScaling& b) {
  return a.type == b.type && a.factor == b.factor && a.low_freq_factor == b.low_freq_factor &&
         a.high_freq_factor == b.high_freq_factor && a.original_max_position == b.original_max_position &&
         a.beta_fast == b.beta_fast && a.beta_slow == b.beta_slow && a.truncate == b.truncate && a.mscale == b.mscale &&
         a.mscale_all_dim == b.mscale_all_dim && a.attention_factor == b.attention_factor &&
         a.short_factor == b.short_factor && a.long_factor == b.long_factor;
}
inline bool operator==(const RopeConfig& a, const RopeConfig& b) {
  return a.d_head == b.d_head && a.theta == b.theta && a.rotary_fraction == b.rotary_fraction && a.layout == b.layout &&
         a.scaling == b.scaling;
}
inline bool operator!=(const RopeConfig& a, const RopeConfig& b) { return !(a == b); }

class RotaryEmbedding {
 public:
  /// Throws std::invalid_argument naming a setting that is out of range.
  explicit RotaryEmbedding(const RopeConfig& config) : config_(config) {
    check(config);
    rotary_dims_ = rotary_dims_of(config);
    const Index pairs = rotary_dims_ / 2;
    inv_freq_.resize(pairs);
    for (Index i = 0; i < pairs; ++i) inv_freq_(i) = std::pow(config.theta, -2.0 * double(i) / double(rotary_dims_));
    scale_frequencies();
  }

  /// True if a call whose sequence ends at `sequence_length` tokens uses LongRoPE's long factors.
  bool long_factors_for(Index sequence_length) const {
    return config_.scaling.type == RopeScaling::Type::longrope && sequence_length > config_.scaling.original_max_position;
  }

  /// Throws std::invalid_argument naming a setting of `config` that is out of range, and computes
  /// nothing: a config reader checks a model's settings this way without building frequencies
  /// for a head_dim of 2^32.
  static void check(const RopeConfig& config, const char* where = "RotaryEmbedding") {
    if (config.d_head <= 0) detail::invalid(where, "d_head must be > 0, got ", config.d_head);
    if (!(config.theta > 1.0) || !std::isfinite(config.theta))
      detail::invalid(where, "theta must be finite and > 1, got ", config.theta);
    if (!(config.rotary_fraction > 0.0 && config.rotary_fraction <= 1.0))
      detail::invalid(where, "rotary_fraction must be in (0, 1], got ", config.rotary_fraction);
    if (rotary_dims_of(config) < 2)
      detail::invalid(where, "d_head ", config.d_head, " x rotary_fraction ", config.rotary_fraction, " leaves no pair to rotate");
    const RopeScaling& s = config.scaling;
    if (s.type == RopeScaling::Type::proportional && config.d_head % 2 != 0)
      detail::invalid(where, "proportional RoPE pairs the whole head: d_head must be even, got ", config.d_head);
    if (s.type == RopeScaling::Type::longrope) {
      const auto pairs = static_cast<std::size_t>(rotary_dims_of(config) / 2);
      if (s.short_factor.size() != pairs || s.long_factor.size() != pairs)
        detail::invalid(where, "longrope needs ", pairs, " short and long factors (rotary dimensions / 2), got ",
                        s.short_factor.size(), " and ", s.long_factor.size());
      for (const std::vector<double>* f : {&s.short_factor, &s.long_factor})
        for (const double value : *f)
          if (!(value > 0.0) || !std::isfinite(value)) detail::invalid(where, "longrope factors must be finite and > 0, got ", value);
      if (s.original_max_position <= 0) detail::invalid(where, "longrope needs original_max_position > 0");
    }
    for (const std::optional<double>& m : {s.mscale, s.mscale_all_dim, s.attention_factor})
      if (m && !std::isfinite(*m)) detail::invalid(where, "rope scaling settings must be finite, got ", *m);
    for (const double value : {s.factor, s.low_freq_factor, s.high_freq_factor, s.beta_fast, s.beta_slow})
      if (!std::isfinite(value)) detail::invalid(where, "rope scaling settings must be finite, got ", value);
    if (s.type == RopeScaling::Type::none || s.type == RopeScaling::Type::proportional) return;
    if (!(s.factor >= 1.0) || !std::isfinite(s.factor)) detail::invalid(where, "rope scaling factor must be finite and >= 1, got ", s.factor);
    // low_freq_factor == high_freq_factor (Llama 4 Scout and Maverick ship 1.0 and 1.0): no band
    // between the two wavelengths, as Hugging Face's formula accepts it.
    if (s.type == RopeScaling::Type::llama3 &&
        (!(s.high_freq_factor >= s.low_freq_factor) || !(s.low_freq_factor > 0.0) || !std::isfinite(s.high_freq_factor) ||
         s.original_max_position <= 0))
      detail::invalid(where, "llama3 scaling needs 0 < low_freq_factor <= high_freq_factor and original_max_position > 0, got ",
                      s.low_freq_factor, ", ", s.high_freq_factor, ", ", s.original_max_position);
    if (s.type != RopeScaling::Type::yarn && s.type != RopeScaling::Type::longrope) return;
    // beta_fast == beta_slow is accepted as Hugging Face accepts it (the ramp then has width 0.001).
    if (s.type == RopeScaling::Type::yarn &&
        (s.original_max_position <= 0 || !(s.beta_fast >= s.beta_slow) || !(s.beta_slow > 0.0) || !std::isfinite(s.beta_fast)))
      detail::invalid(where, "yarn scaling needs original_max_position > 0 and beta_fast >= beta_slow > 0");
    if (s.attention_factor && (!(*s.attention_factor > 0.0) || !std::isfinite(*s.attention_factor)))
      detail::invalid(where, "yarn attention_factor must be finite and > 0, got ", *s.attention_factor);
  }

  Index d_head() const { return config_.d_head; }
  /// The dimensions rotated in each head (an even number <= d_head).
  Index rotary_dims() const { return rotary_dims_; }
  /// The rotary_dims() / 2 frequencies, after scaling, of a call whose sequence has
  /// `sequence_length` tokens (LongRoPE's choice; every other rule has one set).
  const Vector<double>& inv_freq(Index sequence_length = 0) const {
    return long_factors_for(sequence_length) ? long_inv_freq_ : inv_freq_;
  }
  /// What cos and sin are multiplied by (YaRN's attention factor; 1 otherwise).
  double attention_factor() const { return attention_factor_; }
  const RopeConfig& config() const { return config_; }

  /// Rotates, in place, every head of the m rows of x: (m, heads d_head), row t at position
  /// first_position + t. Q and K laid side by side ([Q | K]) are rotated in one pass: each row's
  /// angles are computed once for all its heads. `sequence_length`: the length of the call's whole
  /// sequence, which LongRoPE chooses its factors by (unset: first_position + m).
  template <class Scalar>
  void rotate(Eigen::Ref<Matrix<Scalar>> x, Index first_position, int threads = 1,
              std::optional<Index> sequence_length = std::nullopt) const {
    rotate_rows<Scalar>(x, first_position, threads, /*sign=*/1, sequence_length.value_or(first_position + x.rows()),
                        "RotaryEmbedding::rotate");
  }

  /// The backward of rotate: turns ∂L/∂x' into ∂L/∂x, in place (the transposed rotation, times the
  /// attention factor). dx: (m, heads d_head), row t at position first_position + t.
  template <class Scalar>
  void rotate_gradient(Eigen::Ref<Matrix<Scalar>> dx, Index first_position, int threads = 1,
                       std::optional<Index> sequence_length = std::nullopt) const {
    rotate_rows<Scalar>(dx, first_position, threads, /*sign=*/-1, sequence_length.value_or(first_position + dx.rows()),
                        "RotaryEmbedding::rotate_gradient");
  }

 private:
  /// Rotates every head of every row by +angle (sign 1) or -angle (sign -1).
  template <class Scalar>
  void rotate_rows(Eigen::Ref<Matrix<Scalar>> x, Index first_position, int threads, int sign,
                   Index sequence_length, const char* where) const {
    if (x.cols() % config_.d_head != 0)
      detail::invalid(where, "x has ", x.cols(), " columns, not a whole number of heads of ", config_.d_head);
    if (first_position < 0) detail::invalid(where, "first_position must be >= 0, got ", first_position);
    if (!std::isfinite(static_cast<Scalar>(attention_factor_)))
      detail::invalid(where, "the attention factor ", attention_factor_, " is not finite in ", detail::scalar_name<Scalar>());
    const Index pairs = rotary_dims_ / 2;
    const Vector<double>& frequencies = inv_freq(sequence_length);
    threads = detail::thread_count(threads, where);
    // Each thread's cos and sin, allocated before the parallel loop (nothing in it can throw).
    std::vector<Scalar> angles_of(static_cast<std::size_t>(2 * pairs * threads));
    detail::parallel_for<detail::Schedule::by_part>(x.rows() >= 64 ? threads : 1, x.rows(), [&](Index t) {
      Scalar* cos = angles_of.data() + 2 * pairs * detail::this_thread();
      Scalar* sin = cos + pairs;
      angles(frequencies, first_position + t, sign, cos, sin);
      for (Index c0 = 0; c0 < x.cols(); c0 += config_.d_head) rotate_head(x.row(t).data() + c0, cos, sin);
    });
  }

  /// cos and sin of sign position frequencies[i], times the attention factor, for every pair i.
  template <class Scalar>
  void angles(const Vector<double>& frequencies, Index position, int sign, Scalar* cos, Scalar* sin) const {
    for (Index i = 0; i < frequencies.size(); ++i) {
      const double angle = double(position) * frequencies(i);
      cos[i] = static_cast<Scalar>(std::cos(angle) * attention_factor_);
      sin[i] = static_cast<Scalar>(sign * std::sin(angle) * attention_factor_);
    }
  }

  template <class Scalar>
  void rotate_head(Scalar* x, const Scalar* cos, const Scalar* sin) const {
    const Index pairs = rotary_dims_ / 2;
    const bool half = config_.layout == RopeLayout::half;
    for (Index i = 0; i < pairs; ++i) {
      Scalar& a = x[half ? i : 2 * i];
      Scalar& b = x[half ? i + pairs : 2 * i + 1];
      const Scalar xa = a, xb = b;
      a = xa * cos[i] - xb * sin[i];
      b = xb * cos[i] + xa * sin[i];
    }
  }

  /// The rotated dimensions of each head: d_head x rotary_fraction, rounded down to pairs (the
  /// whole head for proportional RoPE, whose fraction says how many frequencies turn).
  static Index rotary_dims_of(const RopeConfig& config) {
    if (config.scaling.type == RopeScaling::Type::proportional) return config.d_head / 2 * 2;
    return static_cast<Index>(static_cast<double>(config.d_head) * config.rotary_fraction) / 2 * 2;
  }

  void scale_frequencies() {
    const RopeScaling& s = config_.scaling;
    if (s.type == RopeScaling::Type::linear) inv_freq_ /= s.factor;
    if (s.type == RopeScaling::Type::llama3) scale_llama3();
    if (s.type == RopeScaling::Type::yarn) scale_yarn();
    if (s.type == RopeScaling::Type::longrope) scale_longrope();
    if (s.type == RopeScaling::Type::proportional) {
      // Gemma 4: theta^(-2i / d_head) for the first int(fraction d_head / 2) pairs, 0 (no turn) after.
      const auto turning = static_cast<Index>(config_.rotary_fraction * double(config_.d_head) / 2.0);
      for (Index i = 0; i < inv_freq_.size(); ++i) inv_freq_(i) = i < turning ? inv_freq_(i) : 0.0;
    }
  }

  /// LongRoPE (Phi-3/4), as Hugging Face computes it: each frequency divided by its short or long
  /// factor; cos and sin times sqrt(1 + ln(factor) / ln(original)) unless attention_factor is set.
  void scale_longrope() {
    const RopeScaling& s = config_.scaling;
    long_inv_freq_ = inv_freq_;
    for (Index i = 0; i < inv_freq_.size(); ++i) {
      inv_freq_(i) /= s.short_factor[static_cast<std::size_t>(i)];
      long_inv_freq_(i) /= s.long_factor[static_cast<std::size_t>(i)];
    }
    const double ratio = s.factor > 1 ? std::sqrt(1 + std::log(s.factor) / std::log(double(s.original_max_position))) : 1.0;
    attention_factor_ = s.attention_factor.value_or(ratio);
  }

  /// Llama 3.1: wavelengths below original / high_freq_factor kept, above original /
  /// low_freq_factor divided by factor, and blended in between. With low_freq_factor ==
  /// high_freq_factor (Llama 4) there is no between: a wavelength exactly at the one boundary is
  /// kept (Hugging Face's blend would divide 0 by 0 there).
  void scale_llama3() {
    const RopeScaling& s = config_.scaling;
    const double original = double(s.original_max_position), pi = std::acos(-1.0);
    const double low_wavelength = original / s.low_freq_factor, high_wavelength = original / s.high_freq_factor;
    for (Index i = 0; i < inv_freq_.size(); ++i) {
      const double f = inv_freq_(i), wavelength = 2 * pi / f;
      if (wavelength < high_wavelength || (wavelength == high_wavelength && low_wavelength == high_wavelength)) continue;
      if (wavelength > low_wavelength) {
        inv_freq_(i) = f / s.factor;
        continue;
      }
      const double smooth = (original / wavelength - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
      inv_freq_(i) = (1 - smooth) * f / s.factor + smooth * f;
    }
  }

  /// YaRN (Peng et al., 2023) as Hugging Face computes it: frequencies that turn fewer than
  /// beta_slow times over the original context are divided by factor, more than beta_fast times
  /// kept, a linear ramp between; cos and sin scaled by the attention factor.
  void scale_yarn() {
    const RopeScaling& s = config_.scaling;
    const double pi = std::acos(-1.0), dims = double(rotary_dims_);
    const auto correction_dim = [&](double rotations) {
      return dims * std::log(double(s.original_max_position) / (rotations * 2 * pi)) / (2 * std::log(config_.theta));
    };
    // The correction range, rounded out to whole dimensions unless truncate is false (gpt-oss).
    const double fast = correction_dim(s.beta_fast), slow = correction_dim(s.beta_slow);
    const double low = std::max(s.truncate ? std::floor(fast) : fast, 0.0);
    double high = std::min(s.truncate ? std::ceil(slow) : slow, dims - 1);
    if (high == low) high += 0.001;
    for (Index i = 0; i < inv_freq_.size(); ++i) {
      const double ramp = std::clamp((double(i) - low) / (high - low), 0.0, 1.0);  // 0: kept, 1: divided
      inv_freq_(i) = inv_freq_(i) / s.factor * ramp + inv_freq_(i) * (1 - ramp);
    }
    const auto mscale = [&](double m) { return s.factor > 1 ? 0.1 * m * std::log(s.factor) + 1 : 1.0; };
    const bool ratio = s.mscale && s.mscale_all_dim && *s.mscale != 0 && *s.mscale_all_dim != 0;  // as Hugging Face tests them
    attention_factor_ = s.attention_factor ? *s.attention_factor : ratio ? mscale(*s.mscale) / mscale(*s.mscale_all_dim) : mscale(1);
  }

  RopeConfig config_;
  Index rotary_dims_ = 0;
  Vector<double> inv_freq_, long_inv_freq_;  // long: LongRoPE's long factors
  double attention_factor_ = 1.0;
};

}  // namespace headwise
