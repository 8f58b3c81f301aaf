// headwise::compiled, where PCRE2 was found: the tokenizer, compiled once, here, with PCRE2's and
// nlohmann/json.hpp's headers; a file compiled against the library sees its declarations only.
// See include/headwise/detail/compiled.hpp.
#define HEADWISE_COMPILING_TEXT
#include "headwise/text/byte_level_bpe.hpp"
#include "headwise/text/tokenizer.hpp"
