// The batches' copies to the device (train/batch_upload.hpp).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <thread>
#include <vector>

#include "fnvlp/train/batch_upload.hpp"

namespace fnvlp::train {
namespace {

data::Batch host_batch(int64_t seed, int64_t b) {
  torch::manual_seed(static_cast<uint64_t>(seed));
  data::Batch x;
  x.prepared = torch::randn({b, 3, 16, 16});
  x.tokens = torch::randint(1000, {b, 12}, torch::kLong);
  x.attention_mask = torch::ones({b, 12}, torch::kLong);
  x.pair_id = torch::arange(b) + seed * b;
  x.image_id = x.pair_id / 2;
  x.label = torch::full({b}, seed, torch::kLong);
  return x;
}

void expect_equal(const data::Batch& a, const data::Batch& host) {
  for (auto [d, h] : {std::pair{&a.prepared, &host.prepared},
                      {&a.tokens, &host.tokens},
                      {&a.attention_mask, &host.attention_mask},
                      {&a.pair_id, &host.pair_id},
                      {&a.image_id, &host.image_id},
                      {&a.label, &host.label}})
    EXPECT_TRUE(torch::equal(d->cpu(), *h));
}

TEST(BatchUpload, CpuHandsTheBatchThrough) {
  const BatchUpload up(torch::kCPU);
  data::Batch b = host_batch(1, 4);
  const auto data = b.prepared.data_ptr();
  up.start(b);
  EXPECT_FALSE(b.upload);
  const data::Batch d = up.finish(b);
  EXPECT_EQ(d.prepared.data_ptr(), data);  // no copy
}

// Batches started on another thread (the loader), several ahead, then used in turn while the
// step's stream is busy: each arrives whole on the device, the host batch stays on the host.
TEST(BatchUpload, CudaCopiesStartedAheadArriveWhole) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "SKIPPED: no CUDA device visible";
  const BatchUpload up(torch::Device(torch::kCUDA, 0));
  std::vector<data::Batch> hosts, started(8);
  for (int64_t i = 0; i < 8; ++i) hosts.push_back(host_batch(i, 64));
  std::thread loader([&] {
    for (size_t i = 0; i < hosts.size(); ++i) {
      started[i] = hosts[i];
      up.start(started[i]);
    }
  });
  loader.join();
  auto busy = torch::randn({2048, 2048}, torch::kCUDA);
  for (size_t i = 0; i < hosts.size(); ++i) {
    ASSERT_TRUE(started[i].upload) << "batch " << i;
    EXPECT_TRUE(started[i].prepared.is_pinned() && started[i].prepared.is_cpu());
    busy = busy.matmul(busy).tanh();  // the step's stream has queued work
    const data::Batch d = up.finish(started[i]);
    EXPECT_TRUE(d.prepared.is_cuda() && d.label.is_cuda() && !d.upload);
    expect_equal(d, hosts[i]);
  }
}

}  // namespace
}  // namespace fnvlp::train
