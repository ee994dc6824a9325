// libFuzzer target, structure-aware: the input drives the HDF5 API to write a well-formed shard
// file with hostile content (attribute types and values, dataset names, types, ranks, shapes,
// chunk shapes, filters, missing or extra objects) and a manifest.json that matches its size and
// sha256, so that the checksum gate passes and the file reaches what reads it: verify_dataset
// (fnvlp-shard --verify: manifest bounds, attributes, layouts, every chunk) and ShardReader (the
// training reader). Every fault must be an fnvlp::Error naming the file, never a crash, a
// sanitizer report or an allocation sized by the file. Unlike fuzz_shard (raw bytes, which reach
// libhdf5 1.10.8's unhardened decoders: tests/fuzz/README.md), the files here are ones libhdf5
// itself wrote, the case fnvlp must handle for any file that passes its checksum.
#include <fuzzer/FuzzedDataProvider.h>
#include <hdf5.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "fnvlp/core/error.hpp"
#include "fnvlp/core/sha256.hpp"
#include "fnvlp/data/manifest.hpp"
#include "fnvlp/data/shard.hpp"
#include "fuzz_common.hpp"

using namespace fnvlp::data;
namespace fs = std::filesystem;

// libhdf5 1.10.8 keeps some decoded metadata on its error paths (see fuzz_shard.cpp).
extern "C" const char* __lsan_default_suppressions() { return "leak:libhdf5\n"; }

namespace {

constexpr const char* kShard = "shard-00000.h5";

// Integers that break size arithmetic, or plausible small ones.
int64_t hostile_int(FuzzedDataProvider& in) {
  static const int64_t kEdges[] = {0,
                                   1,
                                   -1,
                                   2,
                                   3,
                                   64,
                                   255,
                                   256,
                                   65536,
                                   std::numeric_limits<int32_t>::max(),
                                   int64_t{1} << 31,
                                   int64_t{1} << 32,
                                   int64_t{1} << 40,
                                   std::numeric_limits<int64_t>::max(),
                                   std::numeric_limits<int64_t>::min()};
  if (in.ConsumeBool()) return in.PickValueInArray(kEdges);
  return in.ConsumeIntegralInRange<int64_t>(-4, 80);
}

hid_t pick_type(FuzzedDataProvider& in) {
  static const hid_t* const kTypes[] = {
      &H5T_NATIVE_INT64_g, &H5T_NATIVE_INT32_g,  &H5T_NATIVE_INT16_g, &H5T_NATIVE_UINT8_g,
      &H5T_NATIVE_FLOAT_g, &H5T_NATIVE_DOUBLE_g, &H5T_STD_U8LE_g,     &H5T_STD_I64BE_g};
  return *in.PickValueInArray(kTypes);
}

void check(herr_t rc) {
  if (rc < 0) std::abort();  // the generator's own HDF5 calls must succeed
}

void write_attribute(FuzzedDataProvider& in, hid_t file, const char* name) {
  const int kind = in.ConsumeIntegralInRange(0, 4);
  if (kind == 0) return;  // missing
  if (kind == 3) {        // a string (also where an integer is expected)
    const std::string v = in.ConsumeRandomLengthString(80);
    const hid_t t = H5Tcopy(H5T_C_S1);
    check(H5Tset_size(t, v.empty() ? 1 : v.size()));
    const hid_t sp = H5Screate(H5S_SCALAR);
    const hid_t a = H5Acreate2(file, name, t, sp, H5P_DEFAULT, H5P_DEFAULT);
    check(H5Awrite(a, t, v.empty() ? "" : v.data()));
    H5Aclose(a);
    H5Sclose(sp);
    H5Tclose(t);
    return;
  }
  // An integer scalar of some type, or a small array.
  const hsize_t n = kind == 4 ? in.ConsumeIntegralInRange<hsize_t>(0, 3) : 1;
  const hid_t sp = kind == 4 ? H5Screate_simple(1, &n, nullptr) : H5Screate(H5S_SCALAR);
  const hid_t t = kind == 2 ? pick_type(in) : H5T_STD_I64LE;
  std::vector<int64_t> v(std::max<hsize_t>(n, 1));
  for (auto& x : v) x = hostile_int(in);
  const hid_t a = H5Acreate2(file, name, t, sp, H5P_DEFAULT, H5P_DEFAULT);
  // Converted from int64 on write (floats and narrower ints take what converts).
  H5Awrite(a, H5T_NATIVE_INT64, v.data());
  H5Aclose(a);
  H5Sclose(sp);
}

void write_dataset(FuzzedDataProvider& in, hid_t file, const std::string& name) {
  const int rank = in.ConsumeIntegralInRange(0, 4);
  std::vector<hsize_t> dims(rank), maxdims(rank), chunk(rank);
  hsize_t elems = 1;
  for (int d = 0; d < rank; ++d) {
    dims[d] = in.ConsumeIntegralInRange<hsize_t>(0, 70);
    maxdims[d] = in.ConsumeBool() ? H5S_UNLIMITED : dims[d];
    chunk[d] = in.ConsumeIntegralInRange<hsize_t>(1, 80);
    elems *= dims[d];
  }
  if (elems > (1u << 16)) return;  // keep files small: missing instead
  const hid_t type = pick_type(in);
  const hid_t sp =
      rank == 0 ? H5Screate(H5S_SCALAR) : H5Screate_simple(rank, dims.data(), maxdims.data());
  const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  bool chunked = rank > 0 && in.ConsumeBool();
  for (int d = 0; d < rank; ++d) chunked = chunked || maxdims[d] == H5S_UNLIMITED;
  if (chunked) {
    check(H5Pset_chunk(dcpl, rank, chunk.data()));
    if (in.ConsumeBool()) check(H5Pset_fletcher32(dcpl));
    if (in.ConsumeBool()) check(H5Pset_deflate(dcpl, 1));
  }
  const hid_t ds = H5Dcreate2(file, name.c_str(), type, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  H5Pclose(dcpl);
  H5Sclose(sp);
  if (ds < 0) return;  // HDF5 refused the combination (chunk larger than a fixed dim, ...)
  if (elems > 0 && in.ConsumeBool()) {
    std::vector<int64_t> values(elems);
    for (auto& v : values) v = in.ConsumeBool() ? hostile_int(in) : 0;
    H5Dwrite(ds, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data());
  }
  H5Dclose(ds);
}

// The shard's HDF5 file, written through the API the way a hostile or buggy writer could.
void write_shard(FuzzedDataProvider& in, const std::string& path) {
  const hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
  if (in.ConsumeBool()) check(H5Pset_libver_bounds(fapl, H5F_LIBVER_V110, H5F_LIBVER_V110));
  const hid_t file = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
  H5Pclose(fapl);
  if (file < 0) std::abort();
  for (const char* a :
       {"fnvlp_schema", "created_by", "image_size", "max_len", "vocab_sha256", "num_pairs"})
    write_attribute(in, file, a);
  for (const char* d :
       {shard_ds::kImages, shard_ds::kPairImage, shard_ds::kTokens, shard_ds::kLengths,
        shard_ds::kPairId, shard_ds::kImageId, shard_ds::kLabel}) {
    const int kind = in.ConsumeIntegralInRange(0, 5);
    if (kind == 0) continue;  // missing
    if (kind == 1) {          // a group where a dataset belongs
      H5Gclose(H5Gcreate2(file, d, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
      continue;
    }
    write_dataset(in, file, d);
  }
  if (in.ConsumeBool()) write_dataset(in, file, in.ConsumeRandomLengthString(12) + "_extra");
  H5Fclose(file);
}

nlohmann::json manifest(FuzzedDataProvider& in, const std::string& shard) {
  auto num = [&](int64_t plausible) { return in.ConsumeBool() ? plausible : hostile_int(in); };
  nlohmann::json s = {{"file", kShard},
                      {"first_pair_id", num(0)},
                      {"num_pairs", num(8)},
                      {"num_images", num(2)},
                      {"bytes", static_cast<int64_t>(fs::file_size(shard))},
                      {"sha256", fnvlp::sha256_file(shard)}};
  return {{"fnvlp_manifest_schema", 1},
          {"shard_schema", num(kShardSchemaRaw)},
          {"created_by", "fuzz"},
          {"created_at", "2026-01-01T00:00:00Z"},
          {"image_size", num(8)},
          {"max_len", num(6)},
          {"num_images", num(2)},
          {"num_pairs", num(8)},
          {"records", {{"total", num(8)}, {"filtered_by_split", 0}}},
          {"rejects", {{"total", 0}, {"by_reason", nlohmann::json::object()}}},
          {"source", nlohmann::json::object()},
          {"vocab",
           {{"path", "vocab.txt"},
            {"sha256", std::string(64, '0')},
            {"size", num(30522)},
            {"special_tokens", {{"pad", 0}, {"cls", 101}, {"sep", 102}, {"mask", 103}}}}},
          {"shards", nlohmann::json::array({s})}};
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string dir = [] {
    if (H5open() < 0) std::abort();
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);  // errors are read from the stack, not printed
    const std::string d = fnvlp::fuzz::temp_path("_struct");
    fs::create_directories(d);
    return d;
  }();
  FuzzedDataProvider in(data, size);
  const std::string shard = dir + "/" + kShard;
  write_shard(in, shard);
  {
    std::ofstream m(dir + "/manifest.json");
    m << manifest(in, shard).dump();
  }
  try {
    const VerifyReport r = verify_dataset(dir);
    (void)r;
  } catch (const fnvlp::Error&) {
  } catch (const nlohmann::json::exception&) {
  }
  try {
    const ShardReader r(shard);
    const PairColumns cols = r.read_pairs();
    const int64_t s = r.header().image_size;
    if (s > 0 && s <= 512 && r.num_images() > 0 && r.num_images() <= 4096) {
      std::vector<uint8_t> buf(static_cast<size_t>(s * s * 3));
      for (int64_t row = 0; row < r.num_images(); ++row) r.read_images(row, 1, buf.data());
    }
    (void)cols;
  } catch (const fnvlp::Error&) {
  }
  return 0;
}
