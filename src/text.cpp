// headwise::compiled, where PCRE2 was found: the tokenizer, compiled once, here, with PCRE2's,
// utf8proc's and nlohmann/json.hpp's headers; a file compiled against the library sees its
// declarations only. See include/headwise/detail/compiled.hpp.
#define HEADWISE_COMPILING_TEXT
#include "headwise/io/tokenizer.hpp"
#include "headwise/text/tokenizer.hpp"
