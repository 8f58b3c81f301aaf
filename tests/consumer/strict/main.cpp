// Every public header, its templates instantiated for float and double by the calls below (a small
// random layer; given a folder, a checkpoint loaded from it). Checked by the compiler's front end with
// -Werror (strict/CMakeLists.txt): the instantiations are what it checks; the program is not run.
#include <cstdio>
#include <string>
#include <type_traits>
#include <vector>

#include <headwise/headwise.hpp>
#include <headwise/interpret.hpp>
#include <headwise/io/gpt2.hpp>
#include <headwise/io/decoder_model.hpp>
#include <headwise/io/latent_attention.hpp>
#include <headwise/io/llama.hpp>
#include <headwise/io/tokenizer.hpp>
#include <headwise/model/weight_arithmetic.hpp>
#include <headwise/text/tokenizer.hpp>

namespace {

template <class Scalar>
double exercise() {
  using headwise::Matrix;
  headwise::MultiHeadWeights<Scalar> w;
  w.w_q = w.w_k = w.w_v = w.w_o = Matrix<Scalar>::Random(8, 8) * Scalar(0.5);
  headwise::LayerConfig config;
  config.rope = headwise::RopeConfig{};
  const headwise::MultiHeadAttention<Scalar> layer(2, w, config);
  const Matrix<Scalar> x = Matrix<Scalar>::Random(5, 8);
  const Matrix<Scalar> y = layer.forward(x);
  auto cache = layer.make_cache(8);
  const Matrix<Scalar> decoded = layer.forward_incremental(x, cache);
  const auto trace = layer.trace(x);
  const auto fused = headwise::layer_backward(layer, x, y);
  const auto stepwise = headwise::backward_step_by_step(layer, x, y);
  const auto run = headwise::interpret::inspect(layer, x);
  const Matrix<Scalar> pattern = run.pattern(1);
  const std::vector<std::string> labels{"a", "b", "c", "a", "b"};
  const std::string svg = headwise::interpret::svg_heatmap(pattern, labels, labels, "head 0.1");
  headwise::AttentionCall two_heads;
  two_heads.heads = {2, 2};
  auto shard = headwise::partial_attention<Scalar>(x, x, x, two_heads);
  headwise::merge_into(shard, shard);
  // Keys and values stored narrow (float32 layers): BF16, F16, int8, through the forward and a cache.
  double narrow = 0;
  if constexpr (std::is_same_v<Scalar, float>)
    for (const headwise::KvStorage storage : {headwise::KvStorage::bf16, headwise::KvStorage::f16, headwise::KvStorage::int8}) {
      headwise::LayerConfig narrow_config = config;
      narrow_config.kv_storage = storage;
      const headwise::MultiHeadAttention<Scalar> narrow_layer(2, w, narrow_config);
      auto narrow_cache = narrow_layer.make_cache(8);
      narrow += double(narrow_layer.forward(x)(0, 0) + narrow_layer.forward_incremental(x, narrow_cache)(0, 0) +
                       narrow_layer.forward_step_by_step(x)(0, 0));
    }
  // Multi-head latent attention: 2 heads, kv_lora_rank 4, qk_nope 2, qk_rope 2, v_head 2.
  headwise::LatentAttentionWeights<Scalar> lw;
  lw.w_q_a = Matrix<Scalar>::Random(8, 4), lw.q_a_norm = headwise::RowVector<Scalar>::Ones(4);
  lw.w_q_b = Matrix<Scalar>::Random(4, 8), lw.w_kv_a = Matrix<Scalar>::Random(8, 6);
  lw.kv_a_norm = headwise::RowVector<Scalar>::Ones(4), lw.w_kv_b = Matrix<Scalar>::Random(4, 8), lw.w_o = Matrix<Scalar>::Random(4, 8);
  headwise::LatentAttentionConfig lc;
  lc.n_heads = 2, lc.qk_nope_head_dim = 2, lc.qk_rope_head_dim = 2, lc.v_head_dim = 2;
  lc.rope.d_head = 2;
  const headwise::MultiHeadLatentAttention<Scalar> mla(lw, lc);
  auto latent_cache = mla.make_cache(5);
  const Matrix<Scalar> latent_out = mla.forward(x) - mla.forward_incremental(x, latent_cache) + mla.forward_step_by_step(x);
  const auto latent_run = headwise::interpret::inspect(mla, x);
  const Matrix<Scalar> latent_norms = headwise::interpret::contribution_norms(mla, latent_run.attention.z);
  return narrow + double((y - decoded).cwiseAbs().maxCoeff() + trace.output(0, 0) + fused.dx(0, 0) + stepwise.dx(0, 0) +
                shard.z(0, 0) + latent_out(0, 0) + mla.trace(x).output(0, 0) + latent_run.pattern(1)(2, 1) + latent_norms(0, 0)) +
         headwise::interpret::induction_score(pattern, {1, 2, 3, 1, 2}) + double(svg.size()) +
         double(headwise::interpret::contribution_norms(layer, run.attention.z)(0, 0));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1) {
    const std::string folder = argv[1];
    const auto llama = headwise::io::load_llama_attention_layers<float>(folder);
    const auto gpt2 = headwise::io::load_gpt2_attention_layers<double>(folder);
    const auto latent = headwise::io::load_latent_attention_layers<double>(folder);
    auto model = headwise::io::load_decoder_model<float>(folder);
    const headwise::Index stored = headwise::model::set_weight_arithmetic(model, headwise::WeightType::mxfp4, headwise::WeightArithmetic::stored);
    const auto run = model.run({0, 1});
    const auto next = model.generate({0, 1}, 2);
    const auto scores = headwise::interpret::score_model_heads(model, {0, 1, 0, 1});
    const std::string page = headwise::interpret::head_score_page(scores, "strict");
    return static_cast<int>(llama.size() + gpt2.size() + latent.size() + next.size() + page.size() +
                            static_cast<std::size_t>(run.logits.rows() + stored));
  }
  // A three-token BPE: "ab" merges to one token and decodes back.
  const auto bpe = headwise::text::Tokenizer::from_tokenizer_json_text(
      R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]},
          "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true}})", "strict");
  if (bpe.encode("ab") != std::vector<headwise::Index>{2} || bpe.decode({2}) != "ab") return 1;
  const double sum = exercise<float>() + exercise<double>();
  std::printf("strict consumer: %s\n", sum == sum ? "ran" : "NaN");
  return sum == sum ? 0 : 1;
}
