// libFuzzer target: manifest.json parsing (Manifest::from_json) and its round trip. Malformed
// JSON or fields must throw (nlohmann's or fnvlp::Error), never crash; an accepted manifest
// must serialise and parse back to the same JSON.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstdlib>

#include "fnvlp/core/error.hpp"
#include "fnvlp/data/manifest.hpp"

using namespace fnvlp::data;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const nlohmann::json j =
      nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return 0;
  try {
    const Manifest m = Manifest::from_json(j, "fuzz/manifest.json");
    const nlohmann::json back = m.to_json();
    if (Manifest::from_json(back, "round trip").to_json() != back) std::abort();
  } catch (const fnvlp::Error&) {
  } catch (const nlohmann::json::exception&) {
  }
  return 0;
}
