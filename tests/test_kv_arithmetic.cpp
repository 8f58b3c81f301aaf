// Attention arithmetic in the stored precision (KvArithmetic::stored, detail/int8_products.hpp,
// detail/bf16_products.hpp, detail/f16_products.hpp): int8 keys and values multiplied as integers,
// the query rounded to int8 per row; BF16 ones by BF16 pairs, the query and the weights rounded to
// BF16; F16 ones by chains of F16 multiply-adds (the portable chains here unless the machine has
// AVX512-FP16, where they are also checked against its registers' bits). The same bits on any
// thread count, split of keys, paged or packed store, and decoding as the forward; against
// PyTorch's float64 on the fixture layer, the output's error and the KL divergence of the weights
// its documented rule gives (computed here, independently); and what it does not take, refused by
// name. A kernel test: built for this machine (VNNI and AVX512-BF16 where it has them) and for
// AVX2 (pmaddwd for the integers, the portable BF16 loops).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "headwise/attend_batch.hpp"
#include "headwise/interpret.hpp"
#include "headwise/io/latent_attention.hpp"
#include "headwise/io/llama.hpp"
#include "headwise/paged_kv_cache.hpp"
#include "support/catch.hpp"
#include "support/fixtures.hpp"
#include "support/layer_checks.hpp"
#include "support/matchers.hpp"
#include "support/random.hpp"

// The portable copy of the kernel's tests (tests/CMakeLists.txt) must be built as a plain Release
// build is, without -march: with vector extensions its portable paths would not be compiled.
#if defined(HEADWISE_TEST_PORTABLE) && (defined(__AVX__) || defined(HEADWISE_BF16_DOT) || defined(HEADWISE_INT8_VNNI))
#error "the portable copy of the kernel's tests is built with vector extensions beyond SSE2"
#endif

using namespace headwise;
using headwise_test::IsNear;
using headwise_test::mean_kl;
using headwise_test::weights_of;


namespace {
/// The stored arithmetic's weights for head h of a layer, computed here from the documented rule
/// (detail/int8_products.hpp, kv_storage.hpp) in float32 and double: keys to int8 per token and
/// head (scale max |k| / 127), the scaled query to int8 per row, S = (Σ q k) s_k s_q, softmax in double.
/// x to int8 with one scale, max |x| / 127, rounded to nearest (ties to even): the rule keys and
/// queries share (kv_storage.hpp, detail/int8_products.hpp).
Eigen::RowVectorXf to_int8(const Eigen::RowVectorXf& x, float& scale) {
  scale = x.cwiseAbs().maxCoeff() / 127.0f;
  Eigen::RowVectorXf out(x.size());
  for (Index c = 0; c < x.size(); ++c) out(c) = scale == 0 ? 0.0f : std::max(-127.0f, std::min(127.0f, std::nearbyint(x(c) / scale)));
  return out;
}

/// x rounded to BF16 (to nearest, ties to even), back in float: the rule BF16 keys and, under the
/// stored arithmetic, the scaled queries are rounded by.
Eigen::RowVectorXf to_bf16(const Eigen::RowVectorXf& x) {
  return x.unaryExpr([](float c) { return static_cast<float>(Eigen::bfloat16(c)); });
}

/// x rounded to F16 (nearest, ties to even; subnormals kept; from 65520 on infinite), found here
/// as the nearer of the two F16 numbers around x (Eigen's conversion of float(x) and its
/// neighbours by bits), compared in long double: independent of the library's rounding.
double to_f16(long double x) {
  if (std::isnan(x) || std::abs(x) >= 65520.0L) return std::isnan(x) ? double(x) : std::copysign(std::numeric_limits<double>::infinity(), double(x));
  const std::uint16_t guess = Eigen::numext::bit_cast<std::uint16_t>(Eigen::half(static_cast<float>(x)));
  if (static_cast<long double>(static_cast<float>(x)) == x)  // (float(x) exact: Eigen's one rounding is the answer)
    return static_cast<float>(Eigen::numext::bit_cast<Eigen::half>(guess));
  double best = 0;
  long double best_distance = std::numeric_limits<long double>::infinity();
  bool best_even = true;
  for (const int step : {-1, 0, 1}) {  // (the guess may be one off: float(x) rounded first)
    const std::uint16_t bits = static_cast<std::uint16_t>(guess + step);
    const double value = static_cast<float>(Eigen::numext::bit_cast<Eigen::half>(bits));
    if (!std::isfinite(value) || (std::signbit(value) != std::signbit(static_cast<double>(x)) && value != 0)) continue;
    const long double distance = std::abs(static_cast<long double>(value) - x);
    if (distance < best_distance || (distance == best_distance && !best_even && bits % 2 == 0))
      best = value, best_distance = distance, best_even = bits % 2 == 0;
  }
  return best;
}

/// The F16 chains' dot product of two rows of F16 numbers (detail/f16_products.hpp's rule, here in
/// long double): chunks of 32 terms, each a chain h = F16(a b + h) from 0, their sums added in float.
double f16_chain_dot(const Eigen::RowVectorXd& a, const Eigen::RowVectorXd& b) {
  float sum = 0;
  for (Index c0 = 0; c0 < a.size(); c0 += 32) {
    double h = 0;
    for (Index c = c0; c < std::min<Index>(a.size(), c0 + 32); ++c) h = to_f16(static_cast<long double>(a(c)) * b(c) + h);
    sum += static_cast<float>(h);
  }
  return sum;
}

/// Keys (n x d) as a storage keeps them: int8 entries with one scale a key (max |k| / 127), BF16 or
/// F16 (scale 1). Rounded once, read by every query row.
struct RoundedKeys {
  Eigen::MatrixXd entries;
  Eigen::VectorXd scales;
  RoundedKeys first(Index m) const { return {entries.topRows(m), scales.head(m)}; }
  /// The keys as the widened arithmetic multiplies them: entry times scale.
  Eigen::MatrixXd widened() const { return scales.asDiagonal() * entries; }
};
RoundedKeys rounded_keys(KvStorage storage, const Matrix<float>& k) {
  RoundedKeys out{Eigen::MatrixXd(k.rows(), k.cols()), Eigen::VectorXd::Ones(k.rows())};
  for (Index j = 0; j < k.rows(); ++j) {
    float scale = 1;
    if (storage == KvStorage::f16) out.entries.row(j) = k.row(j).cast<double>().unaryExpr([](double c) { return to_f16(c); });
    else out.entries.row(j) = (storage == KvStorage::int8 ? to_int8(k.row(j), scale) : to_bf16(k.row(j))).cast<double>();
    out.scales(j) = scale;
  }
  return out;
}

/// The weights one query row (d wide, before the divisor) gives the keys under the storage's stored
/// arithmetic, from its documented rule, the softmax in double. int8: the scaled query to int8, S =
/// (Σ q k) s_k s_q. BF16: the scaled query to BF16, their products summed (the float32 sums of the
/// kernel add no error this measure sees). F16: the scaled query to F16, the F16 chains' sums.
Eigen::RowVectorXd arithmetic_weights(KvStorage storage, const Eigen::RowVectorXf& q, const RoundedKeys& k, double divisor) {
  float q_scale = 1;
  const Eigen::RowVectorXf scaled = q * static_cast<float>(1.0 / divisor);
  if (storage == KvStorage::f16) {
    const Eigen::RowVectorXd rounded = scaled.cast<double>().unaryExpr([](double c) { return to_f16(c); });
    Eigen::RowVectorXd s(k.entries.rows());
    for (Index j = 0; j < s.size(); ++j) s(j) = f16_chain_dot(rounded, k.entries.row(j));
    const Eigen::RowVectorXd e = (s.array() - s.maxCoeff()).exp();
    return e / e.sum();
  }
  const Eigen::VectorXd rounded = (storage == KvStorage::int8 ? to_int8(scaled, q_scale) : to_bf16(scaled)).cast<double>().transpose();
  const Eigen::RowVectorXd s = ((k.entries * rounded).array() * k.scales.array() * double(q_scale)).transpose();
  const Eigen::RowVectorXd e = (s.array() - s.maxCoeff()).exp();
  return e / e.sum();
}

/// Head h's causal pattern under the stored arithmetic, from q (n, H d) and k (n, G d).
Matrix<double> stored_arithmetic_pattern(KvStorage storage, const Matrix<float>& q, const Matrix<float>& k, Index h, Index group,
                                         Index d, double divisor) {
  const Index n = q.rows(), g = h / group;
  Matrix<double> p = Matrix<double>::Zero(n, n);
  const RoundedKeys k_g = rounded_keys(storage, k.middleCols(g * d, d));
  for (Index i = 0; i < n; ++i) p.row(i).head(i + 1) = arithmetic_weights(storage, q.block(i, h * d, 1, d), k_g.first(i + 1), divisor);
  return p;
}
}  // namespace

TEST_CASE("int8, BF16 and F16 under the stored arithmetic: the same bits on any thread count and split, decoding the "
          "forward, paged as packed", "[storage][kernel][arithmetic]") {
  const KvStorage storage = GENERATE(KvStorage::int8, KvStorage::bf16, KvStorage::f16);
  CAPTURE(storage_name(storage));
  std::mt19937 rng(5);
  const Index n = 150, G = 2, H = 8, d = 32;
  const Matrix<float> k = headwise_test::random_matrix<float>(n, G * d, rng), v = headwise_test::random_matrix<float>(n, G * d, rng);
  const Matrix<float> q = headwise_test::random_matrix<float>(n, H * d, rng);
  const StoreFormat format{ValueStorage::own, storage, KvArithmetic::stored};
  PackedKeysValues<float> stored(n, G, d, d, format), widened(n, G, d, d, {ValueStorage::own, storage});
  for (Index t = 0; t < n; t += 37) {
    const Index m = std::min<Index>(37, n - t);
    stored.append(k.middleRows(t, m), v.middleRows(t, m)), widened.append(k.middleRows(t, m), v.middleRows(t, m));
  }
  // The store holds the numbers the widened store holds, in another layout.
  Matrix<float> k_stored, v_stored, k_widened, v_widened;
  detail::unpack(stored, k_stored, v_stored), detail::unpack(widened, k_widened, v_widened);
  CHECK_THAT(headwise_test::as_double(k_stored), headwise_test::IsExactly(k_widened));
  CHECK_THAT(headwise_test::as_double(v_stored), headwise_test::IsExactly(v_widened));
  PagedKvShape shape;
  shape.block_tokens = KvBlocks<float>::lanes, shape.blocks = (n + shape.block_tokens - 1) / shape.block_tokens;
  shape.kv = {G, d, d, format};
  PagedKvCache<float> pool(shape);
  const Index s = pool.add_sequence();
  for (Index t = 0; t < n; t += 50) pool.append(s, k.middleRows(t, std::min<Index>(50, n - t)), v.middleRows(t, std::min<Index>(50, n - t)));

  AttentionOptions one, two;
  one.threads = 1, two.threads = 2;
  AttentionCall call;
  call.heads = {H, G}, call.tiles.keys = 2 * KvBlocks<float>::lanes, call.tiles.key_shard = 64;  // (a key tile over two blocks)
  call.options = &one;
  const Matrix<float> z = attend<float>(q, stored, call).z;
  const Matrix<float> plain = attend<float>(q, widened, call).z;
  CHECK_THAT(headwise_test::as_double(z), IsNear(headwise_test::as_double(plain), 2e-2));  // two roundings, not the same
  CHECK((z - plain).cwiseAbs().maxCoeff() > 0);                                           // (the arithmetic did change)
  call.options = &two;
  CHECK_THAT(headwise_test::as_double(attend<float>(q, stored, call).z), headwise_test::IsExactly(z));
  CHECK_THAT(headwise_test::as_double(attend<float>(q, pool.sequence(s), call).z), headwise_test::IsExactly(z));
  for (const bool split : {true, false}) {
    call.tiles.split_keys = split;
    for (const Index i : {Index(0), Index(63), Index(64), n - 1}) {  // one query: split-key decoding over up to 3 shards
      CAPTURE(split, i);
      PackedKeysValues<float> prefix(i + 1, G, d, d, format);
      prefix.append(k.topRows(i + 1), v.topRows(i + 1));
      CHECK_THAT(headwise_test::as_double(attend<float>(q.row(i), prefix, call).z), headwise_test::IsExactly(Matrix<float>(z.row(i))));
    }
  }
  // A sliding window of 45 keys: a row's keys begin inside a key panel (and an F16 chain's chunk),
  // at a different place for each row; paged as packed, decoding as the forward.
  AttentionOptions windowed = one;
  windowed.window = 45;
  call.options = &windowed, call.tiles.split_keys = true;
  const Matrix<float> zw = attend<float>(q, stored, call).z;
  CHECK_THAT(headwise_test::as_double(attend<float>(q, pool.sequence(s), call).z), headwise_test::IsExactly(zw));
  CHECK((zw - z).cwiseAbs().maxCoeff() > 0);
  for (const Index i : {Index(50), Index(77), n - 1}) {
    CAPTURE(i);
    PackedKeysValues<float> prefix(i + 1, G, d, d, format);
    prefix.append(k.topRows(i + 1), v.topRows(i + 1));
    CHECK_THAT(headwise_test::as_double(attend<float>(q.row(i), prefix, call).z), headwise_test::IsExactly(Matrix<float>(zw.row(i))));
  }
}

TEST_CASE("int8, BF16 and F16 under the stored arithmetic: a layer decodes bitwise its forward, and PyTorch's float64 is "
          "met within the roundings measured", "[storage][fixture][arithmetic]") {
  const KvStorage storage = GENERATE(KvStorage::int8, KvStorage::bf16, KvStorage::f16);
  CAPTURE(storage_name(storage));
  const io::SafetensorsFile ref = headwise_test::load_fixture("llama-tiny/attention-reference.safetensors");
  const auto layers = io::load_llama_attention_layers<float>(headwise_test::data_path("llama-tiny"));
  const Matrix<double> f64_output = ref.matrix<double>("layers.1.attn.output.f64");
  const Matrix<float> x = ref.matrix<float>("layers.1.attn.input");
  double errors[2] = {0, 0};
  for (const KvArithmetic a : {KvArithmetic::widened, KvArithmetic::stored}) {
    CAPTURE(arithmetic_name(a));
    LayerConfig config = layers[1].config();
    config.kv_storage = storage, config.kv_arithmetic = a;
    const MultiHeadAttention<float> layer(layers[1].n_heads(), weights_of(layers[1]), config);
    AttentionOptions one, two;
    one.threads = 1, two.threads = 2;
    const Matrix<float> whole = layer.forward(x, one);
    CHECK_THAT(headwise_test::as_double(layer.forward(x, two)), headwise_test::IsExactly(whole));
    KvCache<float> cache = layer.make_cache(x.rows());
    CHECK(cache.arithmetic() == a);
    Matrix<float> decoded(x.rows(), x.cols());
    for (Index i0 = 0; i0 < x.rows(); i0 += 3) {
      const Index m = std::min<Index>(3, x.rows() - i0);
      decoded.middleRows(i0, m) = layer.forward_incremental(x.middleRows(i0, m), cache);
    }
    CHECK_THAT(headwise_test::as_double(decoded), headwise_test::IsExactly(whole));
    errors[static_cast<int>(a)] = (whole.cast<double>() - f64_output).cwiseAbs().maxCoeff() / f64_output.cwiseAbs().maxCoeff();
  }
  // The weights the stored arithmetic gives, from its documented rule, against PyTorch's float64 pattern.
  const ForwardRecord<float> run = interpret::inspect(layers[1], x);
  const Index group = layers[1].n_heads() / layers[1].n_kv_heads(), d = layers[1].d_head();
  double worst = 0;
  for (Index h = 0; h < layers[1].n_heads(); ++h)
    worst = std::max(worst, mean_kl(ref.slice<double>("layers.1.attn.pattern.f64", h),
                                    stored_arithmetic_pattern(storage, run.q, run.k, h, group, d, std::sqrt(double(d)))));
  CAPTURE(errors[0], errors[1], worst);
  if (storage == KvStorage::int8) {
    CHECK(errors[1] < 1.2e-2);  // measured 6.2e-3 (widened int8: 5.0e-3): the rounding of queries and weights adds to the storage's
    CHECK(worst < 2e-4);        // measured 5.5e-5 (widened int8: 3.2e-5, test_kv_storage.cpp)
  } else if (storage == KvStorage::bf16) {
    CHECK(errors[1] < 4e-3);  // measured 1.8e-3 (widened BF16: 1.7e-3)
    CHECK(worst < 2e-5);      // measured 6.3e-6
  } else {
    CHECK(errors[1] < 2e-3);  // measured 9.1e-4 (widened F16: 2.2e-4)
    CHECK(worst < 3e-6);      // measured 1.1e-6 (widened F16: 5.0e-8)
  }
  CHECK(errors[1] > (storage == KvStorage::f16 ? 1e-5 : 1e-4));
  CHECK(worst > 1e-8);
}

TEST_CASE("an int8 latent under the stored arithmetic: values read out of the keys are the values stored on their own, "
          "the same bits on any thread count, split and store, float64 met within the roundings measured",
          "[storage][kernel][arithmetic][latent]") {
  std::mt19937 rng(17);
  const Index n = 300, rows = 8, d = 72, dv = 64;  // a latent of one key/value head: 8 heads folded into rows, keys 72 wide, values the first 64
  Matrix<float> k = headwise_test::random_matrix<float>(n, d, rng);
  k.col(0) = k.cwiseAbs().rowwise().maxCoeff() * 1.5f;  // (each key's largest entry among its values: their int8 scale is the key's)
  const Matrix<float> q = headwise_test::random_matrix<float>(n * rows, d, rng) * 2.0f;
  const StoreFormat latent_format{ValueStorage::key_prefix, KvStorage::int8, KvArithmetic::stored};
  PackedKeysValues<float> latent(n, 1, d, dv, latent_format), own(n, 1, d, dv, {ValueStorage::own, KvStorage::int8, KvArithmetic::stored});
  for (Index t = 0; t < n; t += 70) {
    const Index m = std::min<Index>(70, n - t);
    latent.append(k.middleRows(t, m)), own.append(k.middleRows(t, m), k.middleRows(t, m).leftCols(dv));
  }
  PagedKvShape shape;
  shape.block_tokens = KvBlocks<float>::lanes, shape.blocks = (n + shape.block_tokens - 1) / shape.block_tokens;
  shape.kv = {1, d, dv, latent_format};
  PagedKvCache<float> pool(shape);
  const Index s = pool.add_sequence();
  for (Index t = 0; t < n; t += 100) pool.append(s, k.middleRows(t, 100));

  AttentionOptions one, two;
  one.threads = 1, two.threads = 2;
  one.query_rows_per_position = two.query_rows_per_position = rows;
  AttentionCall call;
  call.options = &one;
  call.tiles.keys = 2 * KvBlocks<float>::lanes, call.tiles.key_shard = 128;  // (a key tile over two blocks)
  const Matrix<float> z = attend<float>(q, latent, call).z;
  CHECK_THAT(headwise_test::as_double(attend<float>(q, own, call).z), headwise_test::IsExactly(z));
  call.options = &two;
  CHECK_THAT(headwise_test::as_double(attend<float>(q, latent, call).z), headwise_test::IsExactly(z));
  CHECK_THAT(headwise_test::as_double(attend<float>(q, pool.sequence(s), call).z), headwise_test::IsExactly(z));
  for (const bool split : {true, false}) {
    call.tiles.split_keys = split;
    for (const Index i : {Index(0), Index(127), Index(128), n - 1}) {  // one position's rows: split-key decoding over up to 3 shards
      CAPTURE(split, i);
      PackedKeysValues<float> prefix(i + 1, 1, d, dv, latent_format);
      prefix.append(k.topRows(i + 1));
      CHECK_THAT(headwise_test::as_double(attend<float>(q.middleRows(i * rows, rows), prefix, call).z),
                 headwise_test::IsExactly(Matrix<float>(z.middleRows(i * rows, rows))));
    }
  }
  AttentionOptions two_rows = one;  // (a short sliver: a decoding step's products, which ask for their next phase ahead)
  two_rows.query_rows_per_position = 2;
  call.options = &two_rows;
  for (const Index i : {Index(127), n - 1}) {
    CAPTURE(i);
    PackedKeysValues<float> prefix(i + 1, 1, d, dv, latent_format);
    prefix.append(k.topRows(i + 1));
    CHECK_THAT(headwise_test::as_double(attend<float>(q.middleRows(i * rows, 2), prefix, call).z),
               headwise_test::IsExactly(Matrix<float>(z.middleRows(i * rows, 2))));
  }
  // float64 on the unrounded numbers: the output's error, and the worst head's (row r % rows') mean KL of a row's weights
  // under the documented rule.
  const double divisor = std::sqrt(double(d));
  const RoundedKeys int8_keys = rounded_keys(KvStorage::int8, k);
  double error = 0, largest = 0;
  std::vector<double> kl_sum(static_cast<std::size_t>(rows), 0.0);
  for (Index r = 0; r < n * rows; ++r) {
    const Index i = r / rows;
    const Eigen::RowVectorXd scores = (k.topRows(i + 1).cast<double>() * q.row(r).cast<double>().transpose()).transpose() / divisor;
    const Eigen::RowVectorXd e = (scores.array() - scores.maxCoeff()).exp();
    const Eigen::RowVectorXd p = e / e.sum();
    const Eigen::RowVectorXd z64 = p * k.topRows(i + 1).leftCols(dv).cast<double>();
    error = std::max(error, (z.row(r).cast<double>() - z64).cwiseAbs().maxCoeff()), largest = std::max(largest, z64.cwiseAbs().maxCoeff());
    kl_sum[static_cast<std::size_t>(r % rows)] += mean_kl(p, arithmetic_weights(KvStorage::int8, q.row(r), int8_keys.first(i + 1), divisor));
  }
  const double kl = *std::max_element(kl_sum.begin(), kl_sum.end()) / double(n);
  CAPTURE(error / largest, kl);
  CHECK(error / largest < 3e-2);  // measured 2.1e-2 of the largest output
  CHECK(kl < 5e-4);               // measured 2.2e-4
  CHECK(error / largest > 1e-5);  // (the numbers were rounded)
}

TEST_CASE("a DeepSeek-V3 latent layer in int8 under the stored arithmetic decodes bitwise its forward, and PyTorch's float64 is "
          "met within the roundings measured", "[storage][fixture][arithmetic][latent]") {
  const auto layers = io::load_latent_attention_layers<float>(headwise_test::data_path("deepseek-v3-tiny"));
  const io::SafetensorsFile ref = headwise_test::load_fixture("deepseek-v3-tiny/attention-reference.safetensors");
  const Matrix<float> x = ref.matrix<float>("layers.1.attn.input");
  const Matrix<double> f64_output = ref.matrix<double>("layers.1.attn.output.f64");
  LatentAttentionConfig config = layers[1].config();
  config.kv_storage = KvStorage::int8, config.kv_arithmetic = KvArithmetic::stored;
  const MultiHeadLatentAttention<float> layer(layers[1].weights(), config);
  AttentionOptions one, two;
  one.threads = 1, two.threads = 2;
  const Matrix<float> whole = layer.forward(x, one);
  CHECK_THAT(headwise_test::as_double(layer.forward(x, two)), headwise_test::IsExactly(whole));
  KvCache<float> cache = layer.make_cache(x.rows());
  CHECK(cache.storage() == KvStorage::int8);
  CHECK(cache.arithmetic() == KvArithmetic::stored);
  Matrix<float> decoded(x.rows(), x.cols());
  for (Index i0 = 0; i0 < x.rows(); i0 += 3) {
    const Index m = std::min<Index>(3, x.rows() - i0);
    decoded.middleRows(i0, m) = layer.forward_incremental(x.middleRows(i0, m), cache, i0 % 2 ? two : one);
  }
  CHECK_THAT(headwise_test::as_double(decoded), headwise_test::IsExactly(whole));
  const double scale = f64_output.cwiseAbs().maxCoeff();
  const double stored = (whole.cast<double>() - f64_output).cwiseAbs().maxCoeff() / scale;
  // The step-by-step path attends to the same int8 latent, widened: the storage's part of the error.
  const double widened = (layer.forward_step_by_step(x).cast<double>() - f64_output).cwiseAbs().maxCoeff() / scale;
  const double as_computed = (layers[1].forward(x).cast<double>() - f64_output).cwiseAbs().maxCoeff() / scale;
  // The weights the stored arithmetic gives (its documented rule, on PyTorch's absorbed queries and latent keys) against
  // PyTorch's float64 pattern: the worst head's mean KL of a row.
  Matrix<float> latent(x.rows(), layer.latent_width());
  latent << ref.matrix<float>("layers.1.attn.c_kv.f64"), ref.matrix<float>("layers.1.attn.k_rope.f64");
  double kl = 0;
  for (Index h = 0; h < layer.n_heads(); ++h) {
    Matrix<float> q(x.rows(), layer.latent_width());
    q << ref.slice<float>("layers.1.attn.q_absorbed.f64", h), ref.slice<float>("layers.1.attn.q_rope.f64", h);
    Matrix<double> p = Matrix<double>::Zero(x.rows(), x.rows());
    for (Index i = 0; i < x.rows(); ++i)
      p.row(i).head(i + 1) = arithmetic_weights(KvStorage::int8, q.row(i), rounded_keys(KvStorage::int8, latent.topRows(i + 1)), layer.divisor());
    kl = std::max(kl, mean_kl(ref.slice<double>("layers.1.attn.pattern.f64", h), p));
  }
  CAPTURE(stored, widened, as_computed, kl);
  CHECK(stored < 3e-2);    // measured 2.0e-2 of the largest output
  CHECK(widened < 3e-2);   // measured 1.5e-2
  CHECK(stored > 1e-4);    // (the latent was rounded: the float32 layer meets PyTorch to ~1e-6)
  CHECK(as_computed < 1e-5);
  CHECK(kl < 1e-3);        // measured 3.3e-4
  CHECK(kl > 1e-8);
  CHECK_THROWS_WITH(interpret::inspect(layer, x).pattern(0), Catch::Contains("under the stored arithmetic"));
  config.kv_storage = KvStorage::bf16;
  CHECK_THROWS_WITH(MultiHeadLatentAttention<float>(layers[1].weights(), config),
                    Catch::Contains("values inside the keys are stored as computed, or in int8 under the stored arithmetic; not in BF16"));
}

TEST_CASE("the stored arithmetic: what it does not take is refused by name", "[storage][errors][arithmetic]") {
  CHECK_THROWS_WITH(PackedKeysValues<float>(4, 1, 8, 8, {ValueStorage::own, KvStorage::as_computed, KvArithmetic::stored}),
                    Catch::Contains("keys and values kept as computed take KvArithmetic::widened"));
  CHECK_THROWS_WITH(PackedKeysValues<float>(4, 1, 7, 7, {ValueStorage::own, KvStorage::bf16, KvArithmetic::stored}),
                    Catch::Contains("BF16 keys under the stored arithmetic need d_head a multiple of 2") && Catch::Contains("got 7"));
  CHECK_THROWS_WITH(PackedKeysValues<float>(4, 1, 6, 6, {ValueStorage::own, KvStorage::int8, KvArithmetic::stored}),
                    Catch::Contains("need d_head a multiple of 4") && Catch::Contains("got 6"));
  CHECK_THROWS_WITH(PackedKeysValues<float>(4, 1, 8, 8, {ValueStorage::key_prefix, KvStorage::bf16, KvArithmetic::stored}),
                    Catch::Contains("values inside the keys are stored as computed, or in int8 under the stored arithmetic; not in BF16"));
  PagedKvShape shape;
  shape.blocks = 2, shape.kv = {1, 10, 10, {ValueStorage::own, KvStorage::int8, KvArithmetic::stored}};
  CHECK_THROWS_WITH(PagedKvCache<float>(shape), Catch::Contains("need d_head a multiple of 4"));
  const auto layers = io::load_llama_attention_layers<float>(headwise_test::data_path("llama-tiny"));
  LayerConfig config = layers[0].config();
  config.kv_storage = KvStorage::int8, config.kv_arithmetic = KvArithmetic::stored;
  const MultiHeadAttention<float> stored(layers[0].n_heads(), weights_of(layers[0]), config);
  config.kv_arithmetic = KvArithmetic::widened;
  const MultiHeadAttention<float> widened(layers[0].n_heads(), weights_of(layers[0]), config);
  KvCache<float> widened_cache = widened.make_cache(8);
  const Matrix<float> x = Matrix<float>::Random(2, layers[0].d_model());
  CHECK_THROWS_WITH(stored.forward_incremental(x, widened_cache),
                    Catch::Contains("keeps keys and values for the widened arithmetic, this layer the stored"));
  CHECK_THROWS_WITH(interpret::inspect(stored, x).pattern(0), Catch::Contains("under the stored arithmetic"));
  config.kv_storage = KvStorage::as_computed, config.kv_arithmetic = KvArithmetic::stored;
  CHECK_THROWS_WITH(MultiHeadAttention<float>(layers[0].n_heads(), weights_of(layers[0]), config),
                    Catch::Contains("keys and values kept as computed take KvArithmetic::widened"));
  // F16 under the stored arithmetic rounds q / divisor to F16: a query beyond its range is refused,
  // packed, batched or in a layer's forward; the widened arithmetic takes it.
  PackedKeysValues<float> f16(4, 1, 8, 8, {ValueStorage::own, KvStorage::f16, KvArithmetic::stored});
  f16.append(Matrix<float>::Ones(4, 8), Matrix<float>::Ones(4, 8));
  Matrix<float> q = Matrix<float>::Ones(1, 8);
  q(0, 3) = 65520.0f * std::sqrt(8.0f) * 1.001f;
  AttentionCall call;
  call.heads = {1, 1};
  CHECK_THROWS_WITH(attend<float>(q, f16, call), Catch::Contains("beyond F16's largest number (65504)") && Catch::Contains("q / divisor"));
  AttentionBatch<float> batch;
  batch.sequences.emplace_back(q, f16.blocks());
  CHECK_THROWS_WITH(attend<float>(batch, call), Catch::Contains("beyond F16's largest number (65504)"));
  q(0, 3) = 65504.0f * std::sqrt(8.0f) * 0.999f;  // (within range: taken)
  CHECK(attend<float>(q, f16, call).z.allFinite());
  // A chain that leaves F16's range: a score's (of either sign: none dropped in silence as -inf, with
  // or without a soft-cap, in one shard or another) or a value column's (4 keys of weight 1 and
  // value 60000) is refused by name, packed or batched.
  const auto overflows = [&](const Matrix<float>& keys, const Matrix<float>& values, const Matrix<float>& query) {
    PackedKeysValues<float> store(keys.rows(), 1, 8, 8, {ValueStorage::own, KvStorage::f16, KvArithmetic::stored});
    store.append(keys, values);
    AttentionBatch<float> one_sequence;
    one_sequence.sequences.emplace_back(query, store.blocks());
    CHECK_THROWS_WITH(attend<float>(one_sequence, call), Catch::Contains("left F16's range (beyond 65504)"));
    return attend<float>(query, store, call);
  };
  const Matrix<float> large = Matrix<float>::Constant(4, 8, 60000.0f), small = Matrix<float>::Ones(4, 8);
  for (const float sign : {1.0f, -1.0f})
    CHECK_THROWS_WITH(overflows(large, small, Matrix<float>::Constant(1, 8, sign * 8.0f)), Catch::Contains("left F16's range (beyond 65504)"));
  Matrix<float> one_large = Matrix<float>::Ones(200, 8);  // key 150 alone overflows: -inf would drop just it
  one_large.row(150).setConstant(60000.0f);
  AttentionOptions capped;
  capped.softcap = 30.0;
  const AttentionOptions* const choices[] = {nullptr, &capped};
  for (const AttentionOptions* options : choices) {
    call.options = options, call.tiles.keys = 64, call.tiles.key_shard = 64;  // (key 150 in the third of four shards)
    CHECK_THROWS_WITH(overflows(one_large, Matrix<float>::Ones(200, 8), Matrix<float>::Constant(1, 8, -8.0f)),
                      Catch::Contains("left F16's range (beyond 65504)"));
  }
  call.options = nullptr, call.tiles = {};
  CHECK_THROWS_WITH(overflows(small, large, Matrix<float>::Zero(1, 8)),
                    Catch::Contains("left F16's range"));
}

TEST_CASE("the F16 chains' multiply-add: one rounding to F16 of a b + c, against the exact sum", "[arithmetic]") {
  // F16 numbers of every kind: subnormal, normal, near the largest; sums that tie, cancel, overflow
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> any_bits(0, 0x7bff), sign(0, 1);
  const auto f16 = [](int bits) { return static_cast<float>(Eigen::numext::bit_cast<Eigen::half>(static_cast<std::uint16_t>(bits))); };
  const auto random_f16 = [&] { return (sign(rng) ? -1.0f : 1.0f) * f16(any_bits(rng)); };
  std::vector<std::array<float, 3>> cases = {
      {1.5f, f16(0x3956), 0.0f},              // 1.5 x 683/1024 = 1 + 2^-11: a tie, to even (1)
      {1.5f, f16(0x3956), f16(0x0001)},       // the tie and the smallest subnormal above it: up
      {1.5f, f16(0x3956), -f16(0x0001)},      // below it: down
      {f16(0x0001), f16(0x0001), 1.0f},       // 2^-48 beside 1: 1
      {256.0f, 256.0f, -1.0f},                // 65535: beyond the last tie (65520): infinite
      {255.875f, 256.0f, 0.0f},               // 65504: the largest
      {f16(0x0200), 0.5f, 0.0f},              // a subnormal halved: exact
      {f16(0x0001), 0.5f, 0.0f},              // 2^-25, a tie between 0 and 2^-24: to even (0)
      {f16(0x0003), 0.5f, 0.0f},              // 3 x 2^-25: a tie, to even (2^-23)
      {2.0f, 3.0f, -6.0f},                    // exact cancellation: +0
  };
  for (int i = 0; i < 200000; ++i) cases.push_back({random_f16(), random_f16(), random_f16()});
  for (int i = 0; i < 20000; ++i) {  // c near -a b: the sums that cancel most
    const float a = random_f16(), b = random_f16();
    cases.push_back({a, b, -static_cast<float>(to_f16(static_cast<long double>(a) * b)) * (1.0f + (sign(rng) ? 1 : -1) * 0.0009765625f)});
  }
  Index wrong = 0;
  for (const auto& [a, b, c] : cases) {
    const double expected = to_f16(static_cast<long double>(a) * b + c);  // (exact in long double: 64 bits hold every such sum used here)
    const float got = detail::f16_fma(a, b, c);
    if (!(got == expected || (std::isnan(got) && std::isnan(expected)))) ++wrong;
  }
  CHECK(wrong == 0);
  CHECK(detail::f16_fma(1.5f, f16(0x3956), 0.0f) == 1.0f);
  CHECK(detail::f16_fma(1.5f, f16(0x3956), f16(0x0001)) == f16(0x3c01));
  CHECK(detail::f16_fma(1.5f, f16(0x3956), -f16(0x0001)) == 1.0f);
  CHECK(std::isinf(detail::f16_fma(256.0f, 256.0f, -1.0f)));
  CHECK(detail::f16_fma(f16(0x0003), 0.5f, 0.0f) == f16(0x0002));
  CHECK(!std::signbit(detail::f16_fma(2.0f, 3.0f, -6.0f)));
}

namespace {
/// F16 bits of every kind for the products' tests: normal numbers of spread `spread`, subnormals,
/// and (odd > 1) numbers near F16's largest and zeros of either sign, each about one in 3 odd + 1.
std::vector<std::uint16_t> f16_numbers(Index n, float spread, int odd, std::mt19937& rng) {
  std::normal_distribution<float> normal;
  std::uniform_int_distribution<int> kind(0, 3 * odd), subnormal(1, 0x3ff), sign(0, 1);
  std::vector<std::uint16_t> bits(static_cast<std::size_t>(n));
  for (auto& b : bits) {
    const int k = kind(rng);
    const std::uint16_t s = static_cast<std::uint16_t>(sign(rng) << 15);
    if (k == 0) b = static_cast<std::uint16_t>(s | subnormal(rng));
    else if (k == 1 && odd > 1) b = static_cast<std::uint16_t>(s | 0x7bf0 | subnormal(rng) % 16);  // within 16 ulps of 65504
    else if (k == 2 && odd > 1) b = s;
    else b = detail::f16_bits(static_cast<float>(Eigen::half(spread * normal(rng))));
  }
  return bits;
}
double f16_of(std::uint16_t bits) { return detail::f16_value(bits); }
}  // namespace

TEST_CASE("the F16 products are the rule's chains, computed here independently, bit for bit", "[arithmetic]") {
  std::mt19937 rng(4);
  constexpr Index W = 32, d = 100;  // (score chains of 32, 32, 32 and 4 components)
  const std::vector<std::uint16_t> q = f16_numbers(3 * d, 2.0f, 8, rng), keys = f16_numbers(d * W, 1.0f, 8, rng);
  // scores: S[r][w] = the chained sums of row r against key w (component c of key w at c W + w)
  std::vector<float> s(3 * W);
  detail::f16_score_products_of<detail::PortableF16Lanes<W>, W, 1>(std::make_integer_sequence<Index, 3>{}, d, q.data(), d, keys.data(), 0,
                                                                  detail::PanelPrefetch{}, s.data(), W);
  Index wrong = 0, infinite = 0;
  for (Index r = 0; r < 3; ++r)
    for (Index w = 0; w < W; ++w) {
      Eigen::RowVectorXd a(d), b(d);
      for (Index c = 0; c < d; ++c) a(c) = f16_of(q[static_cast<std::size_t>(r * d + c)]), b(c) = f16_of(keys[static_cast<std::size_t>(c * W + w)]);
      const double expected = f16_chain_dot(a, b);
      const float got = s[static_cast<std::size_t>(r * W + w)];
      if (!std::isfinite(expected)) ++infinite;
      if (!(got == expected || (std::isnan(got) && std::isnan(expected)))) ++wrong;
    }
  CHECK(wrong == 0);
  CHECK(infinite > 0);  // (numbers near 65504 make some chains overflow)
  // values, as runs of keys on the chunks' grid (chunks of places 0-31, 32-63, 64-95): acc[r][w] =
  // 0.5 + each chunk's chain, in order. Two runs with a chain carried between them (keys 0-44 at
  // places 5-49: runs of 20 and 25); two runs that meet at a chunk's end, the second over three
  // chunks (keys 0-66 at places 5-71: runs of 27 and 40).
  constexpr Index tokens = 67;
  const std::vector<std::uint16_t> p = f16_numbers(3 * tokens, 0.3f, 1, rng), values = f16_numbers(tokens * W, 2.0f, 1, rng);
  const std::vector<std::vector<detail::F16Run>> cases = {{{20, 5, false, false}, {25, 25, true, true}},
                                                          {{27, 5, false, false}, {40, 0, false, true}}};
  for (const auto& runs : cases) {
    std::vector<float> acc(3 * W, 0.5f);
    std::vector<std::uint16_t> carry(3 * W);
    Index first = 0;
    for (const detail::F16Run& run : runs) {
      detail::f16_value_products_of<detail::PortableF16Lanes<W>, W, 1>(std::make_integer_sequence<Index, 3>{}, run, p.data() + first, tokens,
                                                                      values.data() + first * W, 0, detail::PanelPrefetch{}, carry.data(),
                                                                      W, acc.data(), W);
      first += run.tokens;
    }
    wrong = 0;
    for (Index r = 0; r < 3; ++r)
      for (Index w = 0; w < W; ++w) {
        float expected = 0.5f;
        for (Index chunk_first = 0; chunk_first < first;) {  // keys 0 .. first - 1 at places 5 ...
          const Index chunk_end = std::min(first, (chunk_first + 5) / 32 * 32 + 32 - 5);
          double h = 0;
          for (Index t = chunk_first; t < chunk_end; ++t)
            h = to_f16(static_cast<long double>(f16_of(p[static_cast<std::size_t>(r * tokens + t)])) * f16_of(values[static_cast<std::size_t>(t * W + w)]) + h);
          expected += static_cast<float>(h);
          chunk_first = chunk_end;
        }
        if (acc[static_cast<std::size_t>(r * W + w)] != expected) ++wrong;
      }
    CHECK(wrong == 0);
  }
}

#if defined(HEADWISE_F16_FMA)
TEST_CASE("the F16 chains in AVX512-FP16's registers are the portable chains' bits", "[arithmetic]") {
  std::mt19937 rng(9);
  constexpr Index W = 32, d = 100, tokens = 45;  // (a chain cut short: 100 = 3 x 32 + 4)
  // subnormals, numbers near 65504 (chains that overflow: NaN scores, infinite sums), zeros of both signs
  const std::vector<std::uint16_t> q = f16_numbers(4 * d, 3.0f, 8, rng), keys = f16_numbers(2 * d * W, 1.0f, 8, rng),
                                   p = f16_numbers(4 * tokens, 0.3f, 8, rng), values = f16_numbers(2 * tokens * W, 2.0f, 8, rng);
  const auto same = [](const std::vector<float>& x, const std::vector<float>& y) {  // (NaN as NaN)
    for (std::size_t i = 0; i < x.size(); ++i)
      if (!(x[i] == y[i] || (std::isnan(x[i]) && std::isnan(y[i]))) || std::signbit(x[i]) != std::signbit(y[i])) return false;
    return true;
  };
  for (const unsigned mxcsr : {_mm_getcsr(), _mm_getcsr() | 0x8040u}) {  // as it is, and with FTZ and DAZ set
    CAPTURE(mxcsr);
    const unsigned before = _mm_getcsr();
    _mm_setcsr(mxcsr);
    std::vector<float> vector_out(4 * 2 * W), portable_out(4 * 2 * W);
    detail::f16_score_products_of<detail::Avx512F16Lanes, W, 2>(std::make_integer_sequence<Index, 4>{}, d, q.data(), d, keys.data(), d * W,
                                                             detail::PanelPrefetch{}, vector_out.data(), 2 * W);
    detail::f16_score_products_of<detail::PortableF16Lanes<W>, W, 2>(std::make_integer_sequence<Index, 4>{}, d, q.data(), d, keys.data(),
                                                                    d * W, detail::PanelPrefetch{}, portable_out.data(), 2 * W);
    // values: a run that begins inside a chunk, is carried, and is finished by a second run
    std::vector<float> vector_acc(4 * 2 * W, 0.5f), portable_acc(4 * 2 * W, 0.5f);
    std::vector<std::uint16_t> vector_carry(4 * 2 * W), portable_carry(4 * 2 * W);
    for (const detail::F16Run run : {detail::F16Run{20, 5, false, false}, detail::F16Run{25, 25, true, true}}) {
      const Index first = run.phase == 5 ? 0 : 20;
      detail::f16_value_products_of<detail::Avx512F16Lanes, W, 2>(std::make_integer_sequence<Index, 4>{}, run, p.data() + first, tokens,
                                                               values.data() + first * W, tokens * W, detail::PanelPrefetch{},
                                                               vector_carry.data(), 2 * W, vector_acc.data(), 2 * W);
      detail::f16_value_products_of<detail::PortableF16Lanes<W>, W, 2>(std::make_integer_sequence<Index, 4>{}, run, p.data() + first,
                                                                      tokens, values.data() + first * W, tokens * W, detail::PanelPrefetch{},
                                                                      portable_carry.data(), 2 * W, portable_acc.data(), 2 * W);
    }
    _mm_setcsr(before);
    CHECK(same(vector_out, portable_out));
    CHECK(same(vector_acc, portable_acc));
    CHECK(vector_carry == portable_carry);
    CHECK(std::any_of(portable_out.begin(), portable_out.end(), [](float x) { return std::isnan(x); }));  // (the edges were reached)
  }
}
#endif

TEMPLATE_TEST_CASE("the stored arithmetic's query rows to int8: ties to even, the sum, and rows without a scale", "[arithmetic]", float,
                   double) {
  // max |x| = 127: the scale is 1, so each entry's integer is its own rounding (worked by hand)
  const std::vector<TestType> row = {127, TestType(2.5), TestType(-2.5), TestType(3.5), TestType(-0.5), TestType(0.5), TestType(1.5),
                                     -127, TestType(126.5), TestType(-0.0)};
  const std::vector<int> expected = {127, 2, -2, 4, 0, 0, 2, -127, 126, 0};
  std::vector<std::int8_t> out(row.size(), 99);
  float scale = -1;
  std::int32_t sum = -1;
  detail::quantize_query_row(row.data(), Index(row.size()), out.data(), scale, sum);
  CHECK(scale == 1.0f);
  CHECK(std::vector<int>(out.begin(), out.end()) == expected);
  CHECK(sum == 132);
  // all zeros, or so small that max / 127 underflows to 0: scale 0 and zeros (every score 0)
  const TestType tiny = static_cast<TestType>(std::numeric_limits<float>::denorm_min());
  for (const std::vector<TestType>& none : {std::vector<TestType>{0, TestType(-0.0), 0, 0}, std::vector<TestType>{tiny, 0, -tiny, 0}}) {
    std::fill(out.begin(), out.end(), std::int8_t(99));
    detail::quantize_query_row(none.data(), Index(none.size()), out.data(), scale, sum);
    CHECK(scale == 0.0f);
    CHECK(sum == 0);
    CHECK(std::all_of(out.begin(), out.begin() + 4, [](std::int8_t q) { return q == 0; }));
  }
  // not finite (inf, NaN, or finite in double but not in float): scale NaN, which makes the row's scores NaN
  for (const TestType bad : {std::numeric_limits<TestType>::infinity(), std::numeric_limits<TestType>::quiet_NaN(), TestType(1e39)}) {
    if (std::is_same_v<TestType, float> && bad == TestType(1e39)) continue;  // (inf already)
    const std::vector<TestType> not_finite = {1, bad, -1, 0};
    detail::quantize_query_row(not_finite.data(), Index(not_finite.size()), out.data(), scale, sum);
    CHECK(std::isnan(scale));
    CHECK(sum == 0);
  }
}

TEST_CASE("the stored arithmetic's exp against std::exp in double: within 3.5 ulp on [-87, 0], -87 below it, NaN kept",
          "[arithmetic]") {
  using Packet = detail::TileShape<float>::Packet;
  constexpr Index P = detail::TileShape<float>::packet;
  const auto exp_of = [](const std::vector<float>& x) {  // by packets (x.size() a multiple of P)
    std::vector<float> y(x.size());
    for (std::size_t i = 0; i < x.size(); i += P)
      Eigen::internal::pstoreu(y.data() + i, detail::exp_nonpositive(Eigen::internal::ploadu<Packet>(x.data() + i)));
    return y;
  };
  std::vector<float> x;  // every 2^-14 of [-87, 0], the ends of the reduction's range, 0 and -0
  for (Index i = 0; i <= 87 * 16384; ++i) x.push_back(-float(i) / 16384.0f);
  for (const float edge : {-0.34657359f, -0.34657360f, -0.0f, -1e-30f, -86.99999f}) x.push_back(edge);
  while (x.size() % P != 0) x.push_back(0.0f);
  const std::vector<float> y = exp_of(x);
  double worst = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double e = std::exp(double(x[i]));
    const double ulp = double(std::nextafter(float(e), 2.0f)) - double(float(e));
    worst = std::max(worst, std::abs(double(y[i]) - e) / ulp);
  }
  CHECK(worst <= 3.5);  // (measured 2.8 with FMA, 3.06 without; Eigen's pexp 1.3, 4.5 with AVX-512)
  CHECK(exp_of(std::vector<float>(P, 0.0f))[0] == 1.0f);
  // below -87 (e^x below float's smallest normal number) as -87; NaN stays NaN
  std::vector<float> edges(static_cast<std::size_t>(std::max<Index>(P, 8)), -87.0f);  // (P is 4 with SSE)
  edges[1] = -88.0f, edges[2] = -1e30f, edges[3] = -std::numeric_limits<float>::infinity(), edges[4] = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> at_edges = exp_of(edges);
  CHECK(at_edges[0] == Approx(std::exp(-87.0)).epsilon(1e-6));
  for (Index i = 1; i < 4; ++i) CHECK(at_edges[static_cast<std::size_t>(i)] == at_edges[0]);
  CHECK(std::isnan(at_edges[4]));
}

TEST_CASE("int8, BF16 and F16 under the stored arithmetic at Llama 3 8B's heads: a decoding step over 2048 random tokens "
          "against float64, beside the widened arithmetic", "[storage][kernel][arithmetic]") {
  const KvStorage storage = GENERATE(KvStorage::int8, KvStorage::bf16, KvStorage::f16);
  CAPTURE(storage_name(storage));
  std::mt19937 rng(11);
#ifdef HEADWISE_TESTS_UNDER_SANITIZERS
  const Index n = 2048, G = 2, H = 8, d = 128, group = H / G;  // (two of the eight key/value heads: what ASan sees of them)
#else
  const Index n = 2048, G = 8, H = 32, d = 128, group = H / G;
#endif
  const Matrix<float> k = headwise_test::random_matrix<float>(n, G * d, rng), v = headwise_test::random_matrix<float>(n, G * d, rng);
  const Matrix<float> q = headwise_test::random_matrix<float>(1, H * d, rng) * 3.0f;  // (scores of spread ~3: peaked rows)
  const double divisor = std::sqrt(double(d));
  // float64 on the unrounded numbers: each head's weights and Z.
  Matrix<double> z64(1, H * d);
  std::vector<Eigen::RowVectorXd> p64(static_cast<std::size_t>(H));
  for (Index h = 0; h < H; ++h) {
    const Index g = h / group;
    const Eigen::RowVectorXd s = (k.middleCols(g * d, d).cast<double>() * q.block(0, h * d, 1, d).cast<double>().transpose()).transpose() / divisor;
    const Eigen::RowVectorXd e = (s.array() - s.maxCoeff()).exp();
    p64[static_cast<std::size_t>(h)] = e / e.sum();
    z64.middleCols(h * d, d) = p64[static_cast<std::size_t>(h)] * v.middleCols(g * d, d).cast<double>();
  }
  double errors[2] = {0, 0};
  for (const KvArithmetic a : {KvArithmetic::widened, KvArithmetic::stored}) {
    PackedKeysValues<float> store(n, G, d, d, {ValueStorage::own, storage, a});
    store.append(k, v, 2);
    AttentionOptions options;
    options.threads = 2;
    AttentionCall call;
    call.heads = {H, G}, call.options = &options;
    const Matrix<float> z = attend<float>(q, store, call).z;
    errors[static_cast<int>(a)] = (z.cast<double>() - z64).cwiseAbs().maxCoeff() / z64.cwiseAbs().maxCoeff();
  }
  double kl = 0, kl_widened = 0;  // the worst head's KL of the weights, stored and widened (stored keys, float queries)
  for (Index g = 0; g < G; ++g) {
    const RoundedKeys k_g = rounded_keys(storage, k.middleCols(g * d, d));
    const Eigen::MatrixXd widened = k_g.widened();
    for (Index h = g * group; h < (g + 1) * group; ++h) {
      kl = std::max(kl, mean_kl(p64[static_cast<std::size_t>(h)], arithmetic_weights(storage, q.block(0, h * d, 1, d), k_g, divisor)));
      const Eigen::RowVectorXd s = (widened * q.block(0, h * d, 1, d).cast<double>().transpose()).transpose() / divisor;
      const Eigen::RowVectorXd e = (s.array() - s.maxCoeff()).exp();
      kl_widened = std::max(kl_widened, mean_kl(p64[static_cast<std::size_t>(h)], e / e.sum()));
    }
  }
  CAPTURE(errors[0], errors[1], kl, kl_widened);
  if (storage == KvStorage::int8) {
    CHECK(errors[0] < 3e-2);  // measured 2.2e-2 (widened) and 2.5e-2 (stored; 2.9e-2 with the 2048-key tiles of AVX-512) of the largest output
    CHECK(errors[1] < 4e-2);
    CHECK(kl < 1.5e-3);        // measured 7.4e-4
    CHECK(kl_widened < 1e-3);  // measured 4.0e-4
  } else if (storage == KvStorage::bf16) {
    CHECK(errors[0] < 7e-3);   // measured 3.5e-3 (widened) and 6.1e-3 (stored)
    CHECK(errors[1] < 1.2e-2);
    CHECK(kl < 1e-4);          // measured 4.2e-5
    CHECK(kl_widened < 5e-5);  // measured 2.3e-5
  } else {
    CHECK(errors[0] < 1.5e-3);  // measured 7.0e-4 (widened) and 3.6e-3 (stored: the scores' F16 chains)
    CHECK(errors[1] < 7e-3);
    CHECK(kl < 5e-5);           // measured 1.7e-5
    CHECK(kl_widened < 1e-6);   // measured 3.9e-7
  }
  CHECK(kl > 1e-10);
}
