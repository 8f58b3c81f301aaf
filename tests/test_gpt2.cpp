// Loading GPT-2 attention layers from checkpoints: every layer against PyTorch, through both paths,
// the BF16 and F16 copies, and every error a loader can meet.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>

#include "headwise/io/gpt2.hpp"
#include "support/catch.hpp"
#include "support/fixtures.hpp"
#include "support/matchers.hpp"
#include "support/safetensors_writer.hpp"

using namespace headwise;
using headwise::io::SafetensorsError;
using headwise_test::IsNear;

namespace {

// Rounding a float to BF16 and to F16, round-to-nearest-even, written from the formats' definitions.
double round_to_bf16(float x) {
  std::uint32_t bits;
  std::memcpy(&bits, &x, 4);
  bits = (bits + 0x7fffu + ((bits >> 16) & 1u)) & 0xffff0000u;
  float y;
  std::memcpy(&y, &bits, 4);
  return y;
}
double round_to_f16(float x) {
  if (x == 0.0f) return 0.0;
  const int e = std::max(std::ilogb(x), -14);  // F16: 10 fraction bits, smallest normal 2^-14
  return std::nearbyint(std::ldexp(double(x), 10 - e)) * std::ldexp(1.0, e - 10);
}

std::string write_temp(const std::string& name, const std::string& text) {
  const std::string path = std::string(HEADWISE_TEST_TMP_DIR) + "/" + name;
  std::ofstream(path) << text;
  return path;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEMPLATE_TEST_CASE("every GPT-2 fixture layer reproduces PyTorch through both paths", "[gpt2][fixture]", float, double) {
  const double rel = sizeof(TestType) == 4 ? 1e-5 : 1e-10;
  for (const char* folder : {"gpt2-tiny", "gpt2-small-1layer"}) {
    const auto reference = headwise_test::load_fixture(std::string(folder) + "/attention-reference.safetensors");
    const auto config = io::read_gpt2_config(headwise_test::data_path(std::string(folder) + "/config.json"));
    const Index layers = std::string(folder) == "gpt2-tiny" ? 2 : 1;
    for (Index layer = 0; layer < layers; ++layer) {
      CAPTURE(folder, layer);
      const auto mha = io::load_gpt2_attention<TestType>(headwise_test::data_path(folder), layer);
      CHECK(mha.n_heads() == config.n_head);
      CHECK(mha.d_model() == config.n_embd);
      const std::string p = "h." + std::to_string(layer) + ".attn.";
      const Matrix<TestType> x = reference.matrix<TestType>(p + "input");
      const Matrix<double> expected = reference.matrix<double>(p + "output.f64");
      CHECK_THAT(headwise_test::as_double(mha.forward(x)), IsNear(expected, rel));
      CHECK_THAT(headwise_test::as_double(mha.forward_step_by_step(x)), IsNear(expected, rel));
      const auto trace = mha.trace(x);
      for (Index h = 0; h < mha.n_heads(); ++h) {
        CAPTURE(h);
        CHECK_THAT(headwise_test::as_double(trace.heads[h].weights),
                   IsNear(reference.slice<double>(p + "pattern.f64", h), rel));
      }
    }
  }
}

TEST_CASE("the BF16 and F16 checkpoints load to the F32 weights rounded to their format", "[gpt2][fixture]") {
  const auto f32 = io::load_gpt2_attention<double>(headwise_test::data_path("gpt2-tiny"), 1);
  for (const char* folder : {"gpt2-tiny-bf16", "gpt2-tiny-f16"}) {
    CAPTURE(folder);
    const bool bf16 = std::string(folder) == "gpt2-tiny-bf16";
    const auto low = io::load_gpt2_attention<double>(headwise_test::data_path(folder), 1);
    auto rounded = [&](const Matrix<double>& m) {
      Matrix<double> r(m.rows(), m.cols());
      for (Index i = 0; i < m.size(); ++i) {
        const float x = static_cast<float>(m.data()[i]);
        r.data()[i] = bf16 ? round_to_bf16(x) : round_to_f16(x);
      }
      return r;
    };
    CHECK_THAT(low.w_qkv(), headwise_test::IsExactly(rounded(f32.w_qkv())));
    CHECK_THAT(low.b_qkv(), headwise_test::IsExactly(rounded(f32.b_qkv())));
    CHECK_THAT(low.w_o(), headwise_test::IsExactly(rounded(f32.w_o())));
    CHECK_THAT(low.b_o(), headwise_test::IsExactly(rounded(f32.b_o())));
  }
}

TEST_CASE("GPT-2 loading errors name the problem", "[gpt2][errors]") {
  using Catch::Matchers::Contains;
  const std::string good = R"({"n_embd": 8, "n_head": 2, "n_layer": 1})";
  const io::Gpt2Config config = io::read_gpt2_config(write_temp("good.json", good));
  CHECK(config.n_embd == 8);
  CHECK(config.n_head == 2);
  CHECK(config.n_layer == 1);

  CHECK_THAT(error_of([] { io::read_gpt2_config(write_temp("no-head.json", R"({"n_embd": 8})")); }),
             Contains("no-head.json: no integer field \"n_head\""));
  CHECK_THAT(error_of([] { io::read_gpt2_config(write_temp("no-embd.json", R"({"n_head": 2})")); }),
             Contains("no-embd.json: no integer field \"n_embd\""));
  // (A missing size is refused, not defaulted: Hugging Face's 12 layers, or none, would load another model.)
  CHECK_THAT(error_of([] { io::read_gpt2_config(write_temp("no-layer.json", R"({"n_embd": 8, "n_head": 2})")); }),
             Contains("no-layer.json: no integer field \"n_layer\""));
  CHECK_THAT(error_of([] { io::read_gpt2_config(write_temp("bad.json", R"({"n_embd": 10, "n_head": 3, "n_layer": 1})")); }),
             Contains("n_embd = 10 is not divisible by n_head = 3"));
  CHECK_THAT(error_of([] { io::read_gpt2_config(write_temp("zero.json", R"({"n_embd": 8, "n_head": 0})")); }),
             Contains("\"n_head\" = 0 must be an integer in [1, 4294967296]"));
  CHECK_THAT(error_of([] { io::read_gpt2_config(write_temp("notjson.json", "n_embd = 8")); }),
             Contains("is not a JSON object"));
  CHECK_THAT(error_of([] { io::read_gpt2_config(std::string(HEADWISE_TEST_TMP_DIR) + "/missing.json"); }),
             Contains("cannot open"));

  using headwise_test::TensorSpec;
  std::map<std::string, TensorSpec> tensors = {{"h.0.attn.c_attn.weight", {{8, 24}}},
                                               {"h.0.attn.c_attn.bias", {{24}}},
                                               {"h.0.attn.c_proj.weight", {{8, 8}}},
                                               {"h.0.attn.c_proj.bias", {{8}}},
                                               {"h.0.attn.bias", {{1, 1, 4, 4}}},
                                               {"h.0.attn.masked_bias", {{}}}};
  const io::SafetensorsFile complete(headwise_test::write_safetensors(tensors), "complete");
  CHECK(io::load_gpt2_attention<float>(complete, config, 0).n_heads() == 2);
  CHECK_THAT(error_of([&] { io::load_gpt2_attention<float>(complete, config, 1); }),
             Contains("layer 1 is out of range [0, 1)"));
  CHECK_THAT(error_of([&] { io::load_gpt2_attention<float>(complete, config, -1); }),
             Contains("layer -1 is out of range"));

  auto missing = tensors;
  missing.erase("h.0.attn.c_proj.bias");
  const io::SafetensorsFile without_bias(headwise_test::write_safetensors(missing), "without-bias");
  CHECK_THAT(error_of([&] { io::load_gpt2_attention<float>(without_bias, config, 0); }),
             Contains("missing tensor \"h.0.attn.c_proj.bias\""));

  auto wrong = tensors;
  wrong["h.0.attn.c_attn.weight"] = TensorSpec{{8, 16}};
  const io::SafetensorsFile wrong_shape(headwise_test::write_safetensors(wrong), "wrong-shape");
  CHECK_THAT(error_of([&] { io::load_gpt2_attention<float>(wrong_shape, config, 0); }),
             Contains("tensor \"h.0.attn.c_attn.weight\" has shape [8, 16], expected [8, 24]"));
}

TEST_CASE("every layer at once equals the layers loaded one by one, and reproduces PyTorch", "[gpt2][fixture]") {
  const auto layers = io::load_gpt2_attention_layers<float>(headwise_test::data_path("gpt2-tiny"));
  REQUIRE(layers.size() == 2);
  const auto reference = headwise_test::load_fixture("gpt2-tiny/attention-reference.safetensors");
  for (Index layer = 0; layer < 2; ++layer) {
    CAPTURE(layer);
    const auto one = io::load_gpt2_attention<float>(headwise_test::data_path("gpt2-tiny"), layer);
    const auto& all = layers[static_cast<std::size_t>(layer)];
    CHECK_THAT(headwise_test::as_double(all.w_qkv()), headwise_test::IsExactly(one.w_qkv()));
    CHECK_THAT(headwise_test::as_double(all.w_o()), headwise_test::IsExactly(one.w_o()));
    const std::string p = "h." + std::to_string(layer) + ".attn.";
    CHECK_THAT(headwise_test::as_double(all.forward(reference.matrix<float>(p + "input"))),
               IsNear(reference.matrix<double>(p + "output.f64"), 1e-5));
  }
  const io::Gpt2Config no_layers{64, 4, 0};
  CHECK_THAT(error_of([&] {
               io::load_gpt2_attention_layers<float>(headwise_test::load_fixture("gpt2-tiny/model.safetensors"),
                                                     no_layers);
             }),
             Catch::Matchers::Contains("the config has n_layer = 0, expected an integer in [1, 4294967296]"));
}
