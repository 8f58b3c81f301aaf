// Where the tests find their reference fixtures (tests/data, copied from shared/fixtures).
#pragma once

#include <string>

#include "headwise/io/safetensors.hpp"

#ifndef HEADWISE_TEST_DATA_DIR
#error "HEADWISE_TEST_DATA_DIR must name the tests/data folder"
#endif

namespace headwise_test {

inline std::string data_path(const std::string& relative) {
  return std::string(HEADWISE_TEST_DATA_DIR) + "/" + relative;
}

inline headwise::io::SafetensorsFile load_fixture(const std::string& relative) {
  return headwise::io::SafetensorsFile::open(data_path(relative));
}

}  // namespace headwise_test
