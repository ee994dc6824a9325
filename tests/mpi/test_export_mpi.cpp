// The epoch export written by every rank's own rows (issue 27), run by ctest at np 1, 2 and 4: the
// file has the bytes one writer gives, whatever the rank count, and no rank gathers the others'.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include "fnvlp/comm/comm.hpp"
#include "fnvlp/data/embeddings.hpp"
#include "fnvlp/data/sampler.hpp"
#include "fnvlp/train/embed_export.hpp"
#include "fnvlp/train/epoch_cache.hpp"
#include "shared_dir.hpp"

namespace fs = std::filesystem;
using fnvlp::Comm;
using fnvlp::data::Embeddings;
using fnvlp::testing::remove_shared;
using fnvlp::testing::shared_temp_dir;

namespace {

Embeddings rows_of(int64_t first, int64_t n, bool lambdas) {
  Embeddings e;
  e.epoch = 4;
  e.step = 99;
  e.dim = 5;
  e.first = first;
  for (int64_t i = first; i < first + n; ++i) {
    for (int k = 0; k < 5; ++k) {
      e.image_emb.push_back(0.5f * static_cast<float>(i) + static_cast<float>(k));
      e.text_emb.push_back(-0.5f * static_cast<float>(i) - static_cast<float>(k));
    }
    e.pair_id.push_back(i);
    e.image_id.push_back(i / 3);
    e.label.push_back(static_cast<int32_t>(i % 4));
    if (lambdas) {
      e.glofnd_lambda_image.push_back(0.01f * static_cast<float>(i));
      e.glofnd_lambda_text.push_back(0.02f * static_cast<float>(i));
    }
  }
  return e;
}

std::string bytes_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void check_export(const Comm& comm, int64_t total, bool lambdas) {
  const std::string dir = shared_temp_dir(comm, "export_mpi");
  const fnvlp::data::PairRange b =
      fnvlp::data::BlockPartition(total, comm.size()).block(comm.rank());
  const Embeddings mine = rows_of(b.begin, b.size(), lambdas);
  fnvlp::train::write_embeddings_collective(comm, dir + "/epoch-004.h5", mine, total);
  if (comm.is_root()) {
    EXPECT_FALSE(fs::exists(dir + "/epoch-004.h5.tmp"));
    fnvlp::data::write_embeddings(dir + "/one-writer.h5", rows_of(0, total, lambdas));
    const std::string got = bytes_of(dir + "/epoch-004.h5");
    EXPECT_FALSE(got.empty());
    EXPECT_TRUE(got == bytes_of(dir + "/one-writer.h5"))
        << total << " pairs at " << comm.size() << " ranks: bytes differ from one writer's";
  }
  // Each rank reads back its own block and nothing else.
  int64_t rows = 0;
  const Embeddings back =
      fnvlp::data::read_embedding_rows(dir + "/epoch-004.h5", b.begin, b.size(), &rows);
  EXPECT_EQ(rows, total);
  EXPECT_EQ(back.pair_id, mine.pair_id);
  EXPECT_EQ(back.image_emb, mine.image_emb);
  EXPECT_EQ(back.glofnd_lambda_text, mine.glofnd_lambda_text);
  remove_shared(comm, dir);
}

}  // namespace

TEST(Export, RanksWriteTheirRowsIntoTheBytesOfOneWriter) {
  const Comm comm;
  check_export(comm, 9001, true);   // blocks cross the 4,096-row chunks
  check_export(comm, 9001, false);  // a run without GloFND
}

// Fewer pairs than ranks at np 4: empty blocks write nothing; the thresholds column still exists.
TEST(Export, EmptyBlocksWriteNothing) {
  const Comm comm;
  check_export(comm, 2, true);
}

// One rank's failure is every rank's error, and no partial file is left under the final name.
TEST(Export, AFailedBlockFailsTheExportOnEveryRank) {
  const Comm comm;
  const std::string dir = shared_temp_dir(comm, "export_mpi");
  const fnvlp::data::PairRange b = fnvlp::data::BlockPartition(100, comm.size()).block(comm.rank());
  const bool last = comm.rank() == comm.size() - 1;
  const Embeddings mine = rows_of(b.begin + (last ? 1 : 0), b.size(), true);  // past the end
  EXPECT_THROW(fnvlp::train::write_embeddings_collective(comm, dir + "/epoch-000.h5", mine, 100),
               fnvlp::CollectiveError);
  comm.barrier();
  if (comm.is_root()) {
    EXPECT_FALSE(fs::exists(dir + "/epoch-000.h5"));
    fs::remove_all(dir);
  }
}

// The cached embeddings in a checkpoint move to their new owners on another rank count: saved by
// the blocks of this run, read back by one rank owning every pair.
TEST(Export, CachedEmbeddingsReadBackUnderAnotherOwnership) {
  const Comm comm;
  const std::string dir = shared_temp_dir(comm, "export_mpi");
  const int64_t total = 37, dim = 3;
  const fnvlp::data::PairRange b =
      fnvlp::data::BlockPartition(total, comm.size()).block(comm.rank());
  fnvlp::train::EpochCache mine(b, dim);
  std::vector<int64_t> ids;
  for (int64_t p = b.begin; p < b.end; p += 2) ids.push_back(p);  // every other pair seen
  const auto n = static_cast<int64_t>(ids.size());
  const auto rows = torch::arange(n * dim, torch::kFloat).reshape({n, dim}) + 100 * comm.rank();
  mine.record(torch::tensor(ids), rows, -rows);
  mine.save(dir, comm, total);
  fnvlp::train::EpochCache all({0, total}, dim);
  all.load(dir, comm);
  std::vector<int64_t> unseen;
  for (int r = 0; r < comm.size(); ++r) {
    const fnvlp::data::PairRange rb = fnvlp::data::BlockPartition(total, comm.size()).block(r);
    for (int64_t p = rb.begin + 1; p < rb.end; p += 2) unseen.push_back(p);
  }
  EXPECT_EQ(all.unseen(), unseen);
  for (int64_t k = 0; k < n; ++k) {
    EXPECT_TRUE(all.image()[ids[static_cast<size_t>(k)]].equal(rows[k])) << "pair " << ids[k];
    EXPECT_TRUE(all.text()[ids[static_cast<size_t>(k)]].equal(-rows[k])) << "pair " << ids[k];
  }
  remove_shared(comm, dir);
}
