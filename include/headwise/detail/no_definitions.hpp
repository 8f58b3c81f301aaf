// Internal: what a reader's or the tokenizer's header includes at its end in place of its
// definitions where a library holds them (compiled mode: detail/compiled.hpp). Nothing.
#pragma once
