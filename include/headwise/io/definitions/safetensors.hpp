// The definitions of headwise/io/safetensors.hpp, included at its end where the
// readers' definitions are compiled: header-only, or in src/io.cpp (detail/compiled.hpp).
#pragma once

#include "headwise/io/safetensors.hpp"

#include <nlohmann/json.hpp>

namespace headwise::io {

HEADWISE_IO_INLINE void SafetensorsFile::parse() {
  if (bytes_.size < 8)
    fail("file is " + std::to_string(bytes_.size) +
         " bytes, too short for the 8-byte header length");
  if (!detail::host_is_little_endian()) fail("reading on a big-endian host is not supported");
  const std::uint64_t header_length = detail::load<std::uint64_t>(bytes_.data);
  if (header_length > max_header_length)
    fail("header length " + std::to_string(header_length) + " exceeds the limit of " +
         std::to_string(max_header_length) + " bytes");
  if (header_length > bytes_.size - 8)
    fail("header length " + std::to_string(header_length) + " runs past the end of the file (" +
         std::to_string(bytes_.size) + " bytes)");
  data_begin_ = 8 + header_length;
  const std::uint64_t data_size = bytes_.size - data_begin_;

  const auto* text = reinterpret_cast<const char*>(bytes_.data + 8);
  const nlohmann::json header =
      nlohmann::json::parse(text, text + header_length, /*callback=*/nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded()) fail("header is not valid JSON");
  if (!header.is_object()) fail("header is JSON but not an object");

  for (const auto& item : header.items()) {
    if (item.key() == "__metadata__") {
      read_metadata(item.value());
      continue;
    }
    TensorInfo t = read_entry(item.key(), item.value());
    tensors_.emplace(t.name, std::move(t));
  }
  check_tiling(data_size);
}

HEADWISE_IO_INLINE void SafetensorsFile::check_tiling(std::uint64_t data_size) const {
  std::vector<const TensorInfo*> by_offset;
  for (const auto& entry : tensors_) by_offset.push_back(&entry.second);
  std::sort(by_offset.begin(), by_offset.end(), [](const TensorInfo* a, const TensorInfo* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });

  // The byte ranges must tile the data section: each starts where the previous one ended.
  std::uint64_t covered = 0;
  const TensorInfo* previous = nullptr;
  for (const TensorInfo* t : by_offset) {
    const std::string range = "[" + std::to_string(t->begin) + ", " + std::to_string(t->end) + ")";
    if (t->end > data_size)
      fail("tensor \"" + t->name + "\" has data_offsets " + range +
           " past the end of the data section (" + std::to_string(data_size) + " bytes)");
    if (t->begin < covered)
      fail("tensors \"" + previous->name + "\" and \"" + t->name + "\" overlap: \"" + t->name +
           "\" starts at byte " + std::to_string(t->begin) + ", before \"" + previous->name +
           "\" ends at byte " + std::to_string(covered));
    if (t->begin > covered)
      fail("bytes [" + std::to_string(covered) + ", " + std::to_string(t->begin) +
           ") before tensor \"" + t->name + "\" belong to no tensor (offsets must be contiguous)");
    const auto bytes = detail::checked_mul(t->elements, dtype_size(t->dtype));
    if (!bytes)
      fail("tensor \"" + t->name + "\" of shape " + detail::shape_string(t->shape) +
           " has a byte size that overflows 64 bits");
    if (*bytes != t->end - t->begin)
      fail("tensor \"" + t->name + "\" of shape " + detail::shape_string(t->shape) + " and dtype " +
           dtype_name(t->dtype) + " needs " + std::to_string(*bytes) + " bytes, but data_offsets " +
           range + " hold " + std::to_string(t->end - t->begin));
    covered = t->end;
    previous = t;
  }
  if (covered != data_size)
    fail("the data section has " + std::to_string(data_size) + " bytes but the tensors cover " +
         std::to_string(covered));
}

HEADWISE_IO_INLINE void SafetensorsFile::read_metadata(const nlohmann::json& value) {
  if (!value.is_object()) fail("__metadata__ is not an object");
  for (const auto& item : value.items()) {
    if (!item.value().is_string()) fail("__metadata__ entry \"" + item.key() + "\" is not a string");
    metadata_[item.key()] = item.value().get<std::string>();
  }
}

HEADWISE_IO_INLINE std::uint64_t SafetensorsFile::read_unsigned(const std::string& tensor, const char* field, const nlohmann::json& v) const {
  if (v.is_number_unsigned()) return v.get<std::uint64_t>();
  if (v.is_number_integer())
    fail("tensor \"" + tensor + "\" has a negative " + field + " (" + v.dump() + ")");
  fail("tensor \"" + tensor + "\" has a " + field + " that is not an integer (" + v.dump() + ")");
}

HEADWISE_IO_INLINE TensorInfo SafetensorsFile::read_entry(const std::string& name, const nlohmann::json& entry) const {
  if (!entry.is_object()) fail("entry \"" + name + "\" is not an object");
  TensorInfo t;
  t.name = name;
  const auto dtype = entry.find("dtype");
  if (dtype == entry.end() || !dtype->is_string()) fail("tensor \"" + name + "\" has no dtype string");
  const auto parsed = parse_dtype(dtype->get<std::string>());
  if (!parsed) fail("tensor \"" + name + "\" has unknown dtype \"" + dtype->get<std::string>() + "\"");
  t.dtype = *parsed;

  const auto shape = entry.find("shape");
  if (shape == entry.end() || !shape->is_array()) fail("tensor \"" + name + "\" has no shape array");
  t.elements = 1;
  bool overflow = false;
  for (const auto& dim : *shape) {
    t.shape.push_back(read_unsigned(name, "shape dimension", dim));
    const auto product = detail::checked_mul(t.elements, t.shape.back());
    overflow = overflow || !product;
    t.elements = product.value_or(0);
  }
  if (overflow)
    fail("tensor \"" + name + "\" has shape " + detail::shape_string(t.shape) +
         " whose element count overflows 64 bits");

  const auto offsets = entry.find("data_offsets");
  if (offsets == entry.end() || !offsets->is_array() || offsets->size() != 2)
    fail("tensor \"" + name + "\" has no data_offsets pair [begin, end]");
  t.begin = read_unsigned(name, "data_offsets begin", (*offsets)[0]);
  t.end = read_unsigned(name, "data_offsets end", (*offsets)[1]);
  if (t.end < t.begin)
    fail("tensor \"" + name + "\" has data_offsets [" + std::to_string(t.begin) + ", " +
         std::to_string(t.end) + ") that end before they begin");
  return t;
}


}  // namespace headwise::io
