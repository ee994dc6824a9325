#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>

#include "fnvlp/core/parallel.hpp"

TEST(ParallelFor, VisitsEveryIndexOnceForAnyThreadCount) {
  for (int threads : {1, 2, 3, 8}) {
    std::vector<std::atomic<int>> hits(1000);
    fnvlp::parallel_for(hits.size(), threads, [&](size_t i) { ++hits[i]; });
    for (size_t i = 0; i < hits.size(); ++i) ASSERT_EQ(hits[i].load(), 1) << threads << " threads";
  }
  fnvlp::parallel_for(0, 4, [](size_t) { FAIL() << "called for an empty range"; });
}

TEST(ParallelFor, RethrowsAWorkersException) {
  for (int threads : {1, 4}) {
    EXPECT_THROW(fnvlp::parallel_for(100, threads,
                                     [](size_t i) {
                                       if (i == 37) throw std::runtime_error("bad item");
                                     }),
                 std::runtime_error);
  }
}
