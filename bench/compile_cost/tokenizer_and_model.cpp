// Compile cost: a 20-line program that tokenizes a sentence and runs a whole model on it.
#include <cstdio>
#include <headwise/io/decoder_model.hpp>
#include <headwise/io/tokenizer.hpp>
int main(int argc, char** argv) {
  if (argc < 3) return 2;
  const auto tokenizer = headwise::io::load_tokenizer(argv[2]);
  const auto model = headwise::io::load_decoder_model<float>(argv[1]);
  const auto ids = tokenizer.encode("When Mary and John went to the store");
  const headwise::Matrix<float> logits = model.logits(ids);
  std::printf("%ld tokens, %ld logits\n", long(ids.size()), long(logits.cols()));
}
