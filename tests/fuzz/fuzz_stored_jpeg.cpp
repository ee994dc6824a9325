// libFuzzer target: what the loader does with each JPEG a jpeg shard hands it (Augmenter,
// --verify): decode_stored_jpeg against the size the shard records, then the resizes of the
// augmentation and of fnvlp-shard. The recorded size is either the stream's own (found in its SOF
// marker, so that the decoder is reached) or taken from the input's last bytes (so that the size
// check is). A bad stream must throw ImageError with a reason code, never crash.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <utility>

#include "fnvlp/core/error.hpp"
#include "fnvlp/data/image.hpp"

using namespace fnvlp::data;

namespace {

// Height and width of the first SOFn marker (baseline, extended, progressive), or {0, 0}.
std::pair<int, int> sof_size(const uint8_t* d, size_t n) {
  for (size_t i = 2; i + 8 < n; ++i)
    if (d[i] == 0xFF && (d[i + 1] == 0xC0 || d[i + 1] == 0xC1 || d[i + 1] == 0xC2))
      return {d[i + 5] << 8 | d[i + 6], d[i + 7] << 8 | d[i + 8]};
  return {0, 0};
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3) return 0;
  const uint8_t mode = data[size - 1];
  auto [h, w] = sof_size(data, size);
  if (mode & 1) {
    h = 1 + (data[size - 2] % 64);
    w = 1 + (data[size - 3] % 64);
  }
  const int min_side = (mode >> 1) % 3 == 0 ? 0 : 16;
  try {
    const Image img = decode_stored_jpeg(data, size, w, h, "fuzz-input", min_side);
    if (img.width <= 0 || img.height <= 0 ||
        img.rgb.size() != static_cast<size_t>(img.width) * img.height * 3)
      std::abort();
    if (min_side == 0 && (img.width != w || img.height != h)) std::abort();
    if (static_cast<int64_t>(img.width) * img.height <= (1 << 20)) {
      const Image sq = resize_center_crop(img, 24);
      const Image small = resize_max_side(img, 40);
      if (sq.width != 24 || sq.height != 24 || std::max(small.width, small.height) > 40)
        std::abort();
    }
  } catch (const ImageError& e) {
    if (e.reason().empty()) std::abort();
  }
  return 0;
}
