#pragma once
// safetensors files (Hugging Face's format, timm's and transformers' default): an 8-byte
// little-endian header length N, N bytes of JSON {name: {dtype, shape, data_offsets: [begin,
// end]}, "__metadata__": {str: str}}, then the tensors' bytes, offsets relative to the byte after
// the header. Parsed here without torch and without trusting a byte of it: the header length is
// bounded before anything is allocated, every offset and shape is checked against the file's
// size and the dtype's width, and the tensors must tile the data region exactly (no overlap, no
// hole, as the reference implementation requires). Every error names the file, the tensor and why.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace fnvlp::store {

// Headers above this are refused before they are read (the largest real ones, LLMs with
// thousands of tensors, are a few MB; the reference implementation's limit is 100 MB).
inline constexpr uint64_t kSafetensorsMaxHeader = 100ull << 20;

struct SafetensorsEntry {
  std::string name;
  std::string dtype;  // "F32", "F16", "BF16", "F64", "I64", "I32", "I16", "I8", "U8", "BOOL"
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // byte range within the data region
  uint64_t numel() const;
};

struct SafetensorsHeader {
  std::string file;
  uint64_t data_offset = 0;  // 8 + header length
  uint64_t file_size = 0;
  std::vector<SafetensorsEntry> tensors;  // in the order of their offsets
  std::map<std::string, std::string> metadata;
  const SafetensorsEntry* find(const std::string& name) const;
};

// Bytes per element of a safetensors dtype; 0 for a name the format does not define.
int safetensors_dtype_size(const std::string& dtype);

// Parses the header from the first bytes of a file of `file_size` bytes (`prefix` holds at least
// the 8-byte length and, if the length is in bounds, the header). Throws fnvlp::Error naming
// `file` on any inconsistency. Torch-free: the fuzz target's entry point.
SafetensorsHeader parse_safetensors(const std::string& file, const std::string& prefix,
                                    uint64_t file_size);

// Reads and parses a file's header (at most 8 + kSafetensorsMaxHeader bytes are read).
SafetensorsHeader read_safetensors_header(const std::string& path);

// Copies one tensor's bytes (entry.end - entry.begin of them) into dst.
void read_safetensors_bytes(const SafetensorsHeader& h, const SafetensorsEntry& e, void* dst);

// Bytes of a parsed tensor as a whole vector (the fuzz target and small files).
std::vector<char> read_safetensors_bytes(const SafetensorsHeader& h, const SafetensorsEntry& e);

struct SafetensorsOut {
  std::string name, dtype;
  std::vector<int64_t> shape;
  const void* data = nullptr;  // numel * dtype size bytes, little-endian
};

// Writes a safetensors file through PATH.tmp + fsync + rename: the header lists the tensors by
// name (sorted), their data follows in that order, the header padded with spaces to a multiple
// of 8 bytes so every tensor starts 8-byte aligned (as the reference writer does).
void write_safetensors(const std::string& path, const std::vector<SafetensorsOut>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace fnvlp::store
