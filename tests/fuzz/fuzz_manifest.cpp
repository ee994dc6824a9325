// libFuzzer target: manifest.json parsing (Manifest::from_json), its round trip and its
// verification. Malformed JSON or fields must throw (nlohmann's or fnvlp::Error), never crash; an
// accepted manifest must serialise and parse back to the same JSON, and verify_dataset on it (in
// a directory without its shards: the manifest-level checks, counts bounded before they size
// anything, missing files reported) must report problems, never crash or allocate by its counts.
// fuzz_shard_struct verifies fuzzed manifests against a real shard.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstdlib>
#include <filesystem>

#include "fnvlp/core/error.hpp"
#include "fnvlp/data/manifest.hpp"
#include "fuzz_common.hpp"

using namespace fnvlp::data;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const nlohmann::json j =
      nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return 0;
  try {
    const Manifest m = Manifest::from_json(j, "fuzz/manifest.json");
    const nlohmann::json back = m.to_json();
    if (Manifest::from_json(back, "round trip").to_json() != back) std::abort();
    static const std::string dir = [] {
      const std::string d = fnvlp::fuzz::temp_path("_manifest");
      std::filesystem::create_directories(d);
      return d;
    }();
    m.save(dir);
    const VerifyReport r = verify_dataset(dir);
    if (!m.shards.empty() && r.ok()) std::abort();  // its shard files do not exist
  } catch (const fnvlp::Error&) {
  } catch (const nlohmann::json::exception&) {
  }
  return 0;
}
