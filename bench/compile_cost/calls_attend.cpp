// Compile cost: a file that calls attend() (the fused kernel) once.
#include <headwise/attend.hpp>
#include <cstdio>
int main() {
  headwise::Matrix<float> q = headwise::Matrix<float>::Random(16, 64), k = q, v = q;
  headwise::AttentionCall call;
  call.heads = {4, 4};
  const auto r = headwise::attend<float>(q, k, v, call);
  std::printf("%f\n", double(r.z.sum()));
}
