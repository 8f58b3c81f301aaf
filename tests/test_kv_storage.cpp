// Keys and values stored in BF16, F16 and int8 (kv_storage.hpp): the kernel reads what is stored
// (bitwise the float32 store of the same numbers for BF16 and F16), a layer's forward and its
// decoding attend to the same stored numbers (bitwise equal), the step-by-step path to them too;
// against PyTorch's float64 the error and the KL divergence of each row's weights stay within each
// type's rounding; and what does not fit is refused by name.
#include <cmath>
#include <random>
#include <string>

#include "headwise/attention_backward.hpp"
#include "headwise/interpret.hpp"
#include "headwise/io/llama.hpp"
#include "support/catch.hpp"
#include "support/fixtures.hpp"
#include "support/layer_checks.hpp"
#include "support/matchers.hpp"
#include "support/random.hpp"

using namespace headwise;
using headwise_test::IsNear;
using headwise_test::mean_kl;
using headwise_test::weights_of;

namespace {
constexpr KvStorage narrow_types[] = {KvStorage::bf16, KvStorage::f16, KvStorage::int8};

}  // namespace

TEST_CASE("stored keys and values: the kernel reads BF16 and F16 as the float32 store of the same numbers, int8 to rounding",
          "[storage][kernel]") {
  std::mt19937 rng(3);
  const Index n = 150, G = 2, H = 4, d = 24;
  const Matrix<float> k = headwise_test::random_matrix<float>(n, G * d, rng), v = headwise_test::random_matrix<float>(n, G * d, rng);
  const Matrix<float> q = headwise_test::random_matrix<float>(n, H * d, rng);
  for (const KvStorage s : narrow_types) {
    CAPTURE(storage_name(s));
    PackedKeysValues<float> stored(n, G, d, d, {ValueStorage::own, s});
    for (Index t = 0; t < n; t += 37) stored.append(k.middleRows(t, std::min<Index>(37, n - t)), v.middleRows(t, std::min<Index>(37, n - t)));
    Matrix<float> k_stored, v_stored;  // what the store holds, widened
    detail::unpack(stored, k_stored, v_stored);
    const double bound = s == KvStorage::bf16 ? 1.0 / 256 : s == KvStorage::f16 ? 1.0 / 2048 : 1.0 / 127;  // half an ulp, or a step
    CHECK((k_stored - k).cwiseAbs().maxCoeff() <= bound * k.cwiseAbs().maxCoeff());
    PackedKeysValues<float> plain(n, G, d, d);
    plain.append(k_stored, v_stored);
    for (const int threads : {1, 2}) {
      AttentionOptions options;
      options.threads = threads;
      AttentionCall call;
      call.heads = {H, G}, call.options = &options, call.tiles.keys = 32, call.tiles.key_shard = 64;
      const Matrix<float> z = attend<float>(q, stored, call).z, z_plain = attend<float>(q, plain, call).z;
      // One query over three key shards: the split-key decoding jobs and their merges.
      const Matrix<float> step = attend<float>(q.bottomRows(1), stored, call).z, step_plain = attend<float>(q.bottomRows(1), plain, call).z;
      if (s == KvStorage::int8) {
        CHECK_THAT(headwise_test::as_double(z), IsNear(headwise_test::as_double(z_plain), 1e-5));
        CHECK_THAT(headwise_test::as_double(step), IsNear(headwise_test::as_double(step_plain), 1e-5));
      } else {
        CHECK_THAT(headwise_test::as_double(z), headwise_test::IsExactly(z_plain));
        CHECK_THAT(headwise_test::as_double(step), headwise_test::IsExactly(step_plain));
      }
      CHECK_THAT(headwise_test::as_double(step), headwise_test::IsExactly(Matrix<float>(z.bottomRows(1))));  // decoding = the forward's last row
    }
  }
}

TEST_CASE("a layer with narrow keys and values: decoding is bitwise its forward, the step-by-step path agrees, "
          "and PyTorch's float64 is met within each type's rounding", "[storage][fixture]") {
  const io::SafetensorsFile ref = headwise_test::load_fixture("llama-tiny/attention-reference.safetensors");
  const auto layers = io::load_llama_attention_layers<float>(headwise_test::data_path("llama-tiny"));
  const std::string p = "layers.1.attn.";
  const Matrix<float> x = ref.matrix<float>(p + "input");
  const Matrix<double> expected = ref.matrix<double>(p + "output.f64");
  for (const KvStorage s : narrow_types) {
    CAPTURE(storage_name(s));
    LayerConfig config = layers[1].config();
    config.kv_storage = s;
    const MultiHeadAttention<float> layer(layers[1].n_heads(), weights_of(layers[1]), config);
    AttentionOptions one;
    one.threads = 1;
    const Matrix<float> whole = layer.forward(x, one);
    KvCache<float> cache = layer.make_cache(x.rows());
    CHECK(cache.storage() == s);
    Matrix<float> decoded(x.rows(), x.cols());
    for (Index i0 = 0; i0 < x.rows(); i0 += 5) {
      const Index m = std::min<Index>(5, x.rows() - i0);
      decoded.middleRows(i0, m) = layer.forward_incremental(x.middleRows(i0, m), cache);
    }
    CHECK_THAT(headwise_test::as_double(decoded), headwise_test::IsExactly(whole));
    CHECK_THAT(headwise_test::as_double(layer.forward_step_by_step(x)), IsNear(headwise_test::as_double(whole), 1e-5));
    // Against float64: the output's error and each row's KL divergence, by type.
    const double error = (whole.cast<double>() - expected).cwiseAbs().maxCoeff() / expected.cwiseAbs().maxCoeff();
    const ForwardRecord<float> run = interpret::inspect(layer, x);
    double kl = 0;
    for (Index h = 0; h < layer.n_heads(); ++h) kl = std::max(kl, mean_kl(ref.slice<double>(p + "pattern.f64", h), run.pattern(h).cast<double>()));
    CAPTURE(error, kl);
    const double error_bound = s == KvStorage::f16 ? 2e-3 : 2e-2, kl_bound = s == KvStorage::f16 ? 1e-6 : 1e-4;
    CHECK(error < error_bound);
    CHECK(kl < kl_bound);
    CHECK(error > 1e-7);  // the storage did round (a float32 cache meets PyTorch to ~1e-7)
  }
}

TEST_CASE("narrow keys and values: what does not fit is refused by name", "[storage][errors]") {
  CHECK_THROWS_WITH(PackedKeysValues<double>(4, 1, 8, 8, {ValueStorage::own, KvStorage::bf16}),
                    Catch::Contains("keys and values in BF16 are for float32 layers"));
  CHECK_THROWS_WITH(PackedKeysValues<float>(4, 1, 8, 8, {ValueStorage::key_prefix, KvStorage::int8}),
                    Catch::Contains("values inside the keys are stored as computed, or in int8 under the stored arithmetic; not in int8 "
                                    "under the widened arithmetic"));
  PackedKeysValues<float> f16(4, 1, 2, 2, {ValueStorage::own, KvStorage::f16});
  Matrix<float> k(1, 2), v(1, 2);
  k << 1.0f, 1e5f;
  v << 1.0f, 2.0f;
  CHECK_THROWS_WITH(f16.append(k, v), Catch::Contains("k of the token at position 0 (head 0, component 1) is 100000, finite in float but not in F16"));
  CHECK(f16.size() == 0);
  const auto layers = io::load_llama_attention_layers<float>(headwise_test::data_path("llama-tiny"));
  LayerConfig config = layers[0].config();
  config.kv_storage = KvStorage::int8;
  const MultiHeadAttention<float> int8_layer(layers[0].n_heads(), weights_of(layers[0]), config);
  KvCache<float> float_cache = layers[0].make_cache(8);
  const Matrix<float> x = Matrix<float>::Random(2, layers[0].d_model());
  CHECK_THROWS_WITH(int8_layer.forward_incremental(x, float_cache), Catch::Contains("the cache stores keys and values as computed, this layer int8"));
  CHECK_THROWS_WITH(layer_backward(int8_layer, x, x), Catch::Contains("keys and values stored in a narrower type"));
}
