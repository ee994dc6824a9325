// fnvlp-simstat over MPI ranks (run at np 1, 2, 4): STATS.h5 must hold exactly the brute-force
// thresholds and counts, the same quantile bits as one undistributed pass, whatever the rank
// count, tile size and row block; a bad input fails on every rank without a hang.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "../unit/similarity/simstat_reference.hpp"
#include "fnvlp/comm/comm.hpp"
#include "fnvlp/data/h5.hpp"
#include "fnvlp/similarity/spaces.hpp"

namespace fnvlp {
namespace {

namespace fs = std::filesystem;

[[maybe_unused]] auto* const kokkos_env = ::testing::AddGlobalTestEnvironment(new test::KokkosEnv);

class SimstatMpi : public test::NeedsKokkosDevice {};

fs::path work_dir(const Comm& comm, const std::string& name) {
  const fs::path d = fs::path(FNVLP_BINARY_DIR) / "tests" / "mpi" /
                     ("simstat_" + name + "_np" + std::to_string(comm.size()));
  comm.collective([&] {
    if (comm.is_root()) {
      fs::remove_all(d);
      fs::create_directories(d / "run" / "embeddings");
    }
  });
  return d;
}

template <typename T>
std::vector<T> read(const std::string& file, const std::string& name) {
  h5::Handle f = h5::open_file(file);
  return h5::read_dataset<T>(f, name, file);
}

// Runs simstat on every rank and checks STATS.h5 on rank 0; the summary (the same on every rank)
// goes to *summary_out.
void check_run(const Comm& comm, const data::Embeddings& e, const data::Embeddings& lam_src,
               const similarity::JobOptions& opt, nlohmann::json* summary_out = nullptr) {
  const auto summary = similarity::run_simstat(comm, opt);
  if (summary_out) *summary_out = summary;
  if (!comm.is_root()) return;
  const auto& p = opt.params;
  const int64_t n = e.size();
  {
    h5::Handle f = h5::open_file(opt.out);
    EXPECT_EQ(h5::read_attr_int(f, "n", opt.out), n);
    EXPECT_EQ(h5::read_attr_int(f, "quantiles", opt.out), p.quantiles);
    EXPECT_DOUBLE_EQ(h5::read_attr_double(f, "alpha", opt.out), p.alpha);
    EXPECT_FALSE(h5::read_attr_string(f, "quantile_convention", opt.out).empty());
  }
  const auto pair_id = read<int64_t>(opt.out, "pair_id");
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(pair_id[static_cast<size_t>(i)], i);
  const auto batch = similarity::fnc_batches(n, p.fnc_batch, p.fnc_seed);
  for (const bool image : {true, false}) {
    const std::string m = image ? "image" : "text";
    SCOPED_TRACE(m + " anchors");
    const auto& anchors = image ? e.image_emb : e.text_emb;
    const auto& cands = image ? e.text_emb : e.image_emb;
    const auto& lambda = image ? lam_src.glofnd_lambda_image : lam_src.glofnd_lambda_text;
    // Over the similarities of the path that ran (the device path's and the generic path's are
    // dot_in_double's).
    const auto ref =
        similarity::takes_generic_path(p)
            ? test::brute_force_of(test::generic_similarities(anchors, cands, n, e.dim).data(), n,
                                   e.image_id, e.label, lambda, batch, p.alpha)
            : test::brute_force(anchors, cands, n, e.dim, e.image_id, e.label, lambda, batch,
                                p.alpha);
    const auto thr = read<float>(opt.out, "threshold_" + m);
    const auto fnc = read<float>(opt.out, "fnc_threshold_" + m);
    for (int64_t i = 0; i < n; ++i) {
      const auto u = static_cast<size_t>(i);
      ASSERT_TRUE(test::same_float(thr[u], ref.threshold[u])) << "row " << i;
      ASSERT_TRUE(test::same_float(fnc[u], ref.fnc_threshold[u])) << "row " << i;
    }
    EXPECT_EQ(read<int64_t>(opt.out, "n_neg_" + m), ref.n_neg);
    EXPECT_EQ(read<int64_t>(opt.out, "n_label_" + m), ref.n_label);
    EXPECT_EQ(read<int64_t>(opt.out, "count_exact_" + m), ref.count);
    EXPECT_EQ(read<int64_t>(opt.out, "count_exact_label_" + m), ref.count_label);
    EXPECT_EQ(read<int64_t>(opt.out, "count_lambda_" + m), ref.count_lambda);
    EXPECT_EQ(read<int64_t>(opt.out, "count_lambda_label_" + m), ref.count_lambda_label);
    EXPECT_EQ(read<int64_t>(opt.out, "count_fnc_" + m), ref.count_fnc);
    EXPECT_EQ(read<int64_t>(opt.out, "count_fnc_label_" + m), ref.count_fnc_label);
    // Quantiles: the same bits as one undistributed pass over all rows with its own tiling.
    auto single = p;
    single.tile = 4096;
    single.row_block = 4096;
    const similarity::CandidateReader reader = [&](int64_t c0, int64_t cn, float* out) {
      std::memcpy(out, cands.data() + c0 * e.dim, sizeof(float) * cn * e.dim);
    };
    const auto one = similarity::anchor_stats(anchors.data(), 0, n, e.dim, reader, n, e.image_id,
                                              e.label, batch, lambda.data(), single);
    const auto q = read<float>(opt.out, "quantiles_" + m);
    ASSERT_EQ(q.size(), one.quantiles.size());
    EXPECT_EQ(std::memcmp(q.data(), one.quantiles.data(), 4 * q.size()), 0);
    // The summary's precision is the ratio of the counts over labelled anchors.
    int64_t flagged = 0, tp = 0;
    for (int64_t i = 0; i < n; ++i)
      if (e.label[static_cast<size_t>(i)] >= 0)
        flagged += ref.count[static_cast<size_t>(i)], tp += ref.count_label[static_cast<size_t>(i)];
    EXPECT_EQ(summary[m]["exact"]["flagged"].get<int64_t>(), flagged);
    EXPECT_EQ(summary[m]["exact"]["true_fn"].get<int64_t>(), tp);
  }
}

// What the exactness tests vary besides the decomposition.
struct Stats {
  double alpha;
  int64_t quantiles, bins, fnc_batch;
  uint64_t fnc_seed;
};

// Writes `e` to DIR/emb.h5 (on rank 0) and returns the options of a simstat job on it.
similarity::JobOptions job_on(const Comm& comm, const fs::path& dir, const data::Embeddings& e,
                              const Stats& s) {
  const std::string file = (dir / "emb.h5").string();
  comm.collective([&] {
    if (comm.is_root()) data::write_embeddings(file, e);
  });
  similarity::JobOptions opt;
  opt.embeddings = file;
  opt.params.alpha = s.alpha;
  opt.params.quantiles = s.quantiles;
  opt.params.bins = s.bins;
  opt.params.fnc_batch = s.fnc_batch;
  opt.params.fnc_seed = s.fnc_seed;
  return opt;
}

TEST_F(SimstatMpi, ExactForAnyRankCountAndTile) {
  Comm comm;
  h5::quiet();
  for (const bool adversarial : {false, true}) {
    const auto dir = work_dir(comm, adversarial ? "adv" : "rand");
    const auto e = test::make_embeddings(203, 16, adversarial ? 11 : 12, adversarial);
    auto opt = job_on(comm, dir, e, {0.03, 11, 256, 20, 5});
    // Starting thresholds: none (N / 64 < 256), from a strided HDF5 read of 50 candidates, and
    // from 40 at a margin that starts every anchor at its sample's maximum (most restart).
    struct Variant {
      int64_t tile, block, sample;
      double sigmas;
    };
    for (const Variant v : {Variant{37, 16, -1, 7.0}, {203, 1000, 50, 7.0}, {5, 3, 40, -1e9}}) {
      SCOPED_TRACE("tile " + std::to_string(v.tile) + " block " + std::to_string(v.block) +
                   " sample " + std::to_string(v.sample));
      opt.params.tile = v.tile;
      opt.params.row_block = v.block;
      opt.params.start_sample = v.sample;
      opt.params.start_sigmas = v.sigmas;
      opt.out = (dir / ("stats-" + std::to_string(v.tile) + ".h5")).string();
      opt.json = (dir / "summary.json").string();
      nlohmann::json summary;
      check_run(comm, e, e, opt, &summary);
      // Starting thresholds are the host paths' (the device path has none).
      const bool device = summary["path"] == "device";
      EXPECT_EQ(summary["image"]["start_sample"].get<int64_t>(),
                v.sample < 0 || device ? 0 : v.sample);
      if (v.sigmas < 0 && !adversarial && !device)
        EXPECT_GT(summary["text"]["restarted_anchors"].get<int64_t>(), 0);
      if (v.sample < 0) EXPECT_EQ(summary["text"]["restarted_anchors"].get<int64_t>(), 0);
    }
  }
}

// The device path (on the host here with its GEMMs' stand-ins; on the GPU in a device build):
// exact for any rank count, tile and block, its quantiles those of one undistributed pass.
TEST_F(SimstatMpi, DevicePathExactForAnyRankCountAndTile) {
  Comm comm;
  h5::quiet();
  for (const bool adversarial : {false, true}) {
    const auto dir = work_dir(comm, adversarial ? "device_adv" : "device_rand");
    const auto e = test::make_embeddings(203, 16, adversarial ? 31 : 32, adversarial);
    auto opt = job_on(comm, dir, e, {0.03, 11, 256, 20, 5});
    opt.params.device_path = true;
    for (const auto [tile, block] : {std::pair<int64_t, int64_t>{37, 16}, {203, 1000}, {5, 3}}) {
      SCOPED_TRACE("tile " + std::to_string(tile) + " block " + std::to_string(block));
      opt.params.device_tile = tile;
      opt.params.row_block = block;
      opt.out = (dir / ("stats-" + std::to_string(tile) + ".h5")).string();
      nlohmann::json summary;
      check_run(comm, e, e, opt, &summary);
      EXPECT_EQ(summary["path"], "device");
    }
  }
}

// Above one GEMM block: at 2,300 pairs a rank's anchors start inside a block at np 2 and 4
// (1,150, 575, ...), tiles of 1,000 candidates start inside one (1,000, 2,000), and blocks of 700
// rows or 2,048 end in or at one. Each pair keeps its place in the GEMM (simstat.hpp), so the
// thresholds match the brute force and the quantiles one undistributed pass, bit for bit.
TEST_F(SimstatMpi, ExactAcrossGemmBlocks) {
  Comm comm;
  h5::quiet();
  const auto dir = work_dir(comm, "blocks");
  const auto e = test::make_embeddings(2300, 16, 13, false);
  auto opt = job_on(comm, dir, e, {0.01, 7, 512, 64, 3});
  for (const auto [tile, block] : {std::pair<int64_t, int64_t>{1000, 700}, {4096, 2048}}) {
    SCOPED_TRACE("tile " + std::to_string(tile) + " block " + std::to_string(block));
    opt.params.tile = tile;
    opt.params.row_block = block;
    opt.out = (dir / ("stats-" + std::to_string(tile) + ".h5")).string();
    check_run(comm, e, e, opt);
  }
}

TEST_F(SimstatMpi, LambdaFromNewestEmbeddingsOfARun) {
  Comm comm;
  const auto dir = work_dir(comm, "lambda");
  auto e = test::make_embeddings(61, 8, 21, false);
  auto newer = e;
  for (auto& l : newer.glofnd_lambda_image) l += 0.05f;
  for (auto& l : newer.glofnd_lambda_text) l -= 0.05f;
  auto plain = e;
  plain.glofnd_lambda_image.clear();
  plain.glofnd_lambda_text.clear();
  comm.collective([&] {
    if (!comm.is_root()) return;
    data::write_embeddings((dir / "plain.h5").string(), plain);
    data::write_embeddings((dir / "run/embeddings/epoch-001.h5").string(), e);
    data::write_embeddings((dir / "run/embeddings/epoch-002.h5").string(), newer);
  });
  similarity::JobOptions opt;
  opt.embeddings = (dir / "plain.h5").string();
  opt.lambda_from = (dir / "run").string();
  opt.out = (dir / "stats.h5").string();
  opt.params.alpha = 0.1;
  opt.params.quantiles = 5;
  opt.params.fnc_batch = 8;
  check_run(comm, plain, newer, opt);
}

TEST_F(SimstatMpi, BadInputFailsOnEveryRank) {
  Comm comm;
  const auto dir = work_dir(comm, "bad");
  similarity::JobOptions opt;
  opt.embeddings = (dir / "missing.h5").string();
  opt.out = (dir / "stats.h5").string();
  EXPECT_THROW(similarity::run_simstat(comm, opt), CollectiveError);
  // A lambda source whose pair count differs from the embeddings.
  comm.collective([&] {
    if (!comm.is_root()) return;
    data::write_embeddings((dir / "a.h5").string(), test::make_embeddings(20, 4, 1, false));
    data::write_embeddings((dir / "b.h5").string(), test::make_embeddings(21, 4, 1, false));
  });
  opt.embeddings = (dir / "a.h5").string();
  opt.lambda_from = (dir / "b.h5").string();
  try {
    similarity::run_simstat(comm, opt);
    ADD_FAILURE() << "mismatched lambda source accepted";
  } catch (const CollectiveError& err) {
    EXPECT_NE(std::string(err.what()).find("b.h5"), std::string::npos) << err.what();
  }
  EXPECT_FALSE(fs::exists(opt.out));
}

}  // namespace
}  // namespace fnvlp
