// Compile cost: one Eigen float matrix product, the baseline every other figure is a ratio to.
#include <Eigen/Dense>
#include <cstdio>
int main() {
  Eigen::MatrixXf a = Eigen::MatrixXf::Random(64, 64), b = Eigen::MatrixXf::Random(64, 64);
  Eigen::MatrixXf c = a * b;
  std::printf("%f\n", double(c.sum()));
}
