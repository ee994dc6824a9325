#pragma once
// fnvlp-report: one HTML page (report.html, relative PNG links) and report.json from a pretraining
// run (metrics.jsonl, config.yaml, embeddings), an optional STATS.h5 of fnvlp-simstat and an
// optional campaign directory (layout of issue 7; its claims page from analysis/claims.py, issue
// 31). Numbers are computed here; the PNGs are drawn
// by analysis/plots.py (Debian's python3 + matplotlib, Agg backend, no network) from CSV files
// under REPORT_DIR/data/ and a plot list REPORT_DIR/data/plots.json.
#include <nlohmann/json.hpp>
#include <string>

namespace fnvlp::report {

struct Options {
  std::string run_dir;  // optional when campaign_dir is given
  std::string stats;    // STATS.h5 (optional)
  std::string campaign_dir;
  std::string out_dir;
  std::string python = "/usr/bin/python3";
  std::string plots_script;   // analysis/plots.py
  std::string claims_script;  // analysis/claims.py (default: beside plots_script)
  // What the long-horizon GloFND arm found (analysis/horizon.py --summary: a sentence and its
  // table), stated beside GloFND's numbers so a short run's gap to alpha is not read as a bug.
  // Default: results/long_horizon.json beside plots_script; "none" or a missing file: not shown.
  std::string horizon;
};

// Writes the report and returns report.json's content. Throws fnvlp::Error naming the file and
// the record on bad input, and when the plotting tool is missing.
nlohmann::json build_report(const Options& opt);

// Campaign retrieval table: per method, mean and sample std over seeds of every eval.json key.
nlohmann::json campaign_table(const std::string& campaign_dir);

}  // namespace fnvlp::report
