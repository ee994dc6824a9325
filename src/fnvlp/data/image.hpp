#pragma once
// Image codec for ingest and the synthetic generator: JPEG through libjpeg-turbo, PNG through
// libpng, always to 8-bit RGB in HWC order. Decode failures carry a machine-readable reason that
// ends up in rejects.jsonl.
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace fnvlp::data {

struct Image {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> rgb;  // height * width * 3 bytes, row-major, RGB
  size_t bytes() const { return rgb.size(); }
};

// A decode failure of one input; `reason` is one of the codes below.
class ImageError : public std::runtime_error {
 public:
  ImageError(std::string reason, const std::string& message)
      : std::runtime_error(message), reason_(std::move(reason)) {}
  const std::string& reason() const { return reason_; }

 private:
  std::string reason_;
};

namespace image_reason {
inline constexpr const char* kMissing = "missing_image";              // cannot open/read the file
inline constexpr const char* kEmpty = "empty_image";                  // zero bytes or 0x0 pixels
inline constexpr const char* kTruncated = "truncated_image";          // data ends early
inline constexpr const char* kCorrupt = "corrupt_image";              // decoder error or warning
inline constexpr const char* kUnsupported = "unsupported_image";      // neither JPEG nor PNG
inline constexpr const char* kOutsideRoot = "image_outside_root";     // resolves outside the root
inline constexpr const char* kNotRegular = "image_not_regular_file";  // device, FIFO, directory
inline constexpr const char* kTooLarge = "image_too_large";           // above the size cap
}  // namespace image_reason

enum class ImageFormat { kJpeg, kPng, kUnknown };
ImageFormat sniff_format(const uint8_t* data, size_t size);

// Decodes JPEG or PNG bytes to RGB. `name` is used in messages only. When `min_side` > 0 a JPEG
// may be decoded at a reduced DCT scale whose shorter side is still >= min_side (much faster for
// large photos that are resized down anyway). Throws ImageError.
Image decode_image(const uint8_t* data, size_t size, const std::string& name, int min_side = 0);

// A JPEG as fnvlp-shard stores it (--image-codec jpeg): 8-bit YCbCr or greyscale of exactly
// width x height, as the shard's image_hw records. Another size, CMYK/YCCK, another precision, a
// cut or corrupt stream: ImageError, raised before or instead of handing back pixels.
Image decode_stored_jpeg(const uint8_t* data, size_t size, int width, int height,
                         const std::string& name, int min_side = 0);

// What read_image_file accepts before it reads a byte.
struct ImageFileLimits {
  // Canonical directory the file must resolve inside (after every symlink); empty: anywhere.
  std::string root;
  // Files larger than this are refused unread; the read also stops there if the file grows.
  int64_t max_bytes = int64_t{64} << 20;
};

// Reads a file and decodes it. Throws ImageError: kMissing (cannot open/read), kNotRegular (a
// device, FIFO or directory, never opened), kOutsideRoot, kTooLarge, or a decode reason.
Image read_image_file(const std::string& path, int min_side = 0,
                      const ImageFileLimits& limits = {});

// Resizes so the shorter side equals `size` (antialiased triangle filter, as PIL's BILINEAR),
// then crops the centred size x size square. Returns the input unchanged when already square of
// that size.
Image resize_center_crop(const Image& in, int size);

// Scales down so that the longer side is max_side (the shorter one rounded, at least 1 px),
// keeping the aspect ratio, with the filter of resize_center_crop; smaller images are returned
// unchanged. What --image-codec jpeg stores.
Image resize_max_side(const Image& in, int max_side);

// Encoders (synthetic data, --image-codec jpeg, tests); JPEG 4:2:0. Throw fnvlp::Error on failure.
std::vector<uint8_t> encode_png(const Image& img);
void write_png_file(const std::string& path, const Image& img);
std::vector<uint8_t> encode_jpeg(const Image& img, int quality);

}  // namespace fnvlp::data
