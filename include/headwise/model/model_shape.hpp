// A model built from a small config, with random weights, for training in the library (the toys
// of the interpretability literature: Elhage et al.'s attention-only transformers, Edelman et al.'s
// in-context Markov chains): a vocabulary, a width, layers of heads, a gated SiLU MLP or none
// (attention-only), RoPE or learned positions, RMSNorms before each half and the LM head, an LM
// head of its own or tied. Named as the Llama-style checkpoints are (model/parameters.hpp), so its
// parameters and gradients read as a Hugging Face model's would.
//
//   model::ModelShape shape;  shape.vocab = 8, shape.d_model = 16, shape.layers = 2;
//   auto model = model::make_model<float>(shape, /*seed=*/1);
#pragma once

#include <cmath>
#include <random>

#include "headwise/detail/errors.hpp"
#include "headwise/model/decoder_model.hpp"

namespace headwise::model {

struct ModelShape {
  Index vocab = 0, d_model = 0, layers = 1;
  Index heads = 1;
  Index kv_heads = 0;   ///< grouped-query attention's key/value heads; 0: heads
  Index d_head = 0;     ///< 0: d_model / heads
  Index d_mlp = 0;      ///< the gated SiLU MLP's width; 0: attention-only blocks
  Index context = 0;    ///< learned positions for this many tokens (GPT-2's kind); 0: RoPE
  double rope_theta = 10000.0;
  double eps = 1e-5;    ///< the RMSNorms'
  bool tied = false;    ///< the LM head is the embedding
  double init = 0.02;   ///< every weight matrix drawn from N(0, init²) (norms 1)
};

template <class Scalar>
DecoderModel<Scalar> make_model(const ModelShape& s, unsigned seed) {
  constexpr const char* where = "make_model";
  const Index d_head = s.d_head ? s.d_head : (s.heads > 0 ? s.d_model / s.heads : 0), kv = s.kv_heads ? s.kv_heads : s.heads;
  if (s.vocab < 1 || s.d_model < 1 || s.layers < 0 || s.heads < 1 || d_head < 1 || s.d_mlp < 0 || s.context < 0 || !(s.init > 0.0) ||
      !(s.eps > 0.0) || kv < 1 || s.heads % kv != 0)
    detail::invalid(where, "vocab ", s.vocab, ", d_model ", s.d_model, ", layers ", s.layers, ", heads ", s.heads, " (", kv, " key/value), d_head ", d_head,
                    ", d_mlp ", s.d_mlp, ", context ", s.context, ", init ", s.init, ", eps ", s.eps,
                    ": sizes must be >= 1 (layers, d_mlp, context >= 0; key/value heads dividing heads), init and eps > 0");
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, s.init);
  const auto draw = [&](Index rows, Index cols) { return Matrix<Scalar>(Matrix<double>::NullaryExpr(rows, cols, [&] { return normal(rng); }).template cast<Scalar>()); };
  const WeightType type = std::is_same_v<Scalar, double> ? WeightType::f64 : WeightType::f32;
  const auto norm = [&] {
    Norm<Scalar> n;
    n.kind = Norm<Scalar>::Kind::rms, n.eps = s.eps, n.weight = RowVector<Scalar>::Ones(s.d_model);
    return n;
  };
  DecoderModel<Scalar> m;
  m.embedding = StoredMatrix::from(draw(s.vocab, s.d_model), type);
  if (s.context) m.positions = draw(s.context, s.d_model);
  for (Index l = 0; l < s.layers; ++l) {
    MultiHeadWeights<Scalar> w;
    w.w_q = draw(s.d_model, s.heads * d_head), w.w_k = draw(s.d_model, kv * d_head), w.w_v = draw(s.d_model, kv * d_head);
    w.w_o = draw(s.heads * d_head, s.d_model);
    LayerConfig config;
    if (!s.context) {
      RopeConfig rope;
      rope.d_head = d_head, rope.theta = s.rope_theta;
      config.rope = rope;
    }
    Block<Scalar> b{norm(), MultiHeadAttention<Scalar>(s.heads, std::move(w), config), std::nullopt, std::nullopt, {}, std::nullopt, std::nullopt, std::nullopt};
    if (s.d_mlp) {
      b.mlp_norm = norm();
      b.mlp.w_gate = StoredMatrix::from(draw(s.d_mlp, s.d_model), type), b.mlp.w_up = StoredMatrix::from(draw(s.d_mlp, s.d_model), type);
      b.mlp.w_down = StoredMatrix::from(draw(s.d_model, s.d_mlp), type);
    }
    m.blocks.push_back(std::move(b));
  }
  m.final_norm = norm();
  m.unembedding = s.tied ? m.embedding : StoredMatrix::from(draw(s.vocab, s.d_model), type);
  return m;
}

}  // namespace headwise::model
