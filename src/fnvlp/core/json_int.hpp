#pragma once
// Integers read from JSON the user or another job wrote.
//
// nlohmann's get<Int>() converts a JSON float with a plain cast, which is undefined behaviour when
// the value is out of the integer's range (1e111 as a COCO image_id or a manifest count; found by
// tests/fuzz/fuzz_ingest and fuzz_manifest). Ids, counts and labels must be JSON integers in range.

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

namespace fnvlp {

template <class Int>
Int json_integer(const nlohmann::json& v) {
  static_assert(std::is_integral_v<Int>, "json_integer reads integral types");
  if (!v.is_number_integer())
    throw std::invalid_argument("expected an integer, got " + v.dump().substr(0, 40));
  bool in_range;
  if (v.is_number_unsigned()) {
    in_range = v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<Int>::max());
  } else {
    const int64_t x = v.get<int64_t>();
    in_range =
        x >= 0
            ? static_cast<uint64_t>(x) <= static_cast<uint64_t>(std::numeric_limits<Int>::max())
            : std::is_signed_v<Int> && x >= static_cast<int64_t>(std::numeric_limits<Int>::min());
  }
  if (!in_range) throw std::invalid_argument("integer " + v.dump() + " is out of range");
  return v.get<Int>();
}

}  // namespace fnvlp
