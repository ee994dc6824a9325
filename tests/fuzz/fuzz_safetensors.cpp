// libFuzzer target: safetensors files (store/safetensors.hpp), the format of the weights
// fnvlp-pretrain --init-from reads. Any input must parse or throw fnvlp::Error, never crash or
// allocate beyond its own size; an accepted header's tensors must tile the data region exactly
// and read back within the file.
#include <cstdint>
#include <cstdlib>

#include "fnvlp/core/error.hpp"
#include "fnvlp/store/safetensors.hpp"
#include "fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = fnvlp::fuzz::write_temp(data, size, ".safetensors");
  try {
    const auto h = fnvlp::store::read_safetensors_header(path);
    uint64_t bytes = 0;
    for (const auto& t : h.tensors) {
      if (t.end - t.begin != t.numel() * fnvlp::store::safetensors_dtype_size(t.dtype))
        std::abort();
      bytes += t.end - t.begin;
      if (fnvlp::store::read_safetensors_bytes(h, t).size() != t.end - t.begin) std::abort();
    }
    if (h.data_offset + bytes != size) std::abort();
  } catch (const fnvlp::Error&) {
  }
  return 0;
}
