// Decoding and resize/centre-crop (src/fnvlp/data/image.cpp). Test inputs are built here with
// libpng's and TurboJPEG's own encoders, so these tests do not depend on image_encode.cpp.
#include <gtest/gtest.h>
#include <png.h>
#include <sys/stat.h>
#include <turbojpeg.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "fnvlp/core/error.hpp"
#include "fnvlp/data/image.hpp"
#include "hostile_jpeg.hpp"

namespace {

using fnvlp::data::decode_image;
using fnvlp::data::decode_stored_jpeg;
using fnvlp::data::Image;
using fnvlp::data::ImageError;
using fnvlp::data::ImageFormat;
using fnvlp::data::read_image_file;
using fnvlp::data::resize_center_crop;
using fnvlp::data::resize_max_side;
using fnvlp::data::sniff_format;
namespace reason = fnvlp::data::image_reason;

const std::string kRealJpeg =
    FNVLP_SHARED_DIR "/data/flickr8k-128/images/1000268201_693b08cb0e.jpg";

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + "/fnvlp_test_image_" + name;
}

void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

std::vector<uint8_t> head(const std::vector<uint8_t>& v, size_t n) {
  return std::vector<uint8_t>(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(n));
}

// Decodes and expects an ImageError with `want`; returns its message.
std::string expect_error(const std::vector<uint8_t>& bytes, const std::string& name,
                         const char* want) {
  try {
    const Image img = decode_image(bytes.data(), bytes.size(), name);
    ADD_FAILURE() << name << ": decoded " << img.width << "x" << img.height << ", expected "
                  << want;
  } catch (const ImageError& e) {
    EXPECT_EQ(e.reason(), want) << e.what();
    EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
    return e.what();
  }
  return "";
}

// Encodes with libpng's simplified writer; `format` is a PNG_FORMAT_* value, `colormap` is
// needed for the colour-mapped formats, 16-bit formats take uint16 samples in `pixels`.
std::vector<uint8_t> make_png(int w, int h, png_uint_32 format, const void* pixels,
                              const void* colormap = nullptr, int colormap_entries = 0) {
  png_image img;
  std::memset(&img, 0, sizeof(img));
  img.version = PNG_IMAGE_VERSION;
  img.width = static_cast<png_uint_32>(w);
  img.height = static_cast<png_uint_32>(h);
  img.format = format;
  img.colormap_entries = static_cast<png_uint_32>(colormap_entries);
  png_alloc_size_t size = 0;
  EXPECT_TRUE(png_image_write_to_memory(&img, nullptr, &size, 0, pixels, 0, colormap))
      << img.message;
  std::vector<uint8_t> out(size);
  EXPECT_TRUE(png_image_write_to_memory(&img, out.data(), &size, 0, pixels, 0, colormap))
      << img.message;
  out.resize(size);
  return out;
}

// Encodes with TurboJPEG; `pixel_format` is a TJPF_* value matching `pixels`.
std::vector<uint8_t> make_jpeg(int w, int h, int pixel_format, const std::vector<uint8_t>& pixels,
                               int subsamp, int quality) {
  tjhandle tj = tjInitCompress();
  EXPECT_NE(tj, nullptr);
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  EXPECT_EQ(tjCompress2(tj, pixels.data(), w, 0, h, pixel_format, &buf, &size, subsamp, quality,
                        TJFLAG_ACCURATEDCT),
            0)
      << tjGetErrorStr2(tj);
  std::vector<uint8_t> out(buf, buf + size);
  tjFree(buf);
  tjDestroy(tj);
  return out;
}

// PNG's chunk CRC (ISO 3309 / zlib crc32), for forging a valid header.
uint32_t png_crc(const uint8_t* p, size_t n) {
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
  }
  return c ^ 0xFFFFFFFFu;
}

// A deterministic pattern with every channel varying (and wrapping) in both directions.
Image synthetic(int w, int h) {
  Image img;
  img.width = w;
  img.height = h;
  img.rgb.resize(static_cast<size_t>(w) * h * 3);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      uint8_t* p = &img.rgb[(static_cast<size_t>(y) * w + x) * 3];
      p[0] = static_cast<uint8_t>((x * 7 + y * 3) % 256);
      p[1] = static_cast<uint8_t>((x * x + 2 * y) % 256);
      p[2] = static_cast<uint8_t>(((255 - 5 * y + x) % 256 + 256) % 256);
    }
  }
  return img;
}

Image solid(int w, int h, uint8_t r, uint8_t g, uint8_t b) {
  Image img;
  img.width = w;
  img.height = h;
  for (int i = 0; i < w * h; ++i) img.rgb.insert(img.rgb.end(), {r, g, b});
  return img;
}

const uint8_t* pixel(const Image& img, int x, int y) {
  return &img.rgb[(static_cast<size_t>(y) * img.width + x) * 3];
}

void expect_near_all(const Image& got, const std::vector<int>& want, int tol, const char* what) {
  ASSERT_EQ(got.rgb.size(), want.size()) << what;
  int worst = 0;
  for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::abs(got.rgb[i] - want[i]));
  EXPECT_LE(worst, tol) << what;
}

// ------------------------------------------------------------------------------------------
// Decoding

TEST(ImageDecode, RealJpegIs128x128) {
  const Image img = read_image_file(kRealJpeg);
  EXPECT_EQ(img.width, 128);
  EXPECT_EQ(img.height, 128);
  ASSERT_EQ(img.bytes(), 128u * 128 * 3);
  int lo = 255, hi = 0;  // a photograph, not a flat or all-black buffer
  for (uint8_t v : img.rgb) lo = std::min<int>(lo, v), hi = std::max<int>(hi, v);
  EXPECT_GT(hi - lo, 100);
  // Memory and file paths agree.
  const std::vector<uint8_t> bytes = read_bytes(kRealJpeg);
  EXPECT_EQ(decode_image(bytes.data(), bytes.size(), "mem").rgb, img.rgb);
}

TEST(ImageDecode, SniffFormat) {
  const std::vector<uint8_t> jpeg = read_bytes(kRealJpeg);
  EXPECT_EQ(sniff_format(jpeg.data(), jpeg.size()), ImageFormat::kJpeg);
  const uint8_t gray[4] = {0, 64, 128, 255};
  const std::vector<uint8_t> png = make_png(2, 2, PNG_FORMAT_GRAY, gray);
  EXPECT_EQ(sniff_format(png.data(), png.size()), ImageFormat::kPng);
  EXPECT_EQ(sniff_format(png.data(), 7), ImageFormat::kUnknown);  // signature cut short
  EXPECT_EQ(sniff_format(jpeg.data(), 2), ImageFormat::kUnknown);
  const uint8_t gif[6] = {'G', 'I', 'F', '8', '9', 'a'};
  EXPECT_EQ(sniff_format(gif, sizeof(gif)), ImageFormat::kUnknown);
  EXPECT_EQ(sniff_format(nullptr, 0), ImageFormat::kUnknown);
}

TEST(ImageDecode, TruncatedJpegIsAnError) {
  const std::vector<uint8_t> jpeg = read_bytes(kRealJpeg);
  ASSERT_EQ(jpeg[jpeg.size() - 2], 0xFF);
  ASSERT_EQ(jpeg[jpeg.size() - 1], 0xD9);
  // libjpeg alone would only warn and return a grey-filled image.
  std::string msg = expect_error(head(jpeg, jpeg.size() / 2), "half.jpg", reason::kTruncated);
  EXPECT_NE(msg.find("Premature end of JPEG file"), std::string::npos) << msg;
  expect_error(head(jpeg, jpeg.size() - 2), "no-eoi.jpg", reason::kTruncated);
  expect_error(head(jpeg, 100), "header-only.jpg", reason::kTruncated);
  // Also at a reduced DCT scale, where fewer coefficients are needed.
  const std::vector<uint8_t> half = head(jpeg, jpeg.size() / 2);
  EXPECT_THROW(decode_image(half.data(), half.size(), "half.jpg", 16), ImageError);
  // Bytes after EOI are harmless.
  std::vector<uint8_t> trailing = jpeg;
  trailing.insert(trailing.end(), {0x00, 0x12, 0x34});
  EXPECT_EQ(decode_image(trailing.data(), trailing.size(), "trailing.jpg").width, 128);
}

TEST(ImageDecode, CorruptJpegMarkersAreErrors) {
  const std::vector<uint8_t> jpeg = read_bytes(kRealJpeg);
  // Walk the marker segments up to SOS to find the structural bytes to damage.
  size_t sof = 0, dht = 0, sos = 0;
  for (size_t i = 2; i + 4 <= jpeg.size();) {
    ASSERT_EQ(jpeg[i], 0xFF) << "at " << i;
    const uint8_t m = jpeg[i + 1];
    if (m == 0xC0 || m == 0xC2) sof = i;
    if (m == 0xC4 && dht == 0) dht = i;
    if (m == 0xDA) {
      sos = i;
      break;
    }
    i += 2 + (jpeg[i + 2] << 8 | jpeg[i + 3]);
  }
  ASSERT_GT(sof, 0u);
  ASSERT_GT(dht, 0u);
  ASSERT_GT(sos, 0u);
  const struct {
    const char* name;
    size_t offset;
  } flips[] = {
      {"sof-marker", sof + 1},     {"sof-length", sof + 3}, {"sof-precision", sof + 4},
      {"sof-components", sof + 9}, {"dht-length", dht + 3}, {"dht-class", dht + 4},
      {"sos-marker", sos + 1},     {"sos-length", sos + 3},
  };
  for (const auto& f : flips) {
    std::vector<uint8_t> bad = jpeg;
    bad[f.offset] ^= 0xFF;
    std::string msg = expect_error(bad, f.name, reason::kCorrupt);
    EXPECT_NE(msg.find("JPEG"), std::string::npos) << msg;
  }
  // The decoder handle is reused per thread: a failure must not poison the next image.
  EXPECT_EQ(decode_image(jpeg.data(), jpeg.size(), "after-errors").width, 128);
}

TEST(ImageDecode, EmptyGarbageAndMissing) {
  expect_error({}, "empty-bytes", reason::kEmpty);
  const std::string empty_file = temp_path("empty.jpg");
  write_bytes(empty_file, {});
  try {
    read_image_file(empty_file);
    ADD_FAILURE() << "zero-byte file decoded";
  } catch (const ImageError& e) {
    EXPECT_EQ(e.reason(), reason::kEmpty);
    EXPECT_NE(std::string(e.what()).find(empty_file), std::string::npos) << e.what();
  }
  std::remove(empty_file.c_str());

  std::vector<uint8_t> garbage(4096);
  uint32_t s = 12345;
  for (auto& b : garbage) b = static_cast<uint8_t>((s = s * 1103515245u + 12345u) >> 24);
  const std::string msg = expect_error(garbage, "garbage.bin", reason::kUnsupported);
  EXPECT_NE(msg.find("neither JPEG nor PNG"), std::string::npos) << msg;

  const std::string missing = temp_path("does/not/exist.jpg");
  try {
    read_image_file(missing);
    ADD_FAILURE() << "missing file decoded";
  } catch (const ImageError& e) {
    EXPECT_EQ(e.reason(), reason::kMissing);
    EXPECT_NE(std::string(e.what()).find(missing), std::string::npos) << e.what();
  }
}

TEST(ImageDecode, GrayscaleJpegBecomesRgb) {
  const int w = 40, h = 24;
  std::vector<uint8_t> gray(static_cast<size_t>(w) * h);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) gray[static_cast<size_t>(y) * w + x] = static_cast<uint8_t>(x * 6);
  const std::vector<uint8_t> jpeg = make_jpeg(w, h, TJPF_GRAY, gray, TJSAMP_GRAY, 95);
  const Image img = decode_image(jpeg.data(), jpeg.size(), "gray.jpg");
  ASSERT_EQ(img.width, w);
  ASSERT_EQ(img.height, h);
  for (int i = 0; i < w * h; ++i) {
    const uint8_t* p = &img.rgb[static_cast<size_t>(i) * 3];
    EXPECT_EQ(p[0], p[1]);
    EXPECT_EQ(p[1], p[2]);
    EXPECT_NEAR(p[0], gray[i], 6) << "pixel " << i;
  }
}

TEST(ImageDecode, CmykJpegIsConvertedWithAdobeInversion) {
  // TurboJPEG writes TJPF_CMYK input as an Adobe YCCK JPEG and stores the bytes as given. Read
  // under the Adobe convention (stored = 255 - ink), as Pillow does, these bytes are:
  //   stored (255, 0, 0, 255) = ink (0, 255, 255, 0) -> red
  //   stored (255, 255, 255, 128) = no colour ink, k = 127 -> grey 128
  const int w = 16, h = 16;
  const struct {
    uint8_t cmyk[4];
    int rgb[3];
  } cases[] = {{{255, 0, 0, 255}, {255, 0, 0}}, {{255, 255, 255, 128}, {128, 128, 128}}};
  for (const auto& c : cases) {
    std::vector<uint8_t> px;
    for (int i = 0; i < w * h; ++i) px.insert(px.end(), c.cmyk, c.cmyk + 4);
    const std::vector<uint8_t> jpeg = make_jpeg(w, h, TJPF_CMYK, px, TJSAMP_444, 100);
    const Image img = decode_image(jpeg.data(), jpeg.size(), "cmyk.jpg");
    ASSERT_EQ(img.width, w);
    const uint8_t* p = pixel(img, 8, 8);
    for (int k = 0; k < 3; ++k) EXPECT_NEAR(p[k], c.rgb[k], 3) << "channel " << k;
  }
}

TEST(ImageDecode, DctScalingKeepsShorterSideAtLeastMinSide) {
  const int w = 512, h = 384;
  const Image src = synthetic(w, h);
  const std::vector<uint8_t> jpeg = make_jpeg(w, h, TJPF_RGB, src.rgb, TJSAMP_420, 90);
  const Image full = decode_image(jpeg.data(), jpeg.size(), "big.jpg");
  EXPECT_EQ(full.width, w);
  EXPECT_EQ(full.height, h);
  // Scales <= 1/2 only: 1/2 -> 256x192, 3/8 -> 192x144, 1/4 -> 128x96, 1/8 -> 64x48.
  const struct {
    int min_side, w, h;
  } cases[] = {{100, 192, 144}, {144, 192, 144}, {145, 256, 192}, {96, 128, 96},
               {10, 64, 48},    {193, 512, 384}, {1000, 512, 384}};
  for (const auto& c : cases) {
    const Image img = decode_image(jpeg.data(), jpeg.size(), "big.jpg", c.min_side);
    EXPECT_EQ(img.width, c.w) << "min_side " << c.min_side;
    EXPECT_EQ(img.height, c.h) << "min_side " << c.min_side;
    EXPECT_EQ(img.bytes(), static_cast<size_t>(img.width) * img.height * 3);
  }
  // The reduced decode is the same picture: compare a smooth region's mean colour.
  const Image quarter = decode_image(jpeg.data(), jpeg.size(), "big.jpg", 96);
  const Image quarter_ref = resize_center_crop(full, 96);
  const Image quarter_sq = resize_center_crop(quarter, 96);
  double diff = 0;
  for (size_t i = 0; i < quarter_sq.rgb.size(); ++i)
    diff += std::abs(quarter_sq.rgb[i] - quarter_ref.rgb[i]);
  EXPECT_LT(diff / quarter_sq.rgb.size(), 12.0);
}

TEST(ImageDecode, PngRgbGrayPaletteRoundTrip) {
  const int w = 5, h = 3;
  const Image rgb = synthetic(w, h);
  std::vector<uint8_t> png = make_png(w, h, PNG_FORMAT_RGB, rgb.rgb.data());
  Image img = decode_image(png.data(), png.size(), "rgb.png");
  EXPECT_EQ(img.width, w);
  EXPECT_EQ(img.height, h);
  EXPECT_EQ(img.rgb, rgb.rgb);

  std::vector<uint8_t> gray(w * h);
  for (int i = 0; i < w * h; ++i) gray[i] = static_cast<uint8_t>(i * 17);
  png = make_png(w, h, PNG_FORMAT_GRAY, gray.data());
  img = decode_image(png.data(), png.size(), "gray.png");
  ASSERT_EQ(img.bytes(), static_cast<size_t>(w * h * 3));
  for (int i = 0; i < w * h; ++i) {
    for (int k = 0; k < 3; ++k) EXPECT_EQ(img.rgb[i * 3 + k], gray[i]) << i;
  }

  const uint8_t palette[4 * 3] = {255, 0, 0, 0, 255, 0, 0, 0, 255, 10, 20, 30};
  std::vector<uint8_t> index(w * h);
  for (int i = 0; i < w * h; ++i) index[i] = static_cast<uint8_t>(i % 4);
  png = make_png(w, h, PNG_FORMAT_RGB_COLORMAP, index.data(), palette, 4);
  img = decode_image(png.data(), png.size(), "palette.png");
  for (int i = 0; i < w * h; ++i) {
    for (int k = 0; k < 3; ++k) EXPECT_EQ(img.rgb[i * 3 + k], palette[index[i] * 3 + k]) << i;
  }
}

TEST(ImageDecode, PngAlphaIsCompositedOnWhite) {
  // Opaque pixels keep their colour, transparent ones become white, half-transparent black lies
  // between: libpng composites in linear light, 0.5 -> 0.5^(1/2.2) * 255 = 186, not 128.
  const uint8_t rgba[4 * 4] = {10, 200, 30, 255, 0, 0, 0, 0, 0, 0, 0, 128, 255, 0, 0, 0};
  const std::vector<uint8_t> png = make_png(4, 1, PNG_FORMAT_RGBA, rgba);
  const Image img = decode_image(png.data(), png.size(), "rgba.png");
  ASSERT_EQ(img.width, 4);
  EXPECT_EQ(img.rgb[0], 10);
  EXPECT_EQ(img.rgb[1], 200);
  EXPECT_EQ(img.rgb[2], 30);
  for (int k = 0; k < 3; ++k) EXPECT_EQ(img.rgb[3 + k], 255);
  for (int k = 0; k < 3; ++k) EXPECT_NEAR(img.rgb[6 + k], 186, 2);
  for (int k = 0; k < 3; ++k) EXPECT_EQ(img.rgb[9 + k], 255);
}

TEST(ImageDecode, Png16BitIsReducedTo8Bit) {
  // PNG_FORMAT_LINEAR_RGB writes 16-bit linear samples (gAMA 1.0); libpng converts them to 8-bit
  // with its 1/2.2 power-law approximation of sRGB: 0 -> 0, 1 -> 255, 0.5 -> 0.5^(1/2.2) = 186.
  const uint16_t px[3 * 3] = {0, 0, 0, 65535, 65535, 65535, 32768, 32768, 32768};
  const std::vector<uint8_t> png = make_png(3, 1, PNG_FORMAT_LINEAR_RGB, px);
  const Image img = decode_image(png.data(), png.size(), "deep.png");
  ASSERT_EQ(img.width, 3);
  for (int k = 0; k < 3; ++k) {
    EXPECT_EQ(img.rgb[k], 0);
    EXPECT_EQ(img.rgb[3 + k], 255);
    EXPECT_NEAR(img.rgb[6 + k], 186, 1);
  }
}

TEST(ImageDecode, TruncatedOrCorruptPngIsAnError) {
  const Image src = synthetic(64, 48);
  const std::vector<uint8_t> png = make_png(64, 48, PNG_FORMAT_RGB, src.rgb.data());
  expect_error(head(png, png.size() / 2), "half.png", reason::kTruncated);
  expect_error(head(png, png.size() - 12), "no-iend.png", reason::kTruncated);  // IEND removed
  expect_error(head(png, 20), "header-only.png", reason::kTruncated);
  std::vector<uint8_t> bad = png;
  bad[16] ^= 0x01;  // IHDR width: CRC mismatch
  expect_error(bad, "bad-ihdr.png", reason::kCorrupt);
  bad = png;
  bad[png.size() / 2] ^= 0xFF;  // inside IDAT: CRC mismatch
  expect_error(bad, "bad-idat.png", reason::kCorrupt);
}

TEST(ImageDecode, AbsurdDimensionsAreRefused) {
  // A valid IHDR for 70000 x 1: rejected before any pixel buffer is allocated.
  std::vector<uint8_t> png = make_png(1, 1, PNG_FORMAT_GRAY, "\x80");
  const uint32_t big = 70000;
  png[16] = big >> 24, png[17] = (big >> 16) & 255, png[18] = (big >> 8) & 255, png[19] = big & 255;
  const uint32_t crc = png_crc(&png[12], 17);  // over chunk type + data
  png[29] = crc >> 24, png[30] = (crc >> 16) & 255, png[31] = (crc >> 8) & 255, png[32] = crc & 255;
  const std::string msg = expect_error(png, "wide.png", reason::kUnsupported);
  EXPECT_NE(msg.find("too large"), std::string::npos) << msg;
}

// ------------------------------------------------------------------------------------------
// Resize

TEST(ImageResize, SquareOfTargetSizeIsReturnedUnchanged) {
  const Image src = synthetic(32, 32);
  const Image out = resize_center_crop(src, 32);
  EXPECT_EQ(out.width, 32);
  EXPECT_EQ(out.rgb, src.rgb);
}

TEST(ImageResize, ConstantStaysConstant) {
  for (const auto& dims : {std::pair<int, int>{300, 200}, {200, 300}, {50, 80}, {1, 1}}) {
    const Image out = resize_center_crop(solid(dims.first, dims.second, 17, 130, 251), 64);
    ASSERT_EQ(out.width, 64);
    ASSERT_EQ(out.height, 64);
    for (int i = 0; i < 64 * 64; ++i) {
      ASSERT_EQ(out.rgb[i * 3 + 0], 17);
      ASSERT_EQ(out.rgb[i * 3 + 1], 130);
      ASSERT_EQ(out.rgb[i * 3 + 2], 251);
    }
  }
}

TEST(ImageResize, CropIsCentred) {
  // 300x200 in thirds red | green | blue -> resized 150x100 -> crop columns [25, 125): the
  // resized thirds end at 50 and 100, so the output holds red [0, 25), green [25, 75), blue
  // [75, 100), symmetric about the centre.
  Image src = solid(300, 200, 0, 0, 0);
  for (int y = 0; y < 200; ++y) {
    for (int x = 0; x < 300; ++x) src.rgb[(static_cast<size_t>(y) * 300 + x) * 3 + x / 100] = 255;
  }
  const Image out = resize_center_crop(src, 100);
  ASSERT_EQ(out.width, 100);
  ASSERT_EQ(out.height, 100);
  for (int y : {0, 50, 99}) {
    const uint8_t* l = pixel(out, 10, y);
    const uint8_t* c = pixel(out, 50, y);
    const uint8_t* r = pixel(out, 89, y);
    EXPECT_EQ(std::vector<int>(l, l + 3), (std::vector<int>{255, 0, 0}));
    EXPECT_EQ(std::vector<int>(c, c + 3), (std::vector<int>{0, 255, 0}));
    EXPECT_EQ(std::vector<int>(r, r + 3), (std::vector<int>{0, 0, 255}));
    for (int x = 0; x < 100; ++x) {  // mirror symmetry: red <-> blue, green stays
      EXPECT_EQ(pixel(out, x, y)[0], pixel(out, 99 - x, y)[2]) << x;
      EXPECT_EQ(pixel(out, x, y)[1], pixel(out, 99 - x, y)[1]) << x;
    }
  }
  // The transition straddles resized column 50 = output column 25 (antialiased, not a hard cut).
  EXPECT_GT(pixel(out, 24, 50)[0], pixel(out, 26, 50)[0]);
}

// Expected values from Pillow 9.4 (Debian python3-pil), generated with
//   from PIL import Image
//   def synth(w, h):
//       im = Image.new('RGB', (w, h))
//       im.putdata([((x*7 + y*3) % 256, (x*x + 2*y) % 256, (255 - 5*y + x) % 256)
//                   for y in range(h) for x in range(w)])
//       return im
//   def rcc(im, s):  # torchvision Resize(s) + CenterCrop(s)
//       w, h = im.size
//       nw, nh = (s, int(s*h/w)) if w <= h else (int(s*w/h), s)
//       r = im.resize((nw, nh), Image.BILINEAR)
//       l, t = int(round((nw - s) / 2.0)), int(round((nh - s) / 2.0))
//       return r.crop((l, t, l + s, t + s))
//   print([v for p in rcc(synth(W, H), S).getdata() for v in p])
// The implementation reproduces them exactly; the tolerance is 1 as allowed by the spec.
TEST(ImageResize, MatchesPillowDownscale) {
  // 37x23 -> 16x10, crop x 3.
  const std::vector<int> want = {
      56,  60,  56,  72,  101, 44,  89,  153, 8,   105, 173, 10,  121, 52,  12,  137, 115, 14,  153,
      170, 16,  169, 81,  19,  186, 153, 21,  202, 87,  23,  62,  64,  232, 78,  105, 217, 95,  157,
      174, 111, 177, 158, 127, 56,  81,  143, 119, 69,  159, 174, 27,  175, 85,  20,  192, 157, 13,
      208, 91,  12,  69,  69,  237, 85,  110, 239, 102, 162, 241, 118, 182, 243, 134, 61,  243, 150,
      124, 241, 166, 179, 204, 182, 90,  197, 199, 162, 127, 215, 96,  103, 76,  73,  225, 92,  114,
      227, 109, 166, 229, 125, 186, 232, 141, 65,  234, 157, 128, 236, 173, 183, 238, 189, 94,  241,
      206, 166, 243, 222, 100, 245, 82,  78,  214, 98,  119, 216, 115, 171, 218, 131, 191, 221, 147,
      70,  223, 163, 133, 225, 179, 188, 227, 195, 99,  230, 212, 171, 232, 228, 105, 234, 90,  82,
      202, 106, 123, 204, 123, 175, 206, 139, 195, 209, 155, 74,  211, 171, 137, 213, 187, 185, 215,
      203, 101, 218, 220, 175, 220, 236, 109, 222, 96,  87,  191, 112, 128, 193, 129, 180, 195, 145,
      187, 198, 161, 76,  200, 177, 142, 202, 193, 124, 204, 209, 86,  207, 226, 180, 209, 237, 114,
      211, 103, 91,  179, 119, 132, 181, 136, 184, 183, 152, 124, 186, 168, 64,  188, 184, 146, 190,
      200, 114, 192, 216, 86,  195, 233, 184, 197, 200, 118, 199, 110, 96,  168, 126, 137, 170, 143,
      189, 172, 159, 119, 175, 175, 66,  177, 191, 151, 179, 207, 119, 181, 223, 91,  184, 234, 169,
      186, 112, 109, 188, 116, 100, 157, 132, 141, 159, 149, 193, 161, 165, 123, 164, 181, 70,  166,
      197, 155, 168, 213, 123, 170, 229, 95,  173, 227, 127, 175, 50,  83,  177};
  expect_near_all(resize_center_crop(synthetic(37, 23), 10), want, 1, "37x23 -> 10");
}

TEST(ImageResize, MatchesPillowUpscale) {
  // 7x5 -> 16x12, crop x 2 (50x80 -> 64 style upscale, small enough to hard-code).
  const std::vector<int> want = {
      4,  1,  104, 7,  1,  0,   10, 2,  0,   13, 4,  1,   16, 6,  1,   19, 8,  2,   23, 11, 2,
      26, 14, 3,   29, 17, 3,   32, 21, 4,   35, 25, 4,   38, 29, 4,   4,  1,  122, 7,  1,  31,
      10, 2,  31,  13, 4,  32,  16, 6,  32,  19, 8,  33,  23, 11, 33,  26, 14, 34,  29, 17, 34,
      32, 21, 35,  35, 25, 35,  38, 29, 22,  6,  2,  184, 9,  2,  136, 12, 3,  136, 15, 5,  137,
      18, 7,  137, 21, 9,  138, 25, 12, 138, 28, 15, 139, 31, 18, 139, 34, 22, 140, 37, 26, 140,
      40, 30, 84,  7,  3,  245, 10, 3,  241, 13, 4,  241, 16, 6,  242, 19, 8,  242, 22, 10, 243,
      26, 13, 243, 29, 16, 244, 32, 19, 244, 35, 23, 245, 38, 27, 245, 41, 31, 145, 8,  4,  249,
      11, 4,  249, 14, 5,  249, 17, 7,  250, 20, 9,  250, 23, 11, 251, 27, 14, 251, 30, 17, 252,
      33, 20, 252, 36, 24, 253, 39, 28, 253, 42, 32, 188, 9,  5,  247, 12, 5,  247, 15, 6,  247,
      18, 8,  248, 21, 10, 248, 24, 12, 249, 28, 15, 249, 31, 18, 250, 34, 21, 250, 37, 25, 251,
      40, 29, 251, 43, 33, 229, 11, 5,  245, 14, 5,  245, 17, 6,  245, 20, 8,  246, 23, 10, 246,
      26, 12, 247, 30, 15, 247, 33, 18, 248, 36, 21, 248, 39, 25, 249, 42, 29, 249, 45, 33, 249,
      12, 6,  243, 15, 6,  243, 18, 7,  243, 21, 9,  244, 24, 11, 244, 27, 13, 245, 31, 16, 245,
      34, 19, 246, 37, 22, 246, 40, 26, 247, 43, 30, 247, 46, 34, 247, 13, 7,  241, 16, 7,  241,
      19, 8,  241, 22, 10, 242, 25, 12, 242, 28, 14, 243, 32, 17, 243, 35, 20, 244, 38, 23, 244,
      41, 27, 245, 44, 31, 245, 47, 35, 245, 14, 8,  239, 17, 8,  239, 20, 9,  239, 23, 11, 240,
      26, 13, 240, 29, 15, 241, 33, 18, 241, 36, 21, 242, 39, 24, 242, 42, 28, 243, 45, 32, 243,
      48, 36, 243, 16, 9,  237, 19, 9,  237, 22, 10, 237, 25, 12, 238, 28, 14, 238, 31, 16, 239,
      35, 19, 239, 38, 22, 240, 41, 25, 240, 44, 29, 241, 47, 33, 241, 50, 37, 241, 16, 9,  236,
      19, 9,  236, 22, 10, 236, 25, 12, 237, 28, 14, 237, 31, 16, 238, 35, 19, 238, 38, 22, 239,
      41, 25, 239, 44, 29, 240, 47, 33, 240, 50, 37, 240};
  expect_near_all(resize_center_crop(synthetic(7, 5), 12), want, 1, "7x5 -> 12");
}

TEST(ImageResize, MatchesPillowPortraitWithHalfEvenCropOffset) {
  // 23x42 -> 9x16: the crop offset (16 - 9) / 2 = 3.5 rounds half to even, to 4.
  const std::vector<int> want = {
      41,  25,  200, 57,  35,  202, 75,  59,  205, 93,  95,  207, 111, 145, 210, 129, 204, 213, 147,
      100, 215, 165, 117, 218, 181, 207, 220, 49,  30,  186, 65,  40,  188, 83,  64,  191, 101, 100,
      193, 119, 150, 196, 137, 205, 199, 155, 100, 201, 173, 122, 204, 189, 159, 206, 57,  35,  173,
      73,  45,  175, 91,  69,  178, 109, 105, 180, 127, 155, 183, 145, 177, 186, 163, 64,  188, 181,
      127, 191, 197, 138, 193, 64,  40,  160, 80,  50,  162, 98,  74,  165, 116, 110, 167, 134, 160,
      170, 152, 174, 173, 170, 59,  175, 188, 132, 178, 204, 143, 180, 73,  46,  147, 89,  56,  149,
      107, 80,  152, 125, 116, 154, 143, 166, 157, 161, 180, 160, 179, 65,  162, 197, 138, 165, 213,
      149, 167, 80,  51,  134, 96,  61,  136, 114, 85,  139, 132, 121, 141, 150, 171, 144, 168, 185,
      147, 186, 70,  149, 204, 143, 152, 220, 154, 154, 88,  56,  121, 104, 66,  123, 122, 90,  126,
      140, 126, 128, 158, 176, 131, 176, 190, 134, 194, 75,  136, 212, 148, 139, 228, 159, 141, 96,
      61,  107, 112, 71,  109, 130, 95,  112, 148, 131, 114, 166, 181, 117, 184, 146, 120, 202, 71,
      122, 220, 153, 125, 236, 164, 127, 104, 67,  95,  120, 77,  97,  138, 101, 100, 156, 137, 102,
      174, 187, 105, 192, 116, 108, 210, 69,  110, 228, 159, 113, 233, 170, 115};
  expect_near_all(resize_center_crop(synthetic(23, 42), 9), want, 1, "23x42 -> 9");
}

TEST(ImageResize, UpscaleAndLargeShapes) {
  const Image up = resize_center_crop(synthetic(50, 80), 64);
  EXPECT_EQ(up.width, 64);
  EXPECT_EQ(up.height, 64);
  EXPECT_EQ(up.bytes(), 64u * 64 * 3);
  // Shapes that take the SIMD paths with and without a scalar tail, and the crop-only path
  // (shorter side already equal to size), stay deterministic: the same input, the same bytes.
  for (const auto& c : {std::array<int, 3>{640, 480, 256},
                        {500, 375, 128},
                        {333, 128, 128},
                        {128, 333, 128},
                        {1000, 3, 2}}) {
    const Image src = synthetic(c[0], c[1]);
    const Image a = resize_center_crop(src, c[2]);
    const Image b = resize_center_crop(src, c[2]);
    EXPECT_EQ(a.width, c[2]);
    EXPECT_EQ(a.height, c[2]);
    EXPECT_EQ(a.rgb, b.rgb);
  }
  // Crop only: 333x128 -> 128 is the columns [102, 230) of the source, untouched.
  const Image src = synthetic(333, 128);
  const Image crop = resize_center_crop(src, 128);
  for (int y : {0, 127})
    for (int x : {0, 64, 127}) EXPECT_EQ(pixel(crop, x, y)[1], pixel(src, x + 102, y)[1]);
}

TEST(ImageResize, RejectsBadArguments) {
  EXPECT_THROW(resize_center_crop(synthetic(4, 4), 0), fnvlp::Error);
  EXPECT_THROW(resize_center_crop(Image{}, 8), fnvlp::Error);
  Image short_buffer = synthetic(4, 4);
  short_buffer.rgb.pop_back();
  EXPECT_THROW(resize_center_crop(short_buffer, 8), fnvlp::Error);
}

// Issue 28: what read_image_file refuses before it reads a byte. Each case must end in a named
// ImageError, never a hang (/dev/zero, a FIFO without a writer) or an allocation of the file's
// size (a sparse 10 GB file).
std::string image_error_reason(const std::string& path, const fnvlp::data::ImageFileLimits& lim) {
  try {
    read_image_file(path, 0, lim);
  } catch (const ImageError& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    return e.reason();
  }
  return "decoded";
}

// --image-codec jpeg stores each image at its aspect ratio, longer side at most max_side, with
// resize_center_crop's (Pillow-exact) filter: the centre square of it is resize_center_crop's.
TEST(ImageResize, MaxSideKeepsTheAspectRatioWithTheSameFilter) {
  const Image land = synthetic(500, 375), port = synthetic(333, 500);
  const Image a = resize_max_side(land, 384);
  EXPECT_EQ(a.width, 384);
  EXPECT_EQ(a.height, 288);
  const Image sq = resize_center_crop(land, 288);
  for (int y = 0; y < 288; ++y)
    ASSERT_EQ(0, std::memcmp(pixel(a, 48, y), pixel(sq, 0, y), 288 * 3)) << "row " << y;
  const Image b = resize_max_side(port, 384);
  EXPECT_EQ(b.height, 384);
  EXPECT_EQ(b.width, 256);  // 333 * 384 / 500 = 255.74, rounded
  // Images within the bound are stored as they are; a sliver keeps at least one pixel.
  EXPECT_EQ(resize_max_side(land, 500).rgb, land.rgb);
  const Image thin = resize_max_side(synthetic(1000, 2), 100);
  EXPECT_EQ(thin.width, 100);
  EXPECT_EQ(thin.height, 1);
  EXPECT_THROW(resize_max_side(land, 0), fnvlp::Error);
}

// A stored JPEG must be what fnvlp-shard writes; anything else is refused with a reason code,
// naming the stored image, before pixels are handed back.
TEST(ImageDecode, StoredJpegIsCheckedAgainstWhatTheShardRecords) {
  const Image src = synthetic(40, 30);
  const std::vector<uint8_t> good = make_jpeg(40, 30, TJPF_RGB, src.rgb, TJSAMP_420, 90);
  const Image img = decode_stored_jpeg(good.data(), good.size(), 40, 30, "s.h5 row 0");
  EXPECT_EQ(img.width, 40);
  EXPECT_EQ(img.height, 30);
  const std::vector<uint8_t> gray_px(40 * 30, 100);
  const std::vector<uint8_t> gray = make_jpeg(40, 30, TJPF_GRAY, gray_px, TJSAMP_GRAY, 90);
  EXPECT_EQ(decode_stored_jpeg(gray.data(), gray.size(), 40, 30, "g").width, 40);

  auto refused = [](const std::vector<uint8_t>& bytes, int w, int h, const char* want) {
    try {
      decode_stored_jpeg(bytes.data(), bytes.size(), w, h, "shard-00007.h5:/image_bytes row 3");
    } catch (const ImageError& e) {
      EXPECT_EQ(e.reason(), want) << e.what();
      EXPECT_NE(std::string(e.what()).find("shard-00007.h5:/image_bytes row 3"), std::string::npos)
          << e.what();
      return std::string(e.what());
    }
    ADD_FAILURE() << "accepted, expected " << want;
    return std::string();
  };
  EXPECT_NE(refused(good, 41, 30, reason::kCorrupt).find("the shard records 41x30"),
            std::string::npos);
  refused(head(good, good.size() / 2), 40, 30, reason::kTruncated);
  // A header claiming 60000 x 60000 is refused from the header alone: no allocation follows.
  refused(fnvlp::testutil::patch_sof(good, 8, 60000, 60000), 40, 30, reason::kUnsupported);
  refused(fnvlp::testutil::patch_sof(good, 8, 300, 400), 40, 30, reason::kCorrupt);
  // TurboJPEG writes CMYK input as Adobe YCCK, as Photoshop does.
  EXPECT_NE(refused(fnvlp::testutil::cmyk_jpeg(40, 30), 40, 30, reason::kUnsupported).find("YCCK"),
            std::string::npos);
  // 12- and 16-bit samples: libjpeg-turbo's 8-bit decoder refuses them.
  refused(fnvlp::testutil::patch_sof(good, 12, 30, 40), 40, 30, reason::kCorrupt);
  refused(fnvlp::testutil::patch_sof(good, 16, 30, 40), 40, 30, reason::kCorrupt);
  const std::vector<uint8_t> png = {0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A, 0, 0, 0, 13};
  refused(png, 40, 30, reason::kUnsupported);
}

TEST(ImageFile, DevicesFifosDirectoriesHugeFilesAndEscapesAreRefused) {
  namespace fs = std::filesystem;
  const fs::path base = temp_path("image_limits");
  fs::remove_all(base);
  const fs::path root = base / "root";
  fs::create_directories(root / "sub");
  const auto real = read_bytes(kRealJpeg);
  write_bytes((root / "sub" / "ok.jpg").string(), real);
  write_bytes((base / "outside.jpg").string(), real);
  fs::create_symlink(root / "sub" / "ok.jpg", root / "link-inside.jpg");
  fs::create_symlink(base / "outside.jpg", root / "link-outside.jpg");
  fs::create_directory_symlink(base, root / "dir-link");
  ASSERT_EQ(::mkfifo((root / "fifo.jpg").c_str(), 0600), 0);
  std::ofstream((root / "huge.jpg").string()).close();
  fs::resize_file(root / "huge.jpg", uint64_t{10} << 30);  // sparse: no disk used

  fnvlp::data::ImageFileLimits lim;
  lim.root = fs::canonical(root).string();
  lim.max_bytes = 1 << 20;
  const std::string r = root.string();
  EXPECT_EQ(image_error_reason(r + "/sub/ok.jpg", lim), "decoded");
  EXPECT_EQ(image_error_reason(r + "/link-inside.jpg", lim), "decoded");
  EXPECT_EQ(image_error_reason(r + "/sub/../sub/ok.jpg", lim), "decoded");
  EXPECT_EQ(image_error_reason(r + "/../outside.jpg", lim), reason::kOutsideRoot);
  EXPECT_EQ(image_error_reason((base / "outside.jpg").string(), lim), reason::kOutsideRoot);
  EXPECT_EQ(image_error_reason(r + "/link-outside.jpg", lim), reason::kOutsideRoot);
  EXPECT_EQ(image_error_reason(r + "/dir-link/outside.jpg", lim), reason::kOutsideRoot);
  EXPECT_EQ(image_error_reason("/dev/zero", lim), reason::kNotRegular);
  EXPECT_EQ(image_error_reason(r + "/fifo.jpg", lim), reason::kNotRegular);
  EXPECT_EQ(image_error_reason(r + "/sub", lim), reason::kNotRegular);
  EXPECT_EQ(image_error_reason(r + "/huge.jpg", lim), reason::kTooLarge);
  // The cap is inclusive: a file of exactly max_bytes is read.
  lim.max_bytes = static_cast<int64_t>(real.size());
  EXPECT_EQ(image_error_reason(r + "/sub/ok.jpg", lim), "decoded");
  lim.max_bytes = static_cast<int64_t>(real.size()) - 1;
  EXPECT_EQ(image_error_reason(r + "/sub/ok.jpg", lim), reason::kTooLarge);
  // Without a root, files anywhere are read; the other refusals stay.
  lim = {};
  EXPECT_EQ(image_error_reason(r + "/link-outside.jpg", lim), "decoded");
  EXPECT_EQ(image_error_reason("/dev/zero", lim), reason::kNotRegular);
  EXPECT_EQ(image_error_reason(r + "/huge.jpg", lim), reason::kTooLarge);
  fs::remove_all(base);
}

}  // namespace
