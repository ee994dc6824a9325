// safetensors parsing (store/safetensors.hpp): a round trip through the writer, and hostile files
// (offsets past the end, overlaps, holes, a 2 GB header length, a header that is not JSON, shapes
// that do not match their bytes, unknown dtypes), each a named error before any allocation the
// file's size does not bound.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "fnvlp/core/error.hpp"
#include "fnvlp/store/safetensors.hpp"

using namespace fnvlp::store;
namespace fs = std::filesystem;

namespace {

std::string temp_file(const std::string& name) {
  return ::testing::TempDir() + "/fnvlp_safetensors_" + name;
}

// 8-byte little-endian length, the header, then `data` bytes.
std::string file_bytes(const std::string& header, size_t data, uint64_t length = UINT64_MAX) {
  if (length == UINT64_MAX) length = header.size();
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((length >> (8 * i)) & 0xff);
  return out + header + std::string(data, '\x01');
}

std::string write(const std::string& name, const std::string& bytes) {
  const std::string p = temp_file(name);
  std::ofstream(p, std::ios::binary) << bytes;
  return p;
}

// The error read_safetensors_header throws for these bytes ("" if none).
std::string error_of(const std::string& bytes) {
  const std::string p = write("hostile", bytes);
  try {
    read_safetensors_header(p);
  } catch (const fnvlp::Error& e) {
    EXPECT_NE(e.message().find(p), std::string::npos)
        << "the error names the file: " << e.message();
    return e.message();
  }
  return "";
}

}  // namespace

TEST(Safetensors, WriterRoundTrip) {
  const std::vector<float> a = {1.5f, -2.0f, 3.25f, 0.0f, 7.0f, 8.0f};
  const std::vector<uint16_t> b = {1, 2, 3};
  const std::string p = temp_file("round_trip.safetensors");
  write_safetensors(p, {{"b.bias", "BF16", {3}, b.data()}, {"a.weight", "F32", {2, 3}, a.data()}},
                    {{"format", "pt"}});
  const SafetensorsHeader h = read_safetensors_header(p);
  EXPECT_EQ(h.data_offset % 8, 0u) << "header padded so the data is 8-byte aligned";
  EXPECT_EQ(h.metadata.at("format"), "pt");
  ASSERT_EQ(h.tensors.size(), 2u);
  EXPECT_EQ(h.tensors[0].name, "a.weight") << "sorted by name, data in that order";
  EXPECT_EQ(h.tensors[0].shape, (std::vector<int64_t>{2, 3}));
  std::vector<float> back(6);
  read_safetensors_bytes(h, h.tensors[0], back.data());
  EXPECT_EQ(back, a);
  const auto bb = read_safetensors_bytes(h, *h.find("b.bias"));
  ASSERT_EQ(bb.size(), 6u);
  EXPECT_EQ(std::memcmp(bb.data(), b.data(), 6), 0);
  EXPECT_FALSE(fs::exists(p + ".tmp"));
}

TEST(Safetensors, AcceptsAWellFormedHeader) {
  const std::string h =
      R"({"__metadata__":{"format":"pt"},"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
      R"("e":{"dtype":"F16","shape":[0,4],"data_offsets":[8,8]}})";
  EXPECT_EQ(error_of(file_bytes(h, 8)), "");
}

TEST(Safetensors, HostileFilesAreNamedErrors) {
  const std::string ok = R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  struct Case {
    const char* what;
    std::string bytes;
    const char* expect;
  };
  const std::vector<Case> cases = {
      {"shorter than the length", std::string("\x05\x00\x00", 3), "shorter than the 8-byte"},
      {"2 GB header length", file_bytes(ok, 8, 2ull << 30), "exceeds the limit"},
      {"length past the end", file_bytes(ok, 8, 4096), "runs past the end"},
      {"not JSON", file_bytes("{\"x\": [1, 2", 8), "not valid JSON"},
      {"not an object", file_bytes("[1, 2, 3]", 8), "not a JSON object"},
      {"offsets past the end",
       file_bytes(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,4096]}})", 8),
       "outside the data region"},
      {"begin after end",
       file_bytes(R"({"x":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", 8),
       "outside the data region"},
      {"overlapping tensors",
       file_bytes(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                  R"("y":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                  12),
       "overlaps"},
      {"a hole", file_bytes(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8),
       "belong to no tensor"},
      {"trailing bytes", file_bytes(ok, 16), "tensors end at 8"},
      {"shape against bytes",
       file_bytes(R"({"x":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 16), "12 expected"},
      {"a huge shape",
       file_bytes(
           R"({"x":{"dtype":"F64","shape":[4294967296,4294967296,16],"data_offsets":[0,8]}})", 8),
       "needs more bytes"},
      {"negative dimension",
       file_bytes(R"({"x":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8),
       "non-negative integers"},
      {"unknown dtype", file_bytes(R"({"x":{"dtype":"F33","shape":[2],"data_offsets":[0,8]}})", 8),
       "unknown dtype 'F33'"},
      {"missing field", file_bytes(R"({"x":{"dtype":"F32","shape":[2]}})", 8),
       "lacks dtype, shape or data_offsets"},
      {"metadata not strings", file_bytes(R"({"__metadata__":{"a":1}})", 0), "not a string"},
  };
  for (const auto& c : cases) {
    const std::string e = error_of(c.bytes);
    EXPECT_NE(e.find(c.expect), std::string::npos)
        << c.what << ": expected '" << c.expect << "' in: " << (e.empty() ? "(accepted)" : e);
  }
}
