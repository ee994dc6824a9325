// Shard trust before libhdf5 (issue 28): verify_shard_checksums hashes the shards spread over the
// ranks and every rank agrees on the result, at np 1, 2 and 4.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "../unit/data/dataset_fixture.hpp"
#include "fnvlp/comm/comm.hpp"
#include "fnvlp/data/shard_job.hpp"

namespace fs = std::filesystem;
using fnvlp::Comm;

namespace {

// A fresh copy of the two-shard test dataset, written by rank 0, in a directory every rank sees.
std::string shared_dataset(const Comm& comm, const std::string& name) {
  std::string dir = ::testing::TempDir() + "/fnvlp_verify_" + name + "_" + std::to_string(getpid());
  comm.bcast(dir);
  if (comm.is_root()) fnvlp::testutil::write_test_dataset(dir);
  comm.barrier();
  return dir;
}

void flip_last_byte(const std::string& path) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(-1, std::ios::end);
  char c = 0;
  f.get(c);
  f.seekp(-1, std::ios::end);
  f.put(static_cast<char>(c ^ 0x01));
}

// The CollectiveError every rank must throw for DIR ("" and a test failure when a rank does not);
// returns after a barrier, so rank 0 may then remove DIR.
std::string agreed_error(const Comm& comm, const std::string& dir) {
  std::string what;
  try {
    fnvlp::data::verify_shard_checksums(comm, dir);
    ADD_FAILURE() << "no error on rank " << comm.rank();
  } catch (const fnvlp::CollectiveError& e) {
    what = e.what();
  }
  comm.barrier();
  return what;
}

TEST(VerifyShardChecksums, AcceptsMatchingShardsOnEveryRank) {
  Comm comm;
  const std::string dir = shared_dataset(comm, "ok");
  EXPECT_NO_THROW(fnvlp::data::verify_shard_checksums(comm, dir));
  comm.barrier();
  if (comm.is_root()) fs::remove_all(dir);
}

TEST(VerifyShardChecksums, AChangedByteFailsEveryRankNamingTheFile) {
  Comm comm;
  const std::string dir = shared_dataset(comm, "flip");
  if (comm.is_root()) flip_last_byte(dir + "/shard-00001.h5");
  comm.barrier();
  const std::string what = agreed_error(comm, dir);
  EXPECT_NE(what.find("shard-00001.h5: sha256 "), std::string::npos) << what;
  EXPECT_NE(what.find("not opened"), std::string::npos) << what;
  EXPECT_EQ(what.find("shard-00000.h5"), std::string::npos) << what;
  if (comm.is_root()) fs::remove_all(dir);
}

TEST(VerifyShardChecksums, MissingAndTruncatedShardsAreNamed) {
  Comm comm;
  const std::string dir = shared_dataset(comm, "size");
  if (comm.is_root()) {
    fs::remove(dir + "/shard-00000.h5");
    fs::resize_file(dir + "/shard-00001.h5", 100);
  }
  comm.barrier();
  const std::string what = agreed_error(comm, dir);
  EXPECT_NE(what.find("shard-00000.h5: missing (listed in "), std::string::npos) << what;
  EXPECT_NE(what.find("shard-00001.h5: 100 bytes, "), std::string::npos) << what;
  if (comm.is_root()) fs::remove_all(dir);
}

}  // namespace
