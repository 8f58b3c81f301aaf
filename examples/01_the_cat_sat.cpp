// Example 1: the worked example "the cat sat", one head, every step printed as the text prints it.
//
// d_model = 4, one head with d_head = 2. Rows are tokens; weights map row vectors (Q = X W_Q).
#include <cmath>
#include <cstdio>
#include <limits>

#include <headwise/headwise.hpp>

using headwise::Index;
using headwise::Matrix;

namespace {

const char* const tokens[] = {"the", "cat", "sat"};

void print_matrix(const char* title, const Matrix<double>& m, const char* format = "%8.5f") {
  std::printf("%s\n", title);
  for (Index i = 0; i < m.rows(); ++i) {
    std::printf("  %-4s [", tokens[i]);
    for (Index j = 0; j < m.cols(); ++j) {
      const double value = m(i, j);
      if (value == -std::numeric_limits<double>::infinity()) std::printf(" %8s", "-inf");
      else { std::printf(" "); std::printf(format, value); }
    }
    std::printf(" ]\n");
  }
  std::printf("\n");
}

}  // namespace

int main() {
  Matrix<double> x(3, 4), w_q(4, 2), w_k(4, 2), w_v(4, 2);
  x << 1, 0, 1, 0,  // the
      0, 1, 1, 0,   // cat
      1, 1, 0, 1;   // sat
  w_q << 1, 0, 0, 1, 0, 1, 1, 0;
  w_k << 1, 0, 1, 1, 0, 1, 0, 0;
  w_v << 0, 1, 1, 0, 1, 1, 0, -1;

  const headwise::AttentionHead<double> head{headwise::Linear<double>(w_q), headwise::Linear<double>(w_k),
                                             headwise::Linear<double>(w_v)};
  const headwise::HeadTrace<double> t = head.trace(x);  // every intermediate, causal, divisor sqrt(2)

  std::printf("the cat sat: one causal attention head, step by step (headwise %s)\n\n", HEADWISE_VERSION_STRING);
  print_matrix("X (one row per token)", x, "%2.0f");
  print_matrix("step 1. Q = X W_Q", t.q, "%2.0f");
  print_matrix("        K = X W_K", t.k, "%2.0f");
  print_matrix("        V = X W_V", t.v, "%2.0f");
  std::printf("        q_3 = (1,1,0,1) W_Q = (%g, %g)\n\n", t.q(2, 0), t.q(2, 1));
  print_matrix("step 2. S = Q K^T (every query against every key)", t.scores, "%2.0f");
  std::printf("        S_32 = q_3 . k_2 = (2,1).(1,2) = %g\n\n", t.scores(2, 1));
  std::printf("step 3. divide by sqrt(d_head) = sqrt(2) = %.3f\n", t.divisor);
  print_matrix("step 4. S / sqrt(2), upper triangle masked (no looking ahead)", t.masked_scores);

  const auto row = t.scaled_scores.row(2);
  const double max = row.maxCoeff();
  std::printf("step 5. softmax of row 3 (sat):\n");
  std::printf("        scaled, masked row 3    (%.2f, %.2f, %.2f)\n", row(0), row(1), row(2));
  std::printf("        minus the row max %.2f  (%.2f, %.2f, %.2f)\n", max, row(0) - max, row(1) - max, row(2) - max);
  const double e0 = std::exp(row(0) - max), e1 = std::exp(row(1) - max), e2 = std::exp(row(2) - max);
  std::printf("        exp                     (%.3f, %.3f, %.3f)   sum %.3f\n", e0, e1, e2, e0 + e1 + e2);
  std::printf("        divided by the sum      (%.3f, %.3f, %.3f)\n\n", t.weights(2, 0), t.weights(2, 1), t.weights(2, 2));
  print_matrix("        A = softmax of every row (masked entries exactly 0)", t.weights);

  print_matrix("step 6. out = A V", t.z);
  std::printf("        out_3 = %.3f (1,2) + %.3f (2,1) + %.3f (1,0) = (%.3f, %.3f)\n", t.weights(2, 0),
              t.weights(2, 1), t.weights(2, 2), t.z(2, 0), t.z(2, 1));
  std::printf("        out_1 == v_1 bit for bit (the first token sees only itself): %s\n",
              t.z(0, 0) == t.v(0, 0) && t.z(0, 1) == t.v(0, 1) ? "yes" : "no");
  return 0;
}
