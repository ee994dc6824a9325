// NcclComm against Comm (MPI) on the same data, at np 1, 2 and 4 (ctest label gpu). The tests
// skip on every rank together (a rank skipping alone would leave its peers in a collective):
// without NCCL in the build, without a CUDA device, or with more ranks on a node than GPUs (NCCL
// refuses two ranks on one GPU).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "fnvlp/comm/comm.hpp"
#include "fnvlp/comm/nccl.hpp"
#include "fnvlp/comm/node_local.hpp"  // the node-local rank picks the GPU
#include "fnvlp/comm/tensors.hpp"
#include "fnvlp/core/device_copy.hpp"

#if defined(FNVLP_WITH_CUDA)
#include <ATen/cuda/Sleep.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

using fnvlp::Comm;
using fnvlp::NcclComm;

namespace {

// Why this job cannot run the NCCL tests ("" when it can), agreed by every rank. Sets each
// rank's CUDA device to its node-local rank.
std::string skip_reason(const Comm& comm) {
  std::string why;
  if (!fnvlp::nccl_built()) {
    why = "no NCCL in this build";
  } else {
    const fnvlp::NodeLocal local = fnvlp::node_local(comm);
    const int local_rank = local.rank, local_size = local.size;
    const int devices = static_cast<int>(torch::cuda::device_count());
    if (devices == 0) {
      why = "no CUDA device";
    } else if (local_size > devices) {
      why = "NCCL needs one GPU per rank: " + std::to_string(local_size) + " ranks, " +
            std::to_string(devices) + " devices";
    } else {
#if defined(FNVLP_WITH_CUDA)
      c10::cuda::set_device(static_cast<c10::DeviceIndex>(local_rank));
#endif
    }
  }
  for (const auto& w : comm.allgather_strings(why))
    if (!w.empty()) return w;
  return "";
}

// One communicator for the suite (NCCL initialisation costs a second or more), made and
// destroyed inside RUN_ALL_TESTS, while MPI and CUDA are up.
class Nccl : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    comm_ = std::make_unique<Comm>();
    skip_ = skip_reason(*comm_);
    if (!skip_.empty()) return;
    try {
      nccl_ = std::make_unique<NcclComm>(*comm_);
    } catch (const std::exception& e) {
      init_error_ = e.what();  // thrown on every rank: each test then fails on every rank
    }
  }
  static void TearDownTestSuite() {
    nccl_.reset();
    comm_.reset();
  }
  void SetUp() override {
    if (!skip_.empty()) GTEST_SKIP() << skip_;
    ASSERT_TRUE(nccl_) << "NcclComm failed: " << init_error_;
  }

  static const Comm& comm() { return *comm_; }
  static const NcclComm& nccl() { return *nccl_; }
  static torch::Device gpu() { return torch::Device(torch::kCUDA, nccl_->device()); }
  // Per-rank data, different on every rank and repeatable.
  static void seed(int salt) { torch::manual_seed(1000 * salt + comm_->rank()); }
  // Small integers: every partial sum is exact in any type and any order (bf16 included).
  static torch::Tensor small_ints(std::vector<int64_t> shape) {
    return torch::randint(-8, 9, shape, torch::kFloat);
  }

  static std::unique_ptr<Comm> comm_;
  static std::unique_ptr<NcclComm> nccl_;
  static std::string skip_, init_error_;
};
std::unique_ptr<Comm> Nccl::comm_;
std::unique_ptr<NcclComm> Nccl::nccl_;
std::string Nccl::skip_, Nccl::init_error_;

TEST(NcclBuild, RefusedWithoutNccl) {
  if (fnvlp::nccl_built()) GTEST_SKIP() << "this build has NCCL";
  Comm comm;
  try {
    NcclComm nccl(comm);
    FAIL() << "NcclComm was made in a build without NCCL";
  } catch (const fnvlp::Error& e) {
    EXPECT_NE(std::string(e.what()).find("this build has no NCCL"), std::string::npos) << e.what();
  }
}

// A GPU build on a machine without GPUs: refused on every rank, not a crash or a hang.
TEST(NcclBuild, RefusedWithoutCudaDevice) {
  Comm comm;
  if (!fnvlp::nccl_built()) GTEST_SKIP() << "no NCCL in this build";
  if (comm.allreduce_max<int64_t>(static_cast<int64_t>(torch::cuda::device_count())) > 0)
    GTEST_SKIP() << "a CUDA device is present";
  try {
    NcclComm nccl(comm);
    FAIL() << "NcclComm was made without a CUDA device";
  } catch (const fnvlp::Error& e) {
    EXPECT_NE(std::string(e.what()).find("no CUDA device"), std::string::npos) << e.what();
  }
}

TEST_F(Nccl, RankAndSizeAreComms) {
  EXPECT_EQ(nccl().rank(), comm().rank());
  EXPECT_EQ(nccl().size(), comm().size());
  EXPECT_GE(nccl().device(), 0);
  nccl().synchronize("an idle stream");
}

TEST_F(Nccl, AllreduceSumFloatMatchesMpi) {
  seed(1);
  torch::Tensor host = torch::randn({37, 5});
  torch::Tensor dev = host.to(gpu());
  comm().allreduce(host.data_ptr<float>(), static_cast<size_t>(host.numel()),
                   fnvlp::ReduceOp::kSum);
  nccl().allreduce_sum(dev);
  // Ring versus MPI's order: the sums differ in the last bits at most.
  EXPECT_TRUE(torch::allclose(dev.cpu(), host, 1e-5, 1e-5));
}

TEST_F(Nccl, AllreduceSumBf16MatchesMpi) {
  seed(2);
  torch::Tensor host = small_ints({64, 3});
  torch::Tensor dev = host.to(gpu()).to(torch::kBFloat16);
  comm().allreduce(host.data_ptr<float>(), static_cast<size_t>(host.numel()),
                   fnvlp::ReduceOp::kSum);
  nccl().allreduce_sum(dev);
  EXPECT_EQ(dev.scalar_type(), torch::kBFloat16);
  EXPECT_TRUE(torch::equal(dev.cpu().to(torch::kFloat), host));
}

TEST_F(Nccl, AllreduceSumOtherTypesExact) {
  seed(3);
  const torch::Tensor host = small_ints({11});
  torch::Tensor expect = host.clone();
  comm().allreduce(expect.data_ptr<float>(), static_cast<size_t>(expect.numel()),
                   fnvlp::ReduceOp::kSum);
  for (const auto type : {torch::kDouble, torch::kLong, torch::kInt}) {
    torch::Tensor dev = host.to(gpu()).to(type);
    nccl().allreduce_sum(dev);
    EXPECT_EQ(dev.scalar_type(), type);
    EXPECT_TRUE(torch::equal(dev.cpu().to(torch::kFloat), expect)) << type;
  }
  torch::Tensor empty = torch::zeros({0, 4}, torch::TensorOptions().device(gpu()));
  nccl().allreduce_sum(empty);  // nothing to move, on every rank alike
}

TEST_F(Nccl, AllgatherRowsRaggedMatchesMpi) {
  seed(4);
  // 2, 0, 3, 1 rows: ragged blocks, an empty one at np >= 2.
  const int64_t rows[] = {2, 0, 3, 1};
  const torch::Tensor host = torch::randn({rows[comm().rank() % 4], 3, 5});
  int64_t offset = -1;
  const torch::Tensor expect = fnvlp::allgather_rows(comm(), host, &offset);
  const torch::Tensor got = nccl().allgather_rows(host.to(gpu()));
  EXPECT_TRUE(got.is_cuda());
  ASSERT_EQ(got.sizes(), expect.sizes());
  EXPECT_TRUE(torch::equal(got.cpu(), expect));
  EXPECT_TRUE(torch::equal(got.cpu().narrow(0, offset, host.size(0)), host));
}

TEST_F(Nccl, AllgatherRowsEqualBlocksKeepTheDtype) {
  seed(5);
  const torch::Tensor host = small_ints({4, 6});  // equal blocks: the single ncclAllGather
  const torch::Tensor expect = fnvlp::allgather_rows(comm(), host, nullptr);
  const torch::Tensor got = nccl().allgather_rows(host.to(gpu()).to(torch::kBFloat16));
  EXPECT_EQ(got.scalar_type(), torch::kBFloat16);
  ASSERT_EQ(got.sizes(), expect.sizes());
  EXPECT_TRUE(torch::equal(got.cpu().to(torch::kFloat), expect));
  const torch::Tensor ids = torch::arange(3, torch::kLong) + 10 * comm().rank();
  const torch::Tensor all_ids = nccl().allgather_rows(ids.to(gpu()));
  EXPECT_TRUE(torch::equal(all_ids.cpu(), fnvlp::allgather_ids(comm(), ids)));
}

TEST_F(Nccl, BroadcastFromTheLastRank) {
  const int root = comm().size() - 1;
  torch::Tensor f = torch::full({7, 3}, float(comm().rank()) + 0.5f).to(gpu());
  torch::Tensor ids = torch::arange(5, torch::kLong).add(100 * comm().rank()).to(gpu());
  nccl().broadcast(f, root);
  nccl().broadcast(ids, root);
  EXPECT_TRUE(torch::equal(f.cpu(), torch::full({7, 3}, root + 0.5f)));
  EXPECT_TRUE(torch::equal(ids.cpu(), torch::arange(5, torch::kLong).add(100 * root)));
}

// A bad argument on any rank throws fnvlp::Error on every rank (no peer left inside NCCL), and
// leaves the communicator usable.
TEST_F(Nccl, RefusedArgumentsThrowOnEveryRank) {
  auto message_of = [](const std::function<void()>& fn) -> std::string {
    try {
      fn();
    } catch (const fnvlp::Error& e) {
      return e.what();
    }
    return "";
  };
  torch::Tensor shorts = torch::ones({4}, torch::kShort).to(gpu());
  std::string msg = message_of([&] { nccl().allreduce_sum(shorts); });
  EXPECT_NE(msg.find("has no NCCL type"), std::string::npos) << msg;

  // Only rank 0 passes a host tensor: every rank throws, naming rank 0.
  torch::Tensor t = torch::ones({4});
  if (comm().rank() != 0) t = t.to(gpu());
  msg = message_of([&] { nccl().allreduce_sum(t); });
  EXPECT_NE(msg.find("rank 0: needs a CUDA tensor"), std::string::npos) << msg;

  // Only the last rank names a root out of range.
  torch::Tensor v = torch::ones({4}).to(gpu());
  const int last = comm().size() - 1;
  msg = message_of([&] { nccl().broadcast(v, comm().rank() == last ? comm().size() : 0); });
  EXPECT_NE(msg.find("rank " + std::to_string(last) + ": root"), std::string::npos) << msg;

  torch::Tensor strided = torch::ones({4, 6}).to(gpu()).t();
  msg = message_of([&] { nccl().broadcast(strided, 0); });
  EXPECT_NE(msg.find("contiguous"), std::string::npos) << msg;

  if (comm().size() > 1) {
    torch::Tensor ragged = torch::ones({comm().rank() + 1}).to(gpu());
    msg = message_of([&] { nccl().allreduce_sum(ragged); });
    EXPECT_NE(msg.find("ranks disagree"), std::string::npos) << msg;
    torch::Tensor cols = torch::ones({2, comm().rank() + 1}).to(gpu());
    msg = message_of([&] { nccl().allgather_rows(cols); });
    EXPECT_NE(msg.find("ranks disagree"), std::string::npos) << msg;
  }

  torch::Tensor ones = torch::ones({3}).to(gpu());
  nccl().allreduce_sum(ones);
  EXPECT_TRUE(torch::equal(ones.cpu(), torch::full({3}, float(comm().size()))));
}

#if defined(FNVLP_WITH_CUDA)
// The trainer gathers ids from its host batch and sends them to the GPU without waiting for it
// (core/device_copy.hpp): a plain .to(device) would wait for the queued kernel below.
TEST_F(Nccl, HostIdsReachTheGpuWithoutWaitingForIt) {
  const torch::Tensor ids = torch::arange(4, torch::kLong) + 100 * comm().rank();
  const torch::Tensor expect = fnvlp::allgather_ids(comm(), ids);
  (void)fnvlp::allgather_ids(comm(), ids, gpu());  // the page-locked block, allocated once
  torch::cuda::synchronize();
  at::cuda::sleep(int64_t{1} << 30);  // the stream busy for about half a second
  const auto t0 = std::chrono::steady_clock::now();
  const torch::Tensor on_gpu = fnvlp::allgather_ids(comm(), ids, gpu());
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(waited, 0.2) << "the copy to the GPU waited for the queued kernel";
  EXPECT_TRUE(on_gpu.is_cuda());
  EXPECT_TRUE(torch::equal(on_gpu.cpu(), expect));
  EXPECT_TRUE(fnvlp::to_device_async(on_gpu, gpu()).is_same(on_gpu));  // already there
}

// Work that outlasts the timeout: synchronize aborts that communicator and throws naming the rank
// and the operation; it refuses every later call, other communicators go on.
TEST_F(Nccl, SynchronizeTimesOutAndAborts) {
  NcclComm quick(comm(), 3.0);
  {
    // A side stream, so the rest of the suite does not queue behind the spinning kernel.
    const c10::cuda::CUDAStreamGuard side(
        c10::cuda::getStreamFromPool(false, static_cast<c10::DeviceIndex>(quick.device())));
    at::cuda::sleep(int64_t{12} << 30);  // about 6 s at 2 GHz (abort may wait for it)
    std::string msg;
    try {
      quick.synchronize("a slow stream");
    } catch (const fnvlp::Error& e) {
      msg = e.what();
    }
    EXPECT_NE(msg.find("NCCL rank " + std::to_string(comm().rank())), std::string::npos) << msg;
    EXPECT_NE(msg.find("a slow stream: not done after"), std::string::npos) << msg;
  }
  torch::Tensor t = torch::ones({2}).to(gpu());
  EXPECT_THROW(quick.allreduce_sum(t), fnvlp::Error);
  nccl().allreduce_sum(t);
  EXPECT_TRUE(torch::equal(t.cpu(), torch::full({2}, float(comm().size()))));
}
#endif

}  // namespace
