#pragma once
// fnvlp-synth: the embedded default dataset. Procedurally rendered scenes of coloured shapes with
// templated captions, written in ALBEF's pretraining JSON format plus a "label" key. The label is
// the semantic class (shape x colour); everything else in a scene (count, size, position,
// rotation, background, noise) is nuisance, so many images share a class and many captions fit
// several images: the false negatives the project studies, with ground truth.
//
// Every value is a pure function of (seed, image index, stream) through a counter-based hash, so
// the output bytes do not depend on how images are split over ranks.
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "fnvlp/data/image.hpp"

namespace fnvlp {
class Comm;
}

namespace fnvlp::data::synth {

struct Options {
  std::string out_dir;
  int64_t images = 10000;
  int captions_per_image = 5;
  int classes = 16;
  int image_size = 64;
  uint64_t seed = 0;
  double val_fraction = 0.1;
};

inline constexpr int kNumShapes = 8;
inline constexpr int kNumColours = 8;
inline constexpr int kMaxClasses = kNumShapes * kNumColours;
inline constexpr int kMaxCount = 4;             // objects per image: 1..kMaxCount
inline constexpr int64_t kMaxImages = 9999999;  // image ids have 7 digits
inline constexpr int kMinImageSize = 16;
inline constexpr int kMaxImageSize = 1024;

// Throws fnvlp::Error naming the offending option.
void validate(const Options& opt);

struct Noun {
  std::string singular;
  std::string plural;
};
struct ShapeDef {
  std::string name;
  std::vector<Noun> synonyms;  // synonyms[0] is the name
};
struct ColourDef {
  std::string name;
  std::array<uint8_t, 3> rgb;
  std::vector<std::string> synonyms;  // synonyms[0] is the name
};
const std::vector<ShapeDef>& shapes();
const std::vector<ColourDef>& colours();

// Class k is a (shape, colour) pair. The order walks the diagonals of the 8x8 grid, so any first
// K classes spread over as many shapes and colours as possible and, from K > 8 on, every shape
// and colour is shared between classes (the model has to bind the two). Independent of the seed.
struct ClassInfo {
  int shape = 0;
  int colour = 0;
};
ClassInfo class_info(int k);

enum class Background { kPlain, kGradient, kStripes, kChecker };
const char* background_name(Background b);

// Geometry is in image-relative units ([0,1] x [0,1], y down) so a scene renders at any size.
struct Object {
  double cx = 0, cy = 0;
  double radius = 0;  // the shape fits in this circle
  double angle = 0;   // radians
  std::array<float, 3> rgb{};
};

struct Scene {
  int64_t index = 0;
  int label = 0;
  int shape = 0;
  int colour = 0;
  Background background = Background::kPlain;
  std::array<float, 3> bg_a{}, bg_b{};
  double bg_angle = 0;   // gradient / stripe direction, radians
  double bg_period = 0;  // stripe / checker period (image-relative)
  double bg_phase = 0;
  float noise = 0;  // uniform pixel noise amplitude in 0..255 units
  uint64_t noise_key = 0;
  std::vector<Object> objects;  // non-overlapping, fully inside the image
};

// Class of image `index`: exactly balanced within each consecutive block of K images.
int label_of(const Options& opt, int64_t index);
Scene make_scene(const Options& opt, int64_t index);
Image render(const Scene& scene, int image_size);
// `n` captions, distinct where the templates allow; each names the class's shape and colour
// (one synonym each) and only true nuisance facts.
std::vector<std::string> make_captions(const Scene& scene, int n, uint64_t seed);

std::string image_id(int64_t index);    // "synth-0000042"
std::string image_path(int64_t index);  // "images/synth-0000042.png", relative to out_dir

// Renders and writes the images with index % size == rank (creates out_dir/images).
void write_images(const Options& opt, int rank, int size);
// Writes captions.json, splits.json, retrieval_val.json and classes.json (one process).
void write_metadata(const Options& opt);
// Number of validation images: the last ones in index order.
int64_t num_val(const Options& opt);

struct Summary {
  int64_t images = 0;
  int64_t captions = 0;
  int64_t train = 0;
  int64_t val = 0;
  double seconds = 0;
};
// The whole job on every rank of `comm`: ranks render disjoint images, rank 0 writes the JSON.
// A failure on any rank (bad options included) raises CollectiveError on every rank, so no peer
// is left waiting and job_main exits cleanly.
Summary generate(const Options& opt, const Comm& comm);

}  // namespace fnvlp::data::synth
