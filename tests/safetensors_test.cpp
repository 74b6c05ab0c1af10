// Safetensors I/O: round trips of every driftcheck dtype, the layout promises (8-byte aligned data, tensors
// at multiples of their element size), a one-line error naming the file for every way a file can be
// malformed, no crash on corrupted bytes, and interoperability with an independent NumPy reading and writing
// of the format (tests/python/safetensors_interop.py).
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <sys/wait.h>

#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>

#include <nlohmann/json.hpp>

#include "driftcheck/io/safetensors.hpp"

namespace driftcheck::io {
namespace {

namespace fs = std::filesystem;

constexpr DType kAllDTypes[] = {DType::kF64,      DType::kF32,        DType::kF16,    DType::kBF16,
                                DType::kF8E4M3FN, DType::kF8E4M3FNUZ, DType::kF8E5M2, DType::kI32};

StTensor make(DType t, Shape shape) {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return {std::move(shape), std::make_shared<Storage>(t, n)};
}

// The content tests/python/safetensors_interop.py builds by the same rules (content() there): for every
// dtype, values exact in it ("values.<dtype>", [2, 17]) and every encoding of the 8- and 16-bit float formats
// ("codes.<dtype>"), plus a scalar, an empty tensor and fp32 specials.
Safetensors interop_content() {
  Safetensors f;
  for (DType t : kAllDTypes) {
    StTensor v = make(t, {2, 17});
    for (std::int64_t i = 0; i < 34; ++i)
      v.data->store(i, t == DType::kI32 ? (i - 17) * 123456789.0 : static_cast<double>(i % 17 - 8) * 0.25);
    f.tensors["values." + std::string(dtype_name(t))] = v;
    if (float_format(t) != nullptr) {
      const std::int64_t n = std::int64_t{1} << dtype_size(t) * 8;
      StTensor codes = make(t, {n});
      for (std::int64_t i = 0; i < n; ++i) codes.data->store_bits(i, static_cast<std::uint64_t>(i));
      f.tensors["codes." + std::string(dtype_name(t))] = codes;
    }
  }
  StTensor scalar = make(DType::kF64, {});
  scalar.data->store(0, 0.1);
  f.tensors["scalar"] = scalar;
  f.tensors["empty"] = make(DType::kF32, {0, 3});
  StTensor specials = make(DType::kF32, {5});
  const float values[] = {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN(), -0.0f, 1e-45f};
  std::memcpy(specials.data->bytes.data(), values, sizeof values);
  f.tensors["specials.fp32"] = specials;
  f.metadata = {{"driftcheck.test", "interop"}, {"note", "unicode \xc3\xbc and \"quotes\""}};
  return f;
}

void expect_same(const Safetensors& a, const Safetensors& b) {
  EXPECT_EQ(a.metadata, b.metadata);
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  for (const auto& [name, t] : a.tensors) {
    const auto it = b.tensors.find(name);
    ASSERT_NE(it, b.tensors.end()) << name;
    EXPECT_EQ(it->second.shape, t.shape) << name;
    EXPECT_EQ(it->second.data->dtype, t.data->dtype) << name;
    EXPECT_TRUE(it->second.data->bytes == t.data->bytes) << name;
  }
}

TEST(Safetensors, RoundTripKeepsEveryDTypeShapeBitAndMetadata) {
  const Safetensors f = interop_content();
  const std::string bytes = encode_safetensors(f);
  const Safetensors back = parse_safetensors(bytes, "mem");
  expect_same(f, back);
  EXPECT_EQ(encode_safetensors(back), bytes);  // deterministic: the same content gives the same bytes
  EXPECT_EQ(back.tensors.at("values.fp8_e4m3fnuz").view().at({0, 9}), 0.25);
}

TEST(Safetensors, DataIsAlignedForZeroCopyLoads) {
  const std::string bytes = encode_safetensors(interop_content());
  std::uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ((8 + n) % 8, 0u);
  const auto header = nlohmann::json::parse(bytes.substr(8, n));
  for (const auto& [name, v] : header.items()) {
    if (name == "__metadata__") continue;
    const int size = v["dtype"] == "F64"                           ? 8
                     : v["dtype"] == "F32" || v["dtype"] == "I32"  ? 4
                     : v["dtype"] == "F16" || v["dtype"] == "BF16" ? 2
                                                                   : 1;
    EXPECT_EQ(v["data_offsets"][0].get<std::uint64_t>() % size, 0u) << name;
  }
  EXPECT_EQ(header["__metadata__"]["driftcheck.dtype.values.fp8_e4m3fnuz"], "fp8_e4m3fnuz");
  EXPECT_EQ(header["values.fp8_e4m3fnuz"]["dtype"], "U8");
}

TEST(Safetensors, WriterRejectsWhatItCannotWrite) {
  Safetensors f;
  f.tensors["x"] = make(DType::kF32, {2, 3});
  f.tensors["x"].shape = {2, 4};
  EXPECT_THROW(encode_safetensors(f), InvalidArgument);
  f.tensors["x"].shape = {2, 3};
  f.metadata["driftcheck.dtype.x"] = "fp8_e4m3fnuz";
  EXPECT_THROW(encode_safetensors(f), InvalidArgument);
  f.metadata.clear();
  f.tensors["__metadata__"] = make(DType::kF32, {1});
  EXPECT_THROW(encode_safetensors(f), InvalidArgument);
}

// A file from a header text and a data buffer, as a hand-written or corrupted file would be.
std::string file_of(const std::string& header, const std::string& data = {}) {
  const std::uint64_t n = header.size();
  std::string out(reinterpret_cast<const char*>(&n), 8);
  return out + header + data;
}

void expect_error(const std::string& bytes, const std::string& mentions) {
  try {
    parse_safetensors(bytes, "bad.safetensors");
    ADD_FAILURE() << "parsed without error; expected: " << mentions;
  } catch (const SafetensorsError& e) {
    const std::string what = e.what();
    EXPECT_TRUE(what.starts_with("bad.safetensors: ")) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    EXPECT_NE(what.find(mentions), std::string::npos) << "expected '" << mentions << "' in: " << what;
  }
}

TEST(Safetensors, EveryMalformedFileIsOneLineNamingTheFile) {
  const std::string x = R"("x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  const std::string eight(8, '\0');
  ASSERT_EQ(parse_safetensors(file_of("{" + x + "}   ", eight), "ok").tensors.at("x").shape, Shape{2});

  expect_error("", "0 bytes, shorter than the 8-byte header length");
  expect_error(file_of("{" + x + "}", eight).substr(0, 5), "shorter than the 8-byte header length");
  std::string huge = file_of("{}");
  const std::uint64_t too_long = kMaxSafetensorsHeader + 1;
  std::memcpy(huge.data(), &too_long, 8);
  expect_error(huge, "exceeds the specification's limit");
  expect_error(file_of("{" + x + "}", eight).substr(0, 20), "exceeds the 12 bytes that follow it");
  expect_error(file_of(" {" + x + "}", eight), "does not start with '{'");
  expect_error(file_of("{" + x + "}\n", eight), "does not end with '}'");  // padding is spaces only
  expect_error(file_of("{" + x + ",}", eight), "not valid JSON");
  expect_error(file_of("{\"x\":\"\xff\"}"), "not valid JSON");  // not UTF-8
  // A number beyond a double's range: nlohmann throws out_of_range, not parse_error (fuzz_safetensors, 10^6
  // runs).
  expect_error(file_of(R"({"x":{"dtype":"F64","shape":[0,4e666],"data_offsets":[0,0]}})"), "not valid JSON");
  expect_error(file_of("{" + x + "," + x + "}", eight), "key \"x\" twice");
  expect_error(file_of(R"({"__metadata__":{"a":"1","a":"2"}})"), "key \"a\" twice");
  expect_error(file_of(R"({"__metadata__":{"a":1}})"), "value of \"a\" is not a string");
  expect_error(file_of(R"({"__metadata__":[]})"), "__metadata__ is not an object");
  expect_error(file_of(R"({"x":[]})"), "tensor \"x\" is not an object");
  expect_error(file_of(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"sha":"0"}})", eight),
               "unknown field \"sha\"");
  expect_error(file_of(R"({"x":{"shape":[2],"data_offsets":[0,8]}})", eight), "no string dtype");
  expect_error(file_of(R"({"x":{"dtype":"F32","data_offsets":[0,8]}})", eight), "no shape array");
  expect_error(file_of(R"({"x":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", eight),
               "not a non-negative integer");
  expect_error(file_of(R"({"x":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}})", eight),
               "not a non-negative integer");
  expect_error(file_of(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", eight), "no data_offsets");
  expect_error(file_of(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", eight),
               "data_offsets [8, 0] outside the 8-byte data buffer");
  expect_error(file_of(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,16]}})", eight),
               "outside the 8-byte data buffer");
  expect_error(file_of(R"({"x":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})", eight),
               "dtype \"I64\", which driftcheck does not read");
  expect_error(file_of(R"({"x":{"dtype":"U8","shape":[8],"data_offsets":[0,8]}})", eight),
               "U8 without __metadata__ \"driftcheck.dtype.x\"");
  expect_error(file_of(R"({"__metadata__":{"driftcheck.dtype.x":"fp8_e4m3fnuz"},)" + x + "}", eight),
               "marks a tensor that is F32, not U8");
  expect_error(file_of(R"({"__metadata__":{"driftcheck.dtype.y":"fp8_e4m3fnuz"},)" + x + "}", eight),
               "\"driftcheck.dtype.y\" marks no U8 tensor");
  expect_error(file_of(R"({"x":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", eight),
               "shape [3] of F32 needs 12 bytes, its data_offsets [0, 8] hold 8");
  expect_error(
      file_of(R"({"x":{"dtype":"F32","shape":[4611686018427387904,8],"data_offsets":[0,8]}})", eight),
      "size overflows");
  const std::string y_at_4 = R"("y":{"dtype":"F32","shape":[1],"data_offsets":[4,8]})";
  expect_error(file_of("{" + x + "," + y_at_4 + "}", eight), "tensors \"x\" and \"y\" overlap");
  const std::string y_at_12 = R"("y":{"dtype":"F32","shape":[1],"data_offsets":[12,16]})";
  expect_error(file_of("{" + x + "," + y_at_12 + "}", std::string(16, '\0')),
               "bytes 8 to 12 of the data buffer belong to no tensor");
  expect_error(file_of("{" + x + "}", eight + "tail"), "4 bytes after the last tensor");
  // A file cut short inside its data: the last tensor runs past the end.
  expect_error(file_of("{" + x + "}", eight).substr(0, 8 + x.size() + 2 + 7),
               "outside the 7-byte data buffer");
}

TEST(Safetensors, ZeroSizeTensorsTileAtAnyOffset) {
  // Empty tensors have begin == end; several may sit at the same offset, before or after data.
  const std::string e1 = R"("e1":{"dtype":"F16","shape":[0],"data_offsets":[0,0]})";
  const std::string e2 = R"("e2":{"dtype":"BF16","shape":[3,0],"data_offsets":[4,4]})";
  const std::string x = R"("x":{"dtype":"I32","shape":[1],"data_offsets":[0,4]})";
  const Safetensors f = parse_safetensors(file_of("{" + e1 + "," + e2 + "," + x + "}", "abcd"), "ok");
  EXPECT_EQ(f.tensors.at("e2").shape, (Shape{3, 0}));
  EXPECT_EQ(f.tensors.at("e2").data->numel(), 0);
  EXPECT_EQ(f.tensors.at("x").data->load_bits(0), 0x64636261u);
}

TEST(Safetensors, ReadingNamesTheFileItCannotOpen) {
  try {
    read_safetensors("/nonexistent/dir/x.safetensors");
    ADD_FAILURE();
  } catch (const SafetensorsError& e) {
    EXPECT_EQ(std::string(e.what()), "/nonexistent/dir/x.safetensors: cannot be read");
  }
}

// Any truncation or byte change of a valid file either still parses or is a SafetensorsError: never a crash
// or another exception (the ASan build checks the reads; the libFuzzer target goes further).
RC_GTEST_PROP(Safetensors, CorruptedFilesNeverCrash, ()) {
  static const std::string valid = encode_safetensors(interop_content());
  std::string bytes = valid;
  const auto cut = *rc::gen::inRange<std::size_t>(0, bytes.size() + 1);
  const auto pos = *rc::gen::inRange<std::size_t>(0, bytes.size());
  const auto value = *rc::gen::arbitrary<char>();
  bytes[pos] = value;
  if (*rc::gen::arbitrary<bool>()) bytes.resize(cut);
  try {
    const Safetensors f = parse_safetensors(bytes, "corrupt");
    RC_ASSERT(encode_safetensors(f).size() <= valid.size() + 8);
  } catch (const SafetensorsError&) {
  }
}

RC_GTEST_PROP(Safetensors, RandomTensorsRoundTrip, ()) {
  const auto count = *rc::gen::inRange(0, 6);
  Safetensors f;
  for (int k = 0; k < count; ++k) {
    const DType t = *rc::gen::elementOf(std::vector<DType>(std::begin(kAllDTypes), std::end(kAllDTypes)));
    const auto shape =
        *rc::gen::container<Shape>(*rc::gen::inRange(0, 4), rc::gen::inRange<std::int64_t>(0, 5));
    StTensor st = make(t, shape);
    for (auto& b : st.data->bytes) b = static_cast<std::byte>(*rc::gen::arbitrary<std::uint8_t>());
    f.tensors[std::to_string(k)] = st;
  }
  const Safetensors back = parse_safetensors(encode_safetensors(f), "mem");
  RC_ASSERT(back.tensors.size() == f.tensors.size());
  for (const auto& [name, t] : f.tensors) {
    RC_ASSERT(back.tensors.at(name).shape == t.shape);
    RC_ASSERT(back.tensors.at(name).data->dtype == t.data->dtype);
    RC_ASSERT(back.tensors.at(name).data->bytes == t.data->bytes);
  }
}

// Runs tests/python/safetensors_interop.py with Debian's python3 + NumPy; true when it exits 0.
bool run_interop(const std::string& mode, const fs::path& file) {
  const std::string cmd = std::string(DRIFTCHECK_PYTHON) + " " + DRIFTCHECK_TESTS_DIR +
                          "/python/safetensors_interop.py " + mode + " " + file.string();
  const int status = std::system(cmd.c_str());
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

fs::path scratch_file(const std::string& name) {
  const fs::path dir =
      fs::temp_directory_path() / ("driftcheck_safetensors_test_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return dir / name;
}

TEST(Safetensors, NumpyReadsWhatDriftcheckWrites) {
  const fs::path file = scratch_file("from_driftcheck.safetensors");
  write_safetensors(file, interop_content());
  EXPECT_TRUE(run_interop("check", file)) << "the NumPy reader rejected " << file;
  // The check can fail: one flipped element bit is caught.
  Safetensors wrong = interop_content();
  wrong.tensors.at("codes.fp8_e5m2").data->store_bits(3, 4);
  write_safetensors(file, wrong);
  EXPECT_FALSE(run_interop("check", file));
  fs::remove_all(file.parent_path());
}

TEST(Safetensors, DriftcheckReadsWhatNumpyWrites) {
  const fs::path file = scratch_file("from_numpy.safetensors");
  ASSERT_TRUE(run_interop("write", file));
  expect_same(interop_content(), read_safetensors(file));
  fs::remove_all(file.parent_path());
}

}  // namespace
}  // namespace driftcheck::io
