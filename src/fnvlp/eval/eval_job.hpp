#pragma once
// fnvlp-eval: zero-shot retrieval (ITC, then ITM re-ranking of the top k_test) of a checkpoint on
// a sharded dataset, plus an optional linear probe on frozen image features; one JSON result.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "fnvlp/comm/comm.hpp"
#include "fnvlp/eval/itm_eval.hpp"
#include "fnvlp/eval/linear_probe.hpp"

namespace fnvlp::eval {

struct EvalOptions {
  std::string checkpoint;  // RUN/checkpoints/step-N, RUN/checkpoints/latest, RUN/best/latest
  std::string data_dir;    // shards to evaluate
  std::string out;         // EVAL.json (rank 0, atomic)
  std::string ranks_out;   // optional: per-query ranks (JSON arrays), for invariance checks
  RetrievalEvalConfig retrieval;
  bool probe = false;
  std::string probe_train_dir;  // probe's training shards; empty: split data_dir by image
  ProbeConfig probe_cfg;
  int64_t threads = 1;  // libtorch and BLAS threads per rank
  // Each shard's sha256 against its manifest before libhdf5 opens it (data.verify=full of the
  // training config); false: sizes only.
  bool verify_checksums = true;
};

// Collective. Returns the JSON written to opt.out (the same on every rank).
nlohmann::json run_evaluation(const Comm& comm, const EvalOptions& opt);

}  // namespace fnvlp::eval
