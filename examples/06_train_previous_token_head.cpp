// Example 6: one attention head, randomly initialised, trained from scratch by plain gradient
// descent until it is a previous-token head.
//
//   06_train_previous_token_head [folder for the SVG patterns] [steps, default 1000]
//
// Task: sequences of 12 random tokens from a vocabulary of 8; the input of token t at position i
// is [onehot(t) | onehot(i)] (d_model 20); the target output at position i is onehot of the token
// at i - 1 (nothing is asked of position 0). A head solves it by attending from each position to
// the one before (positions in Q and K) and copying that token (tokens in V and W_O). A batch of
// 32 sequences is one call, packed with cu_seqlens (no attention across sequences); the gradients
// come from the fused backward (layer_backward). Prints the loss falling and the mean weight on the
// previous token rising over 1000 steps; writes the pattern of one sequence before and after
// training as SVG (docs/training/ holds this output).
#include <cstdio>
#include <exception>
#include <random>
#include <string>
#include <vector>

#include <headwise/headwise.hpp>
#include <headwise/interpret.hpp>

using headwise::Index;
using Mat = headwise::Matrix<double>;

constexpr Index vocabulary = 8, length = 12, batch = 32, d_model = vocabulary + length, d_head = 16;

struct Batch {
  Mat x, target;
  std::vector<Index> cu_seqlens;
};

Batch random_batch(std::mt19937& rng) {
  std::uniform_int_distribution<Index> token(0, vocabulary - 1);
  Batch b{Mat::Zero(batch * length, d_model), Mat::Zero(batch * length, d_model), {0}};
  for (Index s = 0; s < batch; ++s) {
    Index previous = -1;
    for (Index i = 0; i < length; ++i) {
      const Index row = s * length + i, t = token(rng);
      b.x(row, t) = 1, b.x(row, vocabulary + i) = 1;
      if (previous >= 0) b.target(row, previous) = 1;
      previous = t;
    }
    b.cu_seqlens.push_back((s + 1) * length);
  }
  return b;
}

headwise::MultiHeadAttention<double> layer_of(const headwise::MultiHeadWeights<double>& w) {
  return headwise::MultiHeadAttention<double>(1, w);
}

/// Mean squared error over the positions that have a target, and its gradient dY.
double loss_and_gradient(const Mat& out, const Batch& b, Mat& dy) {
  dy = out - b.target;
  for (Index row = 0; row < out.rows(); row += length) dy.row(row).setZero();  // position 0: no target
  const double count = double(batch * (length - 1));
  const double loss = dy.squaredNorm() / count;
  dy *= 2.0 / count;
  return loss;
}

/// The mean weight each position (but the first) puts on the one before it.
double previous_token_score(const headwise::MultiHeadAttention<double>& layer, const Batch& b, const headwise::AttentionOptions& o) {
  const auto run = headwise::interpret::inspect(layer, b.x, o);
  double sum = 0;
  for (Index row = 0; row < b.x.rows(); ++row)
    if (row % length != 0) sum += run.attention.statistics.previous_token_mass(0, row);
  return sum / double(batch * (length - 1));
}

void write_pattern(const headwise::MultiHeadAttention<double>& layer, const Batch& b, const std::string& path,
                   const std::string& title) {
  const Mat first = b.x.topRows(length);  // one sequence on its own
  const Mat a = layer.trace(first).heads[0].weights;
  std::vector<std::string> labels;
  for (Index i = 0; i < length; ++i) {
    Index t = 0;
    first.row(i).head(vocabulary).maxCoeff(&t);
    labels.push_back("t" + std::to_string(t) + "@" + std::to_string(i));
  }
  headwise::interpret::write_file(path, headwise::interpret::svg_heatmap(a, labels, labels, title, 30));
}

int main(int argc, char** argv) try {
  const std::string folder = argc > 1 ? argv[1] : ".";
  const int steps = argc > 2 ? std::stoi(argv[2]) : 1000;
  std::mt19937 rng(2026);
  std::normal_distribution<double> normal(0.0, 0.3);
  const auto random = [&](Index rows, Index cols) {
    Mat m(rows, cols);
    for (Index i = 0; i < m.size(); ++i) m.data()[i] = normal(rng);
    return m;
  };
  headwise::MultiHeadWeights<double> w;
  w.w_q = random(d_model, d_head), w.w_k = random(d_model, d_head), w.w_v = random(d_model, d_head);
  w.w_o = random(d_head, d_model);
  const Batch probe = random_batch(rng);  // a fixed batch to report on
  headwise::AttentionOptions probe_options;
  probe_options.cu_seqlens = probe.cu_seqlens;
  write_pattern(layer_of(w), probe, folder + "/trained-head-before.svg", "before training");

  const double rate = 1.0;
  double loss = 0;
  for (int step = 0; step <= steps; ++step) {
    const Batch b = random_batch(rng);
    headwise::AttentionOptions o;
    o.cu_seqlens = b.cu_seqlens;
    const auto layer = layer_of(w);
    headwise::ForwardRecord<double> record;
    Mat dy;
    loss = loss_and_gradient(headwise::forward_for_backward(layer, b.x, record, o), b, dy);
    if (step % 200 == 0)
      std::printf("step %3d  loss %.4f  previous-token score %.3f\n", step, loss, previous_token_score(layer, probe, probe_options));
    const headwise::MultiHeadGradients<double> g = headwise::layer_backward(layer, b.x, dy, o, &record);
    w.w_q -= rate * g.dw_q, w.w_k -= rate * g.dw_k, w.w_v -= rate * g.dw_v, w.w_o -= rate * g.dw_o;
  }
  const auto trained = layer_of(w);
  write_pattern(trained, probe, folder + "/trained-head-after.svg", "after " + std::to_string(steps) + " steps");
  const double score = previous_token_score(trained, probe, probe_options);
  std::printf("final loss %.4f, previous-token score %.3f: %s\n", loss, score,
              loss < 0.05 && score > 0.9 ? "a previous-token head" : "not yet a previous-token head");
  std::printf("wrote trained-head-before.svg and trained-head-after.svg to %s\n", folder.c_str());
  return 0;
} catch (const std::exception& e) {  // a folder that does not exist, say: no "wrote" without the files
  std::fprintf(stderr, "%s\n", e.what());
  return 1;
}
