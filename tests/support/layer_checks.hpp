// One loaded checkpoint against its PyTorch references, every way the library runs a layer: the
// fused and step-by-step paths, the trace (queries and keys as they enter the scores, the normed
// ones, values, patterns, Z), inspect's patterns from the logsumexp, decoding through the cache in
// random chunks (bitwise the forward), and 1 thread against 2 (bitwise).
#pragma once

#include <algorithm>
#include <cmath>
#include <random>
#include <string>

#include "headwise/interpret.hpp"
#include "headwise/io/llama.hpp"
#include "headwise/multi_head_attention.hpp"
#include "support/catch.hpp"
#include "support/fixtures.hpp"
#include "support/matchers.hpp"

namespace headwise_test {

/// A layer's weights, back out of its fused W_QKV (to build the same layer with another config).
template <class Scalar>
headwise::MultiHeadWeights<Scalar> weights_of(const headwise::MultiHeadAttention<Scalar>& layer) {
  using headwise::QkvPart;
  const headwise::QkvLayout l = layer.layout();
  headwise::MultiHeadWeights<Scalar> w;
  w.w_q = l.part(layer.w_qkv(), QkvPart::query), w.w_k = l.part(layer.w_qkv(), QkvPart::key), w.w_v = l.part(layer.w_qkv(), QkvPart::value);
  w.b_q = l.part(layer.b_qkv(), QkvPart::query), w.b_k = l.part(layer.b_qkv(), QkvPart::key), w.b_v = l.part(layer.b_qkv(), QkvPart::value);
  w.w_o = layer.w_o(), w.b_o = layer.b_o();
  return w;
}

/// The mean over rows of KL(p || q) between two patterns (rows summing to 1): the serving world's
/// measure of what a narrower arithmetic does to the weights.
inline double mean_kl(const headwise::Matrix<double>& p, const headwise::Matrix<double>& q) {
  double total = 0;
  for (headwise::Index i = 0; i < p.rows(); ++i)
    for (headwise::Index j = 0; j < p.cols(); ++j)
      if (p(i, j) > 0) total += p(i, j) * std::log(p(i, j) / std::max(q(i, j), 1e-300));
  return total / double(p.rows());
}

/// A [heads, T, d] tensor as (T, heads d).
template <class Scalar>
headwise::Matrix<Scalar> side_by_side(const headwise::io::SafetensorsFile& file, const std::string& name) {
  const auto heads = static_cast<headwise::Index>(file.info(name).shape[0]);
  const headwise::Matrix<Scalar> first = file.slice<Scalar>(name, 0);
  headwise::Matrix<Scalar> all(first.rows(), heads * first.cols());
  for (headwise::Index h = 0; h < heads; ++h) all.middleCols(h * first.cols(), first.cols()) = file.slice<Scalar>(name, h);
  return all;
}

/// The trace of one layer against the reference's per-head tensors under prefix p.
template <class Scalar>
void check_trace(const headwise::MultiHeadAttention<Scalar>& layer, const headwise::MultiHeadTrace<Scalar>& trace,
                 const headwise::io::SafetensorsFile& ref, const std::string& p) {
  using headwise::Index;
  const Index d = layer.d_head();
  const auto tol = tolerance<Scalar>();
  const auto q_rot = side_by_side<double>(ref, p + "q_rot.f64"), k_rot = side_by_side<double>(ref, p + "k_rot.f64");
  const bool normed = ref.contains(p + "q_normed.f64"), values = ref.contains(p + "v.f64"), z = ref.contains(p + "z.f64");
  for (Index h = 0; h < layer.n_heads(); ++h) {
    CAPTURE(h);
    const Index g = layer.kv_head_of(h);
    const auto& head = trace.heads[static_cast<std::size_t>(h)];
    CHECK_THAT(head.q_rotated.template cast<double>(), IsNear(q_rot.middleCols(h * d, d), tol));
    CHECK_THAT(head.k_rotated.template cast<double>(), IsNear(k_rot.middleCols(g * d, d), tol));
    CHECK_THAT(head.weights.template cast<double>(), IsNear(ref.slice<double>(p + "pattern.f64", h), tol));
    if (normed) CHECK_THAT(head.q_normed.template cast<double>(), IsNear(ref.slice<double>(p + "q_normed.f64", h), tol));
    if (normed && ref.contains(p + "k_normed.f64"))
      CHECK_THAT(head.k_normed.template cast<double>(), IsNear(ref.slice<double>(p + "k_normed.f64", g), tol));
    if (values) CHECK_THAT(head.v.template cast<double>(), IsNear(ref.slice<double>(p + "v.f64", g), tol));
    if (z) CHECK_THAT(head.z.template cast<double>(), IsNear(ref.slice<double>(p + "z.f64", h), tol));
  }
}

/// A KV-sharing layer reading the cache of `source` (filled from x_source): its output, its trace
/// (queries, borrowed keys and values, patterns), and decoding in chunks (the source layer first,
/// then this one) bitwise the same.
template <class Scalar>
void check_shared_layer(const headwise::MultiHeadAttention<Scalar>& layer, const headwise::MultiHeadAttention<Scalar>& source,
                        const headwise::Matrix<Scalar>& x_source, const headwise::Matrix<Scalar>& x,
                        const headwise::io::SafetensorsFile& ref, const std::string& p) {
  using namespace headwise;
  const Matrix<double> expected = ref.matrix<double>(p + "output.f64");
  KvCache<Scalar> cache = source.make_cache(x.rows());
  source.forward_incremental(x_source, cache);
  const Matrix<Scalar> out = layer.forward_reading_cache(x, cache);
  CHECK_THAT(out.template cast<double>(), IsNear(expected, tolerance<Scalar>()));
  const MultiHeadTrace<Scalar> trace = layer.trace_reading_cache(x, cache);
  CHECK_THAT(trace.output.template cast<double>(), IsNear(expected, tolerance<Scalar>()));
  check_trace(layer, trace, ref, p);
  CHECK_THROWS_WITH(layer.forward(x), Catch::Contains("has no keys and values of its own"));
  KvCache<Scalar> decoding = source.make_cache(x.rows());
  Matrix<Scalar> decoded(x.rows(), x.cols());
  for (Index i0 = 0; i0 < x.rows(); i0 += 5) {
    const Index m = std::min<Index>(5, x.rows() - i0);
    source.forward_incremental(x_source.middleRows(i0, m), decoding);
    decoded.middleRows(i0, m) = layer.forward_reading_cache(x.middleRows(i0, m), decoding);
  }
  CHECK_THAT(as_double(decoded), IsExactly(out));
}

/// Every attention layer of `folder` against `reference` (a file under tests/data): layer numbers
/// from attention_layer_numbers. Decoding starts with a prefill of `prefill` tokens (LongRoPE:
/// past the original context, so that every key is rotated one way), then random chunks.
template <class Scalar>
void check_layers(const std::string& folder, const std::string& reference, headwise::Index prefill = 1) {
  using namespace headwise;
  CAPTURE(folder, reference);
  const io::LlamaConfig config = io::read_llama_config(data_path(folder + "/config.json"));
  const auto layers = io::load_llama_attention_layers<Scalar>(data_path(folder));
  const std::vector<Index> numbers = io::attention_layer_numbers(config);
  REQUIRE(layers.size() == numbers.size());
  const io::SafetensorsFile ref = load_fixture(reference);
  const auto tol = tolerance<Scalar>();
  for (std::size_t l = 0; l < layers.size(); ++l) {
    CAPTURE(numbers[l]);
    const std::string p = "layers." + std::to_string(numbers[l]) + ".attn.";
    const auto& layer = layers[l];
    const Matrix<Scalar> x = ref.matrix<Scalar>(p + "input");
    const Matrix<double> expected = ref.matrix<double>(p + "output.f64");
    if (const auto source = layer.config().shares_keys_values_of) {
      const auto at = std::find(numbers.begin(), numbers.end(), *source);
      REQUIRE(at != numbers.end());
      check_shared_layer(layer, layers[static_cast<std::size_t>(at - numbers.begin())],
                         ref.matrix<Scalar>("layers." + std::to_string(*source) + ".attn.input"), x, ref, p);
      continue;
    }
    AttentionOptions one, two;
    one.threads = 1, two.threads = 2;
    const Matrix<Scalar> out = layer.forward(x, one);
    CHECK_THAT(out.template cast<double>(), IsNear(expected, tol));
    CHECK_THAT(as_double(layer.forward(x, two)), IsExactly(out));
    CHECK_THAT(layer.forward_step_by_step(x).template cast<double>(), IsNear(expected, tol));
    const MultiHeadTrace<Scalar> trace = layer.trace(x);
    CHECK_THAT(trace.output.template cast<double>(), IsNear(expected, tol));
    check_trace(layer, trace, ref, p);
    const auto run = interpret::inspect(layer, x);  // patterns rebuilt from the fused run's logsumexp
    CHECK_THAT(run.output.template cast<double>(), IsNear(expected, tol));
    for (Index h = 0; h < layer.n_heads(); ++h)
      CHECK_THAT(run.pattern(h).template cast<double>(), IsNear(ref.slice<double>(p + "pattern.f64", h), tol));
    std::mt19937 rng(static_cast<unsigned>(l + 7));
    KvCache<Scalar> cache = layer.make_cache(x.rows());
    Matrix<Scalar> decoded(x.rows(), x.cols());
    for (Index i0 = 0; i0 < x.rows();) {
      const Index chunk = i0 == 0 ? prefill : std::uniform_int_distribution<Index>(1, 6)(rng);
      const Index m = std::min<Index>(chunk, x.rows() - i0);
      decoded.middleRows(i0, m) = layer.forward_incremental(x.middleRows(i0, m), cache);
      i0 += m;
    }
    CHECK_THAT(as_double(decoded), IsExactly(out));
  }
}

}  // namespace headwise_test
