// Encoders of image.hpp: PNG through libpng's simplified API, JPEG through TurboJPEG. Decoding
// lives in image.cpp.
#include <png.h>
#include <turbojpeg.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "fnvlp/core/error.hpp"
#include "fnvlp/data/image.hpp"

namespace fnvlp::data {

namespace {

void check_image(const Image& img, const char* what) {
  FNVLP_CHECK(img.width > 0 && img.height > 0,
              what << ": image has no pixels (" << img.width << "x" << img.height << ")");
  FNVLP_CHECK(img.rgb.size() == static_cast<size_t>(img.width) * img.height * 3,
              what << ": " << img.width << "x" << img.height << " RGB image needs "
                   << static_cast<size_t>(img.width) * img.height * 3 << " bytes, has "
                   << img.rgb.size());
}

png_image png_header(const Image& img) {
  png_image png;
  std::memset(&png, 0, sizeof(png));
  png.version = PNG_IMAGE_VERSION;
  png.width = static_cast<png_uint_32>(img.width);
  png.height = static_cast<png_uint_32>(img.height);
  png.format = PNG_FORMAT_RGB;
  return png;
}

}  // namespace

std::vector<uint8_t> encode_png(const Image& img) {
  check_image(img, "encode_png");
  png_image png = png_header(img);
  // The worst case of an uncompressible image bounds the output, so one call suffices.
  png_alloc_size_t size = PNG_IMAGE_PNG_SIZE_MAX(png);
  std::vector<uint8_t> out(size);
  int ok = png_image_write_to_memory(&png, out.data(), &size, 0, img.rgb.data(), 0, nullptr);
  std::string message = png.message;
  png_image_free(&png);
  FNVLP_CHECK(ok != 0, "encode_png: libpng failed: " << message);
  out.resize(size);
  return out;
}

void write_png_file(const std::string& path, const Image& img) {
  check_image(img, "write_png_file");
  // Written under a temporary name in the same directory and renamed: the rename is atomic, so a
  // crash leaves either no file or a complete one under `path`, never half a PNG.
  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  png_image png = png_header(img);
  errno = 0;
  int ok = png_image_write_to_file(&png, tmp.c_str(), 0, img.rgb.data(), 0, nullptr);
  std::string message = png.message;
  png_image_free(&png);
  if (ok == 0) {
    int err = errno;
    std::remove(tmp.c_str());
    FNVLP_FAIL("write_png_file: cannot write "
               << path << ": " << message
               << (err ? std::string(" (") + std::strerror(err) + ")" : ""));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    std::remove(tmp.c_str());
    FNVLP_FAIL("write_png_file: cannot rename " << tmp << " to " << path << ": "
                                                << std::strerror(err));
  }
}

std::vector<uint8_t> encode_jpeg(const Image& img, int quality) {
  check_image(img, "encode_jpeg");
  FNVLP_CHECK(quality >= 1 && quality <= 100,
              "encode_jpeg: quality must be in 1..100, got " << quality);
  // One compressor per thread: fnvlp-shard encodes every image of a jpeg shard.
  thread_local std::unique_ptr<void, int (*)(tjhandle)> handle(tjInitCompress(), tjDestroy);
  FNVLP_CHECK(handle != nullptr, "encode_jpeg: tjInitCompress failed: " << tjGetErrorStr2(nullptr));
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  int rc = tjCompress2(handle.get(), img.rgb.data(), img.width, 0, img.height, TJPF_RGB, &buf,
                       &size, TJSAMP_420, quality, 0);
  std::unique_ptr<unsigned char, void (*)(unsigned char*)> owned(buf, tjFree);
  FNVLP_CHECK(rc == 0, "encode_jpeg: tjCompress2 failed: " << tjGetErrorStr2(handle.get()));
  return std::vector<uint8_t>(buf, buf + size);
}

}  // namespace fnvlp::data
