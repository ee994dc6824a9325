#pragma once
// JPEG streams a shard must never hand to the augmentation: what fnvlp-shard would reject at
// shard time, placed in a shard by hand (tests of the jpeg codec's read-time checks).
#include <turbojpeg.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "fnvlp/data/image.hpp"

namespace fnvlp::testutil {

// A w x h picture with structure in both directions (not constant, not symmetric).
inline data::Image gradient_image(int w, int h) {
  data::Image img;
  img.width = w;
  img.height = h;
  img.rgb.resize(static_cast<size_t>(w) * h * 3);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      uint8_t* p = &img.rgb[(static_cast<size_t>(y) * w + x) * 3];
      p[0] = static_cast<uint8_t>(255 * x / (w - 1 > 0 ? w - 1 : 1));
      p[1] = static_cast<uint8_t>(255 * y / (h - 1 > 0 ? h - 1 : 1));
      p[2] = static_cast<uint8_t>((x * 5 + y * 3) % 256);
    }
  return img;
}

// A CMYK JPEG of w x h (TurboJPEG stores it as Adobe YCCK, as Photoshop does).
inline std::vector<uint8_t> cmyk_jpeg(int w, int h) {
  std::vector<uint8_t> px(static_cast<size_t>(w) * h * 4);
  for (size_t i = 0; i < px.size(); ++i) px[i] = static_cast<uint8_t>(i * 7 % 256);
  tjhandle tj = tjInitCompress();
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  const int rc = tjCompress2(tj, px.data(), w, 0, h, TJPF_CMYK, &buf, &size, TJSAMP_444, 90, 0);
  std::vector<uint8_t> out(buf, buf + size);
  tjFree(buf);
  tjDestroy(tj);
  if (rc != 0) throw std::runtime_error("cmyk_jpeg: tjCompress2 failed");
  return out;
}

// `jpeg` with its SOF0 frame header rewritten: sample precision, height and width.
inline std::vector<uint8_t> patch_sof(std::vector<uint8_t> jpeg, int precision, int height,
                                      int width) {
  for (size_t i = 2; i + 9 < jpeg.size(); ++i)
    if (jpeg[i] == 0xFF && jpeg[i + 1] == 0xC0) {
      jpeg[i + 4] = static_cast<uint8_t>(precision);
      jpeg[i + 5] = static_cast<uint8_t>(height >> 8);
      jpeg[i + 6] = static_cast<uint8_t>(height & 0xFF);
      jpeg[i + 7] = static_cast<uint8_t>(width >> 8);
      jpeg[i + 8] = static_cast<uint8_t>(width & 0xFF);
      return jpeg;
    }
  throw std::runtime_error("patch_sof: no SOF0 marker");
}

}  // namespace fnvlp::testutil
