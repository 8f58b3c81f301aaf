// Reading safetensors: the fixtures' tensors, conversions from every float dtype, and every
// corrupt file refused with a message that names the problem.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <optional>

#include "headwise/io/safetensors.hpp"
#include "support/catch.hpp"
#include "support/fixtures.hpp"
#include "support/matchers.hpp"
#include "support/safetensors_writer.hpp"

using namespace headwise;
using headwise::io::SafetensorsError;
using headwise::io::SafetensorsFile;

namespace {

std::string error_of(const std::string& relative) {
  try {
    headwise_test::load_fixture(relative);
  } catch (const SafetensorsError& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST_CASE("safetensors: shapes, metadata and values of a real checkpoint", "[safetensors]") {
  const auto file = headwise_test::load_fixture("gpt2-tiny/model.safetensors");
  CHECK(file.metadata().at("format") == "pt");
  CHECK(file.contains("h.0.attn.c_attn.weight"));
  CHECK_FALSE(file.contains("h.9.attn.c_attn.weight"));
  const auto& info = file.info("h.0.attn.c_attn.weight");
  CHECK(info.dtype == io::Dtype::F32);
  CHECK(info.shape == std::vector<std::uint64_t>{64, 192});
  const Matrix<float> w = file.matrix<float>("h.0.attn.c_attn.weight");
  CHECK(w.rows() == 64);
  CHECK(w.cols() == 192);
  CHECK(file.row_vector<double>("h.0.attn.c_attn.bias").size() == 192);
  REQUIRE_THROWS_WITH(file.info("nope"), Catch::Matchers::Contains("no tensor named \"nope\""));
  REQUIRE_THROWS_WITH(file.row_vector<float>("wte.weight"),
                      Catch::Matchers::Contains("tensor \"wte.weight\" has shape [50, 64], expected 1 dimension"));
  REQUIRE_THROWS_WITH(file.slice<float>("wte.weight", 0),
                      Catch::Matchers::Contains("has shape [50, 64], expected 3 dimensions"));
}

TEST_CASE("safetensors: BF16 and F16 copies hold the F32 weights rounded to their format", "[safetensors]") {
  const auto f32 = headwise_test::load_fixture("gpt2-tiny/model.safetensors");
  for (const char* folder : {"gpt2-tiny-bf16", "gpt2-tiny-f16"}) {
    CAPTURE(folder);
    const auto low = headwise_test::load_fixture(std::string(folder) + "/model.safetensors");
    const bool bf16 = std::string(folder) == "gpt2-tiny-bf16";
    CHECK(low.info("h.0.attn.c_attn.weight").dtype == (bf16 ? io::Dtype::BF16 : io::Dtype::F16));
    const Matrix<double> reference = f32.matrix<double>("h.0.attn.c_attn.weight");
    const Matrix<double> rounded = low.matrix<double>("h.0.attn.c_attn.weight");
    // Half a unit in the last place: 2^-8 relative for BF16's 8-bit mantissa, 2^-11 for F16's.
    const double half_ulp = bf16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
    for (Index i = 0; i < reference.size(); ++i) {
      const double r = reference.data()[i];
      if (std::abs(r) < 1e-4) continue;  // F16 subnormals hold fewer digits
      CHECK_THAT(rounded.data()[i], WithinRel(r, half_ulp * 1.0001));
    }
  }
}

TEST_CASE("safetensors: F16 and BF16 special values and every integer dtype decode", "[safetensors]") {
  // F16: 1.0 = 0x3c00, -2 = 0xc000, smallest subnormal 0x0001 = 2^-24, inf 0x7c00.
  // BF16: 1.0 = 0x3f80, -0.5 = 0xbf00.
  const std::vector<unsigned char> data = {0x00, 0x3c, 0x00, 0xc0, 0x01, 0x00, 0x00, 0x7c,
                                           0x80, 0x3f, 0x00, 0xbf, 0xfe, 0xff, 0xff, 0xff};
  const auto bytes = headwise_test::file_with_header(
      R"({"h":{"dtype":"F16","shape":[4],"data_offsets":[0,8]},"b":{"dtype":"BF16","shape":[2],"data_offsets":[8,12]},)"
      R"("i":{"dtype":"I32","shape":[1],"data_offsets":[12,16]},"__metadata__":{"what":"test"}})",
      data);
  const SafetensorsFile file(bytes, "memory");
  const auto h = file.values<double>("h");
  CHECK(h[0] == 1.0);
  CHECK(h[1] == -2.0);
  CHECK(h[2] == std::ldexp(1.0, -24));
  CHECK(std::isinf(h[3]));
  const auto b = file.values<float>("b");
  CHECK(b[0] == 1.0f);
  CHECK(b[1] == -0.5f);
  CHECK(file.values<double>("i")[0] == -2.0);
  CHECK(file.metadata().at("what") == "test");
}

TEST_CASE("safetensors: every corrupt fixture is refused with a message naming the problem", "[safetensors][errors]") {
  using Catch::Matchers::Contains;
  CHECK_THAT(error_of("corrupt/empty.safetensors"), Contains("file is 0 bytes, too short for the 8-byte header length"));
  CHECK_THAT(error_of("corrupt/short-length.safetensors"), Contains("file is 3 bytes, too short"));
  CHECK_THAT(error_of("corrupt/header-past-end.safetensors"), Contains("header length 1099511627776 exceeds the limit"));
  CHECK_THAT(error_of("corrupt/header-not-json.safetensors"), Contains("header is not valid JSON"));
  CHECK_THAT(error_of("corrupt/truncated-data.safetensors"), Contains("past the end of the data section"));
  CHECK_THAT(error_of("corrupt/offset-past-end.safetensors"),
             Contains("tensor \"h.0.attn.c_attn.bias\" has data_offsets [0, 4195072) past the end of the data section"));
  CHECK_THAT(error_of("corrupt/shape-size-mismatch.safetensors"),
             Contains("tensor \"h.0.attn.c_attn.bias\" of shape [193] and dtype F32 needs 772 bytes, but data_offsets [0, 768) hold 768"));
  CHECK_THAT(error_of("corrupt/unknown-dtype.safetensors"), Contains("tensor \"h.0.attn.c_attn.bias\" has unknown dtype \"F31\""));
  CHECK_THAT(error_of("corrupt/overlapping-offsets.safetensors"), Contains("overlap"));
  CHECK_THAT(error_of("corrupt/shape-overflow.safetensors"), Contains("element count overflows 64 bits"));
  CHECK_THAT(error_of("corrupt/negative-offset.safetensors"),
             Contains("tensor \"h.0.attn.c_attn.bias\" has a negative data_offsets begin (-8)"));
  CHECK_THAT(error_of("does-not-exist.safetensors"), Contains("cannot open"));
}

TEST_CASE("safetensors: hand-made malformed headers", "[safetensors][errors]") {
  using Catch::Matchers::Contains;
  auto error = [](const std::string& header, std::size_t data_bytes) -> std::string {
    try {
      SafetensorsFile(headwise_test::file_with_header(header, std::vector<unsigned char>(data_bytes)), "m");
    } catch (const SafetensorsError& e) {
      return e.what();
    }
    return "no error";
  };
  CHECK_THAT(error("[1, 2]", 0), Contains("header is JSON but not an object"));
  CHECK_THAT(error(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8), Contains("bytes [0, 4) before tensor \"a\" belong to no tensor"));
  CHECK_THAT(error(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 8), Contains("the data section has 8 bytes but the tensors cover 4"));
  CHECK_THAT(error(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}})", 8), Contains("end before they begin"));
  CHECK_THAT(error(R"({"a":{"shape":[1],"data_offsets":[0,4]}})", 4), Contains("tensor \"a\" has no dtype string"));
  CHECK_THAT(error(R"({"a":{"dtype":"F32","data_offsets":[0,4]}})", 4), Contains("tensor \"a\" has no shape array"));
  CHECK_THAT(error(R"({"a":{"dtype":"F32","shape":[1]}})", 4), Contains("tensor \"a\" has no data_offsets pair"));
  CHECK_THAT(error(R"({"a":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", 4), Contains("shape dimension that is not an integer"));
  CHECK_THAT(error(R"({"__metadata__":{"k":1}})", 0), Contains("__metadata__ entry \"k\" is not a string"));
  CHECK_THAT(error(R"({"a":{"dtype":"F8_E4M3","shape":[4],"data_offsets":[0,4]}})", 4), Contains("no error"));
  CHECK(error("{}", 0) == "no error");
}

// The values of OCP's FP8 formats (the OCP 8-bit floating point specification's tables, and
// PyTorch's float8_e4m3fn / float8_e5m2): sign, subnormals, the largest finite, NaN and inf.
TEST_CASE("FP8 E4M3 (e4m3fn) and E5M2 convert exactly", "[safetensors][fp8]") {
  const auto read = [&](const char* dtype, const std::vector<unsigned char>& bytes) {
    const std::string header = std::string(R"({"a":{"dtype":")") + dtype + R"(","shape":[12],"data_offsets":[0,12]}})";
    return SafetensorsFile(headwise_test::file_with_header(header, bytes), "m").values<double>("a", headwise::io::Fp8::as_stored);
  };
  // Read as a plain tensor, an FP8 weight is refused: its values need its block scales.
  const SafetensorsFile plain(headwise_test::file_with_header(R"({"a":{"dtype":"F8_E4M3","shape":[4],"data_offsets":[0,4]}})",
                                                              std::vector<unsigned char>(4)), "m");
  CHECK_THROWS_WITH(plain.values<float>("a"), Catch::Matchers::Contains("is F8_E4M3: FP8 values are block-scaled weights"));
  CHECK_THROWS_WITH(plain.row_vector<float>("a"), Catch::Matchers::Contains("read with their weight_scale_inv by the attention loaders"));
  // E4M3: S.EEEE.MMM, bias 7.
  const std::vector<double> e4m3 = read("F8_E4M3", {0x00, 0x01, 0x07, 0x08, 0x38, 0x3c, 0x7e, 0x7f, 0x80, 0xb8, 0xfe, 0xff});
  const double e4m3_expected[] = {0.0, 0x1p-9, 7 * 0x1p-9, 0x1p-6, 1.0, 1.5, 448.0};
  for (std::size_t i = 0; i < 7; ++i) CHECK(e4m3[i] == e4m3_expected[i]);
  CHECK(std::isnan(e4m3[7]));  // S.1111.111: NaN (e4m3fn has no infinities)
  CHECK((e4m3[8] == 0.0 && std::signbit(e4m3[8])));
  CHECK(e4m3[9] == -1.0);
  CHECK(e4m3[10] == -448.0);
  CHECK(std::isnan(e4m3[11]));
  // E5M2: S.EEEEE.MM, bias 15, IEEE's infinities and NaNs.
  const std::vector<double> e5m2 = read("F8_E5M2", {0x00, 0x01, 0x07, 0x08, 0x38, 0x3c, 0x7b, 0x7c, 0x7d, 0xfc, 0xbc, 0x80});
  const double e5m2_expected[] = {0.0, 0x1p-16, 1.75 * 0x1p-14, 0x1p-13, 0.5, 1.0, 57344.0};
  for (std::size_t i = 0; i < 7; ++i) CHECK(e5m2[i] == e5m2_expected[i]);
  CHECK((std::isinf(e5m2[7]) && e5m2[7] > 0));
  CHECK(std::isnan(e5m2[8]));
  CHECK((std::isinf(e5m2[9]) && e5m2[9] < 0));
  CHECK(e5m2[10] == -1.0);
  CHECK((e5m2[11] == 0.0 && std::signbit(e5m2[11])));
}

TEST_CASE("an open file is mapped: copies share it and outlive the original", "[safetensors]") {
  std::optional<SafetensorsFile> original = headwise_test::load_fixture("gpt2-tiny/model.safetensors");
  const Matrix<float> before = original->matrix<float>("h.1.attn.c_proj.weight");
  const SafetensorsFile copy = *original;
  original.reset();  // the mapping stays while a copy holds it
  CHECK_THAT(headwise_test::as_double(copy.matrix<float>("h.1.attn.c_proj.weight")), headwise_test::IsExactly(before));
  // The bytes of a file read into memory give the same tensors as the mapped file.
  std::ifstream in(headwise_test::data_path("gpt2-tiny/model.safetensors"), std::ios::binary);
  const std::vector<unsigned char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const SafetensorsFile in_memory(bytes, "in memory");
  CHECK_THAT(headwise_test::as_double(in_memory.matrix<float>("h.1.attn.c_proj.weight")),
             headwise_test::IsExactly(before));
  CHECK(in_memory.names() == copy.names());
}
