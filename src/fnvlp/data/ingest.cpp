#include "fnvlp/data/ingest.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <sstream>

#include "fnvlp/core/error.hpp"
#include "fnvlp/core/json_int.hpp"
#include "fnvlp/data/tokenizer.hpp"

namespace fnvlp::data {

using json = nlohmann::json;

InputFormat parse_input_format(const std::string& name) {
  if (name == "albef") return InputFormat::kAlbef;
  if (name == "coco") return InputFormat::kCoco;
  if (name == "flickr-token") return InputFormat::kFlickrToken;
  FNVLP_FAIL("unknown input format '" << name << "' (expected albef, coco or flickr-token)");
}

std::string Reject::to_json_line() const {
  json j = {{"record", record}, {"reason", reason}, {"source", source}, {"detail", detail}};
  // Details may quote broken input: never let them make the rejects file itself invalid.
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

Reject Reject::from_json_line(const std::string& line) {
  const json j = json::parse(line);
  return {json_integer<int64_t>(j.at("record")), j.at("reason").get<std::string>(),
          j.at("source").get<std::string>(), j.at("detail").get<std::string>()};
}

namespace {

std::string read_file(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  FNVLP_CHECK(f, "cannot open input file '" << path << "': " << std::strerror(errno));
  std::string text;
  char buf[1 << 16];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), f)) > 0;) text.append(buf, n);
  const bool failed = std::ferror(f);
  std::fclose(f);
  FNVLP_CHECK(!failed, "read error on input file '" << path << "'");
  return text;
}

size_t skip_ws(const std::string& s, size_t pos) {
  while (pos < s.size() && (s[pos] == ' ' || s[pos] == '\n' || s[pos] == '\r' || s[pos] == '\t'))
    ++pos;
  return pos;
}

// Structural skip of one JSON value: strings (with escapes) and bracket nesting only. Content
// errors inside a balanced value are left to the per-record parser, so they reject one record.
size_t skip_value(const std::string& s, size_t pos, const std::string& file) {
  int depth = 0;
  const size_t start = pos;
  while (pos < s.size()) {
    const char c = s[pos];
    if (c == '"') {
      ++pos;
      while (pos < s.size() && s[pos] != '"') pos += (s[pos] == '\\') ? 2 : 1;
      FNVLP_CHECK(pos < s.size(), file << ": unterminated string starting near byte " << start);
      ++pos;
    } else if (c == '[' || c == '{') {
      ++depth;
      ++pos;
    } else if (c == ']' || c == '}') {
      if (depth == 0) return pos;  // end of a scalar inside the enclosing container
      --depth;
      ++pos;
    } else if (c == ',' && depth == 0) {
      return pos;
    } else {
      ++pos;
    }
    if (depth == 0 && (c == ']' || c == '}' || c == '"')) return pos;
  }
  FNVLP_CHECK(depth == 0, file << ": unbalanced brackets in the value starting at byte " << start);
  return pos;
}

// Trailing whitespace of a scalar span is harmless to the parser; keep spans as found.
std::vector<std::pair<std::string, Span>> json_object_members(const std::string& s, size_t pos,
                                                              const std::string& file) {
  pos = skip_ws(s, pos);
  FNVLP_CHECK(pos < s.size() && s[pos] == '{', file << ": expected a JSON object at byte " << pos);
  std::vector<std::pair<std::string, Span>> out;
  pos = skip_ws(s, pos + 1);
  if (pos < s.size() && s[pos] == '}') return out;
  while (true) {
    pos = skip_ws(s, pos);
    FNVLP_CHECK(pos < s.size() && s[pos] == '"', file << ": expected a key at byte " << pos);
    const size_t key_end = skip_value(s, pos, file);
    // A key with a raw control character or bad escape is a file-level error naming the file
    // (found by tests/fuzz/fuzz_ingest; it used to escape as a bare nlohmann parse_error).
    std::string key;
    try {
      key = json::parse(s.substr(pos, key_end - pos)).get<std::string>();
    } catch (const json::exception& e) {
      FNVLP_FAIL(file << ": invalid object key at byte " << pos << ": " << e.what());
    }
    pos = skip_ws(s, key_end);
    FNVLP_CHECK(pos < s.size() && s[pos] == ':', file << ": expected ':' at byte " << pos);
    pos = skip_ws(s, pos + 1);
    const size_t value_end = skip_value(s, pos, file);
    out.push_back({key, {pos, value_end}});
    pos = skip_ws(s, value_end);
    FNVLP_CHECK(pos < s.size(), file << ": object not closed");
    if (s[pos] == '}') return out;
    FNVLP_CHECK(s[pos] == ',', file << ": expected ',' or '}' at byte " << pos);
    ++pos;
  }
}

// Plain string operations: std::filesystem::path costs more than the JSON parse per record.
std::string stem_of(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  const size_t begin = slash == std::string::npos ? 0 : slash + 1;
  const size_t dot = path.find_last_of('.');
  const size_t end = (dot == std::string::npos || dot <= begin) ? path.size() : dot;
  return path.substr(begin, end - begin);
}

std::string join_root(const std::string& root, const std::string& rel) {
  if (root.empty() || (!rel.empty() && rel[0] == '/')) return rel;
  return root.back() == '/' ? root + rel : root + "/" + rel;
}

std::string id_string(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_integer()) return v.dump();  // exact, also above INT64_MAX
  throw std::invalid_argument("image_id must be a string or an integer");
}

class Collector {
 public:
  Collector(const std::string& file, const std::string& root,
            const std::optional<std::unordered_set<std::string>>& split)
      : file_(file), root_(root), split_(split) {}

  void reject(int64_t record, const char* reason, const std::string& detail) {
    result.rejects.push_back({record, reason, file_, detail});
  }
  bool in_split(const std::string& image_id) {
    if (!split_ || split_->count(image_id)) return true;
    ++result.filtered_by_split;
    return false;
  }
  void add(int64_t record, const std::string& image_rel, const std::string& caption,
           int32_t label) {
    result.records.push_back({record, join_root(root_, image_rel), caption, label});
  }

  IngestResult result;

 private:
  std::string file_;
  std::string root_;
  const std::optional<std::unordered_set<std::string>>& split_;
};

// Parses one element span as JSON, rejecting it (and returning nullopt) on invalid UTF-8 or bad
// syntax.
std::optional<json> parse_record(Collector& c, const std::string& text, Span span, int64_t record) {
  const std::string_view body(text.data() + span.begin, span.end - span.begin);
  if (!is_valid_utf8(body)) {
    c.reject(record, reject_reason::kInvalidUtf8, "record holds bytes that are not valid UTF-8");
    return std::nullopt;
  }
  try {
    return json::parse(body);
  } catch (const json::exception& e) {
    c.reject(record, reject_reason::kMalformed, std::string("not valid JSON: ") + e.what());
    return std::nullopt;
  }
}

// Calls `f(record, json)` for each element of the JSON array at `begin` that parses; an exception
// `f` throws rejects that record as malformed, with its message.
template <class F>
void for_each_record(const std::string& text, size_t begin, Collector& c, const std::string& file,
                     F&& f) {
  const auto spans = json_array_elements(text, begin, file);
  c.result.total_records = static_cast<int64_t>(spans.size());
  for (size_t i = 0; i < spans.size(); ++i) {
    const auto rec = static_cast<int64_t>(i);
    const std::optional<json> j = parse_record(c, text, spans[i], rec);
    if (!j) continue;
    try {
      f(rec, *j);
    } catch (const std::exception& e) {
      c.reject(rec, reject_reason::kMalformed, e.what());
    }
  }
}

void read_albef(const std::string& text, Collector& c, const std::string& file) {
  for_each_record(text, skip_ws(text, 0), c, file, [&](int64_t rec, const json& j) {
    if (!j.is_object()) throw std::invalid_argument("record is not a JSON object");
    const auto image = j.at("image").get<std::string>();
    if (image.empty()) throw std::invalid_argument("'image' is empty");
    const std::string image_id =
        j.contains("image_id") ? id_string(j.at("image_id")) : stem_of(image);
    const int32_t label = j.contains("label") ? json_integer<int32_t>(j.at("label")) : -1;
    const json& cap = j.at("caption");
    std::vector<std::string> captions;
    if (cap.is_array()) {
      for (const auto& x : cap) captions.push_back(x.get<std::string>());
    } else {
      captions.push_back(cap.get<std::string>());
    }
    if (!c.in_split(image_id)) return;
    for (const auto& caption : captions) c.add(rec, image, caption, label);
  });
}

void read_coco(const std::string& text, Collector& c, const std::string& file) {
  std::optional<Span> images, annotations;
  for (const auto& [key, span] : json_object_members(text, 0, file)) {
    if (key == "images") images = span;
    if (key == "annotations") annotations = span;
  }
  FNVLP_CHECK(images && annotations,
              file << ": a COCO captions file needs 'images' and 'annotations'");
  // The image table is small and needed whole: a broken entry there is a file-level error.
  std::unordered_map<int64_t, std::string> file_names;
  const auto image_spans = json_array_elements(text, images->begin, file);
  for (size_t i = 0; i < image_spans.size(); ++i) {
    const auto& sp = image_spans[i];
    try {
      const json j = json::parse(text.begin() + static_cast<long>(sp.begin),
                                 text.begin() + static_cast<long>(sp.end));
      file_names[json_integer<int64_t>(j.at("id"))] = j.at("file_name").get<std::string>();
    } catch (const std::exception& e) {
      FNVLP_FAIL(file << ": images[" << i << "] is not a valid COCO image entry: " << e.what());
    }
  }
  for_each_record(text, annotations->begin, c, file, [&](int64_t rec, const json& j) {
    const int64_t image_id = json_integer<int64_t>(j.at("image_id"));
    const auto it = file_names.find(image_id);
    if (it == file_names.end())
      throw std::invalid_argument("image_id " + std::to_string(image_id) + " is not in 'images'");
    const auto caption = j.at("caption").get<std::string>();
    if (!c.in_split(std::to_string(image_id))) return;
    c.add(rec, it->second, caption, -1);
  });
}

// Flickr8k/30k token files: "<image file>#<n>\t<caption>" per line.
void read_flickr_token(const std::string& text, Collector& c) {
  std::istringstream in(text);
  std::string line;
  int64_t rec = 0;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    const int64_t r = rec++;
    if (!is_valid_utf8(line)) {
      c.reject(r, reject_reason::kInvalidUtf8, "line holds bytes that are not valid UTF-8");
      continue;
    }
    const size_t tab = line.find('\t');
    const size_t hash = line.rfind('#', tab);
    if (tab == std::string::npos || hash == std::string::npos || hash == 0) {
      c.reject(r, reject_reason::kMalformed, "expected '<image>#<n><TAB><caption>'");
      continue;
    }
    const std::string image = line.substr(0, hash);
    if (!c.in_split(stem_of(image))) continue;
    c.add(r, image, line.substr(tab + 1), -1);
  }
  c.result.total_records = rec;
}

}  // namespace

std::vector<Span> json_array_elements(const std::string& s, size_t pos, const std::string& file) {
  pos = skip_ws(s, pos);
  FNVLP_CHECK(pos < s.size() && s[pos] == '[', file << ": expected a JSON array at byte " << pos);
  std::vector<Span> out;
  pos = skip_ws(s, pos + 1);
  if (pos < s.size() && s[pos] == ']') return out;
  while (true) {
    pos = skip_ws(s, pos);
    const size_t end = skip_value(s, pos, file);
    FNVLP_CHECK(end > pos, file << ": empty element " << out.size() << " at byte " << pos);
    out.push_back({pos, end});
    pos = skip_ws(s, end);
    FNVLP_CHECK(pos < s.size(), file << ": array not closed after element " << out.size() - 1);
    if (s[pos] == ']') return out;
    FNVLP_CHECK(s[pos] == ',', file << ": expected ',' or ']' after element " << out.size() - 1
                                    << " at byte " << pos);
    ++pos;
  }
}

IngestResult read_input(const std::string& path, InputFormat format, const std::string& image_root,
                        const std::optional<std::unordered_set<std::string>>& split_ids) {
  const std::string text = read_file(path);
  Collector c(path, image_root, split_ids);
  switch (format) {
    case InputFormat::kAlbef:
      read_albef(text, c, path);
      break;
    case InputFormat::kCoco:
      read_coco(text, c, path);
      break;
    case InputFormat::kFlickrToken:
      read_flickr_token(text, c);
      break;
  }
  return std::move(c.result);
}

std::unordered_set<std::string> read_split_ids(const std::string& path, const std::string& split) {
  json j;
  try {
    j = json::parse(read_file(path));
  } catch (const json::exception& e) {
    FNVLP_FAIL("split file '" << path << "' is not valid JSON: " << e.what());
  }
  FNVLP_CHECK(j.is_object() && j.contains(split) && j[split].is_array(),
              "split file '" << path << "' has no list named '" << split << "'");
  std::unordered_set<std::string> ids;
  for (const auto& v : j[split]) {
    try {
      ids.insert(id_string(v));
    } catch (const std::exception& e) {
      FNVLP_FAIL("split file '" << path << "', split '" << split << "': " << e.what());
    }
  }
  return ids;
}

}  // namespace fnvlp::data
