// libFuzzer target: the shard reader (ShardReader) on arbitrary HDF5 files. The input is written
// to a temporary .h5 file (the reader opens paths) and read as fnvlp-pretrain would: header
// validation, every per-pair column, then every image row. A bad file must throw fnvlp::Error.
// HDF5's own parser (libhdf5, not instrumented) is exercised too; a crash inside it is reported.
#include <hdf5.h>

#include <cstdint>
#include <cstdlib>
#include <vector>

#include "fnvlp/core/error.hpp"
#include "fnvlp/data/shard.hpp"
#include "fuzz_common.hpp"

using namespace fnvlp::data;

// LeakSanitizer: ignore memory allocated inside libhdf5. libhdf5 1.10.8 leaks on error paths of
// malformed files (H5Dopen2 -> H5D__layout_oh_read keeps the decoded filter pipeline when the
// layout message is missing or bad; later HDF5 releases reset it). fnvlp holds HDF5 memory only
// through ids, which stay reachable from libhdf5's id tables, so no leak of ours is hidden.
extern "C" const char* __lsan_default_suppressions() { return "leak:libhdf5\n"; }

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool quiet = [] {
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);  // errors are read from the stack, not printed
    return true;
  }();
  (void)quiet;
  const std::string& path = fnvlp::fuzz::write_temp(data, size, ".h5");
  try {
    const ShardReader r(path);
    const PairColumns cols = r.read_pairs();
    const int64_t s = r.header().image_size;
    // Bound the buffer: a header may claim any size; the reader must refuse what it cannot hold.
    if (s <= 0 || s > 512 || r.num_images() < 0 || r.num_images() > 4096) return 0;
    std::vector<uint8_t> buf(static_cast<size_t>(s * s * 3));
    for (int64_t row = 0; row < r.num_images(); ++row) r.read_images(row, 1, buf.data());
    (void)cols;
  } catch (const fnvlp::Error&) {
  }
  return 0;
}
