#pragma once
// Readers of the image-caption formats fnvlp-shard accepts. A bad record never sinks the file:
// each is isolated (its own JSON element or line), rejected with a reason, and the rest is read.
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

namespace fnvlp::data {

enum class InputFormat { kAlbef, kCoco, kFlickrToken };
InputFormat parse_input_format(const std::string& name);  // albef | coco | flickr-token

struct InputRecord {
  int64_t record = 0;      // index of the input record (array element, annotation or line)
  std::string image_path;  // image_root joined with the record's relative path
  std::string caption;     // raw, valid UTF-8 (tokenized later)
  int32_t label = -1;      // semantic class when the input has one
};

// One rejected input; serialised as a line of rejects.jsonl.
struct Reject {
  int64_t record = -1;
  std::string reason;  // a code from reject_reason or image_reason
  std::string source;  // the input file, or the image file for image failures
  std::string detail;  // human-readable explanation
  std::string to_json_line() const;
  static Reject from_json_line(const std::string& line);
};

namespace reject_reason {
inline constexpr const char* kMalformed =
    "malformed_record";  // not JSON, or fields missing/mistyped
inline constexpr const char* kInvalidUtf8 = "invalid_utf8";
inline constexpr const char* kEmptyCaption = "empty_caption";  // nothing left after tokenization
}  // namespace reject_reason

struct IngestResult {
  std::vector<InputRecord> records;  // accepted so far, in input order (several per record when a
                                     // record holds a list of captions)
  std::vector<Reject> rejects;
  int64_t total_records = 0;      // records seen (before the split filter)
  int64_t filtered_by_split = 0;  // records skipped because their image is not in the split
};

// `split_ids`: when set, keeps only records whose image id is in it. Image ids are the `image_id`
// field (ALBEF), the COCO image id, or the file stem (Flickr token files and ALBEF records without
// image_id). Structural errors that make the record boundaries unknowable (an unterminated array)
// throw fnvlp::Error naming the file and byte offset.
IngestResult read_input(const std::string& path, InputFormat format, const std::string& image_root,
                        const std::optional<std::unordered_set<std::string>>& split_ids);

// Reads {"train": [ids...], "val": [...]} and returns the ids of one split.
std::unordered_set<std::string> read_split_ids(const std::string& path, const std::string& split);

// Byte spans of the elements of the JSON array that starts at `pos` (its '['). Exposed for tests.
struct Span {
  size_t begin = 0;
  size_t end = 0;
};
std::vector<Span> json_array_elements(const std::string& text, size_t pos, const std::string& file);

}  // namespace fnvlp::data
