// Peak memory and time of GloFND's exact_init on one rank (issue 27 benchmark): the exact
// (1 - alpha)-quantiles of a block of ROWS anchors from ROW0, both modalities, against the N pairs
// of an embeddings export (similarity::exact_thresholds, what every rank runs on its block at the
// epoch the thresholds restart). Uses only that function, so the same source builds against any
// commit and the two can be compared in one run.
//   build/tests/bench/bench_exact_init --create FILE N DIM   (writes a synthetic export)
//   build/tests/bench/bench_exact_init FILE ROW0 ROWS [ALPHA]
// Prints the growth of the peak resident set over the call (VmHWM after, reset by
// /proc/self/clear_refs, minus VmRSS before) and its wall time.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "fnvlp/data/embeddings.hpp"
#include "fnvlp/similarity/simstat.hpp"
#include "proc_status.hpp"

namespace {

// Pairs [first, first + n) of a synthetic export: 5 captions per image, unit vectors.
fnvlp::data::Embeddings rows_of(int64_t first, int64_t n, int64_t dim) {
  fnvlp::data::Embeddings e;
  e.dim = dim;
  e.first = first;
  e.image_emb.resize(static_cast<size_t>(n * dim));
  e.text_emb.resize(e.image_emb.size());
  uint64_t x = 0x9e3779b97f4a7c15ull ^ static_cast<uint64_t>(first);
  const auto next = [&x] {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return static_cast<float>(x >> 40) / static_cast<float>(1 << 24) - 0.5f;
  };
  for (int64_t i = 0; i < n; ++i) {
    for (auto* v : {&e.image_emb, &e.text_emb}) {
      float* row = v->data() + i * dim;
      double norm = 0;
      for (int64_t k = 0; k < dim; ++k) {
        row[k] = next();
        norm += static_cast<double>(row[k]) * row[k];
      }
      for (int64_t k = 0; k < dim; ++k) row[k] = static_cast<float>(row[k] / std::sqrt(norm));
    }
    e.pair_id.push_back(first + i);
    e.image_id.push_back((first + i) / 5);
    e.label.push_back(static_cast<int32_t>((first + i) % 100));
  }
  return e;
}

}  // namespace

int main(int argc, char** argv) {
  using fnvlp::bench::status_mib;
  if (argc >= 5 && std::string(argv[1]) == "--create") {
    const std::string path = argv[2];
    const int64_t n = std::atoll(argv[3]), dim = std::atoll(argv[4]);
    fnvlp::data::create_embeddings(path, n, dim, false, 0, 0);
    for (int64_t r0 = 0; r0 < n; r0 += 1 << 18)
      fnvlp::data::write_embedding_rows(path, rows_of(r0, std::min<int64_t>(1 << 18, n - r0), dim));
    return 0;
  }
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s --create FILE N DIM | FILE ROW0 ROWS [ALPHA]\n", argv[0]);
    return 2;
  }
  const std::string path = argv[1];
  const int64_t row0 = std::atoll(argv[2]), rows = std::atoll(argv[3]);
  const double alpha = argc > 4 ? std::atof(argv[4]) : 0.01;
  const double rss0 = status_mib("VmRSS:");
  std::ofstream("/proc/self/clear_refs") << "5";
  const auto t0 = std::chrono::steady_clock::now();
  const auto exact = fnvlp::similarity::exact_thresholds(path, row0, rows, alpha);
  const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  double sum = 0;
  for (size_t i = 0; i < exact.image.size(); ++i) sum += exact.image[i] + exact.text[i];
  std::printf("exact_init anchors [%lld, %lld): peak +%.1f MiB, %.2f s, threshold sum %.6f\n",
              static_cast<long long>(row0), static_cast<long long>(row0 + rows),
              status_mib("VmHWM:") - rss0, sec, sum);
  return 0;
}
