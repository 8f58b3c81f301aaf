// Writes small safetensors files in memory (F32, raw bytes of any dtype, or any header as text), to
// test the readers and their error paths.
#pragma once

#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace headwise_test {

struct TensorSpec {
  std::vector<std::uint64_t> shape;
  float fill = 0.0f;
};

/// A file made of a header (JSON text, taken as it is) and data bytes.
inline std::vector<unsigned char> file_with_header(const std::string& header, const std::vector<unsigned char>& data = {}) {
  const std::uint64_t n = header.size();
  std::vector<unsigned char> bytes(8 + header.size() + data.size());
  std::memcpy(bytes.data(), &n, 8);
  std::memcpy(bytes.data() + 8, header.data(), header.size());
  if (!data.empty()) std::memcpy(bytes.data() + 8 + header.size(), data.data(), data.size());
  return bytes;
}

/// A tensor of given values (row-major).
struct TensorValues {
  std::vector<std::uint64_t> shape;
  std::vector<float> values;
};

/// F32 tensors, each of its values.
inline std::vector<unsigned char> write_safetensors_values(const std::map<std::string, TensorValues>& tensors) {
  nlohmann::json header = nlohmann::json::object();
  std::vector<unsigned char> data;
  for (const auto& [name, t] : tensors) {
    std::uint64_t count = 1;
    for (auto d : t.shape) count *= d;
    const std::uint64_t begin = data.size();
    data.resize(data.size() + count * 4);
    for (std::uint64_t i = 0; i < count; ++i) std::memcpy(data.data() + begin + i * 4, &t.values.at(i), 4);
    header[name] = {{"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {begin, data.size()}}};
  }
  return file_with_header(header.dump(), data);
}

/// A tensor of any dtype: its shape and its bytes (little-endian, row-major).
struct TensorBytes {
  std::string dtype;
  std::vector<std::uint64_t> shape;
  std::vector<unsigned char> bytes;
};

inline std::vector<unsigned char> write_safetensors_bytes(const std::map<std::string, TensorBytes>& tensors) {
  nlohmann::json header = nlohmann::json::object();
  std::vector<unsigned char> data;
  for (const auto& [name, t] : tensors) {
    const std::uint64_t begin = data.size();
    data.insert(data.end(), t.bytes.begin(), t.bytes.end());
    header[name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {begin, data.size()}}};
  }
  std::string text = header.dump();
  text.resize((text.size() + 7) / 8 * 8, ' ');  // the data 8-byte aligned, as safetensors' writers pad it
  return file_with_header(text, data);
}

/// F32 tensors, each filled with one value.
inline std::vector<unsigned char> write_safetensors(const std::map<std::string, TensorSpec>& tensors) {
  std::map<std::string, TensorValues> filled;
  for (const auto& [name, spec] : tensors) {
    std::uint64_t count = 1;
    for (auto d : spec.shape) count *= d;
    filled[name] = {spec.shape, std::vector<float>(count, spec.fill)};
  }
  return write_safetensors_values(filled);
}

}  // namespace headwise_test
