// Guards the environment: libtorch on Debian's reference BLAS is ~40x slower than on OpenBLAS,
// which would make every training job crawl without any error. 20 GFLOP/s is far below what
// OpenBLAS gives on one core of any recent x86 machine and far above reference BLAS.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>

TEST(Environment, SgemmRunsOnAnOptimisedBlas) {
  torch::manual_seed(0);
  const auto a = torch::randn({1024, 256});
  const auto b = torch::randn({256, 4096});
  const double flop = 2.0 * 1024 * 256 * 4096;
  auto c = torch::mm(a, b);  // warm-up: thread pool, page faults
  double best = 1e30;
  for (int rep = 0; rep < 20; ++rep) {  // best of 20: a busy neighbour only slows some
    const auto t0 = std::chrono::steady_clock::now();
    c = torch::mm(a, b);
    best = std::min(best,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  const double gflops = flop / best / 1e9;
  RecordProperty("gflops", std::to_string(gflops));
  std::printf("1024x256 . 256x4096 fp32 matmul: %.1f GFLOP/s (best of 20, %d intra-op threads)\n",
              gflops, torch::get_num_threads());
  EXPECT_GE(gflops, 20.0) << "libtorch matmul at " << gflops
                          << " GFLOP/s: libtorch is probably on reference BLAS; install "
                             "libopenblas0-pthread (env/install-debian.sh)";
  // The product itself must be right, not only fast.
  EXPECT_TRUE(torch::allclose(
      c.index({0, 0}), (a.index({0}) * b.index({torch::indexing::Slice(), 0})).sum(), 1e-3, 1e-3));
}
