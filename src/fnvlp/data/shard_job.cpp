#include "fnvlp/data/shard_job.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <unordered_map>

#include "fnvlp/core/error.hpp"
#include "fnvlp/core/parallel.hpp"
#include "fnvlp/core/progress.hpp"
#include "fnvlp/core/sha256.hpp"
#include "fnvlp/core/timer.hpp"
#include "fnvlp/data/image.hpp"
#include "fnvlp/data/ingest.hpp"
#include "fnvlp/data/manifest.hpp"
#include "fnvlp/data/shard.hpp"
#include "fnvlp/data/tokenizer.hpp"
#include "fnvlp/version.hpp"

namespace fnvlp::data {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

struct Range {
  size_t begin = 0;
  size_t end = 0;
};

// Cuts the entries into shards of `shard_size`, never splitting a run of consecutive entries of
// the same image (Flickr's five captions stay together, so each image is stored once). The plan
// depends only on the input, never on the rank count.
std::vector<Range> plan_shards(const std::vector<InputRecord>& entries, size_t shard_size) {
  std::vector<Range> plan;
  size_t begin = 0;
  while (begin < entries.size()) {
    size_t end = std::min(entries.size(), begin + shard_size);
    while (end < entries.size() && entries[end].image_path == entries[end - 1].image_path) ++end;
    plan.push_back({begin, end});
    begin = end;
  }
  return plan;
}

std::string tmp_name(size_t plan_index) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), ".shard-%05zu.h5.tmp", plan_index);
  return buf;
}

std::string final_name(size_t shard_index) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "shard-%05zu.h5", shard_index);
  return buf;
}

bool is_fnvlp_output(const std::string& name) {
  return name == kManifestName || name == kRejectsName ||
         (name.rfind("shard-", 0) == 0 && name.size() > 3 &&
          name.substr(name.size() - 3) == ".h5") ||
         (name.rfind(".shard-", 0) == 0 && name.find(".tmp") != std::string::npos) ||
         name == std::string(".") + kManifestName + ".tmp";
}

struct LocalShard {
  size_t plan_index = 0;
  fs::path tmp;
  std::vector<size_t> kept;  // entry indices written, in order
  int64_t num_images = 0;
};

// What one rank learns while writing its shards; entries are indices into IngestResult::records.
struct LocalWork {
  std::vector<LocalShard> shards;
  std::vector<int64_t> rejected_entries;
  std::vector<Reject> rejects;
  int64_t images_decoded = 0;
};

void write_local_shard(const ShardJobOptions& o, const ImageFileLimits& limits,
                       const WordPieceTokenizer& tok, const std::vector<InputRecord>& entries,
                       Range range, LocalShard& shard, LocalWork& work) {
  const auto L = static_cast<size_t>(o.max_len);
  const bool jpeg = parse_image_codec(o.image_codec) == ImageCodec::kJpeg;
  const auto S = static_cast<size_t>(jpeg ? o.max_side : o.image_size);
  const size_t image_bytes = jpeg ? 0 : S * S * 3;

  // Captions first: an entry whose caption yields no word piece never costs an image decode.
  std::vector<std::vector<int32_t>> ids(range.end - range.begin);
  std::vector<size_t> with_caption;
  for (size_t e = range.begin; e < range.end; ++e) {
    ids[e - range.begin] = tok.encode(entries[e].caption, L);
    if (ids[e - range.begin].size() <= 2) {
      work.rejected_entries.push_back(static_cast<int64_t>(e));
      work.rejects.push_back({entries[e].record, reject_reason::kEmptyCaption, o.input,
                              "caption is empty or whitespace after normalisation"});
    } else {
      with_caption.push_back(e);
    }
  }

  ShardHeader header;
  header.codec = jpeg ? ImageCodec::kJpeg : ImageCodec::kRaw;
  header.created_by = std::string("fnvlp-shard ") + kVersion;
  header.image_size = static_cast<int64_t>(S);
  header.max_len = o.max_len;
  header.vocab_sha256 = tok.vocab_sha256();
  ShardWriter writer(shard.tmp.string(), header, static_cast<int>(o.image_chunk));

  // Each distinct image of the shard is decoded and stored once, in order of first use. Images
  // are decoded in batches on the rank's helper threads, then appended in order.
  std::vector<const std::string*> todo;
  std::unordered_map<std::string, int64_t> row_of;  // -1: failed to decode
  for (size_t e : with_caption)
    if (row_of.emplace(entries[e].image_path, 0).second) todo.push_back(&entries[e].image_path);
  std::unordered_map<std::string, ImageError> failed;
  const size_t batch = 256;
  std::vector<uint8_t> pixels(batch * image_bytes);
  std::vector<std::vector<uint8_t>> jpegs(jpeg ? batch : 0);
  std::vector<std::pair<int32_t, int32_t>> hw(jpeg ? batch : 0);
  std::vector<std::optional<ImageError>> errors(batch);
  int64_t next_row = 0;
  for (size_t b = 0; b < todo.size(); b += batch) {
    progress("shard: decoding images");
    const size_t n = std::min(batch, todo.size() - b);
    parallel_for(n, static_cast<int>(o.threads), [&](size_t i) {
      errors[i].reset();
      try {
        const std::string& path = *todo[b + i];
        if (jpeg) {
          // Decoded, scaled to the maximum side and encoded again: every stored stream is then
          // 8-bit YCbCr 4:2:0 of a known size, whatever the input was (CMYK, progressive, PNG).
          const Image img = resize_max_side(read_image_file(path, 0, limits), static_cast<int>(S));
          jpegs[i] = encode_jpeg(img, static_cast<int>(o.jpeg_quality));
          hw[i] = {img.height, img.width};
          return;
        }
        Image img = resize_center_crop(read_image_file(path, static_cast<int>(S), limits),
                                       static_cast<int>(S));
        FNVLP_CHECK(img.rgb.size() == image_bytes, path << ": resize produced a wrong size");
        std::copy(img.rgb.begin(), img.rgb.end(),
                  pixels.begin() + static_cast<long>(i * image_bytes));
      } catch (const ImageError& err) {
        errors[i] = err;
      }
    });
    // Compact the successful images so they append as one contiguous block.
    size_t kept = 0;
    for (size_t i = 0; i < n; ++i) {
      const std::string& path = *todo[b + i];
      if (errors[i]) {
        row_of[path] = -1;
        failed.emplace(path, *errors[i]);
        continue;
      }
      if (jpeg) {
        writer.append_jpeg(jpegs[i].data(), jpegs[i].size(), hw[i].first, hw[i].second);
      } else if (kept != i) {
        std::copy_n(pixels.begin() + static_cast<long>(i * image_bytes), image_bytes,
                    pixels.begin() + static_cast<long>(kept * image_bytes));
      }
      row_of[path] = next_row++;
      ++kept;
    }
    if (!jpeg) writer.append_images(pixels.data(), static_cast<int64_t>(kept));
  }
  work.images_decoded += static_cast<int64_t>(todo.size());

  PairColumns cols;
  for (size_t e : with_caption) {
    const int64_t row = row_of.at(entries[e].image_path);
    if (row < 0) {
      const ImageError& err = failed.at(entries[e].image_path);
      work.rejected_entries.push_back(static_cast<int64_t>(e));
      work.rejects.push_back({entries[e].record, err.reason(), entries[e].image_path, err.what()});
      continue;
    }
    const auto& t = ids[e - range.begin];
    cols.pair_image.push_back(row);
    const size_t off = cols.tokens.size();
    cols.tokens.resize(off + L, tok.pad_id());
    std::copy(t.begin(), t.end(), cols.tokens.begin() + static_cast<long>(off));
    cols.lengths.push_back(static_cast<int16_t>(t.size()));
    cols.label.push_back(entries[e].label);
    shard.kept.push_back(e);
  }
  writer.write_pairs(cols);
  writer.close();
  shard.num_images = next_row;
}

void remove_tmp_files(const LocalWork& work) {
  for (const auto& s : work.shards) fs::remove(s.tmp);
}

void check_options(const ShardJobOptions& o) {
  FNVLP_CHECK(!o.input.empty() && !o.vocab.empty() && !o.out.empty(),
              "--input, --vocab and --out are required");
  FNVLP_CHECK(o.image_size >= 8 && o.image_size <= 4096, "--image-size must be in [8, 4096]");
  FNVLP_CHECK(o.max_len >= 3 && o.max_len <= 32767, "--max-len must be in [3, 32767]");
  FNVLP_CHECK(o.shard_size >= 1, "--shard-size must be >= 1");
  FNVLP_CHECK(o.image_chunk >= 1 && o.image_chunk <= 64, "--image-chunk must be in [1, 64]");
  FNVLP_CHECK(o.threads >= 1 && o.threads <= 256, "--threads must be in [1, 256]");
  FNVLP_CHECK(o.max_reject_fraction >= 0 && o.max_reject_fraction <= 1,
              "--max-reject-fraction must be in [0, 1]");
  FNVLP_CHECK(o.split.empty() == o.split_file.empty(), "--split-file and --split go together");
  parse_image_codec(o.image_codec);
  FNVLP_CHECK(o.max_side >= 8 && o.max_side <= 4096, "--max-side must be in [8, 4096]");
  FNVLP_CHECK(o.jpeg_quality >= 1 && o.jpeg_quality <= 100, "--jpeg-quality must be in [1, 100]");
}

// Images must resolve inside the image root (the working directory when none is given).
ImageFileLimits image_limits(const Comm& comm, const ShardJobOptions& o) {
  ImageFileLimits limits;
  limits.max_bytes = o.max_image_bytes;
  comm.collective([&] {
    const fs::path root = o.image_root.empty() ? fs::current_path() : fs::path(o.image_root);
    FNVLP_CHECK(fs::is_directory(root), "--image-root " << root.string() << " is not a directory");
    if (!o.allow_outside_root) limits.root = fs::canonical(root).string();
  });
  return limits;
}

// A previous run's outputs are removed first, so nothing stale can pass --verify.
void remove_previous_outputs(const Comm& comm, const fs::path& out) {
  comm.collective([&] {
    if (!comm.is_root()) return;
    fs::create_directories(out);
    for (const auto& entry : fs::directory_iterator(out))
      if (entry.is_regular_file() && is_fnvlp_output(entry.path().filename().string()))
        fs::remove(entry.path());
  });
}

// Every rank reads the vocabulary and the whole input (records are small; images are not read).
IngestResult read_inputs(const Comm& comm, const ShardJobOptions& o, InputFormat format,
                         std::optional<WordPieceTokenizer>& tok) {
  IngestResult in;
  comm.collective([&] {
    tok = WordPieceTokenizer::from_file(o.vocab);
    FNVLP_CHECK(tok->pad_id() == 0, o.vocab << ": [PAD] is id " << tok->pad_id()
                                            << "; the shard schema pads tokens with 0");
    std::optional<std::unordered_set<std::string>> split;
    if (!o.split.empty()) split = read_split_ids(o.split_file, o.split);
    in = read_input(o.input, format, o.image_root, split);
  });
  return in;
}

// Rank r writes planned shards r, r + size, ... to temporary files (removed if it fails).
LocalWork write_local_shards(const Comm& comm, const ShardJobOptions& o,
                             const ImageFileLimits& limits, const WordPieceTokenizer& tok,
                             const std::vector<InputRecord>& entries,
                             const std::vector<Range>& plan, const fs::path& out) {
  LocalWork work;
  comm.collective([&] {
    try {
      for (size_t s = static_cast<size_t>(comm.rank()); s < plan.size();
           s += static_cast<size_t>(comm.size())) {
        work.shards.push_back({s, out / tmp_name(s), {}, 0});
        write_local_shard(o, limits, tok, entries, plan[s], work.shards.back(), work);
      }
    } catch (...) {
      remove_tmp_files(work);
      throw;
    }
  });
  return work;
}

// Every reject of every rank, sorted, and which entries survive: all ranks agree on both.
struct RejectTally {
  std::vector<Reject> rejects;
  std::vector<uint8_t> accepted;  // per entry
  std::map<std::string, int64_t> by_reason;
  int64_t candidates = 0;  // entries plus the records rejected while reading
};

RejectTally exchange_rejects(const Comm& comm, const IngestResult& in, const LocalWork& work) {
  RejectTally t;
  t.rejects = in.rejects;
  t.accepted.assign(in.records.size(), 1);
  std::string blob;
  for (const auto& r : work.rejects) blob += r.to_json_line() + "\n";
  for (const auto& b : comm.allgather_strings(blob)) {
    std::istringstream lines(b);
    for (std::string line; std::getline(lines, line);)
      t.rejects.push_back(Reject::from_json_line(line));
  }
  for (int64_t e : comm.allgatherv(work.rejected_entries)) t.accepted[static_cast<size_t>(e)] = 0;
  std::sort(t.rejects.begin(), t.rejects.end(), [](const Reject& a, const Reject& b) {
    return std::tie(a.record, a.reason, a.source) < std::tie(b.record, b.reason, b.source);
  });
  // Image failures are reported once per caption entry; rejects.jsonl keeps one line per entry.
  for (const auto& r : t.rejects) ++t.by_reason[r.reason];
  t.candidates = static_cast<int64_t>(in.records.size() + in.rejects.size());
  return t;
}

void write_rejects(const Comm& comm, const RejectTally& t, const fs::path& out) {
  if (!comm.is_root()) return;
  std::ofstream f(out / kRejectsName);
  for (const auto& r : t.rejects) f << r.to_json_line() << "\n";
  f.flush();
  FNVLP_CHECK(f.good(), "cannot write " << (out / kRejectsName).string());
}

// Too many rejects: nothing is written but rejects.jsonl, and the error names the three most
// frequent reasons with an example record each.
void refuse_if_too_many_rejects(const Comm& comm, const ShardJobOptions& o, const RejectTally& t,
                                const LocalWork& work, const fs::path& out) {
  const auto n_rejects = static_cast<int64_t>(t.rejects.size());
  const double fraction = t.candidates > 0 ? static_cast<double>(n_rejects) / t.candidates : 0.0;
  if (t.candidates > 0 && n_rejects < t.candidates && fraction <= o.max_reject_fraction) return;
  remove_tmp_files(work);
  comm.collective([&] { write_rejects(comm, t, out); });
  std::vector<std::pair<int64_t, std::string>> worst;
  for (const auto& [reason, n] : t.by_reason) worst.push_back({n, reason});
  std::sort(worst.rbegin(), worst.rend());
  std::ostringstream msg;
  msg << o.input << ": " << n_rejects << " of " << t.candidates << " inputs rejected ("
      << 100.0 * fraction << "% > --max-reject-fraction " << 100.0 * o.max_reject_fraction
      << "%); worst reasons:";
  for (size_t i = 0; i < worst.size() && i < 3; ++i) {
    const auto& reason = worst[i].second;
    const auto ex = std::find_if(t.rejects.begin(), t.rejects.end(),
                                 [&](const Reject& r) { return r.reason == reason; });
    msg << " " << reason << " x" << worst[i].first << " (e.g. record " << ex->record << ": "
        << (ex->detail.find(ex->source) == std::string::npos ? ex->source + ": " : "") << ex->detail
        << ");";
  }
  msg << " details in " << (out / kRejectsName).string() << "; no dataset was written";
  throw CollectiveError(msg.str());
}

// Global ids: pair_id dense in input order over accepted entries; image_id dense per distinct
// image in order of its first accepted caption. Final shard numbering skips shards left empty by
// rejects.
struct GlobalIds {
  std::vector<int64_t> pair_id, image_id;  // per entry, -1 where rejected
  int64_t num_pairs = 0;
  int64_t num_images = 0;
  std::vector<int64_t> final_index;  // per planned shard, -1 where empty
  int64_t num_shards = 0;
};

GlobalIds assign_global_ids(const std::vector<InputRecord>& entries,
                            const std::vector<uint8_t>& accepted, const std::vector<Range>& plan) {
  GlobalIds g;
  g.pair_id.assign(entries.size(), -1);
  g.image_id.assign(entries.size(), -1);
  std::unordered_map<std::string, int64_t> image_ids;
  for (size_t e = 0; e < entries.size(); ++e) {
    if (!accepted[e]) continue;
    g.pair_id[e] = g.num_pairs++;
    g.image_id[e] = image_ids.emplace(entries[e].image_path, static_cast<int64_t>(image_ids.size()))
                        .first->second;
  }
  g.num_images = static_cast<int64_t>(image_ids.size());
  g.final_index.assign(plan.size(), -1);
  for (size_t s = 0; s < plan.size(); ++s) {
    bool any = false;
    for (size_t e = plan[s].begin; e < plan[s].end && !any; ++e) any = accepted[e];
    if (any) g.final_index[s] = g.num_shards++;
  }
  return g;
}

// Each rank adds the global ids to its shards, checksums them and moves them to their final
// names; every rank learns every shard's manifest entry, in pair order.
std::vector<ManifestShard> finish_shards(const Comm& comm, const ShardJobOptions& o,
                                         const LocalWork& work, const GlobalIds& g,
                                         const fs::path& out) {
  std::vector<ManifestShard> shards;
  comm.collective([&] {
    // HDF5 here is not built thread-safe: ids are added on this thread, checksums run in parallel.
    std::vector<ManifestShard> done(work.shards.size());
    for (size_t k = 0; k < work.shards.size(); ++k) {
      const LocalShard& ls = work.shards[k];
      if (g.final_index[ls.plan_index] < 0) {
        fs::remove(ls.tmp);
        continue;
      }
      std::vector<int64_t> pids, iids;
      for (size_t e : ls.kept) {
        pids.push_back(g.pair_id[e]);
        iids.push_back(g.image_id[e]);
      }
      ShardWriter::add_global_ids(ls.tmp.string(), pids, iids);
      done[k] = {final_name(static_cast<size_t>(g.final_index[ls.plan_index])),
                 pids.front(),
                 static_cast<int64_t>(pids.size()),
                 ls.num_images,
                 0,
                 ""};
    }
    parallel_for(work.shards.size(), static_cast<int>(o.threads), [&](size_t k) {
      if (done[k].file.empty()) return;
      const fs::path& tmp = work.shards[k].tmp;
      progress("shard: sha256 of the new shards");
      done[k].bytes = static_cast<int64_t>(fs::file_size(tmp));
      done[k].sha256 = sha256_file(tmp.string());
      fs::rename(tmp, out / done[k].file);
    });
    json mine = json::array();
    for (const auto& ms : done)
      if (!ms.file.empty())
        mine.push_back({{"file", ms.file},
                        {"first", ms.first_pair_id},
                        {"pairs", ms.num_pairs},
                        {"images", ms.num_images},
                        {"bytes", ms.bytes},
                        {"sha256", ms.sha256}});
    for (const auto& blob : comm.allgather_strings(mine.dump()))
      for (const auto& j : json::parse(blob))
        shards.push_back({j["file"], j["first"], j["pairs"], j["images"], j["bytes"], j["sha256"]});
  });
  std::sort(shards.begin(), shards.end(),
            [](const auto& a, const auto& b) { return a.first_pair_id < b.first_pair_id; });
  return shards;
}

Manifest make_manifest(const ShardJobOptions& o, const WordPieceTokenizer& tok,
                       const IngestResult& in, const RejectTally& t, const GlobalIds& g,
                       std::vector<ManifestShard> shards) {
  Manifest m;
  m.created_by = std::string("fnvlp-shard ") + kVersion + " (" + kGitCommit + ")";
  m.created_at = utc_now_iso8601();
  m.image_codec = parse_image_codec(o.image_codec);
  m.image_size = m.image_codec == ImageCodec::kJpeg ? o.max_side : o.image_size;
  m.max_len = o.max_len;
  m.vocab_path = fs::absolute(o.vocab).string();
  m.vocab_sha256 = tok.vocab_sha256();
  m.vocab_size = static_cast<int64_t>(tok.size());
  m.special_tokens = tok.special_tokens();
  m.num_pairs = g.num_pairs;
  m.num_images = g.num_images;
  m.records_total = in.total_records;
  m.records_filtered_by_split = in.filtered_by_split;
  m.rejects_total = static_cast<int64_t>(t.rejects.size());
  m.rejects_by_reason = t.by_reason;
  m.source = {{"input", fs::absolute(o.input).string()},
              {"format", o.format},
              {"image_root", o.image_root.empty() ? "" : fs::absolute(o.image_root).string()},
              {"split_file", o.split_file},
              {"split", o.split},
              {"shard_size", o.shard_size},
              {"image_chunk", o.image_chunk},
              {"max_image_bytes", o.max_image_bytes},
              {"allow_outside_root", o.allow_outside_root},
              {"max_reject_fraction", o.max_reject_fraction}};
  if (m.image_codec == ImageCodec::kJpeg) {
    m.source["max_side"] = o.max_side;
    m.source["jpeg_quality"] = o.jpeg_quality;
  }
  m.shards = std::move(shards);
  return m;
}

}  // namespace

ShardJobResult run_shard_job(const Comm& comm, const ShardJobOptions& o) {
  PhaseTimer timer;
  check_options(o);
  const InputFormat format = parse_input_format(o.format);
  const fs::path out(o.out);
  const ImageFileLimits limits = image_limits(comm, o);
  remove_previous_outputs(comm, out);
  std::optional<WordPieceTokenizer> tok;
  const IngestResult in = read_inputs(comm, o, format, tok);
  timer.mark("read input");
  const auto& entries = in.records;
  const std::vector<Range> plan = plan_shards(entries, static_cast<size_t>(o.shard_size));
  if (comm.is_root())
    spdlog::info(
        "fnvlp-shard: {} records ({} outside the split, {} rejected while reading), {} "
        "captions in {} shards over {} ranks",
        in.total_records, in.filtered_by_split, in.rejects.size(), entries.size(), plan.size(),
        comm.size());

  const LocalWork work = write_local_shards(comm, o, limits, *tok, entries, plan, out);
  timer.mark("decode+write shards");
  const RejectTally tally = exchange_rejects(comm, in, work);
  refuse_if_too_many_rejects(comm, o, tally, work, out);
  timer.mark("exchange rejects");

  const GlobalIds ids = assign_global_ids(entries, tally.accepted, plan);
  std::vector<ManifestShard> shards = finish_shards(comm, o, work, ids, out);
  timer.mark("ids+checksums");
  // The manifest is the commit point: written last, by rank 0, after every shard is in place.
  comm.collective([&] {
    write_rejects(comm, tally, out);
    if (comm.is_root()) make_manifest(o, *tok, in, tally, ids, std::move(shards)).save(o.out);
  });

  timer.mark("manifest");
  ShardJobResult r;
  r.phases = timer.summary();
  r.num_pairs = ids.num_pairs;
  r.num_images = ids.num_images;
  r.num_shards = ids.num_shards;
  r.rejects = static_cast<int64_t>(tally.rejects.size());
  r.images_decoded = comm.allreduce_sum(work.images_decoded);
  r.seconds = timer.total();
  return r;
}

void verify_shard_checksums(const Comm& comm, const std::string& dir) {
  PhaseTimer timer;
  int64_t hashed = 0;
  comm.collective([&] {
    const Manifest m = Manifest::load(dir);  // also confines the shard names to DIR
    const std::string mpath = (fs::path(dir) / kManifestName).string();
    std::string problems;
    for (size_t i = static_cast<size_t>(comm.rank()); i < m.shards.size();
         i += static_cast<size_t>(comm.size())) {
      const ManifestShard& s = m.shards[i];
      const std::string path = (fs::path(dir) / s.file).string();
      progress("sha256 of the shards");
      std::string problem;
      if (!fs::exists(path)) {
        problem = "missing (listed in " + mpath + ")";
      } else if (!fs::is_regular_file(path)) {
        problem = "not a regular file (listed in " + mpath + ")";
      } else if (const auto bytes = static_cast<int64_t>(fs::file_size(path)); bytes != s.bytes) {
        problem = std::to_string(bytes) + " bytes, " + mpath + " says " + std::to_string(s.bytes) +
                  " (truncated or replaced?)";
      } else {
        hashed += bytes;
        if (const std::string sha = sha256_file(path); sha != s.sha256)
          problem = "sha256 " + sha + " differs from " + mpath + "'s " + s.sha256;
      }
      if (!problem.empty()) problems += "\n  " + path + ": " + problem;
    }
    FNVLP_CHECK(problems.empty(),
                "shards that do not match their manifest, not opened:" << problems);
  });
  hashed = comm.allreduce_sum(hashed);
  if (comm.is_root())
    spdlog::info("shards of {}: sha256 of {:.1f} MB checked in {:.2f} s over {} ranks", dir,
                 static_cast<double>(hashed) / 1e6, timer.total(), comm.size());
}

std::vector<std::string> verify_dataset_collective(const Comm& comm, const std::string& dir,
                                                   int64_t* pairs_checked) {
  VerifyReport rep = verify_dataset(dir, comm.rank(), comm.size());
  std::vector<uint8_t> seen = rep.image_id_seen;
  comm.allreduce_max(seen);
  std::string blob;
  for (const auto& p : rep.problems) blob += p + "\n";
  std::vector<std::string> problems;
  for (const auto& b : comm.allgather_strings(blob)) {
    std::istringstream lines(b);
    for (std::string line; std::getline(lines, line);) problems.push_back(line);
  }
  // Manifest-level problems are found by every rank: keep one copy of each.
  std::sort(problems.begin(), problems.end());
  problems.erase(std::unique(problems.begin(), problems.end()), problems.end());
  if (problems.empty()) {
    VerifyReport coverage;
    check_image_coverage(seen, coverage);
    problems = coverage.problems;
  }
  if (pairs_checked) *pairs_checked = comm.allreduce_sum(rep.pairs_checked);
  return problems;
}

}  // namespace fnvlp::data
