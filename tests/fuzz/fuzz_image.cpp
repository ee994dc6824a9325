// libFuzzer target: the JPEG (libjpeg-turbo) and PNG (libpng) decoders behind fnvlp-shard, and
// the PIL-exact resize that follows them. A bad image must throw ImageError with a reason code;
// a decoded one must have consistent dimensions and survive resize_center_crop.
#include <cstdint>
#include <cstdlib>

#include "fnvlp/core/error.hpp"
#include "fnvlp/data/image.hpp"

using namespace fnvlp::data;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const int min_side = size > 0 ? (data[size - 1] % 4) * 16 : 0;  // 0: full-size decode
  try {
    const Image img = decode_image(data, size, "fuzz-input", min_side);
    if (img.width <= 0 || img.height <= 0 ||
        img.rgb.size() != static_cast<size_t>(img.width) * img.height * 3)
      std::abort();
    // Resizing is linear in the pixels: keep huge decodes from turning into timeouts.
    if (static_cast<int64_t>(img.width) * img.height <= (1 << 20)) {
      const Image out = resize_center_crop(img, 24);
      if (out.width != 24 || out.height != 24 || out.rgb.size() != 24 * 24 * 3) std::abort();
    }
  } catch (const ImageError& e) {
    if (e.reason().empty()) std::abort();
  }
  return 0;
}
