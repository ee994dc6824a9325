// Peak memory per rank at the epoch boundary and in a checkpoint (issue 27 benchmark).
// export: each rank holds its block of N pairs' embeddings (what embed_dataset returns) with
//   GloFND's thresholds, writes the export with the others (write_embeddings_collective) and
//   hands its block to the grouped samplers as tensors (embedding_tensors): what
//   Trainer::finish_epoch does after the forward pass. With --gather, what the trainer did
//   before: every rank all-gathers every pair's rows, rank 0 writes them, and each rank copies
//   its block out of the gathered rows.
// checkpoint: GloFND's per-pair state of the block (8 floats a pair) through save_per_pair and
//   load_per_pair.
//   mpirun -np R build/tests/bench/bench_export_memory N D DIR [--gather]
// Prints per rank and phase the growth of the peak resident set over the phase (VmHWM after,
// reset by /proc/self/clear_refs, minus VmRSS before) and the phase's wall time.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "fnvlp/comm/comm.hpp"
#include "fnvlp/data/embeddings.hpp"
#include "fnvlp/data/h5.hpp"
#include "fnvlp/data/sampler.hpp"
#include "fnvlp/store/checkpoint.hpp"
#include "fnvlp/train/embed_export.hpp"
#include "proc_status.hpp"

namespace {

using fnvlp::bench::status_mib;

// Measures fn: peak resident growth (MiB) and seconds, collective.
struct Phase {
  double peak_mib, seconds;
};
template <typename Fn>
Phase measure(const fnvlp::Comm& comm, Fn fn) {
  comm.barrier();
  std::ofstream("/proc/self/clear_refs") << "5";  // VmHWM := VmRSS
  const double before = status_mib("VmRSS:");
  const auto t0 = std::chrono::steady_clock::now();
  fn();
  comm.barrier();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return {status_mib("VmHWM:") - before, s};
}

fnvlp::data::Embeddings block_rows(const fnvlp::data::PairRange& b, int64_t dim) {
  fnvlp::data::Embeddings e;
  e.dim = dim;
  e.first = b.begin;
  const auto n = static_cast<size_t>(b.size());
  e.image_emb.resize(n * static_cast<size_t>(dim));
  e.text_emb.resize(e.image_emb.size());
  for (size_t i = 0; i < e.image_emb.size(); ++i) {
    e.image_emb[i] = static_cast<float>(i % 1013) * 1e-3f;
    e.text_emb[i] = -static_cast<float>(i % 997) * 1e-3f;
  }
  for (int64_t p = b.begin; p < b.end; ++p) {
    e.pair_id.push_back(p);
    e.image_id.push_back(p / 5);
    e.label.push_back(-1);
    e.glofnd_lambda_image.push_back(0.5f);
    e.glofnd_lambda_text.push_back(0.5f);
  }
  return e;
}

// What the grouped samplers keep of the block they are given (GroupedSampler::set_embeddings).
std::pair<torch::Tensor, torch::Tensor> sampler_copy(const fnvlp::data::Embeddings& e) {
  const auto [img, txt] = fnvlp::train::embedding_tensors(e);
  return {img.clone(), txt.clone()};
}

}  // namespace

int main(int argc, char** argv) {
  fnvlp::MpiRuntime mpi(&argc, &argv);
  fnvlp::h5::quiet();
  if (argc < 4) {
    std::fprintf(stderr, "usage: bench_export_memory N D DIR [--gather]\n");
    return 2;
  }
  const int64_t n = std::atoll(argv[1]);
  const int64_t dim = std::atoll(argv[2]);
  const std::string path = std::string(argv[3]) + "/epoch-000.h5";
  const bool gather = argc > 4 && std::string(argv[4]) == "--gather";
  const fnvlp::Comm comm;
  const fnvlp::data::PairRange b = fnvlp::data::BlockPartition(n, comm.size()).block(comm.rank());
  const fnvlp::data::Embeddings mine = block_rows(b, dim);
  const Phase exp = measure(comm, [&] {
    if (gather) {
      fnvlp::data::Embeddings all = fnvlp::train::gather_embeddings(comm, mine);
      comm.collective([&] {
        if (comm.is_root()) fnvlp::data::write_embeddings(path, all);
      });
      fnvlp::data::Embeddings copy;
      copy.dim = dim;
      copy.first = b.begin;
      copy.image_emb.assign(all.image_emb.begin() + b.begin * dim,
                            all.image_emb.begin() + b.end * dim);
      copy.text_emb.assign(all.text_emb.begin() + b.begin * dim,
                           all.text_emb.begin() + b.end * dim);
      copy.pair_id.assign(all.pair_id.begin() + b.begin, all.pair_id.begin() + b.end);
      const auto tensors = sampler_copy(copy);
    } else {
      fnvlp::train::write_embeddings_collective(comm, path, mine, n);
      const auto tensors = sampler_copy(mine);
    }
  });
  const double file_mib =
      comm.is_root() ? static_cast<double>(std::filesystem::file_size(path)) / 1048576.0 : 0;
  if (comm.is_root()) std::filesystem::remove(path);
  std::vector<int64_t> ids;
  for (int64_t p = b.begin; p < b.end; ++p) ids.push_back(p);
  const std::vector<float> state(ids.size() * 8, 0.25f);
  const std::string ckpt = std::string(argv[3]);
  const Phase save = measure(
      comm, [&] { fnvlp::store::save_per_pair(ckpt, "glofnd_bench", comm, ids, state, 8, n); });
  const Phase load = measure(comm, [&] {
    const auto rows = fnvlp::store::load_per_pair(ckpt, "glofnd_bench", comm, ids);
  });
  for (int r = 0; r < comm.size(); ++r) {
    if (r == comm.rank())
      std::printf(
          "%s N=%lld D=%lld R=%d rank %d: block %lld pairs (%.1f MiB of embeddings); peak RSS "
          "+%.1f MiB in the export (%.2f s), +%.1f MiB in save_per_pair (%.2f s), +%.1f MiB in "
          "load_per_pair (%.2f s)%s\n",
          gather ? "gather" : "blocks", static_cast<long long>(n), static_cast<long long>(dim),
          comm.size(), comm.rank(), static_cast<long long>(b.size()),
          2.0 * static_cast<double>(mine.image_emb.size() * sizeof(float)) / 1048576.0,
          exp.peak_mib, exp.seconds, save.peak_mib, save.seconds, load.peak_mib, load.seconds,
          comm.is_root() ? (", file " + std::to_string(file_mib) + " MiB").c_str() : "");
    std::fflush(stdout);
    comm.barrier();
  }
  if (comm.is_root()) std::filesystem::remove(ckpt + "/glofnd_bench.h5");
  return 0;
}
