// Llama-family checkpoints (Hugging Face layout) against PyTorch's eager attention: Llama with
// grouped-query heads (float32, BF16 and sharded storage), Qwen2 with q/k/v biases, Mistral with a
// sliding window. Both paths, both scalars, decoding through the cache, and the study tools.
#include <random>
#include <string>

#include "headwise/interpret.hpp"
#include "headwise/io/llama.hpp"
#include "headwise/multi_head_attention.hpp"
#include "support/catch.hpp"
#include "support/fixtures.hpp"
#include "support/layer_checks.hpp"
#include "support/matchers.hpp"

using namespace headwise;
using headwise_test::IsExactly;
using headwise_test::IsNear;
using headwise_test::tolerance;

namespace {
/// Every check of one model folder; `reference` names the folder that holds its reference.
template <class Scalar>
void check_model(const std::string& folder, const std::string& reference) {
  headwise_test::check_layers<Scalar>(folder, reference + "/attention-reference.safetensors");
}
}  // namespace

TEMPLATE_TEST_CASE("Llama: grouped-query heads and RoPE, as PyTorch computes them", "[llama][fixture]", float, double) {
  check_model<TestType>("llama-tiny", "llama-tiny");
}

TEMPLATE_TEST_CASE("Llama stored as BF16 and Llama in two shards", "[llama][fixture]", float, double) {
  check_model<TestType>("llama-tiny-bf16", "llama-tiny-bf16");
  check_model<TestType>("llama-tiny-sharded", "llama-tiny");
  const io::Checkpoint sharded = io::Checkpoint::open(headwise_test::data_path("llama-tiny-sharded"));
  CHECK(sharded.file_count() == 2);
}

TEMPLATE_TEST_CASE("Qwen2 (q, k, v biases) and Mistral (sliding window 8)", "[llama][fixture]", float, double) {
  check_model<TestType>("qwen2-tiny", "qwen2-tiny");
  check_model<TestType>("mistral-tiny", "mistral-tiny");
  const io::LlamaConfig mistral = io::read_llama_config(headwise_test::data_path("mistral-tiny/config.json"));
  REQUIRE(mistral.sliding_window);
  CHECK(*mistral.sliding_window == 8);
  const io::LlamaConfig qwen2 = io::read_llama_config(headwise_test::data_path("qwen2-tiny/config.json"));
  CHECK_FALSE(qwen2.sliding_window);  // use_sliding_window is false
}

// Transformers v5 writes RoPE as rope_parameters (theta and scaling together) and no top-level
// rope_theta / rope_scaling: read as theta 10000 without scaling, the output was off by 55%.
TEMPLATE_TEST_CASE("Llama with a transformers v5 config (rope_parameters, llama3 scaling)", "[llama][fixture][v5]", float,
                   double) {
  const io::LlamaConfig config = io::read_llama_config(headwise_test::data_path("llama-v5-tiny/config.json"));
  CHECK(config.rope.theta == 500000.0);
  CHECK(config.rope.scaling.type == RopeScaling::Type::llama3);
  CHECK(config.rope.scaling.factor == 4.0);
  CHECK(config.rope.scaling.original_max_position == 64);
  const io::SafetensorsFile ref = headwise_test::load_fixture("llama-v5-tiny/attention-reference.safetensors");
  const RotaryEmbedding rope(config.rope);
  const Matrix<double> inv_freq = ref.matrix<double>("layers.0.attn.inv_freq.f64");  // the llama3 bands
  CHECK_THAT(Matrix<double>(rope.inv_freq().transpose()), IsNear(inv_freq, 1e-15));
  check_model<TestType>("llama-v5-tiny", "llama-v5-tiny");
}

TEST_CASE("v5 RoPE settings: what headwise does not read is refused by name", "[llama][errors][v5]") {
  const std::string base = R"({"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 1, )";
  CHECK_NOTHROW(io::parse_llama_config(base + R"("rope_parameters": {"rope_type": "default", "rope_theta": 5e5}})", "v5.json"));
  CHECK_THROWS_WITH(io::parse_llama_config(base + R"("rope_parameters": {"rope_type": "default"}})", "v5.json"),
                    Catch::Contains("v5.json: \"rope_parameters\" has no \"rope_theta\""));
  CHECK(io::parse_llama_config(base + R"("rope_parameters": {"rope_type": "yarn", "rope_theta": 1e4, "factor": 4, "truncate": false}})", "v5.json")
            .rope.scaling.truncate == false);  // gpt-oss's: the correction range kept fractional
  CHECK_THROWS_WITH(io::parse_llama_config(base + R"("rope_parameters": {"rope_type": "yarn", "rope_theta": 1e4, "factor": 4, "truncate": "no"}})", "v5.json"),
                    Catch::Contains("rope_parameters \"truncate\" = \"no\" is not true or false"));
  CHECK_NOTHROW(io::parse_llama_config(base + R"("rope_parameters": {"rope_type": "yarn", "rope_theta": 1e4, "factor": 4, "truncate": true}})", "v5.json"));
  CHECK_THROWS_WITH(io::parse_llama_config(base + R"("rope_scaling": {"rope_type": "linear", "factor": 2, "rope_theta": 5e5}})", "v4.json"),
                    Catch::Contains("rope_scaling has \"rope_theta\" = 500000.0, which headwise does not read"));
  CHECK_THROWS_WITH(io::parse_llama_config(base + R"("partial_rotary_factor": 0.5, "rope_parameters": {"rope_theta": 1e4, "partial_rotary_factor": 0.25}})", "v5.json"),
                    Catch::Contains("\"partial_rotary_factor\" = 0.5 disagrees with rope_parameters' 0.25"));
  CHECK_NOTHROW(io::parse_llama_config(base + R"("rope_parameters": {"rope_type": null, "type": "linear", "factor": 2, "rope_theta": 1e4}})", "v5.json"));
  CHECK_THROWS_WITH(io::parse_llama_config(base + R"("rope_parameters": {"rope_type": "longrope", "rope_theta": 1e4}})", "v5.json"),
                    Catch::Contains("rope_parameters \"short_factor\" must be a list of 8 numbers"));
  CHECK_THROWS_WITH(io::parse_llama_config(base + R"("rope_parameters": {"rope_type": "dynamic", "rope_theta": 1e4, "factor": 2}})", "v5.json"),
                    Catch::Contains("rope_parameters type \"dynamic\" is not one headwise knows"));
  CHECK_THROWS_WITH(io::parse_llama_config(base + R"("rope_parameters": {"full_attention": {"rope_theta": 1e4}}})", "v5.json"),
                    Catch::Contains("keyed by layer type (\"full_attention\"), which this model_type does not have"));
  CHECK_THROWS_WITH(io::parse_llama_config(base + R"("rope_theta": 1e4, "rope_parameters": {"rope_theta": 5e5}})", "v5.json"),
                    Catch::Contains("\"rope_theta\" = 10000.0 disagrees with rope_parameters' 500000.0"));
  CHECK_THROWS_WITH(io::parse_llama_config(base + R"("rope_scaling": {"rope_type": "linear", "factor": 2, "finetuned": true}})", "v4.json"),
                    Catch::Contains("rope_scaling has \"finetuned\" = true"));
  // layer_types, as v5 writes them: full and sliding layers; anything else by name.
  const std::string two = R"({"model_type": "qwen2", "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2, )";
  const io::LlamaConfig mixed = io::parse_llama_config(
      two + R"("use_sliding_window": true, "sliding_window": 8, "layer_types": ["full_attention", "sliding_attention"]})",
      "types.json");
  CHECK_FALSE(mixed.layer(0).window);
  REQUIRE(mixed.layer(1).window);
  CHECK(*mixed.layer(1).window == 8);
  CHECK_THROWS_WITH(mixed.layer(2), Catch::Contains("LlamaConfig::layer: layer 2 out of range [0, 2)"));
  // Qwen2 without use_sliding_window has no window (Hugging Face sets sliding_window to None).
  const io::LlamaConfig off = io::parse_llama_config(
      two + R"("sliding_window": 8, "layer_types": ["full_attention", "sliding_attention"]})", "types.json");
  CHECK_FALSE(off.layer(1).window);
  CHECK_THROWS_WITH(io::parse_llama_config(base + R"("layer_types": ["sliding_attention"]})", "types.json"),
                    Catch::Contains("layer_types[0] = \"sliding_attention\" is not a layer this model_type has"));
  CHECK_THROWS_WITH(io::parse_llama_config(base + R"("sliding_window": 8, "layer_types": ["full_attention"]})", "types.json"),
                    Catch::Contains("\"sliding_window\" is not a key of a llama config.json"));
  CHECK_THROWS_WITH(io::parse_llama_config(two + R"("layer_types": ["full_attention"]})", "types.json"),
                    Catch::Contains("\"layer_types\" must be a list of num_hidden_layers = 2 entries, got 1 entries"));
  CHECK_THROWS_WITH(io::parse_llama_config(two + R"("layer_types": ["full_attention", "linear_attention"]})", "types.json"),
                    Catch::Contains("layer_types[1] = \"linear_attention\" is not a layer this model_type has"));
  CHECK_THROWS_WITH(io::parse_llama_config(two + R"("layer_types": ["sliding_attention", "full_attention"]})", "types.json"),
                    Catch::Contains("sliding_attention layers but there is no \"sliding_window\""));
}

TEST_CASE("Llama-family configs: errors name the problem", "[llama][errors]") {
  const std::string base = R"({"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 1)";
  CHECK_NOTHROW(io::parse_llama_config(base + "}", "ok.json"));
  CHECK_THROWS_WITH(io::parse_llama_config(R"({"model_type": "bert", "hidden_size": 64})", "c.json"),
                    Catch::Contains("model_type \"bert\" is not one this loader reads"));
  CHECK_THROWS_WITH(io::parse_llama_config(base + R"(, "num_key_value_heads": 3})", "c.json"),
                    Catch::Contains("not divisible by num_key_value_heads = 3"));
  CHECK_THROWS_WITH(io::parse_llama_config(base + R"(, "rope_scaling": {"rope_type": "dynamic", "factor": 2}})", "c.json"),
                    Catch::Contains("rope_scaling type \"dynamic\""));
  CHECK_THROWS_WITH(io::parse_llama_config(base + R"(, "rope_theta": -1})", "c.json"), Catch::Contains("theta must be finite and > 1"));
  CHECK_THROWS_WITH(io::parse_llama_config(R"({"model_type": "llama", "hidden_size": 64, "num_attention_heads": 5, "num_hidden_layers": 1})", "c.json"),
                    Catch::Contains("not divisible by num_attention_heads = 5"));
  CHECK_THROWS_WITH(io::parse_llama_config("[1, 2]", "c.json"), Catch::Contains("not a JSON object"));
  // A config whose head counts do not match the tensors.
  const io::Checkpoint model = io::Checkpoint::open(headwise_test::data_path("llama-tiny"));
  io::LlamaConfig wrong = io::read_llama_config(headwise_test::data_path("llama-tiny/config.json"));
  wrong.n_kv_heads = 4;
  CHECK_THROWS_WITH(io::load_llama_attention<float>(model, wrong, 0), Catch::Contains("inconsistent with the config's head counts"));
  CHECK_THROWS_WITH(io::load_llama_attention<float>(model, wrong, 5), Catch::Contains("layer 5 is out of range [0, 2)"));
  io::LlamaConfig deeper = io::read_llama_config(headwise_test::data_path("llama-tiny/config.json"));
  deeper.n_layers = 3;  // the checkpoint has 2
  CHECK_THROWS_WITH(io::load_llama_attention<float>(model, deeper, 2),
                    Catch::Contains("missing tensor \"model.layers.2.self_attn.q_proj.weight\""));
  CHECK_THROWS_WITH(io::load_llama_attention_layers<float>(headwise_test::data_path("gpt2-tiny")),
                    Catch::Contains("model_type"));
}
