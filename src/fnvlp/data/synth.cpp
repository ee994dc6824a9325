#include "fnvlp/data/synth.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "fnvlp/comm/comm.hpp"
#include "fnvlp/core/error.hpp"

namespace fnvlp::data::synth {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

namespace {

constexpr double kPi = 3.14159265358979323846;

// --- counter-based randomness ------------------------------------------------------------------
// splitmix64's finaliser: a bijective 64-bit mix with good avalanche. Values are derived from
// (seed, index, stream, counter) alone, never from a sequential generator shared across images,
// and never through std:: distributions (their algorithms are implementation-defined).
uint64_t mix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

enum Stream : uint64_t { kStreamLabel = 1, kStreamScene = 2, kStreamCaption = 3, kStreamNoise = 4 };

class Rng {
 public:
  Rng(uint64_t seed, uint64_t index, uint64_t stream)
      : key_(mix64(mix64(mix64(seed) ^ stream) ^ index)) {}
  uint64_t next() { return mix64(key_ + 0xd1b54a32d192ed03ULL * ++counter_); }
  // Uniform in [0, 1) with 53 bits: exact binary arithmetic, identical on every platform.
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }
  // Uniform in [0, n) by multiply-shift; the bias for n this small is far below 2^-32.
  int below(int n) { return static_cast<int>(((next() >> 32) * static_cast<uint64_t>(n)) >> 32); }
  bool chance(double p) { return uniform() < p; }
  template <typename T>
  const T& pick(const std::vector<T>& v) {
    return v[static_cast<size_t>(below(static_cast<int>(v.size())))];
  }

 private:
  uint64_t key_;
  uint64_t counter_ = 0;
};

// --- vocabulary ---------------------------------------------------------------------------------
enum ShapeId { kCircle, kSquare, kTriangle, kDiamond, kStar, kCross, kRing, kCrescent };

// Background words never name a colour, so the only colour words in a caption are the class's.
const std::vector<std::vector<std::string>>& background_words() {
  static const std::vector<std::vector<std::string>> words = {
      {"plain", "solid", "flat"},
      {"gradient", "shaded", "fading"},
      {"striped", "stripy", "banded"},
      {"checkered", "checked", "chequered", "checkerboard"},
  };
  return words;
}

// --- geometry -----------------------------------------------------------------------------------
struct V2 {
  double x, y;
};
inline double len(V2 p) { return std::sqrt(p.x * p.x + p.y * p.y); }
inline double clampd(double v, double lo, double hi) { return std::min(std::max(v, lo), hi); }

// Signed distance functions (negative inside) after Inigo Quilez's 2D collection; exact near the
// boundary, which is all the analytic anti-aliasing needs. Shapes point up in y-up coordinates.
double sd_box(V2 p, double hx, double hy) {
  double dx = std::fabs(p.x) - hx, dy = std::fabs(p.y) - hy;
  double ox = std::max(dx, 0.0), oy = std::max(dy, 0.0);
  return std::sqrt(ox * ox + oy * oy) + std::min(std::max(dx, dy), 0.0);
}

double sd_triangle(V2 p, double half_side) {
  const double k = std::sqrt(3.0);
  double r = half_side;
  p.x = std::fabs(p.x) - r;
  p.y = p.y + r / k;
  if (p.x + k * p.y > 0.0) p = {(p.x - k * p.y) / 2.0, (-k * p.x - p.y) / 2.0};
  p.x -= clampd(p.x, -2.0 * r, 0.0);
  return -len(p) * (p.y < 0 ? -1.0 : 1.0);
}

double sd_rhombus(V2 p, double bx, double by) {
  p = {std::fabs(p.x), std::fabs(p.y)};
  double ndot = bx * (bx - 2.0 * p.x) - by * (by - 2.0 * p.y);
  double h = clampd(ndot / (bx * bx + by * by), -1.0, 1.0);
  V2 q{p.x - 0.5 * bx * (1.0 - h), p.y - 0.5 * by * (1.0 + h)};
  double s = p.x * by + p.y * bx - bx * by;
  return len(q) * (s < 0 ? -1.0 : 1.0);
}

double sd_star5(V2 p, double r, double rf) {
  const V2 k1{0.809016994375, -0.587785252292};
  const V2 k2{-k1.x, k1.y};
  p.x = std::fabs(p.x);
  double d1 = std::max(k1.x * p.x + k1.y * p.y, 0.0);
  p = {p.x - 2.0 * d1 * k1.x, p.y - 2.0 * d1 * k1.y};
  double d2 = std::max(k2.x * p.x + k2.y * p.y, 0.0);
  p = {p.x - 2.0 * d2 * k2.x, p.y - 2.0 * d2 * k2.y};
  p.x = std::fabs(p.x);
  p.y -= r;
  V2 ba{rf * -k1.y - 0.0, rf * k1.x - 1.0};
  double h = clampd((p.x * ba.x + p.y * ba.y) / (ba.x * ba.x + ba.y * ba.y), 0.0, r);
  V2 q{p.x - ba.x * h, p.y - ba.y * h};
  double s = p.y * ba.x - p.x * ba.y;
  return len(q) * (s < 0 ? -1.0 : 1.0);
}

// Every shape fits in the circle of radius r; proportions chosen so the 8 shapes stay distinct
// at ~10 px (the diamond is a tall rhombus, not a square turned by 45 degrees).
double shape_sdf(int shape, V2 p, double r) {
  switch (shape) {
    case kCircle:
      return len(p) - r;
    case kSquare:
      return sd_box(p, 0.68 * r, 0.68 * r);
    case kTriangle:
      return sd_triangle(p, 0.98 * r * std::sqrt(3.0) / 2.0);
    case kDiamond:
      return sd_rhombus(p, 0.62 * r, r);
    case kStar:
      return sd_star5(p, r, 0.5);
    case kCross:
      return std::min(sd_box(p, 0.9 * r, 0.3 * r), sd_box(p, 0.3 * r, 0.9 * r));
    case kRing:
      return std::fabs(len(p) - 0.74 * r) - 0.26 * r;
    case kCrescent:
      return std::max(len(p) - r, -(len({p.x - 0.45 * r, p.y}) - 0.8 * r));
  }
  return 1.0;
}

// Angles a shape may be turned by without changing what it is called.
double max_rotation(int shape) {
  switch (shape) {
    case kCircle:
    case kRing:
      return 0.0;
    case kCrescent:
      return kPi;
    default:
      return 20.0 * kPi / 180.0;
  }
}

using Rgb = std::array<float, 3>;

Rgb to_rgbf(const std::array<uint8_t, 3>& c) {
  return {static_cast<float>(c[0]), static_cast<float>(c[1]), static_cast<float>(c[2])};
}

double dist(const Rgb& a, const Rgb& b) {
  double d0 = a[0] - b[0], d1 = a[1] - b[1], d2 = a[2] - b[2];
  return std::sqrt(d0 * d0 + d1 * d1 + d2 * d2);
}

// Smallest distance from `c` to the colours a background made of a and b can show (a gradient
// passes through every mix of the two).
double segment_dist(const Rgb& a, const Rgb& b, const Rgb& c) {
  double best = 1e9;
  for (int i = 0; i <= 16; ++i) {
    float t = static_cast<float>(i) / 16.0f;
    Rgb m{a[0] + (b[0] - a[0]) * t, a[1] + (b[1] - a[1]) * t, a[2] + (b[2] - a[2]) * t};
    best = std::min(best, dist(m, c));
  }
  return best;
}

// Minimum RGB distance between the class colour and any background colour: with per-object
// jitter (<= 12 per channel) and pixel noise (<= 10) an object pixel stays > 100 away from the
// background, so colour alone separates object from background.
constexpr double kMinBackgroundDistance = 150.0;
constexpr float kColourJitter = 12.0f;
constexpr float kMaxNoise = 10.0f;

void choose_background(Rng& rng, Scene& s) {
  Rgb obj = to_rgbf(colours()[static_cast<size_t>(s.colour)].rgb);
  for (int attempt = 0; attempt < 64; ++attempt) {
    Rgb a;
    for (auto& v : a) v = static_cast<float>(rng.uniform(0.0, 255.0));
    // Muted backgrounds keep the saturated object colours the salient thing in the image.
    float grey = (a[0] + a[1] + a[2]) / 3.0f;
    for (auto& v : a) v = grey + 0.35f * (v - grey);
    float lum = 0.299f * a[0] + 0.587f * a[1] + 0.114f * a[2];
    Rgb b;
    for (int c = 0; c < 3; ++c) b[c] = lum > 110.0f ? a[c] * 0.62f : a[c] + (255.0f - a[c]) * 0.5f;
    if (s.background == Background::kPlain) b = a;
    if (segment_dist(a, b, obj) >= kMinBackgroundDistance) {
      s.bg_a = a;
      s.bg_b = b;
      return;
    }
  }
  // Unreachable in practice (every class colour has many far backgrounds); stay deterministic.
  Rgb black{30, 30, 30}, white{225, 225, 225};
  s.bg_a = dist(black, obj) > dist(white, obj) ? black : white;
  s.bg_b = s.bg_a;
}

void place_objects(Rng& rng, Scene& s, int count) {
  static const double kRadius[kMaxCount + 1][2] = {
      {0, 0}, {0.13, 0.30}, {0.11, 0.20}, {0.10, 0.17}, {0.10, 0.15}};
  const double margin = 0.02;
  const double gap = 0.06;  // >= 3.8 px at 64 px: objects never touch, so they can be counted
  Rgb base = to_rgbf(colours()[static_cast<size_t>(s.colour)].rgb);
  double scale = 1.0;
  for (;;) {
    s.objects.clear();
    bool placed_all = true;
    for (int k = 0; k < count && placed_all; ++k) {
      Object o;
      o.radius = scale * rng.uniform(kRadius[count][0], kRadius[count][1]);
      bool placed = false;
      for (int attempt = 0; attempt < 100 && !placed; ++attempt) {
        o.cx = rng.uniform(o.radius + margin, 1.0 - o.radius - margin);
        o.cy = rng.uniform(o.radius + margin, 1.0 - o.radius - margin);
        placed = true;
        for (const Object& q : s.objects) {
          if (len({o.cx - q.cx, o.cy - q.cy}) < o.radius + q.radius + gap) placed = false;
        }
      }
      if (!placed) {
        placed_all = false;
        break;
      }
      double rot = max_rotation(s.shape);
      o.angle = rot > 0 ? rng.uniform(-rot, rot) : 0.0;
      for (int c = 0; c < 3; ++c) {
        float v = base[c] + static_cast<float>(rng.uniform(-kColourJitter, kColourJitter));
        o.rgb[c] = std::min(255.0f, std::max(0.0f, v));
      }
      s.objects.push_back(o);
    }
    if (placed_all) return;
    scale *= 0.9;  // crowded draw: shrink and retry (still a pure function of the stream)
  }
}

// Box-filtered square wave: the fraction of [u - w/2, u + w/2] where frac(u) < 0.5.
double square_wave_coverage(double u, double w) {
  auto integral = [](double x) {
    double f = std::floor(x);
    return 0.5 * f + std::min(x - f, 0.5);
  };
  return (integral(u + 0.5 * w) - integral(u - 0.5 * w)) / w;
}

// --- captions -----------------------------------------------------------------------------------
bool starts_with_vowel(const std::string& w) {
  return !w.empty() && std::strchr("aeiou", w[0]) != nullptr;
}

std::string join(const std::vector<std::string>& words) {
  std::string out;
  for (const auto& w : words) {
    if (w.empty()) continue;
    if (!out.empty()) out += ' ';
    out += w;
  }
  return out;
}

const char* kCountWords[] = {"zero", "one", "two", "three", "four"};

// Position phrases that are true of the scene; empty when no phrase is clearly true.
std::vector<std::string> position_phrases(const Scene& s) {
  std::vector<std::string> out;
  if (s.objects.size() == 1) {
    const Object& o = s.objects[0];
    auto cell = [](double v) { return v < 1.0 / 3.0 ? 0 : (v < 2.0 / 3.0 ? 1 : 2); };
    // Centres within 0.03 of a cell boundary would make either phrase arguable: say nothing.
    auto clear = [](double v) {
      return std::fabs(v - 1.0 / 3.0) > 0.03 && std::fabs(v - 2.0 / 3.0) > 0.03;
    };
    if (!clear(o.cx) || !clear(o.cy)) return out;
    static const std::vector<std::string> kCells[3][3] = {
        {{"in the top left", "near the top left corner", "in the upper left"},
         {"at the top", "near the top", "in the upper middle"},
         {"in the top right", "near the top right corner", "in the upper right"}},
        {{"on the left", "at the left side", "near the left edge"},
         {"in the center", "in the middle", "at the center"},
         {"on the right", "at the right side", "near the right edge"}},
        {{"in the bottom left", "near the bottom left corner", "in the lower left"},
         {"at the bottom", "near the bottom", "in the lower middle"},
         {"in the bottom right", "near the bottom right corner", "in the lower right"}}};
    return kCells[cell(o.cy)][cell(o.cx)];
  }
  bool top = true, bottom = true, left = true, right = true;
  for (const Object& o : s.objects) {
    top = top && o.cy < 0.47;
    bottom = bottom && o.cy > 0.53;
    left = left && o.cx < 0.47;
    right = right && o.cx > 0.53;
  }
  if (top) out.insert(out.end(), {"in the upper half", "near the top"});
  if (bottom) out.insert(out.end(), {"in the lower half", "near the bottom"});
  if (left) out.insert(out.end(), {"on the left side", "on the left"});
  if (right) out.insert(out.end(), {"on the right side", "on the right"});
  if (s.objects.size() == 2) {
    const Object &a = s.objects[0], &b = s.objects[1];
    if (std::fabs(a.cy - b.cy) < 0.08) out.push_back("side by side");
    if (std::fabs(a.cx - b.cx) < 0.08) out.push_back("stacked vertically");
  }
  return out;
}

// Size words that are true of every object in the scene (-1: none, 0: small, 1: large).
int size_kind(const Scene& s) {
  double lo = 1.0, hi = 0.0;
  for (const Object& o : s.objects) {
    lo = std::min(lo, o.radius);
    hi = std::max(hi, o.radius);
  }
  if (s.objects.size() == 1) return hi < 0.17 ? 0 : (lo > 0.25 ? 1 : -1);
  return hi < 0.125 ? 0 : (lo > 0.17 ? 1 : -1);
}

std::string one_caption(Rng& rng, const Scene& s) {
  const int n = static_cast<int>(s.objects.size());
  const Noun& noun = rng.pick(shapes()[static_cast<size_t>(s.shape)].synonyms);
  const std::string& colour = rng.pick(colours()[static_cast<size_t>(s.colour)].synonyms);
  const std::string& noun_text = n == 1 ? noun.singular : noun.plural;

  std::string size_word;
  int sk = size_kind(s);
  if (sk >= 0 && rng.chance(0.35)) {
    static const std::vector<std::string> kSmall{"small", "little"}, kLarge{"large", "big"};
    size_word = rng.pick(sk == 0 ? kSmall : kLarge);
  }
  // Adjectives and noun: "crimson discs", "small discs in crimson", "discs coloured crimson".
  std::vector<std::string> body;
  int colour_form = rng.below(10);
  if (colour_form < 7) {
    body = {size_word, colour, noun_text};
  } else if (colour_form < 9) {
    body = {size_word, noun_text, "in", colour};
  } else {
    body = {size_word, noun_text, "coloured", colour};
  }
  // Quantifier: exact count, vague plural, or none (plural morphology still tells 1 from many).
  std::string quant;
  if (n == 1) {
    int q = rng.below(5);
    quant = q < 3 ? (starts_with_vowel(join(body)) ? "an" : "a") : (q == 3 ? "one" : "a single");
  } else {
    int q = rng.below(8);
    if (q < 4) {
      quant = (n == 2 && q == 3) ? "a pair of" : kCountWords[n];
    } else if (q < 6) {
      std::vector<std::string> vague{"some", "a few", "multiple"};
      if (n >= 3) vague.insert(vague.end(), {"several", "a group of"});
      quant = rng.pick(vague);
    }
  }
  std::string np = join({quant, join(body)});

  std::vector<std::string> positions = position_phrases(s);
  std::string pos = !positions.empty() && rng.chance(0.6) ? rng.pick(positions) : "";
  const std::string& bg = rng.pick(background_words()[static_cast<size_t>(s.background)]);
  static const std::vector<std::string> kPrefix{"a picture of", "an image of", "a drawing of",
                                                "a rendering of", "a scene with"};
  switch (rng.below(9)) {
    case 0:
      return np;
    case 1:
      return join({np, pos});
    case 2:
      return join({np, "on a", bg, "background"});
    case 3:
      return join({np, pos, "on a", bg, "background"});
    case 4:
      return join({rng.pick(kPrefix), np, pos});
    case 5:
      return join({n == 1 || quant == "a pair of" ? "there is" : "there are", np, pos});
    case 6:
      return join({"a", bg, "background with", np, pos});
    case 7:
      return join({np, pos, "against a", bg, "backdrop"});
    default:
      return join({rng.pick(kPrefix), np, "on a", bg, "background"});
  }
}

// --- files --------------------------------------------------------------------------------------
// Writes through a temporary name in the same directory and renames, so readers never see a
// partial file under the final name.
void write_file_atomic(const fs::path& path, const std::function<void(std::ostream&)>& body) {
  fs::path tmp = path;
  tmp += ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    FNVLP_CHECK(out.good(), "cannot create " << tmp.string() << ": " << std::strerror(errno));
    body(out);
    out.flush();
    bool ok = out.good();
    out.close();
    if (!ok || out.fail()) {
      std::remove(tmp.c_str());
      FNVLP_FAIL("cannot write " << tmp.string() << " (disk full?)");
    }
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    std::remove(tmp.c_str());
    FNVLP_FAIL("cannot rename " << tmp.string() << " to " << path.string() << ": " << ec.message());
  }
}

}  // namespace

// --- public API ---------------------------------------------------------------------------------
const std::vector<ShapeDef>& shapes() {
  static const std::vector<ShapeDef> defs = {
      {"circle", {{"circle", "circles"}, {"disc", "discs"}, {"dot", "dots"}}},
      {"square", {{"square", "squares"}, {"box", "boxes"}, {"square block", "square blocks"}}},
      {"triangle",
       {{"triangle", "triangles"}, {"wedge", "wedges"}, {"triangular shape", "triangular shapes"}}},
      {"diamond", {{"diamond", "diamonds"}, {"rhombus", "rhombuses"}, {"lozenge", "lozenges"}}},
      {"star", {{"star", "stars"}, {"star shape", "star shapes"}, {"spiky star", "spiky stars"}}},
      {"cross", {{"cross", "crosses"}, {"plus sign", "plus signs"}, {"plus shape", "plus shapes"}}},
      {"ring", {{"ring", "rings"}, {"hoop", "hoops"}, {"donut", "donuts"}}},
      {"crescent",
       {{"crescent", "crescents"},
        {"crescent moon", "crescent moons"},
        {"moon shape", "moon shapes"}}},
  };
  return defs;
}

const std::vector<ColourDef>& colours() {
  static const std::vector<ColourDef> defs = {
      {"red", {220, 30, 35}, {"red", "crimson", "scarlet"}},
      {"orange", {245, 140, 20}, {"orange", "tangerine", "amber"}},
      {"yellow", {245, 220, 40}, {"yellow", "gold", "lemon"}},
      {"green", {40, 165, 60}, {"green", "emerald", "jade"}},
      {"cyan", {40, 200, 215}, {"cyan", "turquoise", "aqua"}},
      {"blue", {35, 75, 215}, {"blue", "cobalt", "sapphire"}},
      {"purple", {135, 50, 185}, {"purple", "violet", "plum"}},
      {"pink", {250, 125, 190}, {"pink", "rose", "hot pink"}},
  };
  return defs;
}

ClassInfo class_info(int k) {
  FNVLP_CHECK(k >= 0 && k < kMaxClasses, "class " << k << " out of range 0.." << kMaxClasses - 1);
  ClassInfo c;
  c.shape = k % kNumShapes;
  c.colour = (k % kNumShapes + k / kNumShapes) % kNumColours;
  return c;
}

const char* background_name(Background b) {
  switch (b) {
    case Background::kPlain:
      return "plain";
    case Background::kGradient:
      return "gradient";
    case Background::kStripes:
      return "stripes";
    case Background::kChecker:
      return "checker";
  }
  return "?";
}

void validate(const Options& opt) {
  FNVLP_CHECK(!opt.out_dir.empty(), "--out is required");
  FNVLP_CHECK(opt.images >= 1 && opt.images <= kMaxImages,
              "--images must be in 1.." << kMaxImages << ", got " << opt.images);
  FNVLP_CHECK(opt.captions_per_image >= 1 && opt.captions_per_image <= 100,
              "--captions-per-image must be in 1..100, got " << opt.captions_per_image);
  FNVLP_CHECK(opt.classes >= 1, "--classes must be >= 1, got " << opt.classes);
  FNVLP_CHECK(opt.classes <= kMaxClasses,
              "--classes " << opt.classes << " is larger than the " << kMaxClasses
                           << " available shape x colour combinations (" << kNumShapes
                           << " shapes x " << kNumColours << " colours)");
  FNVLP_CHECK(opt.image_size >= kMinImageSize && opt.image_size <= kMaxImageSize,
              "--image-size must be in " << kMinImageSize << ".." << kMaxImageSize << ", got "
                                         << opt.image_size);
  FNVLP_CHECK(opt.val_fraction >= 0.0 && opt.val_fraction < 1.0,
              "--val-fraction must be in [0, 1), got " << opt.val_fraction);
}

int label_of(const Options& opt, int64_t index) {
  // A seeded permutation per block of K images: labels exactly balanced (up to the last partial
  // block) yet in no visible order, and computable from the index alone.
  const int k = opt.classes;
  const int64_t block = index / k;
  const int pos = static_cast<int>(index % k);
  Rng rng(opt.seed, static_cast<uint64_t>(block), kStreamLabel);
  std::vector<int> perm(static_cast<size_t>(k));
  for (int i = 0; i < k; ++i) perm[static_cast<size_t>(i)] = i;
  for (int i = k - 1; i > 0; --i)
    std::swap(perm[static_cast<size_t>(i)], perm[static_cast<size_t>(rng.below(i + 1))]);
  return perm[static_cast<size_t>(pos)];
}

Scene make_scene(const Options& opt, int64_t index) {
  Scene s;
  s.index = index;
  s.label = label_of(opt, index);
  ClassInfo ci = class_info(s.label);
  s.shape = ci.shape;
  s.colour = ci.colour;
  Rng rng(opt.seed, static_cast<uint64_t>(index), kStreamScene);
  int count = 1 + rng.below(kMaxCount);
  s.background = static_cast<Background>(rng.below(4));
  choose_background(rng, s);
  switch (s.background) {
    case Background::kGradient:
      s.bg_angle = rng.uniform(0.0, 2.0 * kPi);
      break;
    case Background::kStripes:
      s.bg_angle = rng.below(4) * kPi / 4.0;
      s.bg_period = rng.uniform(0.12, 0.25);
      s.bg_phase = rng.uniform();
      break;
    case Background::kChecker:
      s.bg_period = rng.uniform(0.12, 0.25);
      s.bg_phase = rng.uniform();
      break;
    case Background::kPlain:
      break;
  }
  s.noise = static_cast<float>(rng.uniform(0.0, kMaxNoise));
  s.noise_key = Rng(opt.seed, static_cast<uint64_t>(index), kStreamNoise).next();
  place_objects(rng, s, count);
  return s;
}

Image render(const Scene& s, int size) {
  FNVLP_CHECK(size >= 1, "render: image size " << size);
  const size_t n = static_cast<size_t>(size) * size;
  std::vector<float> px(n * 3);
  const double inv = 1.0 / size;

  // Background, box-filtered so stripes and checks have no stair-step aliasing.
  const double ca = std::cos(s.bg_angle), sa = std::sin(s.bg_angle);
  for (int y = 0; y < size; ++y) {
    const double py = (y + 0.5) * inv;
    for (int x = 0; x < size; ++x) {
      const double pxn = (x + 0.5) * inv;
      double t = 0.0;  // weight of bg_b
      switch (s.background) {
        case Background::kPlain:
          break;
        case Background::kGradient: {
          double half = 0.5 * (std::fabs(ca) + std::fabs(sa));
          t = ((pxn - 0.5) * ca + (py - 0.5) * sa + half) / (2.0 * half);
          break;
        }
        case Background::kStripes: {
          double u = (pxn * ca + py * sa) / s.bg_period + s.bg_phase;
          double w = (std::fabs(ca) + std::fabs(sa)) * inv / s.bg_period;
          t = square_wave_coverage(u, w);
          break;
        }
        case Background::kChecker: {
          double w = inv / s.bg_period;
          double cx = square_wave_coverage(pxn / s.bg_period + s.bg_phase, w);
          double cy = square_wave_coverage(py / s.bg_period + s.bg_phase, w);
          t = cx * cy + (1.0 - cx) * (1.0 - cy);
          break;
        }
      }
      float* p = &px[(static_cast<size_t>(y) * size + x) * 3];
      for (int c = 0; c < 3; ++c) {
        p[c] = s.bg_a[c] + (s.bg_b[c] - s.bg_a[c]) * static_cast<float>(t);
      }
    }
  }

  // Objects with analytic coverage: the pixel's share inside the shape is approximated from the
  // signed distance at its centre (0.5 - d in pixels), as good as heavy supersampling at a
  // fraction of the cost.
  for (const Object& o : s.objects) {
    const double c = std::cos(o.angle), sn = std::sin(o.angle);
    int x0 = std::max(0, static_cast<int>(std::floor((o.cx - o.radius) * size)) - 1);
    int x1 = std::min(size - 1, static_cast<int>(std::ceil((o.cx + o.radius) * size)) + 1);
    int y0 = std::max(0, static_cast<int>(std::floor((o.cy - o.radius) * size)) - 1);
    int y1 = std::min(size - 1, static_cast<int>(std::ceil((o.cy + o.radius) * size)) + 1);
    for (int y = y0; y <= y1; ++y) {
      for (int x = x0; x <= x1; ++x) {
        double dx = (x + 0.5) * inv - o.cx, dy = (y + 0.5) * inv - o.cy;
        // Into the shape's frame: undo the rotation, and flip y so shapes point up.
        V2 q{c * dx + sn * dy, -(-sn * dx + c * dy)};
        double cov = clampd(0.5 - shape_sdf(s.shape, q, o.radius) * size, 0.0, 1.0);
        if (cov <= 0.0) continue;
        float* p = &px[(static_cast<size_t>(y) * size + x) * 3];
        for (int ch = 0; ch < 3; ++ch) p[ch] += (o.rgb[ch] - p[ch]) * static_cast<float>(cov);
      }
    }
  }

  // Pixel noise from a hash of (scene key, pixel), three 21-bit uniforms per hash.
  Image img;
  img.width = size;
  img.height = size;
  img.rgb.resize(n * 3);
  for (size_t i = 0; i < n; ++i) {
    uint64_t h = mix64(s.noise_key + 0x9e3779b97f4a7c15ULL * (i + 1));
    for (int ch = 0; ch < 3; ++ch) {
      float u = static_cast<float>((h >> (21 * ch)) & 0x1fffff) * (1.0f / 2097152.0f);
      float v = px[i * 3 + ch] + (2.0f * u - 1.0f) * s.noise;
      img.rgb[i * 3 + ch] =
          static_cast<uint8_t>(std::min(255.0f, std::max(0.0f, std::floor(v + 0.5f))));
    }
  }
  return img;
}

std::vector<std::string> make_captions(const Scene& s, int n, uint64_t seed) {
  Rng rng(seed, static_cast<uint64_t>(s.index), kStreamCaption);
  std::vector<std::string> out;
  for (int attempt = 0; attempt < 20 * n && static_cast<int>(out.size()) < n; ++attempt) {
    std::string c = one_caption(rng, s);
    if (std::find(out.begin(), out.end(), c) == out.end()) out.push_back(std::move(c));
  }
  while (static_cast<int>(out.size()) < n) out.push_back(one_caption(rng, s));
  return out;
}

std::string image_id(int64_t index) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "synth-%07lld", static_cast<long long>(index));
  return buf;
}

std::string image_path(int64_t index) { return "images/" + image_id(index) + ".png"; }

int64_t num_val(const Options& opt) {
  if (opt.val_fraction <= 0.0 || opt.images < 2) return 0;
  int64_t v = std::llround(static_cast<double>(opt.images) * opt.val_fraction);
  return std::min(std::max<int64_t>(v, 1), opt.images - 1);
}

void write_images(const Options& opt, int rank, int size) {
  validate(opt);
  FNVLP_CHECK(size >= 1 && rank >= 0 && rank < size,
              "write_images: rank " << rank << " of " << size);
  fs::path dir = fs::path(opt.out_dir) / "images";
  std::error_code ec;
  fs::create_directories(dir, ec);
  FNVLP_CHECK(!ec, "cannot create " << dir.string() << ": " << ec.message());
  for (int64_t i = rank; i < opt.images; i += size) {
    Scene s = make_scene(opt, i);
    write_png_file((fs::path(opt.out_dir) / image_path(i)).string(), render(s, opt.image_size));
  }
}

void write_metadata(const Options& opt) {
  validate(opt);
  const fs::path out(opt.out_dir);
  std::error_code ec;
  fs::create_directories(out, ec);
  FNVLP_CHECK(!ec, "cannot create " << out.string() << ": " << ec.message());
  const int64_t n_val = num_val(opt);
  const int64_t first_val = opt.images - n_val;

  // Captions of all images; they depend on (seed, index) only, so no rank needs to send them.
  std::vector<std::vector<std::string>> captions(static_cast<size_t>(opt.images));
  std::vector<int> labels(static_cast<size_t>(opt.images));
  for (int64_t i = 0; i < opt.images; ++i) {
    Scene s = make_scene(opt, i);
    labels[static_cast<size_t>(i)] = s.label;
    captions[static_cast<size_t>(i)] = make_captions(s, opt.captions_per_image, opt.seed);
  }

  // One entry per line: the file streams out and stays greppable at millions of pairs.
  write_file_atomic(out / "captions.json", [&](std::ostream& os) {
    os << "[\n";
    bool first = true;
    for (int64_t i = 0; i < opt.images; ++i) {
      for (const std::string& c : captions[static_cast<size_t>(i)]) {
        ojson e;
        e["image"] = image_path(i);
        e["caption"] = c;
        e["image_id"] = image_id(i);
        e["label"] = labels[static_cast<size_t>(i)];
        os << (first ? "" : ",\n") << e.dump();
        first = false;
      }
    }
    os << "\n]\n";
  });

  write_file_atomic(out / "retrieval_val.json", [&](std::ostream& os) {
    os << "[";
    for (int64_t i = first_val; i < opt.images; ++i) {
      ojson e;
      e["image"] = image_path(i);
      e["caption"] = captions[static_cast<size_t>(i)];
      e["image_id"] = image_id(i);
      e["label"] = labels[static_cast<size_t>(i)];
      os << (i == first_val ? "\n" : ",\n") << e.dump();
    }
    os << "\n]\n";
  });

  ojson splits;
  splits["train"] = ojson::array();
  splits["val"] = ojson::array();
  for (int64_t i = 0; i < opt.images; ++i)
    splits[i < first_val ? "train" : "val"].push_back(image_id(i));
  write_file_atomic(out / "splits.json", [&](std::ostream& os) { os << splits.dump() << "\n"; });

  ojson classes = ojson::array();
  for (int k = 0; k < opt.classes; ++k) {
    ClassInfo ci = class_info(k);
    const ShapeDef& sh = shapes()[static_cast<size_t>(ci.shape)];
    const ColourDef& co = colours()[static_cast<size_t>(ci.colour)];
    ojson e;
    e["label"] = k;
    e["name"] = co.name + " " + sh.name;
    e["shape"] = sh.name;
    e["colour"] = co.name;
    e["rgb"] = co.rgb;
    ojson shape_syn = ojson::array();
    for (const Noun& w : sh.synonyms) shape_syn.push_back({w.singular, w.plural});
    e["shape_synonyms"] = shape_syn;
    e["colour_synonyms"] = co.synonyms;
    classes.push_back(e);
  }
  write_file_atomic(out / "classes.json", [&](std::ostream& os) { os << classes.dump(2) << "\n"; });
}

Summary generate(const Options& opt, const Comm& comm) {
  const auto t0 = std::chrono::steady_clock::now();
  // Each phase ends in an agreement: a failure anywhere becomes the same CollectiveError on every
  // rank, so no rank is left waiting in a later collective.
  auto phase = [&](const char* what, const std::function<void()>& fn) {
    comm.collective([&] {
      try {
        fn();
      } catch (const std::exception& e) {
        throw std::runtime_error(std::string("fnvlp-synth: ") + what + ": " + e.what());
      }
    });
  };
  // Every rank has the same options; rank 0 alone checks them so the error is reported once.
  phase("setup", [&] {
    if (!comm.is_root()) return;
    validate(opt);
    const fs::path images = fs::path(opt.out_dir) / "images";
    std::error_code ec;
    fs::create_directories(images, ec);
    FNVLP_CHECK(!ec, "cannot create " << images.string() << ": " << ec.message());
  });
  phase("rendering images", [&] { write_images(opt, comm.rank(), comm.size()); });
  phase("writing the JSON files", [&] {
    if (comm.is_root()) write_metadata(opt);
  });

  Summary sum;
  sum.images = opt.images;
  sum.captions = opt.images * opt.captions_per_image;
  sum.val = num_val(opt);
  sum.train = opt.images - sum.val;
  sum.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return sum;
}

}  // namespace fnvlp::data::synth
