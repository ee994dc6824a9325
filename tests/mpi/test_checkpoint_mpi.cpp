// Checkpoints across ranks (ctest runs this at np 1, 2 and 4): per-pair state written under one
// ownership reads back under another, and the save/commit protocol is collective. Every
// expectation is written in terms of rank and size so that it holds at each rank count.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <filesystem>

#include "fnvlp/comm/comm.hpp"
#include "fnvlp/store/checkpoint.hpp"
#include "shared_dir.hpp"

namespace fs = std::filesystem;
using namespace fnvlp::store;
using fnvlp::Comm;
using fnvlp::testing::remove_shared;
using fnvlp::testing::shared_temp_dir;

namespace {

float value_of(int64_t id, int64_t c) { return static_cast<float>(id) * 10.0f + c + 0.25f; }

constexpr int64_t kPairs = 37;  // divides by no rank count: blocks are uneven
constexpr int64_t kCols = 3;

// Rank r of `owners` ranks owns the block [r*N/owners, (r+1)*N/owners); ranks >= owners own none.
void save_blocks(const Comm& comm, const std::string& dir, const std::string& name, int owners) {
  std::vector<int64_t> ids;
  std::vector<float> values;
  if (comm.rank() < owners) {
    for (int64_t id = comm.rank() * kPairs / owners; id < (comm.rank() + 1) * kPairs / owners;
         ++id) {
      ids.push_back(id);
      for (int64_t c = 0; c < kCols; ++c) values.push_back(value_of(id, c));
    }
  }
  save_per_pair(dir, name, comm, ids, values, kCols, kPairs);
}

void expect_rows(const PerPairRows& rows, const std::vector<int64_t>& ids) {
  ASSERT_EQ(rows.cols, kCols);
  ASSERT_EQ(rows.num_pairs_total, kPairs);
  ASSERT_EQ(rows.values.size(), ids.size() * kCols);
  ASSERT_EQ(rows.valid.size(), ids.size());
  for (size_t k = 0; k < ids.size(); ++k) {
    EXPECT_EQ(rows.valid[k], 1) << "pair " << ids[k];
    for (int64_t c = 0; c < kCols; ++c)
      EXPECT_EQ(rows.values[k * kCols + c], value_of(ids[k], c))
          << "pair " << ids[k] << " col " << c;
  }
}

TEST(CheckpointMpi, PerPairStateReadsBackUnderAnotherOwnership) {
  Comm comm;
  const std::string dir = shared_temp_dir(comm, "ckpt_mpi");
  const int r = comm.rank(), n = comm.size();
  // Written by every rank owning a block, and as if by a run on half as many ranks.
  save_blocks(comm, dir, "blocks", n);
  save_blocks(comm, dir, "half", std::max(1, n / 2));
  for (const std::string name : {"blocks", "half"}) {
    // Read back round-robin, in descending order: a different owner for almost every pair.
    std::vector<int64_t> mine;
    for (int64_t id = kPairs - 1 - r; id >= 0; id -= n) mine.push_back(id);
    expect_rows(load_per_pair(dir, name, comm, mine), mine);
    // Every rank may also ask for every pair (duplicates across ranks are fine on load).
    std::vector<int64_t> all(kPairs);
    for (int64_t id = 0; id < kPairs; ++id) all[static_cast<size_t>(id)] = id;
    expect_rows(load_per_pair(dir, name, comm, all), all);
  }
  // A rank that asks for nothing takes part and gets nothing.
  const PerPairRows none =
      load_per_pair(dir, "blocks", comm, r == 0 ? std::vector<int64_t>{} : std::vector<int64_t>{0});
  EXPECT_EQ(none.valid.size(), r == 0 ? 0u : 1u);
  // Two ranks claiming the same pair is an error on every rank (one rank twice at np 1).
  const std::vector<int64_t> claim = n == 1 ? std::vector<int64_t>{0, 0} : std::vector<int64_t>{0};
  const std::vector<float> claim_values(claim.size() * kCols, 1.f);
  try {
    save_per_pair(dir, "dup", comm, claim, claim_values, kCols, kPairs);
    FAIL() << "no error on rank " << r;
  } catch (const fnvlp::CollectiveError& e) {
    EXPECT_NE(std::string(e.what()).find("pair_id 0 supplied by more than one row"),
              std::string::npos)
        << e.what();
  }
  remove_shared(comm, dir);
}

TEST(CheckpointMpi, SaveAndCommitAreCollective) {
  Comm comm;
  const std::string dir = shared_temp_dir(comm, "ckpt_mpi");
  const int r = comm.rank(), n = comm.size();
  CheckpointManager mgr(dir + "/checkpoints", comm);
  for (int64_t step : {4, 8}) {
    const CheckpointInfo info = mgr.save(step, [&](const std::string& d) {
      save_blocks(comm, d, "glofnd", n);  // collective helper first
      if (comm.is_root()) save_json(d, "trainer_state", {{"step", step}});
      save_json(d, rank_file("sampler", r), {{"rank", r}, {"step", step}});
    });
    EXPECT_EQ(info.step, step);
    EXPECT_EQ(info.world_size, n);
  }
  const auto latest = mgr.latest_committed();
  ASSERT_TRUE(latest.has_value());
  EXPECT_EQ(latest->step, 8);
  EXPECT_EQ(latest->world_size, n);
  // Every rank sees the same newest checkpoint and the same `latest` link.
  const std::string link = fs::read_symlink(mgr.dir() + "/latest").string();
  for (const auto& s : comm.allgather_strings(link + "|" + latest->dir))
    EXPECT_EQ(s, link + "|" + latest->dir);
  EXPECT_EQ(link, "step-0000008");
  // The marker lists one shared trainer state, the per-pair file and one file per rank.
  const auto& files = latest->marker["files"];
  EXPECT_EQ(files.size(), static_cast<size_t>(n) + 2);
  EXPECT_TRUE(files.contains("trainer_state.json"));
  EXPECT_TRUE(files.contains("glofnd.h5"));
  for (int k = 0; k < n; ++k) EXPECT_TRUE(files.contains(rank_file("sampler.json", k))) << k;
  EXPECT_EQ(load_json(latest->dir, rank_file("sampler", r))["rank"], r);
  EXPECT_EQ(load_json(latest->dir, "trainer_state")["step"], 8);
  std::vector<int64_t> ids = {kPairs - 1, 0};
  expect_rows(load_per_pair(latest->dir, "glofnd", comm, ids), ids);
  remove_shared(comm, dir);
}

TEST(CheckpointMpi, OneRanksFailedWriteFailsTheSaveEverywhere) {
  Comm comm;
  const std::string dir = shared_temp_dir(comm, "ckpt_mpi");
  const int bad = comm.size() - 1;
  CheckpointManager mgr(dir, comm);
  mgr.save(1, [&](const std::string& d) {
    save_json(d, rank_file("s", comm.rank()), {{"ok", 1}});
  });
  try {
    mgr.save(2, [&](const std::string& d) {
      save_json(d, rank_file("s", comm.rank()), {{"ok", 1}});
      if (comm.rank() == bad) throw std::runtime_error("No space left on device (injected)");
    });
    FAIL() << "no error on rank " << comm.rank();
  } catch (const fnvlp::CollectiveError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("rank " + std::to_string(bad) + ": No space left on device (injected)"),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("'latest' still points to step-0000001"), std::string::npos) << what;
  }
  EXPECT_EQ(fs::read_symlink(dir + "/latest").string(), "step-0000001");
  EXPECT_FALSE(fs::exists(dir + "/step-0000002.tmp"));
  EXPECT_EQ(mgr.latest_committed()->step, 1);
  remove_shared(comm, dir);
}

}  // namespace
