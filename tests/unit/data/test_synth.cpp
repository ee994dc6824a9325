// fnvlp-synth: determinism (per seed, per rank count), output schema, captions that are true of
// their image and name its class, balanced labels, rendering, and the PNG/JPEG encoders.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "fnvlp/comm/comm.hpp"
#include "fnvlp/core/error.hpp"
#include "fnvlp/data/image.hpp"
#include "fnvlp/data/synth.hpp"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace fnvlp::data;

namespace {

fs::path fresh_dir(const std::string& name) {
  fs::path dir =
      fs::path(::testing::TempDir()) / ("fnvlp_synth_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(dir);
  return dir;
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

// Relative path -> contents of every regular file under `dir`.
std::map<std::string, std::string> tree(const fs::path& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) out[fs::relative(e.path(), dir).string()] = read_file(e.path());
  }
  return out;
}

synth::Options small_options(const fs::path& dir, int64_t images = 40, uint64_t seed = 7) {
  synth::Options o;
  o.out_dir = dir.string();
  o.images = images;
  o.classes = 12;
  o.image_size = 32;
  o.seed = seed;
  o.val_fraction = 0.25;
  return o;
}

void generate_single_process(const synth::Options& o) {
  synth::write_images(o, 0, 1);
  synth::write_metadata(o);
}

std::vector<std::string> words_of(const std::string& text) {
  std::vector<std::string> out;
  std::string w;
  for (char c : text) {
    if (std::isalpha(static_cast<unsigned char>(c))) {
      w += c;
    } else if (!w.empty()) {
      out.push_back(w);
      w.clear();
    }
  }
  if (!w.empty()) out.push_back(w);
  return out;
}

// Whole-word phrase match ("plus sign" inside "two plus signs" is not a match of "plus sign").
bool has_phrase(const std::vector<std::string>& words, const std::string& phrase) {
  std::vector<std::string> p = words_of(phrase);
  if (p.empty() || p.size() > words.size()) return false;
  for (size_t i = 0; i + p.size() <= words.size(); ++i) {
    if (std::equal(p.begin(), p.end(), words.begin() + static_cast<std::ptrdiff_t>(i))) return true;
  }
  return false;
}

bool has_word(const std::vector<std::string>& words, const std::string& w) {
  return std::find(words.begin(), words.end(), w) != words.end();
}

double colour_dist(const uint8_t* p, const std::array<uint8_t, 3>& c) {
  double d = 0;
  for (int i = 0; i < 3; ++i) d += (p[i] - c[i]) * static_cast<double>(p[i] - c[i]);
  return std::sqrt(d);
}

struct Component {
  int pixels = 0;
  double cx = 0, cy = 0;  // pixel centroid
};

// 8-connected components of the pixels close to the class colour; specks under 3 px dropped.
std::vector<Component> object_components(const Image& img, const std::array<uint8_t, 3>& colour) {
  const int w = img.width, h = img.height;
  std::vector<int> mask(static_cast<size_t>(w) * h, 0);
  for (int i = 0; i < w * h; ++i) {
    mask[static_cast<size_t>(i)] = colour_dist(&img.rgb[static_cast<size_t>(i) * 3], colour) < 60;
  }
  std::vector<Component> comps;
  std::vector<int> stack;
  for (int start = 0; start < w * h; ++start) {
    if (mask[static_cast<size_t>(start)] != 1) continue;
    Component c;
    stack.push_back(start);
    mask[static_cast<size_t>(start)] = 2;
    while (!stack.empty()) {
      int i = stack.back();
      stack.pop_back();
      int x = i % w, y = i / w;
      ++c.pixels;
      c.cx += x + 0.5;
      c.cy += y + 0.5;
      for (int dy = -1; dy <= 1; ++dy) {
        for (int dx = -1; dx <= 1; ++dx) {
          int nx = x + dx, ny = y + dy;
          if (nx < 0 || ny < 0 || nx >= w || ny >= h) continue;
          int j = ny * w + nx;
          if (mask[static_cast<size_t>(j)] == 1) {
            mask[static_cast<size_t>(j)] = 2;
            stack.push_back(j);
          }
        }
      }
    }
    c.cx /= c.pixels;
    c.cy /= c.pixels;
    if (c.pixels >= 3) comps.push_back(c);
  }
  return comps;
}

Image test_image(int w, int h) {
  Image img;
  img.width = w;
  img.height = h;
  img.rgb.resize(static_cast<size_t>(w) * h * 3);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      uint8_t* p = &img.rgb[(static_cast<size_t>(y) * w + x) * 3];
      p[0] = static_cast<uint8_t>(x * 255 / std::max(1, w - 1));
      p[1] = static_cast<uint8_t>(y * 255 / std::max(1, h - 1));
      p[2] = static_cast<uint8_t>((x * 7 + y * 13) % 256);
    }
  }
  return img;
}

template <typename F>
void expect_error_containing(F&& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "expected an fnvlp::Error containing '" << needle << "'";
  } catch (const fnvlp::Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

}  // namespace

// --- options ------------------------------------------------------------------------------------
TEST(SynthOptions, RejectsInvalidValuesWithClearMessages) {
  synth::Options ok = small_options(fresh_dir("opts"));
  EXPECT_NO_THROW(synth::validate(ok));

  auto with = [&](auto change) {
    synth::Options o = ok;
    change(o);
    return o;
  };
  expect_error_containing([&] { synth::validate(with([](auto& o) { o.classes = 65; })); },
                          "larger than the 64 available");
  expect_error_containing([&] { synth::validate(with([](auto& o) { o.classes = 0; })); },
                          "--classes");
  expect_error_containing([&] { synth::validate(with([](auto& o) { o.images = 0; })); },
                          "--images must be");
  expect_error_containing([&] { synth::validate(with([](auto& o) { o.image_size = 15; })); },
                          "--image-size must be");
  expect_error_containing([&] { synth::validate(with([](auto& o) { o.val_fraction = 1.0; })); },
                          "--val-fraction");
  expect_error_containing([&] { synth::validate(with([](auto& o) { o.captions_per_image = 0; })); },
                          "--captions-per-image");
  expect_error_containing([&] { synth::validate(with([](auto& o) { o.out_dir.clear(); })); },
                          "--out");
  // The writers validate too: nothing is written for bad options.
  synth::Options bad = with([](auto& o) { o.classes = 100; });
  EXPECT_THROW(synth::write_images(bad, 0, 1), fnvlp::Error);
  EXPECT_FALSE(fs::exists(bad.out_dir));
}

TEST(SynthOptions, ValidationSplitIsTheLastFraction) {
  synth::Options o;
  o.images = 100;
  o.val_fraction = 0.1;
  EXPECT_EQ(synth::num_val(o), 10);
  o.val_fraction = 0.0;
  EXPECT_EQ(synth::num_val(o), 0);
  o.images = 3;
  o.val_fraction = 0.01;
  EXPECT_EQ(synth::num_val(o), 1);  // a requested split is never empty ...
  o.val_fraction = 0.99;
  EXPECT_EQ(synth::num_val(o), 2);  // ... and never takes every image
  o.images = 1;
  EXPECT_EQ(synth::num_val(o), 0);
}

// --- classes and labels -------------------------------------------------------------------------
TEST(SynthClasses, AllCombinationsDistinctAndSpread) {
  std::set<std::pair<int, int>> seen;
  for (int k = 0; k < synth::kMaxClasses; ++k) {
    auto c = synth::class_info(k);
    EXPECT_TRUE(seen.insert({c.shape, c.colour}).second) << "class " << k << " repeated";
  }
  // The first 8 classes use every shape and every colour once.
  std::set<int> shapes, colours;
  for (int k = 0; k < 8; ++k) {
    shapes.insert(synth::class_info(k).shape);
    colours.insert(synth::class_info(k).colour);
  }
  EXPECT_EQ(shapes.size(), 8u);
  EXPECT_EQ(colours.size(), 8u);
  EXPECT_THROW(synth::class_info(synth::kMaxClasses), fnvlp::Error);
}

TEST(SynthLabels, CoverAllClassesEvenly) {
  for (int k : {1, 7, 16, 64}) {
    synth::Options o;
    o.classes = k;
    o.images = 1000;
    o.seed = 3;
    std::vector<int> counts(static_cast<size_t>(k), 0);
    for (int64_t i = 0; i < o.images; ++i) {
      int label = synth::label_of(o, i);
      ASSERT_GE(label, 0);
      ASSERT_LT(label, k);
      ++counts[static_cast<size_t>(label)];
    }
    auto [lo, hi] = std::minmax_element(counts.begin(), counts.end());
    EXPECT_LE(*hi - *lo, 1) << "K=" << k;
  }
  // Not in a fixed cyclic order: the sequence depends on the seed.
  synth::Options a, b;
  a.classes = b.classes = 16;
  b.seed = 1;
  int differ = 0;
  for (int64_t i = 0; i < 64; ++i) differ += synth::label_of(a, i) != synth::label_of(b, i);
  EXPECT_GT(differ, 16);
}

// --- captions -----------------------------------------------------------------------------------
TEST(SynthCaptions, NameExactlyTheClassShapeAndColour) {
  synth::Options o;
  o.classes = 64;
  o.seed = 11;
  std::set<std::string> distinct;
  for (int64_t i = 0; i < 2000; ++i) {
    synth::Scene s = synth::make_scene(o, i);
    auto caps = synth::make_captions(s, 5, o.seed);
    ASSERT_EQ(caps.size(), 5u);
    EXPECT_EQ(std::set<std::string>(caps.begin(), caps.end()).size(), 5u)
        << "duplicates, image " << i;
    for (const std::string& cap : caps) {
      distinct.insert(cap);
      auto words = words_of(cap);
      for (int sh = 0; sh < synth::kNumShapes; ++sh) {
        bool named = false;
        for (const auto& n : synth::shapes()[static_cast<size_t>(sh)].synonyms) {
          named = named || has_phrase(words, n.singular) || has_phrase(words, n.plural);
        }
        EXPECT_EQ(named, sh == s.shape)
            << "'" << cap << "' vs shape " << synth::shapes()[static_cast<size_t>(sh)].name;
      }
      for (int co = 0; co < synth::kNumColours; ++co) {
        bool named = false;
        for (const auto& n : synth::colours()[static_cast<size_t>(co)].synonyms) {
          named = named || has_phrase(words, n);
        }
        EXPECT_EQ(named, co == s.colour)
            << "'" << cap << "' vs colour " << synth::colours()[static_cast<size_t>(co)].name;
      }
      // Counts, when stated, are the true count.
      const char* numbers[] = {"one", "two", "three", "four"};
      for (int c = 1; c <= 4; ++c) {
        if (has_word(words, numbers[c - 1])) {
          EXPECT_EQ(static_cast<int>(s.objects.size()), c) << cap;
        }
      }
      if (has_phrase(words, "a pair of")) {
        EXPECT_EQ(s.objects.size(), 2u) << cap;
      }
      if (has_word(words, "several")) {
        EXPECT_GE(s.objects.size(), 3u) << cap;
      }
      // The background word, when stated, is the true background.
      static const std::vector<std::vector<std::string>> bg = {
          {"plain", "solid", "flat"},
          {"gradient", "shaded", "fading"},
          {"striped", "stripy", "banded"},
          {"checkered", "checked", "chequered", "checkerboard"}};
      for (size_t b = 0; b < bg.size(); ++b) {
        for (const auto& w : bg[b]) {
          if (has_word(words, w)) {
            EXPECT_EQ(static_cast<size_t>(s.background), b) << cap;
          }
        }
      }
    }
  }
  // Varied templates: far more distinct captions than classes, yet heavy reuse (false negatives).
  EXPECT_GT(distinct.size(), 2000u);
  EXPECT_LT(distinct.size(), 10000u);
}

TEST(SynthCaptions, SameClassImagesShareCaptions) {
  synth::Options o;
  o.classes = 4;
  o.seed = 5;
  std::map<std::string, std::set<int64_t>> images_of;
  for (int64_t i = 0; i < 400; ++i) {
    for (const auto& c : synth::make_captions(synth::make_scene(o, i), 5, o.seed)) {
      images_of[c].insert(i);
    }
  }
  size_t shared = 0;
  for (const auto& [cap, imgs] : images_of) shared += imgs.size() > 1;
  EXPECT_GT(shared, 50u) << "captions should fit several images of a class";
}

// --- rendering ----------------------------------------------------------------------------------
TEST(SynthRender, ObjectsAreCountableAndWhereCaptionsSay) {
  synth::Options o;
  o.classes = 64;
  o.seed = 21;
  const int size = 64;
  for (int64_t i = 0; i < 400; ++i) {
    synth::Scene s = synth::make_scene(o, i);
    Image img = synth::render(s, size);
    ASSERT_EQ(img.width, size);
    ASSERT_EQ(img.rgb.size(), static_cast<size_t>(size * size * 3));
    auto comps = object_components(img, synth::colours()[static_cast<size_t>(s.colour)].rgb);
    ASSERT_EQ(comps.size(), s.objects.size())
        << "image " << i << " " << synth::shapes()[static_cast<size_t>(s.shape)].name << " "
        << synth::colours()[static_cast<size_t>(s.colour)].name << " on "
        << synth::background_name(s.background);
    for (const auto& c : comps) EXPECT_GT(c.pixels, 20) << "image " << i;

    // Position words checked against the pixels (the crescent's centroid sits off its centre).
    if (s.shape == 7) continue;
    const double third = size / 3.0, tol = 2.0;
    for (const auto& cap : synth::make_captions(s, 5, o.seed)) {
      auto words = words_of(cap);
      bool single = comps.size() == 1;
      for (const auto& c : comps) {
        double lo = single ? third : size / 2.0, hi = single ? 2 * third : size / 2.0;
        if (has_word(words, "left")) {
          EXPECT_LT(c.cx, lo + tol) << cap;
        }
        if (has_word(words, "right")) {
          EXPECT_GT(c.cx, hi - tol) << cap;
        }
        if (has_word(words, "top") || has_word(words, "upper")) {
          EXPECT_LT(c.cy, lo + tol) << cap;
        }
        if (has_word(words, "bottom") || has_word(words, "lower")) {
          EXPECT_GT(c.cy, hi - tol) << cap;
        }
        // "middle" is the centre along the axes no other word names ("in the upper middle").
        if (has_word(words, "center") || has_word(words, "middle")) {
          bool horizontal = has_word(words, "left") || has_word(words, "right");
          bool vertical = has_word(words, "top") || has_word(words, "upper") ||
                          has_word(words, "bottom") || has_word(words, "lower");
          if (!horizontal) {
            EXPECT_NEAR(c.cx, size / 2.0, size / 6.0 + tol) << cap;
          }
          if (!vertical) {
            EXPECT_NEAR(c.cy, size / 2.0, size / 6.0 + tol) << cap;
          }
        }
      }
      if (has_phrase(words, "side by side")) {
        EXPECT_NEAR(comps[0].cy, comps[1].cy, 0.08 * size + tol) << cap;
      }
      if (has_phrase(words, "stacked vertically")) {
        EXPECT_NEAR(comps[0].cx, comps[1].cx, 0.08 * size + tol) << cap;
      }
    }
  }
}

TEST(SynthRender, ScenesRenderAtAnySize) {
  synth::Options o;
  o.seed = 2;
  synth::Scene s = synth::make_scene(o, 0);
  for (int size : {16, 33, 128}) {
    Image img = synth::render(s, size);
    EXPECT_EQ(img.width, size);
    EXPECT_EQ(img.height, size);
    EXPECT_EQ(img.rgb.size(), static_cast<size_t>(size * size * 3));
  }
}

// --- files --------------------------------------------------------------------------------------
TEST(SynthFiles, SameSeedSameBytesDifferentSeedDiffers) {
  fs::path a = fresh_dir("det_a"), b = fresh_dir("det_b"), c = fresh_dir("det_c");
  generate_single_process(small_options(a));
  generate_single_process(small_options(b));
  generate_single_process(small_options(c, 40, 8));
  auto ta = tree(a), tb = tree(b), tc = tree(c);
  EXPECT_EQ(ta.size(), 40u + 4u);
  EXPECT_TRUE(ta == tb) << "same seed, different bytes";
  EXPECT_NE(ta["captions.json"], tc["captions.json"]);
  EXPECT_NE(ta["images/synth-0000000.png"], tc["images/synth-0000000.png"]);
  for (const auto& [name, bytes] : ta) {
    EXPECT_EQ(name.find(".tmp"), std::string::npos) << "temporary file left: " << name;
  }
  for (const auto& d : {a, b, c}) fs::remove_all(d);
}

TEST(SynthFiles, OutputDoesNotDependOnTheRankSplit) {
  fs::path one = fresh_dir("ranks_1"), three = fresh_dir("ranks_3");
  synth::Options o1 = small_options(one, 31), o3 = small_options(three, 31);
  synth::write_images(o1, 0, 1);
  for (int r = 2; r >= 0; --r) synth::write_images(o3, r, 3);
  EXPECT_TRUE(tree(one) == tree(three));
  fs::remove_all(one);
  fs::remove_all(three);
}

TEST(SynthFiles, JsonSchema) {
  fs::path dir = fresh_dir("schema");
  synth::Options o = small_options(dir, 40);
  generate_single_process(o);
  const int64_t n_val = synth::num_val(o);
  ASSERT_EQ(n_val, 10);

  json caps = json::parse(read_file(dir / "captions.json"));
  ASSERT_TRUE(caps.is_array());
  ASSERT_EQ(caps.size(), static_cast<size_t>(o.images * o.captions_per_image));
  std::vector<int> label_of_image(static_cast<size_t>(o.images), -1);
  for (size_t j = 0; j < caps.size(); ++j) {
    const json& e = caps[j];
    const int64_t i = static_cast<int64_t>(j) / o.captions_per_image;  // image order
    ASSERT_TRUE(e.is_object());
    EXPECT_EQ(e.size(), 4u);
    EXPECT_EQ(e.at("image").get<std::string>(), synth::image_path(i));
    EXPECT_EQ(e.at("image_id").get<std::string>(), synth::image_id(i));
    EXPECT_FALSE(e.at("caption").get<std::string>().empty());
    int label = e.at("label").get<int>();
    EXPECT_GE(label, 0);
    EXPECT_LT(label, o.classes);
    if (j % o.captions_per_image == 0) label_of_image[static_cast<size_t>(i)] = label;
    EXPECT_EQ(label, label_of_image[static_cast<size_t>(i)]);
    EXPECT_TRUE(fs::is_regular_file(dir / e.at("image").get<std::string>()));
  }
  EXPECT_EQ(synth::image_id(42), "synth-0000042");

  json splits = json::parse(read_file(dir / "splits.json"));
  ASSERT_EQ(splits.at("train").size(), static_cast<size_t>(o.images - n_val));
  ASSERT_EQ(splits.at("val").size(), static_cast<size_t>(n_val));
  for (int64_t i = 0; i < o.images; ++i) {
    const json& part = i < o.images - n_val ? splits["train"] : splits["val"];
    const int64_t at = i < o.images - n_val ? i : i - (o.images - n_val);
    EXPECT_EQ(part[static_cast<size_t>(at)].get<std::string>(), synth::image_id(i));
  }

  json val = json::parse(read_file(dir / "retrieval_val.json"));
  ASSERT_EQ(val.size(), static_cast<size_t>(n_val));
  for (size_t v = 0; v < val.size(); ++v) {
    const int64_t i = o.images - n_val + static_cast<int64_t>(v);
    EXPECT_EQ(val[v].at("image").get<std::string>(), synth::image_path(i));
    ASSERT_EQ(val[v].at("caption").size(), static_cast<size_t>(o.captions_per_image));
    for (int c = 0; c < o.captions_per_image; ++c) {
      EXPECT_EQ(val[v]["caption"][static_cast<size_t>(c)],
                caps[static_cast<size_t>(i * o.captions_per_image + c)]["caption"]);
    }
    EXPECT_EQ(val[v].at("label").get<int>(), label_of_image[static_cast<size_t>(i)]);
  }

  json classes = json::parse(read_file(dir / "classes.json"));
  ASSERT_EQ(classes.size(), static_cast<size_t>(o.classes));
  for (int k = 0; k < o.classes; ++k) {
    const json& c = classes[static_cast<size_t>(k)];
    auto info = synth::class_info(k);
    EXPECT_EQ(c.at("label").get<int>(), k);
    EXPECT_EQ(c.at("shape").get<std::string>(),
              synth::shapes()[static_cast<size_t>(info.shape)].name);
    EXPECT_EQ(c.at("colour").get<std::string>(),
              synth::colours()[static_cast<size_t>(info.colour)].name);
    EXPECT_GE(c.at("shape_synonyms").size(), 2u);
    EXPECT_GE(c.at("colour_synonyms").size(), 2u);
  }

  // Images decode to the requested size and to exactly what render() produced.
  Image img = read_image_file((dir / synth::image_path(3)).string());
  EXPECT_EQ(img.width, o.image_size);
  EXPECT_EQ(img.height, o.image_size);
  EXPECT_EQ(img.rgb, synth::render(synth::make_scene(o, 3), o.image_size).rgb);
  fs::remove_all(dir);
}

TEST(SynthFiles, GenerateOverComm) {
  fnvlp::Comm comm;
  // One directory for the whole job, named after rank 0's pid.
  int64_t pid = ::getpid();
  comm.bcast(&pid, 1);
  fs::path dir = fs::path(::testing::TempDir()) / ("fnvlp_synth_comm_" + std::to_string(pid));
  fs::path file = dir.string() + "_file";
  if (comm.is_root()) {
    fs::remove_all(dir);
    std::ofstream(file.string()) << "x";
  }
  comm.barrier();

  synth::Options o = small_options(dir, 12);
  synth::Summary sum = synth::generate(o, comm);
  EXPECT_EQ(sum.images, 12);
  EXPECT_EQ(sum.captions, 60);
  EXPECT_EQ(sum.train + sum.val, 12);
  EXPECT_EQ(tree(dir).size(), 12u + 4u);

  // An output path that cannot be a directory fails on every rank (an exception, no hang).
  synth::Options bad = small_options(file, 4);
  try {
    synth::generate(bad, comm);
    ADD_FAILURE() << "generate into a regular file should fail";
  } catch (const fnvlp::CollectiveError& e) {
    EXPECT_NE(std::string(e.what()).find("fnvlp-synth: setup: cannot create"), std::string::npos)
        << e.what();
  }
  // Bad options are a collective error too (one message, clean exit through job_main).
  synth::Options too_many = small_options(dir, 4);
  too_many.classes = 65;
  EXPECT_THROW(synth::generate(too_many, comm), fnvlp::CollectiveError);
  comm.barrier();
  if (comm.is_root()) {
    fs::remove_all(dir);
    fs::remove(file);
  }
}

// --- encoders -----------------------------------------------------------------------------------
TEST(ImageEncode, PngRoundTripIsExact) {
  for (auto [w, h] : {std::pair{1, 1}, {37, 5}, {64, 64}}) {
    Image img = test_image(w, h);
    std::vector<uint8_t> png = encode_png(img);
    ASSERT_GT(png.size(), 8u);
    EXPECT_EQ(sniff_format(png.data(), png.size()), ImageFormat::kPng);
    Image back = decode_image(png.data(), png.size(), "roundtrip");
    EXPECT_EQ(back.width, w);
    EXPECT_EQ(back.height, h);
    EXPECT_EQ(back.rgb, img.rgb);
  }
}

TEST(ImageEncode, WritePngFileIsAtomicAndReadable) {
  fs::path dir = fresh_dir("png_file");
  fs::create_directories(dir);
  Image img = test_image(20, 10);
  std::string path = (dir / "a.png").string();
  write_png_file(path, img);
  write_png_file(path, img);  // overwriting an existing file is fine
  EXPECT_EQ(read_image_file(path).rgb, img.rgb);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1);
  std::vector<uint8_t> png = encode_png(img);
  EXPECT_EQ(read_file(path), std::string(png.begin(), png.end()));
  // A missing directory is an error, and nothing is left behind.
  EXPECT_THROW(write_png_file((dir / "missing" / "b.png").string(), img), fnvlp::Error);
  fs::remove_all(dir);
}

TEST(ImageEncode, JpegRoundTripIsClose) {
  Image img = synth::render(synth::make_scene(synth::Options{}, 0), 64);
  for (int quality : {75, 95}) {
    std::vector<uint8_t> jpg = encode_jpeg(img, quality);
    EXPECT_EQ(sniff_format(jpg.data(), jpg.size()), ImageFormat::kJpeg);
    Image back = decode_image(jpg.data(), jpg.size(), "jpeg");
    ASSERT_EQ(back.width, 64);
    ASSERT_EQ(back.height, 64);
    double err = 0;
    for (size_t i = 0; i < img.rgb.size(); ++i) err += std::abs(img.rgb[i] - back.rgb[i]);
    EXPECT_LT(err / static_cast<double>(img.rgb.size()), quality == 95 ? 5.0 : 9.0);
  }
  EXPECT_THROW(encode_jpeg(img, 0), fnvlp::Error);
  EXPECT_THROW(encode_jpeg(img, 101), fnvlp::Error);
}

TEST(ImageEncode, RejectsMalformedImages) {
  Image empty;
  EXPECT_THROW(encode_png(empty), fnvlp::Error);
  EXPECT_THROW(encode_jpeg(empty, 90), fnvlp::Error);
  Image short_buffer = test_image(4, 4);
  short_buffer.rgb.pop_back();
  EXPECT_THROW(encode_png(short_buffer), fnvlp::Error);
  EXPECT_THROW(encode_jpeg(short_buffer, 90), fnvlp::Error);
}
