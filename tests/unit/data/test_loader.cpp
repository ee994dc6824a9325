// The training input pipeline: block partition, uniform sampler (determinism, drop_last, exact
// resume, resume on another rank count), PairDataset against ShardReader, Prefetcher, augmentation.
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <set>
#include <thread>

#include "dataset_fixture.hpp"
#include "fnvlp/core/error.hpp"
#include "fnvlp/data/augment.hpp"
#include "fnvlp/data/dataset.hpp"
#include "fnvlp/data/image.hpp"
#include "fnvlp/data/prefetch.hpp"
#include "fnvlp/data/sampler.hpp"
#include "fnvlp/data/shard.hpp"
#include "fnvlp/train/batch_source.hpp"
#include "hostile_jpeg.hpp"

namespace fnvlp::data {
namespace {

namespace fs = std::filesystem;
using Batches = std::vector<std::vector<int64_t>>;

std::string tmpdir(const std::string& name) {
  return ::testing::TempDir() + "/fnvlp_loader_" + name;
}

Batches drain(Sampler& s) {
  Batches out;
  std::vector<int64_t> ids;
  while (s.next(ids)) out.push_back(ids);
  return out;
}

Batches epoch_batches(const BlockPartition& p, int64_t batch, uint64_t seed, int rank,
                      int64_t epoch) {
  UniformSampler s(p, batch, seed, rank);
  s.start_epoch(epoch);
  return drain(s);
}

// ---------------------------------------------------------------------------------------------
// BlockPartition

TEST(BlockPartition, CoversEveryPairOnceWithSizesWithinOne) {
  for (int64_t n : {0, 1, 4, 17, 100, 1001}) {
    for (int ranks = 1; ranks <= 5; ++ranks) {
      const BlockPartition p(n, ranks);
      std::vector<int> hits(static_cast<size_t>(n), 0);
      int64_t expect_begin = 0, smallest = n, largest = 0;
      for (int r = 0; r < ranks; ++r) {
        const PairRange b = p.block(r);
        EXPECT_EQ(b.begin, expect_begin) << "blocks must be contiguous, n=" << n << " R=" << ranks;
        expect_begin = b.end;
        smallest = std::min(smallest, b.size());
        largest = std::max(largest, b.size());
        for (int64_t i = b.begin; i < b.end; ++i) {
          ++hits[static_cast<size_t>(i)];
          EXPECT_EQ(p.owner(i), r);
        }
      }
      EXPECT_EQ(expect_begin, n);
      EXPECT_LE(largest - smallest, 1) << "n=" << n << " R=" << ranks;
      EXPECT_EQ(smallest, p.min_block_size());
      for (int h : hits) EXPECT_EQ(h, 1);
    }
  }
  EXPECT_THROW(BlockPartition(10, 0), Error);
  EXPECT_THROW(BlockPartition(10, 2).block(2), Error);
  EXPECT_THROW(BlockPartition(10, 2).owner(10), Error);
}

// ---------------------------------------------------------------------------------------------
// UniformSampler

TEST(UniformSampler, EpochIsAPermutationOfTheBlockInFullBatches) {
  const BlockPartition p(96, 3);  // blocks of 32 = 4 batches of 8
  for (int r = 0; r < 3; ++r) {
    const Batches b = epoch_batches(p, 8, 7, r, 0);
    ASSERT_EQ(b.size(), 4u);
    std::vector<int64_t> all;
    for (const auto& batch : b) {
      EXPECT_EQ(batch.size(), 8u);
      all.insert(all.end(), batch.begin(), batch.end());
    }
    std::vector<int64_t> sorted = all;
    std::sort(sorted.begin(), sorted.end());
    std::vector<int64_t> block(32);
    std::iota(block.begin(), block.end(), p.block(r).begin);
    EXPECT_EQ(sorted, block) << "rank " << r;
    EXPECT_NE(all, block) << "rank " << r << ": not shuffled";
  }
}

TEST(UniformSampler, DeterministicPerSeedAndEpochAndDifferentAcrossEpochs) {
  const BlockPartition p(200, 2);
  EXPECT_EQ(epoch_batches(p, 10, 42, 1, 3), epoch_batches(p, 10, 42, 1, 3));
  EXPECT_NE(epoch_batches(p, 10, 42, 1, 3), epoch_batches(p, 10, 42, 1, 4));
  EXPECT_NE(epoch_batches(p, 10, 42, 1, 3), epoch_batches(p, 10, 43, 1, 3));
  // A sampler that ran other epochs before gives the same epoch 3.
  UniformSampler s(p, 10, 42, 1);
  s.start_epoch(0);
  drain(s);
  s.start_epoch(1);
  std::vector<int64_t> ids;
  s.next(ids);
  s.start_epoch(3);
  EXPECT_EQ(drain(s), epoch_batches(p, 10, 42, 1, 3));
  // The stream itself is pinned: a change of the generator would silently change every run.
  EXPECT_EQ(mix64(0), 0u);
  EXPECT_EQ(mix64(1), 0x5692161D100B05E5ull);
}

TEST(UniformSampler, DropLastKeepsEveryRankInStep) {
  // 23 pairs over 2 ranks: blocks of 12 and 11; batch 5 -> 2 batches each, tails dropped.
  const BlockPartition p(23, 2);
  for (int r = 0; r < 2; ++r) {
    UniformSampler s(p, 5, 1, r);
    EXPECT_EQ(s.batches_per_epoch(), 2);
    s.start_epoch(0);
    const Batches b = drain(s);
    ASSERT_EQ(b.size(), 2u);
    std::set<int64_t> seen;
    for (const auto& batch : b) {
      ASSERT_EQ(batch.size(), 5u);
      for (int64_t id : batch) {
        EXPECT_TRUE(p.block(r).contains(id));
        EXPECT_TRUE(seen.insert(id).second) << "pair " << id << " twice";
      }
    }
    std::vector<int64_t> ids;
    EXPECT_FALSE(s.next(ids)) << "still false after the end";
  }
  // Rank 0's block (12) has room for 2 batches of 6, rank 1's (11) for 1: both run 1.
  EXPECT_EQ(UniformSampler(p, 6, 1, 0).batches_per_epoch(), 1);
  EXPECT_EQ(epoch_batches(p, 6, 1, 0, 0).size(), 1u);
  EXPECT_THROW(UniformSampler(p, 12, 1, 0), Error);  // no full batch on rank 1
}

TEST(UniformSampler, StateResumesMidEpochWithExactlyTheSameBatches) {
  const BlockPartition p(150, 3);
  for (int r = 0; r < 3; ++r) {
    UniformSampler a(p, 7, 99, r);
    a.start_epoch(5);
    std::vector<int64_t> ids;
    for (int k = 0; k < 3; ++k) ASSERT_TRUE(a.next(ids));
    const nlohmann::json st = a.state();
    EXPECT_EQ(st.at("epoch"), 5);
    EXPECT_EQ(st.at("cursor"), 3);
    // The state is the same on every rank: a checkpoint keeps one copy.
    UniformSampler other_rank(p, 7, 99, (r + 1) % 3);
    other_rank.start_epoch(5);
    for (int k = 0; k < 3; ++k) other_rank.next(ids);
    EXPECT_EQ(other_rank.state(), st);
    // A fresh sampler (even with another configured seed: the state's wins) continues exactly.
    UniformSampler b(p, 7, 12345, r);
    b.load_state(nlohmann::json::parse(st.dump()));
    EXPECT_EQ(drain(b), drain(a));
    EXPECT_EQ(b.state(), a.state());
  }
  UniformSampler wrong(BlockPartition(151, 3), 7, 99, 0);
  UniformSampler a(p, 7, 99, 0);
  a.start_epoch(0);
  EXPECT_THROW(wrong.load_state(a.state()), Error);
}

TEST(UniformSampler, ResumeOnAnotherRankCountFinishesTheEpochsRemainingPairs) {
  const int64_t n = 120, batch = 6, cursor = 3;
  // 2 ranks ran 3 batches of epoch 2 ...
  std::set<int64_t> consumed, planned;
  nlohmann::json st;
  for (int r = 0; r < 2; ++r) {
    UniformSampler s(BlockPartition(n, 2), batch, 5, r);
    s.start_epoch(2);
    std::vector<int64_t> ids;
    for (int k = 0; k < cursor; ++k) {
      s.next(ids);
      consumed.insert(ids.begin(), ids.end());
    }
    st = s.state();
    for (const auto& b : drain(s)) planned.insert(b.begin(), b.end());
  }
  // ... and 3 ranks continue: the rest of the epoch's planned pairs, each in its owner's block,
  // none twice, the same number of batches on every rank.
  const BlockPartition p3(n, 3);
  std::set<int64_t> resumed;
  int64_t steps = -1;
  std::vector<nlohmann::json> after_one(3);
  std::vector<Batches> rest_after_one(3);
  for (int r = 0; r < 3; ++r) {
    UniformSampler s(p3, batch, 5, r);
    s.load_state(st);
    const int64_t remaining = s.batches_remaining();
    if (steps < 0) steps = remaining;
    EXPECT_EQ(remaining, steps) << "ranks out of step";
    std::vector<int64_t> ids;
    ASSERT_TRUE(s.next(ids));
    after_one[static_cast<size_t>(r)] = s.state();
    Batches all = {ids};
    rest_after_one[static_cast<size_t>(r)] = drain(s);
    all.insert(all.end(), rest_after_one[static_cast<size_t>(r)].begin(),
               rest_after_one[static_cast<size_t>(r)].end());
    EXPECT_EQ(static_cast<int64_t>(all.size()), steps);
    for (const auto& b : all)
      for (int64_t id : b) {
        EXPECT_TRUE(p3.block(r).contains(id));
        EXPECT_EQ(consumed.count(id), 0u) << "pair " << id << " seen twice in the epoch";
        EXPECT_EQ(planned.count(id), 1u) << "pair " << id << " was not planned";
        EXPECT_TRUE(resumed.insert(id).second);
      }
  }
  EXPECT_GE(steps, 1);
  // Drops are only what keeps ranks in step: fewer than one batch per rank.
  EXPECT_GT(static_cast<int64_t>(resumed.size()), static_cast<int64_t>(planned.size()) - 3 * batch);
  // The resized epoch is itself exactly resumable (its state records the segment).
  EXPECT_EQ(after_one[0], after_one[2]);
  EXPECT_EQ(after_one[0].at("segments").size(), 1u);
  for (int r = 0; r < 3; ++r) {
    UniformSampler s(p3, batch, 5, r);
    s.load_state(after_one[0]);
    EXPECT_EQ(drain(s), rest_after_one[static_cast<size_t>(r)]);
  }
  // The next epoch is an ordinary 3-rank epoch.
  UniformSampler s(p3, batch, 5, 1);
  s.load_state(st);
  drain(s);
  s.start_epoch(3);
  EXPECT_EQ(drain(s), epoch_batches(p3, batch, 5, 1, 3));
  EXPECT_TRUE(s.state().at("segments").empty());
}

// ---------------------------------------------------------------------------------------------
// PairDataset

void expect_batch_matches_shards(const Batch& b, const std::vector<int64_t>& ids,
                                 const std::string& dir, const Manifest& m) {
  const int64_t S = m.image_size, L = m.max_len;
  ASSERT_EQ(b.size(), static_cast<int64_t>(ids.size()));
  EXPECT_EQ(b.images.sizes(), (std::vector<int64_t>{b.size(), S, S, 3}));
  EXPECT_EQ(b.images.scalar_type(), torch::kUInt8);
  EXPECT_EQ(b.tokens.sizes(), (std::vector<int64_t>{b.size(), L}));
  EXPECT_EQ(b.tokens.scalar_type(), torch::kInt64);
  EXPECT_EQ(b.attention_mask.scalar_type(), torch::kInt64);
  for (size_t i = 0; i < ids.size(); ++i) {
    const auto shard = std::find_if(m.shards.begin(), m.shards.end(), [&](const ManifestShard& s) {
      return ids[i] >= s.first_pair_id && ids[i] < s.first_pair_id + s.num_pairs;
    });
    ASSERT_NE(shard, m.shards.end());
    ShardReader reader((fs::path(dir) / shard->file).string());
    const PairColumns c = reader.read_pairs();
    const auto row = static_cast<size_t>(ids[i] - shard->first_pair_id);
    const auto bi = static_cast<int64_t>(i);
    EXPECT_EQ(b.pair_id[bi].item<int64_t>(), c.pair_id[row]);
    EXPECT_EQ(b.image_id[bi].item<int64_t>(), c.image_id[row]);
    EXPECT_EQ(b.label[bi].item<int64_t>(), c.label[row]);
    for (int64_t k = 0; k < L; ++k) {
      EXPECT_EQ(b.tokens[bi][k].item<int64_t>(), c.tokens[row * static_cast<size_t>(L) + k]);
      EXPECT_EQ(b.attention_mask[bi][k].item<int64_t>(), k < c.lengths[row] ? 1 : 0);
    }
    std::vector<uint8_t> pixels(static_cast<size_t>(S * S * 3));
    reader.read_images(c.pair_image[row], 1, pixels.data());
    const torch::Tensor img = b.images[bi].contiguous();
    EXPECT_EQ(0, std::memcmp(img.data_ptr<uint8_t>(), pixels.data(), pixels.size()))
        << "image of pair " << ids[i];
  }
}

TEST(PairDataset, BatchEqualsShardReaderContentAcrossShards) {
  const std::string dir = tmpdir("content");
  const Manifest m = testutil::write_test_dataset(dir, 12);
  PairDataset ds(dir);
  EXPECT_EQ(ds.num_pairs(), 24);
  EXPECT_EQ(ds.image_size(), testutil::kImageSize);
  EXPECT_EQ(ds.max_len(), testutil::kMaxLen);
  EXPECT_EQ(ds.num_shards(), 2);
  EXPECT_EQ(ds.locate(0), (std::pair<int64_t, int64_t>{0, 0}));
  EXPECT_EQ(ds.locate(11), (std::pair<int64_t, int64_t>{0, 11}));
  EXPECT_EQ(ds.locate(12), (std::pair<int64_t, int64_t>{1, 0}));
  EXPECT_EQ(ds.locate(23), (std::pair<int64_t, int64_t>{1, 11}));
  // Random ids (counter-based draws), unsorted, with repeats and shared images, both shards.
  std::vector<int64_t> ids;
  for (uint64_t k = 0; k < 40; ++k) ids.push_back(static_cast<int64_t>(counter_random(7, k) % 24));
  ids.push_back(11);
  ids.push_back(12);
  expect_batch_matches_shards(ds.read(ids), ids, dir, m);
  // Every pair once, in order (the embedding export's access pattern).
  std::vector<int64_t> all(24);
  std::iota(all.begin(), all.end(), 0);
  expect_batch_matches_shards(ds.read(all), all, dir, m);
  EXPECT_EQ(ds.read({}).size(), 0);
  EXPECT_THROW(ds.read({24}), Error);
  EXPECT_THROW(ds.read({-1}), Error);
}

TEST(PairDataset, MissingOrTruncatedShardIsNamed) {
  const std::string dir = tmpdir("missing");
  testutil::write_test_dataset(dir);
  fs::remove(fs::path(dir) / "shard-00001.h5");
  try {
    PairDataset ds(dir);
    FAIL() << "opened a dataset with a missing shard";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("shard-00001.h5"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("missing"), std::string::npos) << e.what();
  }
  testutil::write_test_dataset(dir);
  fs::resize_file(fs::path(dir) / "shard-00000.h5", 1000);
  try {
    PairDataset ds(dir);
    FAIL() << "opened a dataset with a truncated shard";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("shard-00000.h5"), std::string::npos) << e.what();
  }
  EXPECT_THROW(PairDataset(tmpdir("does_not_exist")), Error);
}

TEST(PairDataset, SpecialTokensFromTheManifestOrItsVocabulary) {
  const std::string dir = tmpdir("special");
  Manifest m = testutil::write_test_dataset(dir);
  // The fixture's manifest names no real vocabulary and records no ids.
  EXPECT_THROW(PairDataset(dir).special_tokens(), Error);

  // A manifest written before the ids were recorded: looked up in its vocabulary file, which must
  // still be the one the captions were tokenized with.
  const std::string bert_vocab = FNVLP_SHARED_DIR "/data/vocab/bert-base-uncased-vocab.txt";
  const std::string vocab = tmpdir("vocab.txt");
  fs::copy_file(bert_vocab, vocab, fs::copy_options::overwrite_existing);
  m = testutil::write_test_dataset(dir, 10, vocab);
  std::ofstream(vocab, std::ios::app) << "[unused_extra]\n";
  EXPECT_THROW(PairDataset(dir).special_tokens(), Error);
  fs::copy_file(bert_vocab, vocab, fs::copy_options::overwrite_existing);
  const SpecialTokens bert = PairDataset(dir).special_tokens();
  EXPECT_EQ(std::vector<int64_t>({bert.pad, bert.cls, bert.sep, bert.mask}),
            std::vector<int64_t>({0, 101, 102, 103}));

  // Recorded ids win (and round-trip through manifest.json); the file is not read.
  m.vocab_path = tmpdir("no_such_vocab.txt");
  m.special_tokens = {0, 5, 6, 7};
  m.save(dir);
  EXPECT_EQ(Manifest::load(dir).to_json(), m.to_json());
  const SpecialTokens own = PairDataset(dir).special_tokens();
  EXPECT_EQ(std::vector<int64_t>({own.pad, own.cls, own.sep, own.mask}),
            std::vector<int64_t>({0, 5, 6, 7}));

  m.special_tokens.mask = m.vocab_size;  // outside the vocabulary
  m.save(dir);
  EXPECT_THROW(Manifest::load(dir), Error);
}

TEST(PairDataset, CorruptImageChunkNamesFileAndDataset) {
  const std::string dir = tmpdir("corrupt");
  testutil::write_test_dataset(dir);
  // Flip a byte of image 6's pixels (shard 1, image row 1): Fletcher32 must catch it on read.
  const fs::path path = fs::path(dir) / "shard-00001.h5";
  std::vector<char> bytes(fs::file_size(path));
  {
    std::ifstream in(path, std::ios::binary);
    in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  std::vector<char> needle(16);
  for (size_t k = 0; k < needle.size(); ++k) needle[k] = static_cast<char>(testutil::pixel(6, k));
  auto it = std::search(bytes.begin(), bytes.end(), needle.begin(), needle.end());
  ASSERT_NE(it, bytes.end());
  *it = static_cast<char>(*it ^ 0x10);
  {
    std::ofstream out(path, std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  PairDataset ds(dir);  // same size: opens; the sha256 is checked only on request
  EXPECT_NO_THROW(ds.read({0, 1, 2}));
  try {
    ds.read({3, 12, 13});  // pairs 12/13 use image 6
    FAIL() << "read a corrupted chunk";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("shard-00001.h5:/images"), std::string::npos) << e.what();
  }
  EXPECT_THROW(PairDataset(dir, {0, 256, /*verify_checksums=*/true}), Error);
}

TEST(PairDataset, ConcurrentReadsFromTwoThreadsAgree) {
  // The trainer exports embeddings (main thread) while the prefetcher may read: both lock HDF5.
  const std::string dir = tmpdir("concurrent");
  testutil::write_test_dataset(dir, 40);
  PairDataset ds(dir);
  std::vector<std::vector<int64_t>> batches;
  for (uint64_t k = 0; k < 40; ++k) {
    std::vector<int64_t> ids;
    for (uint64_t j = 0; j < 16; ++j)
      ids.push_back(static_cast<int64_t>(counter_random(k, j) % 80));
    batches.push_back(ids);
  }
  std::vector<torch::Tensor> expect;
  for (const auto& ids : batches) expect.push_back(ds.read(ids).images);
  PairDataset fresh(dir);  // columns not loaded yet: the two threads race to load them too
  std::vector<torch::Tensor> got[2];
  std::thread other([&] {
    for (const auto& ids : batches) got[1].push_back(fresh.read(ids).images);
  });
  for (auto it = batches.rbegin(); it != batches.rend(); ++it)
    got[0].insert(got[0].begin(), fresh.read(*it).images);
  other.join();
  for (size_t k = 0; k < batches.size(); ++k) {
    EXPECT_TRUE(torch::equal(got[0][k], expect[k])) << "batch " << k;
    EXPECT_TRUE(torch::equal(got[1][k], expect[k])) << "batch " << k;
  }
}

// ---------------------------------------------------------------------------------------------
// Prefetcher

// Delays or fails a wrapped sampler, to test waiting and error propagation.
class TestSampler : public Sampler {
 public:
  TestSampler(Sampler& inner, double delay_s, int fail_at = -1, bool bad_id = false)
      : inner_(inner), delay_s_(delay_s), fail_at_(fail_at), bad_id_(bad_id) {}
  void start_epoch(int64_t e) override {
    calls_ = 0;
    inner_.start_epoch(e);
  }
  bool next(std::vector<int64_t>& ids) override {
    std::this_thread::sleep_for(std::chrono::duration<double>(delay_s_));
    if (calls_++ == fail_at_) {
      if (!bad_id_) FNVLP_FAIL("test sampler failure at batch " << fail_at_);
      const bool more = inner_.next(ids);
      ids[0] = 1'000'000;  // outside the dataset
      return more;
    }
    return inner_.next(ids);
  }
  int64_t batches_per_epoch() const override { return inner_.batches_per_epoch(); }
  nlohmann::json state() const override { return inner_.state(); }
  void load_state(const nlohmann::json& s) override { inner_.load_state(s); }

 private:
  Sampler& inner_;
  double delay_s_;
  int fail_at_;
  bool bad_id_;
  int calls_ = 0;
};

void expect_same_batch(const Batch& a, const Batch& b) {
  EXPECT_TRUE(torch::equal(a.images, b.images));
  EXPECT_TRUE(torch::equal(a.tokens, b.tokens));
  EXPECT_TRUE(torch::equal(a.attention_mask, b.attention_mask));
  EXPECT_TRUE(torch::equal(a.pair_id, b.pair_id));
  EXPECT_TRUE(torch::equal(a.image_id, b.image_id));
  EXPECT_TRUE(torch::equal(a.label, b.label));
}

TEST(Prefetcher, DeliversTheSameSequenceAsDirectReadsAndResumes) {
  const std::string dir = tmpdir("prefetch");
  testutil::write_test_dataset(dir, 30);
  PairDataset ds(dir);
  const BlockPartition p(ds.num_pairs(), 2);
  UniformSampler direct(p, 4, 11, 1), threaded(p, 4, 11, 1);
  Prefetcher pf(ds, threaded, 3);
  std::vector<int64_t> ids;
  for (int64_t epoch = 0; epoch < 2; ++epoch) {
    direct.start_epoch(epoch);
    pf.start_epoch(epoch);
    Batch b;
    int64_t n = 0;
    while (pf.next(b)) {
      ASSERT_TRUE(direct.next(ids));
      expect_same_batch(b, ds.read(ids));
      EXPECT_EQ(pf.state(), direct.state())
          << "state must follow consumed, not read-ahead, batches";
      ++n;
    }
    EXPECT_FALSE(direct.next(ids));
    EXPECT_EQ(n, direct.batches_per_epoch());
    EXPECT_FALSE(pf.next(b)) << "stays at the end until the next start_epoch";
  }
  EXPECT_EQ(pf.batches_delivered(), 2 * direct.batches_per_epoch());
  EXPECT_GE(pf.wait_seconds(), 0.0);

  // Checkpoint after 2 batches of epoch 2, resume in a fresh sampler + prefetcher.
  pf.start_epoch(2);
  Batch b;
  pf.next(b);
  pf.next(b);
  const nlohmann::json st = pf.state();
  Batches rest;
  while (pf.next(b))
    rest.push_back(std::vector<int64_t>(b.pair_id.data_ptr<int64_t>(),
                                        b.pair_id.data_ptr<int64_t>() + b.size()));
  UniformSampler fresh(p, 4, 0, 1);
  Prefetcher pf2(ds, fresh, 2);
  pf2.resume(st);
  Batches again;
  while (pf2.next(b))
    again.push_back(std::vector<int64_t>(b.pair_id.data_ptr<int64_t>(),
                                         b.pair_id.data_ptr<int64_t>() + b.size()));
  EXPECT_EQ(again, rest);
  EXPECT_FALSE(rest.empty());
}

// The prepare hook (the trainer's augmentation) runs on the reading thread, once per batch, with
// the batch's index since start_epoch/resume; BatchSource turns that into the step the batch will
// be, in both its threaded and its synchronous mode.
TEST(Prefetcher, PreparesEachBatchOnTheReadingThreadWithItsIndex) {
  const std::string dir = tmpdir("prefetch_prepare");
  testutil::write_test_dataset(dir, 30);
  PairDataset ds(dir);
  const BlockPartition p(ds.num_pairs(), 1);
  UniformSampler sampler(p, 4, 5, 0);
  Prefetcher pf(ds, sampler, 2);
  const auto consumer = std::this_thread::get_id();
  std::atomic<int> on_consumer{0};
  pf.set_prepare([&](Batch& b, int64_t index) {
    if (std::this_thread::get_id() == consumer) ++on_consumer;
    b.prepared = b.pair_id * 10 + index;
    b.prepared_for = index;
  });
  pf.start_epoch(0);
  Batch b;
  int64_t n = 0;
  nlohmann::json after_two;
  while (pf.next(b)) {
    EXPECT_EQ(b.prepared_for, n);
    EXPECT_TRUE(torch::equal(b.prepared, b.pair_id * 10 + n));
    if (++n == 2) after_two = pf.state();
  }
  EXPECT_EQ(n, sampler.batches_per_epoch());
  EXPECT_EQ(on_consumer.load(), 0);
  EXPECT_THROW(
      {
        pf.start_epoch(1);
        pf.set_prepare(nullptr);
      },
      fnvlp::Error)
      << "the hook is replaced only while no epoch is read";
  pf.halt();
  pf.resume(after_two);
  ASSERT_TRUE(pf.next(b));
  EXPECT_EQ(b.prepared_for, 0) << "indices count from the resume";

  // A failing hook reaches the consumer as a failed read does.
  pf.halt();
  pf.set_prepare([](Batch&, int64_t index) {
    if (index == 1) FNVLP_FAIL("augmentation failed at index " << index);
  });
  pf.start_epoch(0);
  EXPECT_TRUE(pf.next(b));
  EXPECT_THROW(pf.next(b), fnvlp::Error);

  for (const bool synchronous : {false, true}) {
    SCOPED_TRACE(synchronous ? "synchronous" : "prefetch thread");
    UniformSampler s2(p, 4, 5, 0);
    fnvlp::train::BatchSource source(ds, s2, 2, synchronous);
    std::vector<int64_t> steps;
    source.set_prepare([&](Batch& batch, int64_t step) { batch.prepared_for = step; });
    source.start_epoch(0, 100);
    for (int i = 0; i < 3 && source.next(b); ++i) steps.push_back(b.prepared_for);
    const nlohmann::json st = source.state();
    source.halt();
    source.start_epoch(1, 103);
    ASSERT_TRUE(source.next(b));
    steps.push_back(b.prepared_for);
    source.halt();
    source.resume(st, 103);
    ASSERT_TRUE(source.next(b));
    steps.push_back(b.prepared_for);
    EXPECT_EQ(steps, (std::vector<int64_t>{100, 101, 102, 103, 103}));
  }
}

TEST(Prefetcher, ReportsTheTimeTheConsumerWaited) {
  const std::string dir = tmpdir("prefetch_wait");
  testutil::write_test_dataset(dir, 30);
  PairDataset ds(dir);
  UniformSampler inner(BlockPartition(ds.num_pairs(), 1), 4, 3, 0);  // 15 batches
  // Slow producer, instant consumer: almost all the time is waiting.
  TestSampler slow(inner, 0.02);
  {
    Prefetcher pf(ds, slow, 2, 10);
    pf.start_epoch(0);
    Batch b;
    int n = 0;
    while (pf.next(b)) ++n;
    EXPECT_EQ(n, 15);
    EXPECT_GT(pf.wait_seconds(), 0.7 * 15 * 0.02);
    EXPECT_GT(pf.wait_fraction(), 0.8);
  }
  // Fast producer, slow consumer: after the first batch the queue is always full.
  TestSampler fast(inner, 0.0);
  Prefetcher pf(ds, fast, 2, 5);
  pf.start_epoch(0);
  Batch b;
  while (pf.next(b)) std::this_thread::sleep_for(std::chrono::milliseconds(40));
  EXPECT_LT(pf.wait_fraction(), 0.2);
  EXPECT_LT(pf.wait_seconds(), 0.5 * 15 * 0.04);
}

TEST(Prefetcher, ReaderExceptionSurfacesInNext) {
  const std::string dir = tmpdir("prefetch_error");
  testutil::write_test_dataset(dir, 30);
  PairDataset ds(dir);
  UniformSampler inner(BlockPartition(ds.num_pairs(), 1), 4, 3, 0);
  {
    TestSampler failing(inner, 0.0, /*fail_at=*/3);
    Prefetcher pf(ds, failing, 2);
    pf.start_epoch(0);
    Batch b;
    for (int k = 0; k < 3; ++k) ASSERT_TRUE(pf.next(b));
    try {
      pf.next(b);
      FAIL() << "no exception";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("test sampler failure at batch 3"), std::string::npos);
    }
    EXPECT_THROW(pf.next(b), Error) << "the failure must not turn into a quiet end of epoch";
    pf.start_epoch(1);  // a restart clears it (the sampler fails at its 4th batch again)
    EXPECT_TRUE(pf.next(b));
  }
  {
    TestSampler bad(inner, 0.0, /*fail_at=*/0, /*bad_id=*/true);
    Prefetcher pf(ds, bad, 2);
    pf.start_epoch(0);
    Batch b;
    try {
      pf.next(b);
      FAIL() << "no exception";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("pair_id 1000000 outside"), std::string::npos)
          << e.what();
    }
  }
  {
    // Destroyed mid-epoch with a full queue: joins without hanging.
    TestSampler ok(inner, 0.0);
    Prefetcher pf(ds, ok, 2);
    pf.start_epoch(0);
    Batch b;
    ASSERT_TRUE(pf.next(b));
  }
}

// ---------------------------------------------------------------------------------------------
// Augmenter

torch::Tensor random_images(int64_t b, int64_t s, uint64_t seed) {
  torch::Generator g = at::detail::createCPUGenerator(seed);
  return torch::randint(0, 256, {b, s, s, 3}, g, torch::kUInt8);
}

// Reference: float NCHW in [0, 1], resized, then (x - mean) / std channel by channel.
torch::Tensor reference_eval(const torch::Tensor& images, int64_t res) {
  namespace F = torch::nn::functional;
  torch::Tensor x = images.permute({0, 3, 1, 2}).contiguous().to(torch::kFloat) / 255.0;
  if (x.size(2) != res)
    x = F::interpolate(x, F::InterpolateFuncOptions()
                              .size(std::vector<int64_t>{res, res})
                              .mode(torch::kBilinear)
                              .align_corners(false));
  std::vector<torch::Tensor> ch;
  for (int c = 0; c < 3; ++c) ch.push_back((x.select(1, c) - kImageMean[c]) / kImageStd[c]);
  return torch::stack(ch, 1);
}

AugmentConfig no_augmentation() {
  AugmentConfig c;
  c.random_resized_crop = false;
  c.horizontal_flip = false;
  c.color_jitter = false;
  return c;
}

// Augmenter::train of `images` (a tensor or a batch) on `threads` intra-op threads, generator
// seed 5.
template <typename Images>
torch::Tensor train_on_threads(const Augmenter& aug, const Images& images, int threads) {
  const int saved = at::get_num_threads();
  at::set_num_threads(threads);
  torch::Generator g = at::detail::createCPUGenerator(5);
  const torch::Tensor out = aug.train(images, g);
  at::set_num_threads(saved);
  return out;
}

// Images are split among the intra-op threads; each image's random draws come before the loop.
TEST(Augment, TrainingIsTheSameOnOneAndThreeThreads) {
  const torch::Tensor img = random_images(7, 24, 2);
  AugmentConfig full;
  full.color_jitter = true;
  const Augmenter aug(full, 16);
  EXPECT_TRUE(torch::equal(train_on_threads(aug, img, 1), train_on_threads(aug, img, 3)));
}

TEST(Augment, ShapesTypesAndEvalIsPlainResizeAndNormalisation) {
  const torch::Tensor img = random_images(5, 16, 1);
  AugmentConfig full;
  full.color_jitter = true;
  torch::Generator g = at::detail::createCPUGenerator(3);
  for (int64_t res : {16, 12, 24}) {
    const Augmenter aug(full, res);
    const torch::Tensor t = aug.train(img, g);
    EXPECT_EQ(t.sizes(), (std::vector<int64_t>{5, 3, res, res}));
    EXPECT_EQ(t.scalar_type(), torch::kFloat);
    EXPECT_TRUE(t.is_contiguous());
    const torch::Tensor e = aug.eval(img);
    EXPECT_EQ(e.sizes(), (std::vector<int64_t>{5, 3, res, res}));
    EXPECT_TRUE(e.is_contiguous());
    EXPECT_TRUE(torch::allclose(e, reference_eval(img, res), 1e-5, 1e-5)) << "res " << res;
    // With every augmentation off, training is evaluation (same bilinear sampling).
    torch::Generator g2 = at::detail::createCPUGenerator(3);
    EXPECT_TRUE(torch::allclose(Augmenter(no_augmentation(), res).train(img, g2), e, 1e-4, 1e-4))
        << "res " << res;
  }
  // One value by hand: pixel (0, 0) red of image 0, no resize.
  const float expect =
      static_cast<float>((img[0][0][0][0].item<uint8_t>() / 255.0 - kImageMean[0]) / kImageStd[0]);
  EXPECT_NEAR(Augmenter(full, 16).eval(img)[0][0][0][0].item<float>(), expect, 1e-5);
  EXPECT_THROW(Augmenter(full, 16).eval(torch::zeros({2, 16, 16, 3}, torch::kFloat)), Error);
  AugmentConfig bad;
  bad.crop_scale_min = 0.9;
  bad.crop_scale_max = 0.5;
  EXPECT_THROW(Augmenter(bad, 16), Error);
}

TEST(Augment, FlipActuallyFlips) {
  const torch::Tensor img = random_images(4, 16, 2);
  AugmentConfig c = no_augmentation();
  c.horizontal_flip = true;
  c.flip_prob = 1.0;
  torch::Generator g = at::detail::createCPUGenerator(1);
  for (int64_t res : {16, 10}) {
    const Augmenter aug(c, res);
    const torch::Tensor e = aug.eval(img);
    const torch::Tensor flipped = aug.train(img, g);
    EXPECT_TRUE(torch::allclose(flipped, e.flip({3}), 1e-4, 1e-4)) << "res " << res;
    EXPECT_FALSE(torch::allclose(flipped, e, 1e-2, 1e-2));
  }
  c.flip_prob = 0.0;
  EXPECT_TRUE(
      torch::allclose(Augmenter(c, 16).train(img, g), Augmenter(c, 16).eval(img), 1e-4, 1e-4));
  // p = 0.5 over 64 images: some flipped, some not.
  c.flip_prob = 0.5;
  const torch::Tensor many = random_images(64, 8, 3);
  const torch::Tensor t = Augmenter(c, 8).train(many, g), e = Augmenter(c, 8).eval(many);
  int flipped = 0;
  for (int64_t i = 0; i < 64; ++i) {
    const bool f = torch::allclose(t[i], e[i].flip({2}), 1e-4, 1e-4);
    EXPECT_TRUE(f || torch::allclose(t[i], e[i], 1e-4, 1e-4));
    flipped += f;
  }
  EXPECT_GT(flipped, 16);
  EXPECT_LT(flipped, 48);
}

TEST(Augment, CropStaysInsideTheImageAndJitterScalesBrightness) {
  // Left half 0, right half 255: a crop covering at least half the area at an aspect ratio within
  // 3/4..4/3 cannot lie entirely in either half, so both extremes survive in every image.
  torch::Tensor img = torch::zeros({32, 32, 32, 3}, torch::kUInt8);
  img.narrow(2, 16, 16).fill_(255);
  AugmentConfig c = no_augmentation();
  c.random_resized_crop = true;
  torch::Generator g = at::detail::createCPUGenerator(5);
  const torch::Tensor t = Augmenter(c, 16).train(img, g);
  const float lo = static_cast<float>(-kImageMean[0] / kImageStd[0]);
  const float hi = static_cast<float>((1 - kImageMean[0]) / kImageStd[0]);
  int boundary_moves = 0;
  const torch::Tensor red = t.select(1, 0);
  for (int64_t i = 0; i < 32; ++i) {
    EXPECT_NEAR(red[i].min().item<float>(), lo, 1e-4);
    EXPECT_NEAR(red[i].max().item<float>(), hi, 1e-4);
    // Where the 0/255 edge lands depends on the crop: it must vary across images.
    boundary_moves += !torch::equal(red[i], red[0]);
  }
  EXPECT_GT(boundary_moves, 16);

  // Brightness only, on a uniform grey: every image stays uniform, scaled by a factor in
  // [0.5, 1.5].
  torch::Tensor grey = torch::full({16, 8, 8, 3}, 100, torch::kUInt8);
  AugmentConfig j = no_augmentation();
  j.color_jitter = true;
  j.brightness = 0.5;
  j.contrast = 0;
  j.saturation = 0;
  const torch::Tensor out = Augmenter(j, 8).train(grey, g);
  std::set<float> levels;
  for (int64_t i = 0; i < 16; ++i) {
    const float v = out[i][0][0][0].item<float>();
    EXPECT_NEAR(out[i].select(0, 0).max().item<float>(), v, 1e-5);
    EXPECT_NEAR(out[i].select(0, 0).min().item<float>(), v, 1e-5);
    const double pixel = (v * kImageStd[0] + kImageMean[0]) * 255.0;
    EXPECT_GE(pixel, 50 - 1e-3);
    EXPECT_LE(pixel, 150 + 1e-3);
    levels.insert(v);
  }
  EXPECT_GT(levels.size(), 8u);
}

TEST(Augment, DeterministicPerGeneratorSeed) {
  const torch::Tensor img = random_images(8, 24, 4);
  AugmentConfig c;
  c.color_jitter = true;
  const Augmenter aug(c, 16);
  torch::Generator a = at::detail::createCPUGenerator(77), b = at::detail::createCPUGenerator(77),
                   other = at::detail::createCPUGenerator(78);
  const torch::Tensor first = aug.train(img, a);
  EXPECT_TRUE(torch::equal(first, aug.train(img, b)));
  EXPECT_FALSE(torch::allclose(first, aug.train(img, other)));
  // The generator advances: the next batch is augmented differently.
  EXPECT_FALSE(torch::allclose(aug.train(img, a), first));
}

// ---------------------------------------------------------------------------------------------
// jpeg shards

struct JpegSet {
  std::vector<Image> images;  // as encoded
  std::vector<std::vector<uint8_t>> jpegs;
  std::vector<std::pair<int, int>> hw;
};

// Images of several aspect ratios, longer side <= 48.
JpegSet jpeg_set() {
  JpegSet s;
  const int sizes[][2] = {{48, 32}, {20, 48}, {33, 33}, {48, 40}, {17, 9}};
  for (const auto& wh : sizes) {
    s.images.push_back(testutil::gradient_image(wh[0], wh[1]));
    s.jpegs.push_back(encode_jpeg(s.images.back(), 95));
    s.hw.push_back({wh[1], wh[0]});
  }
  return s;
}

TEST(PairDataset, JpegShardsHandOverTheStoredBytesInBatchOrder) {
  const auto dir = tmpdir("jpeg_bytes");
  const JpegSet set = jpeg_set();
  testutil::write_jpeg_dataset(dir, set.jpegs, set.hw, 48);
  const PairDataset ds(dir);
  EXPECT_EQ(ds.manifest().image_codec, ImageCodec::kJpeg);
  const Batch b = ds.read({3, 0, 3, 4, 1});
  EXPECT_FALSE(b.images.defined());
  ASSERT_TRUE(b.encoded);
  const EncodedImages& e = *b.encoded;
  ASSERT_EQ(e.size(), 5u);
  const std::vector<size_t> want = {3, 0, 3, 4, 1};
  for (size_t i = 0; i < want.size(); ++i) {
    const auto& j = set.jpegs[want[i]];
    ASSERT_EQ(e.bytes_of(i), j.size()) << i;
    EXPECT_EQ(0, std::memcmp(e.data(i), j.data(), j.size())) << i;
    EXPECT_EQ(e.height[i], set.hw[want[i]].first);
    EXPECT_EQ(e.width[i], set.hw[want[i]].second);
    EXPECT_NE(e.source[i].find("row " + std::to_string(want[i]) + " (pair_id " +
                               std::to_string(want[i]) + ")"),
              std::string::npos)
        << e.source[i];
  }
  EXPECT_EQ(b.pair_id[4].item<int64_t>(), 1);
  EXPECT_TRUE(verify_dataset(dir).ok());
}

// ALBEF's RandomResizedCrop samples its box in the whole image: with the scale fixed at 1 and the
// ratio at the image's own, the crop is the whole non-square picture resized to R x R, which a
// crop from a centred square could never give.
TEST(Augment, JpegCropsFromTheWholeStoredImage) {
  const auto dir = tmpdir("jpeg_crop");
  const JpegSet set = jpeg_set();
  testutil::write_jpeg_dataset(dir, set.jpegs, set.hw, 48);
  const PairDataset ds(dir);
  const Batch b = ds.read({0});  // 48 x 32
  AugmentConfig c = no_augmentation();
  c.random_resized_crop = true;
  c.crop_scale_min = c.crop_scale_max = 1.0;
  c.crop_ratio_min = c.crop_ratio_max = 1.5;
  const Augmenter aug(c, 16);
  torch::Generator g = at::detail::createCPUGenerator(4);
  const torch::Tensor got = aug.train(b, g);
  const Image dec = decode_image(set.jpegs[0].data(), set.jpegs[0].size(), "ref");
  const torch::Tensor hwc =
      torch::from_blob(const_cast<uint8_t*>(dec.rgb.data()), {1, 32, 48, 3}, torch::kUInt8);
  const torch::Tensor want = reference_eval(hwc, 16);
  EXPECT_TRUE(torch::allclose(got, want, 1e-4, 1e-4));
  // The centred 32 x 32 square resized is another picture.
  const torch::Tensor square = reference_eval(hwc.slice(2, 8, 40).contiguous(), 16);
  EXPECT_FALSE(torch::allclose(got, square, 1e-2, 1e-2));
}

TEST(Augment, JpegTrainingIsTheSameOnOneAndThreeThreadsAndEvalIsResizeCenterCrop) {
  const auto dir = tmpdir("jpeg_threads");
  const JpegSet set = jpeg_set();
  testutil::write_jpeg_dataset(dir, set.jpegs, set.hw, 48);
  const PairDataset ds(dir);
  const Batch b = ds.read({0, 1, 2, 3, 4, 2, 1});
  AugmentConfig full;
  full.color_jitter = true;
  const Augmenter aug(full, 16);
  const torch::Tensor one = train_on_threads(aug, b, 1);
  EXPECT_EQ(one.sizes(), (std::vector<int64_t>{7, 3, 16, 16}));
  EXPECT_TRUE(torch::equal(one, train_on_threads(aug, b, 3)));
  // Evaluation: torchvision's Resize(16) + CenterCrop(16) of the decoded image (at the DCT scale
  // that keeps the shorter side >= 16), then normalisation.
  const torch::Tensor ev = aug.eval(b);
  for (int64_t i = 0; i < 7; ++i) {
    const size_t k = static_cast<size_t>(b.pair_id[i].item<int64_t>());
    const Image sq =
        resize_center_crop(decode_image(set.jpegs[k].data(), set.jpegs[k].size(), "ref", 16), 16);
    const torch::Tensor hwc =
        torch::from_blob(const_cast<uint8_t*>(sq.rgb.data()), {1, 16, 16, 3}, torch::kUInt8);
    EXPECT_TRUE(torch::allclose(ev[i], reference_eval(hwc, 16)[0], 1e-5, 1e-5)) << i;
  }
}

// What fnvlp-shard rejects at shard time, found in a shard (written by hand, checksums valid):
// the read hands the bytes over, the decode refuses them naming shard, row, pair and reason.
TEST(PairDataset, HostileJpegInAShardIsANamedErrorWhenDecoded) {
  const auto dir = tmpdir("jpeg_hostile");
  const Image img = testutil::gradient_image(48, 32);
  const std::vector<uint8_t> good = encode_jpeg(img, 90);
  const std::vector<std::vector<uint8_t>> jpegs = {
      good,
      std::vector<uint8_t>(good.begin(), good.begin() + static_cast<long>(good.size() / 2)),
      testutil::patch_sof(good, 8, 60000, 60000),
      testutil::cmyk_jpeg(48, 32),
      testutil::patch_sof(good, 12, 32, 48),
      testutil::patch_sof(good, 16, 32, 48)};
  const std::vector<std::string> reason = {"",
                                           image_reason::kTruncated,
                                           image_reason::kUnsupported,
                                           image_reason::kUnsupported,
                                           image_reason::kCorrupt,
                                           image_reason::kCorrupt};
  testutil::write_jpeg_dataset(dir, jpegs, std::vector<std::pair<int, int>>(jpegs.size(), {32, 48}),
                               48);
  const PairDataset ds(dir);
  const Augmenter aug(AugmentConfig{}, 16);
  torch::Generator g = at::detail::createCPUGenerator(1);
  EXPECT_EQ(aug.train(ds.read({0}), g).size(0), 1);
  for (int64_t k = 1; k < static_cast<int64_t>(jpegs.size()); ++k) {
    const Batch b = ds.read({0, k});
    for (int mode = 0; mode < 2; ++mode) {
      try {
        if (mode == 0)
          aug.train(b, g);
        else
          aug.eval(b);
        ADD_FAILURE() << "row " << k << " decoded";
      } catch (const Error& e) {
        const std::string what = e.what();
        const std::string at = dir + "/shard-00000.h5:/image_bytes row " + std::to_string(k) +
                               " (pair_id " + std::to_string(k) + ")";
        EXPECT_NE(what.find(at), std::string::npos) << what;
        EXPECT_NE(what.find("(" + reason[static_cast<size_t>(k)] + ")"), std::string::npos) << what;
      }
    }
  }
  // fnvlp-shard --verify decodes every stored image and lists each bad one.
  const auto problems = verify_dataset(dir).problems;
  EXPECT_EQ(problems.size(), jpegs.size() - 1);
}

}  // namespace
}  // namespace fnvlp::data
