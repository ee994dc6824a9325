// libFuzzer target: the caption-file readers of fnvlp-shard (ALBEF JSON, COCO captions, Flickr
// token lines) and the split file reader. The first byte picks the reader, the rest is the file.
// A reader may reject records or throw fnvlp::Error for a structurally broken file; anything else
// (a crash, a sanitizer report, another exception type) is a finding. Accepted records must hold
// valid UTF-8 captions and records indices inside the input.
#include <cstdint>
#include <cstdlib>
#include <unordered_set>

#include "fnvlp/core/error.hpp"
#include "fnvlp/data/ingest.hpp"
#include "fnvlp/data/tokenizer.hpp"
#include "fuzz_common.hpp"

using namespace fnvlp::data;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const int which = data[0] % 5;
  const std::string& path = fnvlp::fuzz::write_temp(data + 1, size - 1, ".in");
  try {
    if (which == 4) {
      (void)read_split_ids(path, data[0] & 0x80 ? "val" : "train");
      return 0;
    }
    const InputFormat fmt = which == 0   ? InputFormat::kAlbef
                            : which == 1 ? InputFormat::kCoco
                                         : InputFormat::kFlickrToken;
    std::optional<std::unordered_set<std::string>> split;
    if (which == 3) split = std::unordered_set<std::string>{"1000268201_693b08cb0e", "42"};
    const IngestResult r = read_input(path, fmt, "/images", split);
    for (const auto& rec : r.records) {
      if (!is_valid_utf8(rec.caption)) std::abort();  // invalid UTF-8 must be a reject
      if (rec.record < 0 || rec.record >= r.total_records) std::abort();
    }
    for (const auto& rej : r.rejects) (void)Reject::from_json_line(rej.to_json_line());
  } catch (const fnvlp::Error&) {
  }
  return 0;
}
