#pragma once
// Test inputs and a brute-force reference for fnvlp-simstat: the full similarity matrix, every
// row fully sorted. Shared by the unit tests and the MPI tests.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <vector>

#include "fnvlp/data/embeddings.hpp"
#include "fnvlp/similarity/kernels.hpp"
#include "fnvlp/similarity/simstat.hpp"
#include "fnvlp/similarity/spaces.hpp"

namespace fnvlp::test {

// Kokkos for the whole test binary (initialised after MPI in mpi_main, finalised in RUN_ALL_TESTS'
// teardown, before MPI_Finalize), with a threaded backend's threads from OMP_NUM_THREADS; not at
// all where it runs on a device and none is visible. Each binary registers one.
class KokkosEnv : public ::testing::Environment {
 public:
  void SetUp() override {
    if (similarity::device_available()) rt_ = std::make_unique<similarity::KokkosRuntime>(0);
  }
  void TearDown() override { rt_.reset(); }

 private:
  std::unique_ptr<similarity::KokkosRuntime> rt_;
};

// Where Kokkos runs on a device (FNVLP_KOKKOS=cuda) simstat's tests need one: without it each
// says why.
class NeedsKokkosDevice : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!similarity::device_available())
      GTEST_SKIP() << "SKIPPED: this build's Kokkos runs on " << similarity::DeviceSpace::name()
                   << " and no device is visible";
  }
};

// Random unit vectors, or (adversarial) vectors with entries in {-2..2}/4 so that many dot
// products tie exactly, duplicated rows, one huge image group (anchors with few negatives) and
// unlabelled pairs. Captions per image vary 1..5.
inline data::Embeddings make_embeddings(int64_t n, int64_t dim, uint64_t seed, bool adversarial) {
  std::mt19937_64 rng(seed);
  data::Embeddings e;
  e.dim = dim;
  e.image_emb.resize(static_cast<size_t>(n * dim));
  e.text_emb.resize(static_cast<size_t>(n * dim));
  std::normal_distribution<float> g;
  std::uniform_int_distribution<int> q(-2, 2), caps(1, 5), lab(0, 5);
  int64_t image = 0;
  for (int64_t i = 0; i < n;) {
    const int64_t c = adversarial && image == 0 ? n / 2 : caps(rng);
    for (int64_t t = 0; t < c && i < n; ++t, ++i) {
      e.pair_id.push_back(i);
      e.image_id.push_back(1000 + image * 7);
      e.label.push_back(adversarial && (i % 11 == 0) ? -1 : static_cast<int32_t>(image % 6));
    }
    ++image;
  }
  for (auto* m : {&e.image_emb, &e.text_emb}) {
    for (int64_t i = 0; i < n; ++i) {
      float* row = m->data() + i * dim;
      if (adversarial && i % 5 == 3) {  // an exact duplicate of an earlier row
        std::copy(row - 3 * dim, row - 2 * dim, row);
        continue;
      }
      double norm = 0;
      for (int64_t k = 0; k < dim; ++k) {
        row[k] = adversarial ? static_cast<float>(q(rng)) * 0.25f : g(rng);
        norm += double(row[k]) * row[k];
      }
      if (!adversarial && norm > 0)
        for (int64_t k = 0; k < dim; ++k) row[k] = static_cast<float>(row[k] / std::sqrt(norm));
    }
  }
  for (int64_t i = 0; i < n; ++i) {
    e.glofnd_lambda_image.push_back(adversarial ? 0.25f * static_cast<float>(q(rng))
                                                : 0.1f * g(rng));
    e.glofnd_lambda_text.push_back(adversarial ? 0.25f * static_cast<float>(q(rng))
                                               : 0.1f * g(rng));
  }
  return e;
}

struct Reference {
  std::vector<float> threshold, fnc_threshold, qmin, qmax;
  std::vector<std::vector<float>> sorted_neg;  // per row, ascending
  std::vector<int64_t> n_neg, n_label, count, count_label, count_lambda, count_lambda_label,
      count_fnc, count_fnc_label, n_batch_label;
};

// The similarities of the generic path (kernels.hpp, dot_in_double), row-major n x n.
inline std::vector<float> generic_similarities(const std::vector<float>& anchors,
                                               const std::vector<float>& cands, int64_t n,
                                               int64_t dim) {
  std::vector<float> full(static_cast<size_t>(n * n));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j)
      full[static_cast<size_t>(i * n + j)] =
          similarity::dot_in_double(anchors.data() + i * dim, cands.data() + j * dim, dim);
  return full;
}

// Brute force over a full similarity matrix S (row-major n x n), every row fully sorted.
inline Reference brute_force_of(const float* S, int64_t n, const std::vector<int64_t>& image_id,
                                const std::vector<int32_t>& label, const std::vector<float>& lambda,
                                const std::vector<int64_t>& batch, double alpha) {
  Reference r;
  for (int64_t i = 0; i < n; ++i) {
    std::vector<std::pair<float, int>> neg, bneg;
    int64_t lam_n = 0, lam_l = 0;
    for (int64_t j = 0; j < n; ++j) {
      if (image_id[j] == image_id[i]) continue;
      const float v = S[i * n + j];
      const int same = label[i] >= 0 && label[j] == label[i];
      neg.push_back({v, same});
      if (batch[j] == batch[i]) bneg.push_back({v, same});
      if (!lambda.empty() && v >= lambda[i]) lam_n += 1, lam_l += same;
    }
    auto desc = [](auto x, auto y) { return x.first > y.first; };
    std::sort(neg.begin(), neg.end(), desc);
    std::sort(bneg.begin(), bneg.end(), desc);
    int64_t nl = 0;
    for (auto& p : neg) nl += p.second;
    r.n_neg.push_back(static_cast<int64_t>(neg.size()));
    r.n_label.push_back(nl);
    r.count_lambda.push_back(lam_n);
    r.count_lambda_label.push_back(lam_l);
    auto flag = [&](const std::vector<std::pair<float, int>>& v, float& thr, int64_t& cnt,
                    int64_t& cnt_l) {
      const int64_t k = similarity::target_rank(alpha, static_cast<int64_t>(v.size()));
      cnt = cnt_l = 0;
      thr = std::numeric_limits<float>::quiet_NaN();
      if (k == 0) return;
      thr = v[static_cast<size_t>(k - 1)].first;
      for (auto& p : v)
        if (p.first >= thr) cnt += 1, cnt_l += p.second;
    };
    float t, tb;
    int64_t c1, c2, c3, c4;
    flag(neg, t, c1, c2);
    flag(bneg, tb, c3, c4);
    r.threshold.push_back(t);
    r.count.push_back(c1);
    r.count_label.push_back(c2);
    r.fnc_threshold.push_back(tb);
    r.count_fnc.push_back(c3);
    r.count_fnc_label.push_back(c4);
    int64_t bl = 0;
    for (auto& p : bneg) bl += p.second;
    r.n_batch_label.push_back(bl);
    std::vector<float> asc;
    for (auto it = neg.rbegin(); it != neg.rend(); ++it) asc.push_back(it->first);
    r.sorted_neg.push_back(asc);
  }
  return r;
}

// Brute force over S = anchors * candidates^T from the same fixed-shape GEMM the fast path is fed
// with: the reference checks the selection, the counts and the decomposition, on the same float32
// similarities.
inline Reference brute_force(const std::vector<float>& anchors, const std::vector<float>& cands,
                             int64_t n, int64_t dim, const std::vector<int64_t>& image_id,
                             const std::vector<int32_t>& label, const std::vector<float>& lambda,
                             const std::vector<int64_t>& batch, double alpha) {
  std::vector<float> full(static_cast<size_t>(n * n));
  similarity::similarity_tile(anchors.data(), n, cands.data(), n, dim, full.data());
  return brute_force_of(full.data(), n, image_id, label, lambda, batch, alpha);
}

// Same bits, NaN equal to NaN.
inline bool same_float(float a, float b) {
  return (std::isnan(a) && std::isnan(b)) || std::memcmp(&a, &b, sizeof a) == 0;
}

}  // namespace fnvlp::test
