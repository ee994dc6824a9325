// Checkpoints: torch state round trips (bitwise resume of AdamW), the commit protocol and its
// failure modes (uncommitted, corrupt, failed and disk-full saves), pruning and per-pair state.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "fnvlp/comm/comm.hpp"
#include "fnvlp/core/sha256.hpp"
#include "fnvlp/store/checkpoint.hpp"
#include "fnvlp/store/components.hpp"
#include "fnvlp/store/run_dir.hpp"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace fnvlp::store;

namespace {

std::string fresh_dir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/fnvlp_ckpt_" + name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

struct Net : torch::nn::Module {
  Net() {
    fc = register_module("fc", torch::nn::Linear(4, 3));
    bn = register_module("bn", torch::nn::BatchNorm1d(3));
  }
  torch::Tensor forward(const torch::Tensor& x) { return bn->forward(fc->forward(x)); }
  torch::nn::Linear fc{nullptr};
  torch::nn::BatchNorm1d bn{nullptr};
};

void expect_same_state(torch::nn::Module& a, torch::nn::Module& b) {
  const auto pa = a.named_parameters(), pb = b.named_parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (const auto& p : pa) EXPECT_TRUE(torch::equal(p.value(), pb[p.key()])) << p.key();
  const auto ba = a.named_buffers(), bb = b.named_buffers();
  ASSERT_EQ(ba.size(), bb.size());
  for (const auto& x : ba) EXPECT_TRUE(torch::equal(x.value(), bb[x.key()])) << x.key();
}

// One deterministic training step on fixed data.
void train_step(Net& net, torch::optim::Optimizer& opt, int k) {
  const auto x = torch::arange(32, torch::kFloat).reshape({8, 4}).sin() * (k + 1);
  const auto y = torch::arange(24, torch::kFloat).reshape({8, 3}).cos();
  opt.zero_grad();
  torch::mse_loss(net.forward(x), y).backward();
  opt.step();
}

TEST(CheckpointState, ModuleRoundTripKeepsParametersAndBuffers) {
  const std::string dir = fresh_dir("module");
  torch::manual_seed(1);
  Net a;
  a.train();
  for (int i = 0; i < 3; ++i) a.forward(torch::randn({8, 4}));  // moves the running statistics
  ASSERT_EQ(a.bn->num_batches_tracked.item<int64_t>(), 3);
  save_module(dir, "model", a);
  torch::manual_seed(2);
  Net b;
  EXPECT_FALSE(torch::equal(a.fc->weight, b.fc->weight));
  load_module(dir, "model", b);
  expect_same_state(a, b);
  EXPECT_EQ(b.bn->num_batches_tracked.item<int64_t>(), 3);
  EXPECT_GT(module_bytes(a), 0u);
}

TEST(CheckpointState, AdamWResumeIsBitwiseIdentical) {
  const std::string dir = fresh_dir("adamw");
  const auto options = torch::optim::AdamWOptions(1e-2).weight_decay(0.1);
  torch::manual_seed(3);
  Net a;
  torch::optim::AdamW opt_a(a.parameters(), options);
  EXPECT_GT(optimizer_state_bytes(opt_a), 0u);
  for (int k = 0; k < 3; ++k) train_step(a, opt_a, k);
  save_module(dir, "model", a);
  save_optimizer(dir, "optimizer", opt_a);
  for (int k = 3; k < 5; ++k) train_step(a, opt_a, k);

  torch::manual_seed(4);
  Net b;
  torch::optim::AdamW opt_b(b.parameters(), torch::optim::AdamWOptions(0.5));  // lr restored
  load_module(dir, "model", b);
  load_optimizer(dir, "optimizer", opt_b);
  EXPECT_DOUBLE_EQ(static_cast<torch::optim::AdamWOptions&>(opt_b.param_groups()[0].options()).lr(),
                   1e-2);
  for (int k = 3; k < 5; ++k) train_step(b, opt_b, k);
  expect_same_state(a, b);

  // The optimizer state matters: without it the same steps give other parameters.
  torch::manual_seed(4);
  Net c;
  torch::optim::AdamW opt_c(c.parameters(), options);
  load_module(dir, "model", c);
  for (int k = 3; k < 5; ++k) train_step(c, opt_c, k);
  EXPECT_FALSE(torch::equal(a.fc->weight, c.fc->weight));
}

TEST(CheckpointState, JsonRoundTrip) {
  const std::string dir = fresh_dir("json");
  const json state = {
      {"step", 12}, {"epoch", 1}, {"sampler", {{"cursor", 40}, {"perm", {3, 1, 2}}}}};
  save_json(dir, "trainer_state", state);
  EXPECT_EQ(load_json(dir, "trainer_state"), state);
}

// --- commit protocol ----------------------------------------------------------------------------

// A writer in the shape the trainer uses: shared files from rank 0, a per-rank file.
CheckpointManager::WriteFn simple_writer(const fnvlp::Comm& comm, int64_t step) {
  return [&comm, step](const std::string& dir) {
    if (comm.is_root()) save_json(dir, "trainer_state", {{"step", step}});
    save_json(dir, rank_file("sampler", comm.rank()), {{"rank", comm.rank()}});
  };
}

std::string latest_target(const std::string& dir) {
  return fs::read_symlink(dir + "/latest").string();
}

TEST(CheckpointManager, SaveCommitsWithMarkerAndLatestLink) {
  fnvlp::Comm comm;
  const std::string dir = fresh_dir("commit");
  CheckpointManager mgr(dir, comm);
  const CheckpointInfo a = mgr.save(5, simple_writer(comm, 5));
  EXPECT_EQ(a.dir, dir + "/step-0000005");
  EXPECT_EQ(latest_target(dir), "step-0000005");
  const CheckpointInfo b = mgr.save(10, simple_writer(comm, 10));
  EXPECT_EQ(latest_target(dir), "step-0000010");
  EXPECT_FALSE(fs::exists(dir + "/step-0000010.tmp"));
  EXPECT_FALSE(fs::exists(dir + "/latest.tmp"));

  const json marker = json::parse(std::ifstream(b.dir + "/COMMITTED"));
  EXPECT_EQ(marker["step"], 10);
  EXPECT_EQ(marker["world_size"], comm.size());
  EXPECT_TRUE(marker.contains("time"));
  ASSERT_EQ(marker["files"].size(), 2u);
  for (const auto& [name, entry] : marker["files"].items())
    EXPECT_EQ(entry["sha256"], fnvlp::sha256_file(b.dir + "/" + name)) << name;

  const auto latest = mgr.latest_committed();
  ASSERT_TRUE(latest.has_value());
  EXPECT_EQ(latest->step, 10);
  EXPECT_EQ(latest->dir, b.dir);
  EXPECT_EQ(load_json(latest->dir, "trainer_state")["step"], 10);
  EXPECT_EQ(mgr.committed_steps(), (std::vector<int64_t>{5, 10}));
}

TEST(CheckpointManager, FilesInSubdirectoriesAreCoveredByTheMarker) {
  fnvlp::Comm comm;
  const std::string dir = fresh_dir("subdir");
  CheckpointManager mgr(dir, comm);
  const CheckpointInfo info = mgr.save(3, [&](const std::string& d) {
    fs::create_directories(d + "/falcon");
    save_json(d + "/falcon", "policy", {{"w", 1}});
  });
  const json marker = json::parse(std::ifstream(info.dir + "/COMMITTED"));
  EXPECT_TRUE(marker["files"].contains("falcon/policy.json"));
  EXPECT_EQ(verify_checkpoint(info.dir, true), "");
  std::ofstream(info.dir + "/falcon/policy.json") << "{\"w\": 2}\n";  // same size, other bytes
  EXPECT_NE(verify_checkpoint(info.dir, true), "");
}

TEST(CheckpointManager, IgnoresUncommittedDirectories) {
  fnvlp::Comm comm;
  const std::string dir = fresh_dir("uncommitted");
  CheckpointManager mgr(dir, comm);
  EXPECT_FALSE(mgr.latest_committed().has_value());
  mgr.save(20, simple_writer(comm, 20));
  // A save killed after its marker but before the rename, and a directory without a marker.
  fs::copy(dir + "/step-0000020", dir + "/step-0000030.tmp", fs::copy_options::recursive);
  fs::create_directories(dir + "/step-0000040");
  save_json(dir + "/step-0000040", "trainer_state", {{"step", 40}});
  EXPECT_EQ(mgr.committed_steps(), (std::vector<int64_t>{20}));
  const auto latest = mgr.latest_committed();
  ASSERT_TRUE(latest.has_value());
  EXPECT_EQ(latest->step, 20);
  EXPECT_NE(verify_checkpoint(dir + "/step-0000040", true).find("no COMMITTED marker"),
            std::string::npos);
  // The next save clears the stale .tmp directory.
  mgr.save(25, simple_writer(comm, 25));
  EXPECT_FALSE(fs::exists(dir + "/step-0000030.tmp"));
}

// Issue 28: a symlink planted in the run directory never redirects a write, and a COMMITTED
// marker cannot make verification read outside its checkpoint.
TEST(CheckpointManager, PlantedSymlinksAreNotFollowed) {
  fnvlp::Comm comm;
  const std::string dir = fresh_dir("planted");
  const std::string outside = fresh_dir("planted_outside");
  std::ofstream(outside + "/victim") << "keep\n";
  const auto victim = [&] {
    std::ifstream in(outside + "/victim");
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  CheckpointManager mgr(dir, comm);
  fs::create_directory_symlink(outside, dir + "/step-0000003.tmp");
  const CheckpointInfo info = mgr.save(3, simple_writer(comm, 3));
  EXPECT_FALSE(fs::is_symlink(info.dir));
  EXPECT_EQ(verify_checkpoint(info.dir, true), "");
  EXPECT_EQ(std::vector<fs::path>(fs::directory_iterator(outside), {}),
            std::vector<fs::path>{fs::path(outside) / "victim"});

  fs::create_symlink(outside + "/victim", dir + "/summary.json");
  try {
    write_file(dir + "/summary.json", "overwritten\n");
    ADD_FAILURE() << "wrote through a symlink";
  } catch (const fnvlp::Error& e) {
    EXPECT_NE(std::string(e.what()).find("symbolic link"), std::string::npos) << e.what();
  }
  fs::create_symlink(outside + "/victim", dir + "/config.yaml.tmp");
  write_file_atomic(dir + "/config.yaml", "a: 1\n");
  EXPECT_FALSE(fs::is_symlink(dir + "/config.yaml"));
  EXPECT_EQ(victim(), "keep\n");

  json marker = json::parse(std::ifstream(info.dir + "/COMMITTED"));
  for (const std::string bad : {"../../planted_outside/victim", "/etc/hostname", "a//b", "./x"}) {
    json m = marker;
    m["files"][bad] = {{"bytes", 5}, {"sha256", ""}};
    std::ofstream(info.dir + "/COMMITTED") << m.dump(2);
    EXPECT_NE(verify_checkpoint(info.dir, true).find("outside the checkpoint directory"),
              std::string::npos)
        << bad << ": " << verify_checkpoint(info.dir, true);
  }
  std::ofstream(info.dir + "/COMMITTED") << marker.dump(2);
  EXPECT_EQ(verify_checkpoint(info.dir, true), "");
}

TEST(CheckpointManager, CorruptNewestFallsBackToPrevious) {
  fnvlp::Comm comm;
  const std::string dir = fresh_dir("corrupt");
  CheckpointManager mgr(dir, comm, {});
  mgr.save(1, simple_writer(comm, 1));
  mgr.save(2, simple_writer(comm, 2));
  {  // flip one byte, same size: only the checksum can tell
    std::fstream f(dir + "/step-0000002/trainer_state.json", std::ios::in | std::ios::out);
    f.seekp(4);
    f.put('#');
  }
  EXPECT_NE(verify_checkpoint(dir + "/step-0000002", true).find("sha256"), std::string::npos);
  EXPECT_EQ(verify_checkpoint(dir + "/step-0000002", false), "");
  const auto latest = mgr.latest_committed();
  ASSERT_TRUE(latest.has_value());
  EXPECT_EQ(latest->step, 1);
  EXPECT_THROW(mgr.open(dir + "/step-0000002"), fnvlp::CollectiveError);
  EXPECT_EQ(mgr.open(dir + "/step-0000001").step, 1);
  // A missing file is caught without checksums.
  fs::remove(dir + "/step-0000001/" + rank_file("sampler.json", 0));
  EXPECT_NE(verify_checkpoint(dir + "/step-0000001", false).find("missing"), std::string::npos);
  EXPECT_FALSE(mgr.latest_committed().has_value());
}

TEST(CheckpointManager, KeepsTheLastKAfterCommit) {
  fnvlp::Comm comm;
  const std::string dir = fresh_dir("prune");
  CheckpointConfig cfg;
  cfg.keep_last = 2;
  CheckpointManager mgr(dir, comm, cfg);
  for (int64_t s : {10, 20, 30, 40}) mgr.save(s, simple_writer(comm, s));
  EXPECT_EQ(mgr.committed_steps(), (std::vector<int64_t>{30, 40}));
  EXPECT_FALSE(fs::exists(dir + "/step-0000010"));
  cfg.keep_last = 0;
  EXPECT_THROW(CheckpointManager(dir, comm, cfg), fnvlp::Error);
}

TEST(CheckpointManager, ResumingFromAnOlderStepMovesNewerOnesAside) {
  fnvlp::Comm comm;
  const std::string dir = fresh_dir("abandon");
  CheckpointConfig cfg;
  cfg.keep_last = 3;
  CheckpointManager mgr(dir, comm, cfg);
  for (int64_t s : {10, 20, 30}) mgr.save(s, simple_writer(comm, s));
  // As if resumed from step 10 (--resume PATH): step 15 is now the newest of this trajectory.
  mgr.save(15, simple_writer(comm, 15));
  EXPECT_EQ(mgr.committed_steps(), (std::vector<int64_t>{10, 15}));
  EXPECT_TRUE(fs::exists(dir + "/step-0000030.abandoned/COMMITTED"));
  EXPECT_EQ(mgr.latest_committed()->step, 15);
  EXPECT_EQ(latest_target(dir), "step-0000015");
}

TEST(CheckpointManager, SavingACommittedStepAgainWritesNothing) {
  fnvlp::Comm comm;
  const std::string dir = fresh_dir("again");
  CheckpointManager mgr(dir, comm);
  mgr.save(7, simple_writer(comm, 7));
  bool called = false;
  const CheckpointInfo info = mgr.save(7, [&](const std::string&) { called = true; });
  EXPECT_FALSE(called);
  EXPECT_EQ(info.step, 7);
  // A damaged copy of the step is replaced.
  fs::remove(dir + "/step-0000007/trainer_state.json");
  mgr.save(7, simple_writer(comm, 7));
  EXPECT_EQ(verify_checkpoint(dir + "/step-0000007", true), "");
}

TEST(CheckpointManager, FailedWriterLeavesLatestAndPreviousIntact) {
  fnvlp::Comm comm;
  const std::string dir = fresh_dir("fail");
  CheckpointManager mgr(dir, comm);
  mgr.save(100, simple_writer(comm, 100));
  try {
    mgr.save(200, [&](const std::string& d) {
      save_json(d, "trainer_state", {{"step", 200}});
      throw std::runtime_error("injected failure while writing");
    });
    FAIL() << "save did not throw";
  } catch (const fnvlp::CollectiveError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("checkpoint of step 200"), std::string::npos) << what;
    EXPECT_NE(what.find("injected failure while writing"), std::string::npos) << what;
    EXPECT_NE(what.find("'latest' still points to step-0000100"), std::string::npos) << what;
  }
  EXPECT_EQ(latest_target(dir), "step-0000100");
  EXPECT_FALSE(fs::exists(dir + "/step-0000200.tmp"));
  EXPECT_FALSE(fs::exists(dir + "/step-0000200"));
  EXPECT_EQ(mgr.latest_committed()->step, 100);
  EXPECT_EQ(verify_checkpoint(dir + "/step-0000100", true), "");
  // The manager is still usable.
  EXPECT_EQ(mgr.save(300, simple_writer(comm, 300)).step, 300);
}

TEST(CheckpointManager, DiskFullDuringWriteIsAClearErrorAndLatestStays) {
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
  fnvlp::Comm comm;
  const std::string dir = fresh_dir("enospc");
  CheckpointManager mgr(dir, comm);
  mgr.save(1, simple_writer(comm, 1));
  torch::manual_seed(6);
  Net net;
  try {
    mgr.save(2, [&](const std::string& d) {
      // Every write to /dev/full's device (1, 7) fails with ENOSPC, like a full file system. A
      // node of it in the checkpoint, not a symlink: writes never follow links.
      if (::mknod((d + "/model.pt").c_str(), S_IFCHR | 0600, makedev(1, 7)) != 0)
        throw std::runtime_error(std::string("mknod: ") + std::strerror(errno));
      save_module(d, "model", net);
    });
    FAIL() << "save did not throw";
  } catch (const fnvlp::CollectiveError& e) {
    const std::string what = e.what();
    if (what.find("mknod: ") != std::string::npos)
      GTEST_SKIP() << "cannot create a device node here (needs CAP_MKNOD): " << what;
    EXPECT_NE(what.find("No space left on device"), std::string::npos) << what;
    EXPECT_NE(what.find("model.pt"), std::string::npos) << what;
  }
  EXPECT_EQ(latest_target(dir), "step-0000001");
  EXPECT_EQ(mgr.latest_committed()->step, 1);
  // Same through the JSON and raw-file paths.
  EXPECT_THROW(write_file("/dev/full", "x"), fnvlp::Error);
}

TEST(CheckpointManager, FreeSpaceCheckFailsEarly) {
  fnvlp::Comm comm;
  const std::string dir = fresh_dir("space");
  CheckpointManager mgr(dir, comm);
  try {
    mgr.check_free_space(uint64_t(1) << 60);  // an exbibyte per checkpoint
    FAIL() << "no error";
  } catch (const fnvlp::CollectiveError& e) {
    EXPECT_NE(std::string(e.what()).find("not enough free disk space"), std::string::npos)
        << e.what();
  }
  EXPECT_NO_THROW(mgr.check_free_space(1024));
  EXPECT_NO_THROW(mgr.save(1, simple_writer(comm, 1)));
}

TEST(CheckpointManager, WriterMaySaveTheWholeTrainingState) {
  fnvlp::Comm comm;
  const std::string dir = fresh_dir("full");
  CheckpointManager mgr(dir, comm);
  torch::manual_seed(8);
  Net net;
  torch::optim::AdamW opt(net.parameters(), torch::optim::AdamWOptions(1e-3));
  train_step(net, opt, 0);
  mgr.check_free_space(3 * module_bytes(net));
  const std::vector<int64_t> ids = {0, 1, 2, 3, 4};
  const std::vector<float> lambda = {0.f, 0.5f, 1.f, 1.5f, 2.f};
  mgr.save(1, [&](const std::string& d) {
    save_per_pair(d, "glofnd", comm, ids, lambda, 1, 5);  // collective helpers first
    if (comm.is_root()) {
      save_module(d, "model", net);
      save_optimizer(d, "optimizer", opt);
      save_json(d, "trainer_state", {{"step", 1}});
    }
    save_json(d, rank_file("sampler", comm.rank()), {{"rank", comm.rank()}});
  });
  const auto latest = mgr.latest_committed();
  ASSERT_TRUE(latest.has_value());
  EXPECT_EQ(latest->marker["files"].size(), 5u);
  const PerPairRows rows = load_per_pair(latest->dir, "glofnd", comm, {4, 0});
  EXPECT_EQ(rows.values, (std::vector<float>{2.f, 0.f}));
  EXPECT_EQ(rows.valid, (std::vector<uint8_t>{1, 1}));
  Net other;
  load_module(latest->dir, "model", other);
  expect_same_state(net, other);
}

TEST(PerPairState, SingleRankRoundTripWithGapsAndErrors) {
  fnvlp::Comm comm;
  const std::string dir = fresh_dir("per_pair");
  // Pairs 1 and 3 of 5 have no owner: stored as invalid zero rows.
  save_per_pair(dir, "state", comm, {4, 0, 2}, {4.f, 40.f, 0.f, 0.5f, 2.f, 20.f}, 2, 5);
  const PerPairRows rows = load_per_pair(dir, "state", comm, {0, 1, 2, 3, 4, 2});
  EXPECT_EQ(rows.cols, 2);
  EXPECT_EQ(rows.num_pairs_total, 5);
  EXPECT_EQ(rows.values,
            (std::vector<float>{0.f, 0.5f, 0.f, 0.f, 2.f, 20.f, 0.f, 0.f, 4.f, 40.f, 2.f, 20.f}));
  EXPECT_EQ(rows.valid, (std::vector<uint8_t>{1, 0, 1, 0, 1, 1}));
  EXPECT_THROW(load_per_pair(dir, "state", comm, {5}), fnvlp::CollectiveError);
  EXPECT_THROW(save_per_pair(dir, "dup", comm, {1, 1}, {1.f, 2.f}, 1, 3), fnvlp::CollectiveError);
  EXPECT_THROW(save_per_pair(dir, "range", comm, {3}, {1.f}, 1, 3), fnvlp::CollectiveError);
  EXPECT_THROW(save_per_pair(dir, "size", comm, {0}, {1.f}, 2, 3), fnvlp::CollectiveError);
}

}  // namespace

TEST(StoreComponents, CollectiveSavesRunBeforeLocalOnes) {
  fnvlp::store::Components c;
  std::vector<std::string> order;
  auto add = [&](const std::string& name, bool collective) {
    c.add({name, [&order, name](const std::string&) { order.push_back("save " + name); },
           [&order, name](const std::string&, int) { order.push_back("load " + name); },
           collective});
  };
  add("sampler", false);
  add("glofnd", true);
  add("model", false);
  c.save("d");
  c.load("d", 2);
  EXPECT_EQ(order, (std::vector<std::string>{"save glofnd", "save sampler", "save model",
                                             "load glofnd", "load sampler", "load model"}));
}
