// Comm semantics at any rank count (ctest runs this at np 1, 2 and 4): every expectation is
// written in terms of rank and size so it holds for each.
#include <gtest/gtest.h>

#include <limits>
#include <numeric>

#include "fnvlp/comm/comm.hpp"
#include "fnvlp/comm/job_main.hpp"
#include "fnvlp/comm/max_count.hpp"
#include "fnvlp/comm/native.hpp"  // raw MPI only here, where Comm itself is tested

using fnvlp::Comm;

namespace {

TEST(Comm, DuplicatesTheWorldCommunicator) {
  Comm comm;
  int world = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  EXPECT_EQ(comm.size(), world);
  int cmp = 0;
  MPI_Comm_compare(comm.native().comm, MPI_COMM_WORLD, &cmp);
  EXPECT_EQ(cmp, MPI_CONGRUENT);  // same group, separate context: no message can cross
}

TEST(Comm, Reductions) {
  Comm comm;
  const int r = comm.rank(), n = comm.size();
  EXPECT_EQ(comm.allreduce_sum<int64_t>(r + 1), int64_t(n) * (n + 1) / 2);
  EXPECT_EQ(comm.allreduce_max<int32_t>(r), n - 1);
  EXPECT_EQ(comm.allreduce_min<double>(r + 0.5), 0.5);
  std::vector<double> v = {double(r), 1.0};
  comm.allreduce_mean(v);
  EXPECT_DOUBLE_EQ(v[0], (n - 1) / 2.0);
  EXPECT_DOUBLE_EQ(v[1], 1.0);
  EXPECT_EQ(comm.exscan_sum(r + 1), int64_t(r) * (r + 1) / 2);
}

// A buffer longer than one MPI call may carry (2^31 - 1 elements: a CUDA buffer staged on the
// host for the MPI fallback can be longer) goes in chunks: the same sums, here at 7 per call.
TEST(Comm, AllreduceChunksWhatOneCallCannotCarry) {
  Comm comm;
  fnvlp::set_max_count_per_call(7);
  std::vector<float> f(100);
  std::vector<double> d(15);
  for (size_t i = 0; i < f.size(); ++i) f[i] = static_cast<float>(i * (comm.rank() + 1));
  for (size_t i = 0; i < d.size(); ++i) d[i] = 0.5 * static_cast<double>(i + comm.rank());
  const uint64_t before = comm.traffic().allreduce;
  comm.allreduce(f.data(), f.size(), fnvlp::ReduceOp::kSum);
  comm.allreduce(d.data(), d.size(), fnvlp::ReduceOp::kMax);
  fnvlp::set_max_count_per_call(static_cast<size_t>(std::numeric_limits<int>::max()));
  const int n = comm.size();
  for (size_t i = 0; i < f.size(); ++i)
    EXPECT_EQ(f[i], static_cast<float>(i * n * (n + 1) / 2)) << i;
  for (size_t i = 0; i < d.size(); ++i) EXPECT_EQ(d[i], 0.5 * static_cast<double>(i + n - 1)) << i;
  EXPECT_EQ(comm.traffic().allreduce - before, 100 * 4 + 15 * 8u);  // counted once, not per chunk
  EXPECT_THROW(fnvlp::set_max_count_per_call(0), fnvlp::Error);
}

TEST(Comm, ReduceOpsInPlace) {
  Comm comm;
  const int r = comm.rank(), n = comm.size();
  for (const auto& [op, expect] :
       {std::pair{fnvlp::ReduceOp::kSum, n * (n - 1) / 2.0f},
        std::pair{fnvlp::ReduceOp::kMax, n - 1.0f}, std::pair{fnvlp::ReduceOp::kMin, 0.0f}}) {
    std::vector<float> v = {float(r), float(r)};
    comm.allreduce(v.data(), v.size(), op);
    EXPECT_EQ(v, (std::vector<float>{expect, expect}));
  }
}

TEST(Comm, AllgatherAndAllgathervKeepRankOrder) {
  Comm comm;
  const int r = comm.rank(), n = comm.size();
  const auto ranks = comm.allgather<int32_t>(r * 10);
  for (int i = 0; i < n; ++i) EXPECT_EQ(ranks[i], i * 10);
  // Rank i contributes i elements (rank 0 none): ragged sizes, including empty.
  std::vector<int64_t> mine(static_cast<size_t>(r), r);
  const auto all = comm.allgatherv(mine);
  ASSERT_EQ(all.size(), size_t(n) * (n - 1) / 2);
  size_t k = 0;
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < i; ++j) EXPECT_EQ(all[k++], i);
  const auto strings = comm.allgather_strings(std::string(static_cast<size_t>(r), 'a' + r));
  for (int i = 0; i < n; ++i) EXPECT_EQ(strings[i], std::string(static_cast<size_t>(i), 'a' + i));
}

TEST(Comm, AlltoallvDeliversEachRanksSlice) {
  Comm comm;
  const int r = comm.rank(), n = comm.size();
  // Rank r sends (dest + 1) copies of (100 * r + dest) to each dest.
  std::vector<int64_t> send;
  std::vector<int> counts;
  for (int d = 0; d < n; ++d) {
    counts.push_back(d + 1);
    send.insert(send.end(), static_cast<size_t>(d + 1), 100 * r + d);
  }
  std::vector<int> recv_counts;
  const auto got = comm.alltoallv(send, counts, &recv_counts);
  ASSERT_EQ(got.size(), size_t(n) * (r + 1));
  for (int s = 0; s < n; ++s) {
    EXPECT_EQ(recv_counts[s], r + 1);
    for (int k = 0; k <= r; ++k) EXPECT_EQ(got[static_cast<size_t>(s * (r + 1) + k)], 100 * s + r);
  }
}

TEST(Comm, BroadcastFromLastRank) {
  Comm comm;
  const int root = comm.size() - 1;
  std::vector<float> v;
  std::string s;
  if (comm.rank() == root) {
    v = {1.5f, 2.5f, 3.5f};
    s = "from the last rank";
  }
  comm.bcast(v, root);
  comm.bcast(s, root);
  EXPECT_EQ(v, (std::vector<float>{1.5f, 2.5f, 3.5f}));
  EXPECT_EQ(s, "from the last rank");
}

// The traffic counters (the per-step bytes fnvlp-pretrain logs): an all-reduce counts its buffer,
// an all-gather its whole result, a broadcast or all-to-all what it sent, each by element size.
TEST(Comm, CountsThePayloadOfEachKindOfCollective) {
  Comm comm;
  const int r = comm.rank(), n = comm.size();
  const fnvlp::CommTraffic start = comm.traffic();
  std::vector<double> v(5, 1.0);
  comm.allreduce_sum(v);  // 5 doubles
  std::vector<float> mine(static_cast<size_t>(r + 1), 1.0f);
  comm.allgatherv(mine);  // counts (n int32), sum(r + 1) floats
  std::vector<int16_t> b(3);
  comm.bcast(b.data(), b.size(), 0);  // 3 int16
  const fnvlp::CommTraffic d = comm.traffic() - start;
  EXPECT_EQ(d.allreduce, 5u * 8u);
  EXPECT_EQ(d.allgather, 4u * n + 4u * n * (n + 1) / 2);
  EXPECT_EQ(d.other, 3u * 2u);
}

TEST(Comm, OneRanksFailureReachesEveryRankWithoutHanging) {
  Comm comm;
  const int bad = comm.size() - 1;
  try {
    comm.collective([&] {
      if (comm.rank() == bad) throw std::runtime_error("disk full on this rank");
    });
    FAIL() << "no error on rank " << comm.rank();
  } catch (const fnvlp::CollectiveError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("rank " + std::to_string(bad) + ": disk full on this rank"),
              std::string::npos)
        << what;
  }
  EXPECT_TRUE(comm.all_ok(true));
  EXPECT_FALSE(comm.all_ok(comm.rank() != 0));
  // The communicator is still usable after the failure.
  EXPECT_EQ(comm.allreduce_sum<int32_t>(1), comm.size());
}

struct TinyConfig {
  // clang-format off
  FNVLP_CONFIG_FIELDS((int64_t, log_every, 10, fnvlp::config::at_least(1)))
  // clang-format on
};

TEST(JobMain, ConfigErrorsAreOneUsageErrorOnEveryRank) {
  Comm comm;
  EXPECT_EQ(fnvlp::load_job_config<TinyConfig>(comm, {}, {"log_every=3"}).log_every, 3);
  try {
    fnvlp::load_job_config<TinyConfig>(comm, {}, {"log_every=0"});
    FAIL() << "no error on rank " << comm.rank();
  } catch (const fnvlp::UsageError& e) {
    const std::string what = e.what();  // the same error on every rank: said once, no rank prefix
    EXPECT_NE(what.find("'log_every' = 0 is outside [1, inf)"), std::string::npos) << what;
    EXPECT_EQ(what.find("rank "), std::string::npos) << what;
  }
}

TEST(JobMain, AgreeOnErrorNamesTheFailingRanks) {
  Comm comm;
  EXPECT_EQ(fnvlp::agree_on_error(comm, ""), "");
  EXPECT_EQ(fnvlp::agree_on_error(comm, "same everywhere"), "same everywhere");
  const int bad = comm.size() - 1;
  const std::string one = fnvlp::agree_on_error(comm, comm.rank() == bad ? "only here" : "");
  EXPECT_EQ(one, comm.size() == 1 ? "only here" : "rank " + std::to_string(bad) + ": only here");
  if (comm.size() > 1) {  // different errors: each, with its rank
    const std::string each = fnvlp::agree_on_error(comm, "error " + std::to_string(comm.rank()));
    EXPECT_NE(each.find("rank 0: error 0"), std::string::npos) << each;
    EXPECT_NE(each.find("rank 1: error 1"), std::string::npos) << each;
  }
}

}  // namespace
