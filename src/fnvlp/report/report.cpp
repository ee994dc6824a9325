#include "fnvlp/report/report.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <sstream>

#include "fnvlp/core/error.hpp"
#include "fnvlp/data/embeddings.hpp"
#include "fnvlp/data/h5.hpp"
#include "fnvlp/store/run_dir.hpp"

namespace fnvlp::report {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// Telemetry plots: file, title, y label, metrics.jsonl keys (all optional, DESIGN contract).
struct SeriesPlot {
  const char* file;
  const char* title;
  const char* ylabel;
  std::vector<std::string> keys;
  bool alpha_line;
};
const std::vector<SeriesPlot> kSeries = {
    {"loss.png", "Training losses", "loss", {"loss", "itc", "itm", "mlm"}, false},
    {"filtered_frac.png",
     "GloFND/FNC filtered fraction of ITC negatives (line: alpha)",
     "fraction",
     {"filtered_frac_i2t", "filtered_frac_t2i"},
     true},
    {"lambda.png",
     "GloFND lambda over training",
     "lambda",
     {"lambda_image_mean", "lambda_image_p5", "lambda_image_p95", "lambda_text_mean",
      "lambda_text_p5", "lambda_text_p95"},
     false},
    {"fn_quality.png",
     "FN identification vs same-label ground truth",
     "score",
     {"fn_precision", "fn_recall", "fn_f1"},
     false},
    {"batch_fn_rate.png",
     "In-batch false-negative rate (sampler)",
     "fraction of negatives",
     {"batch_fn_rate_image", "batch_fn_rate_label"},
     false},
    {"q.png", "Sampler hardness quantile q (FALCON/GRIT)", "q", {"q_mean", "q_p5", "q_p95"}, false},
    {"falcon_reward.png", "FALCON reward", "reward", {"falcon_reward"}, false},
    {"val.png",
     "Zero-shot validation retrieval",
     "recall (%)",
     {"val_txt_r1", "val_img_r1", "val_r_mean"},
     false},
};

std::string fmt(double v, int prec = 4) {
  if (!std::isfinite(v)) return "n/a";
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(prec);
  os << v;
  return os.str();
}

std::string html_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '<')
      o += "&lt;";
    else if (c == '>')
      o += "&gt;";
    else if (c == '&')
      o += "&amp;";
    else
      o += c;
  }
  return o;
}

void write_file(const fs::path& p, const std::string& content) {
  std::ofstream os(p);
  os << content;
  FNVLP_CHECK(os.good(), "cannot write " << p.string());
}

// Rows of metrics.jsonl: training records carry "loss", validation records "val_r_mean".
std::vector<json> read_metrics(const fs::path& path) {
  std::ifstream in(path);
  FNVLP_CHECK(in.good(), path.string() << ": cannot open (is --run a pretraining run directory?)");
  std::vector<json> rows;
  std::string line;
  for (int64_t no = 1; std::getline(in, line); ++no) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    json j;
    try {
      j = json::parse(line);
    } catch (const std::exception& e) {
      FNVLP_FAIL(path.string() << ": line " << no << " is not JSON: " << e.what());
    }
    FNVLP_CHECK(j.is_object() && j.contains("step") && j["step"].is_number(),
                path.string() << ": line " << no << " has no numeric 'step'");
    rows.push_back(std::move(j));
  }
  return rows;
}

double number_or_nan(const json& j, const std::string& key) {
  return j.contains(key) && j[key].is_number() ? j[key].get<double>()
                                               : std::numeric_limits<double>::quiet_NaN();
}

// One CSV per series plot: step and the keys present in at least one record.
std::vector<std::string> write_series_csv(const std::vector<json>& rows,
                                          const std::vector<std::string>& keys,
                                          const fs::path& csv) {
  std::vector<std::string> present;
  for (const auto& k : keys)
    if (std::any_of(rows.begin(), rows.end(), [&](const json& r) { return r.contains(k); }))
      present.push_back(k);
  if (present.empty()) return present;
  std::ostringstream os;
  os << "step";
  for (const auto& k : present) os << "," << k;
  os << "\n";
  for (const auto& r : rows) {
    bool any = false;
    for (const auto& k : present) any = any || r.contains(k);
    if (!any) continue;
    os << r["step"].get<double>();
    for (const auto& k : present) os << "," << number_or_nan(r, k);
    os << "\n";
  }
  write_file(csv, os.str());
  return present;
}

double config_alpha(const fs::path& run) {
  const fs::path cfg = run / "config.yaml";
  if (!fs::exists(cfg)) return std::numeric_limits<double>::quiet_NaN();
  try {
    const YAML::Node root = YAML::LoadFile(cfg.string());
    if (root["negatives"] && root["negatives"]["alpha"])
      return root["negatives"]["alpha"].as<double>();
  } catch (const std::exception& e) {
    FNVLP_FAIL(cfg.string() << ": cannot read negatives.alpha: " << e.what());
  }
  return std::numeric_limits<double>::quiet_NaN();
}

json prf(int64_t flagged, int64_t true_fn, int64_t label_negatives) {
  const double p = flagged > 0 ? double(true_fn) / double(flagged) : 0.0;
  const double r = label_negatives > 0 ? double(true_fn) / double(label_negatives) : 0.0;
  return {{"flagged", flagged},
          {"true_fn", true_fn},
          {"precision", p},
          {"recall", r},
          {"f1", p + r > 0 ? 2 * p * r / (p + r) : 0.0}};
}

// STATS.h5 and the run's embeddings are read kStatsPiece rows at a time: the report's memory does
// not grow with the number of pairs (a 4M export: tests/integration/report_memory.sh).
constexpr int64_t kStatsPiece = int64_t{1} << 16;
// The lambda-vs-threshold scatter draws every stride-th anchor, at most kScatterPoints of them; the
// error histogram counts every anchor.
constexpr int64_t kScatterPoints = 20000;
constexpr int kErrorBins = 50;

// One modality's FN table (and lambda-vs-threshold plots) from STATS.h5, streamed. `lock` holds
// the HDF5 lock for STATS.h5's calls and is released around the embeddings file's own (it takes
// the lock itself).
json modality_stats(std::unique_lock<std::mutex>& lock, hid_t f, const std::string& stats,
                    const std::string& s, int64_t n, const data::EmbeddingsFile* emb, bool lam,
                    const fs::path& data, json& plots) {
  auto column = [&](const std::string& name) {
    h5::Handle ds = h5::open_dataset(f, name, stats);
    const auto d = h5::dims(ds, stats + ":/" + name);
    FNVLP_CHECK(d.size() == 1 && static_cast<int64_t>(d[0]) == n,
                stats << ":/" << name << " is not [" << n << "]");
    return ds;
  };
  const h5::Handle thr_ds = column("threshold_" + s), fnc_ds = column("fnc_threshold_" + s);
  // Labelled negatives, exact / FNC / GloFND flagged and of them same-label.
  std::vector<std::string> names = {"n_label_",           "count_exact_",     "count_exact_label_",
                                    "count_fnc_",         "count_fnc_label_", "count_lambda_",
                                    "count_lambda_label_"};
  const bool lam_counts = lam && h5::exists(f, "count_lambda_" + s);
  if (!lam_counts) names.resize(5);
  std::vector<h5::Handle> count_ds;
  for (const auto& name : names) count_ds.push_back(column(name + s));
  std::vector<int64_t> sums(names.size(), 0);

  const auto piece = static_cast<size_t>(std::min(n, kStatsPiece));
  std::vector<float> thr(piece), fnc(piece), lambda(lam ? piece : 0);
  std::vector<std::vector<int64_t>> counts(names.size(), std::vector<int64_t>(piece));
  std::vector<int64_t> image_id(emb ? piece : 0);
  std::vector<int32_t> label(emb ? piece : 0);
  // Rows [r0, r0 + rn) of the thresholds (and the run's lambda; with `all`, the counts and labels).
  auto read_piece = [&](int64_t r0, int64_t rn, bool all) {
    const auto row = static_cast<hsize_t>(r0), rows = static_cast<hsize_t>(rn);
    h5::read_rows(thr_ds, H5T_NATIVE_FLOAT, thr.data(), row, rows, stats + ":/threshold_" + s);
    if (all) {
      h5::read_rows(fnc_ds, H5T_NATIVE_FLOAT, fnc.data(), row, rows,
                    stats + ":/fnc_threshold_" + s);
      for (size_t c = 0; c < names.size(); ++c)
        h5::read_rows(count_ds[c], H5T_NATIVE_INT64, counts[c].data(), row, rows,
                      stats + ":/" + names[c] + s);
    }
    if (!emb) return;
    struct Relock {  // STATS.h5's handles close under the lock, even after a throw
      std::unique_lock<std::mutex>& l;
      ~Relock() { l.lock(); }
    };
    lock.unlock();
    const Relock relock{lock};
    if (lam) emb->read_lambda(s == "image", r0, rn, lambda.data());
    if (all) emb->read_columns(r0, rn, image_id.data(), label.data());
  };

  double e_fnc = 0, n_fnc = 0, e_lam = 0, n_lam = 0;
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  const int64_t stride = std::max<int64_t>(1, (n + kScatterPoints - 1) / kScatterPoints);
  std::ostringstream scatter;
  scatter << "threshold,lambda,error\n";
  for (int64_t r0 = 0; r0 < n; r0 += kStatsPiece) {
    const int64_t rn = std::min(kStatsPiece, n - r0);
    read_piece(r0, rn, true);
    for (int64_t i = 0; i < rn; ++i) {
      const auto u = static_cast<size_t>(i);
      // Anchors without a label (label < 0) count in no precision or recall.
      if (label.empty() || label[u] >= 0)
        for (size_t c = 0; c < names.size(); ++c) sums[c] += counts[c][u];
      if (std::isfinite(thr[u]) && std::isfinite(fnc[u])) {
        e_fnc += std::fabs(double(fnc[u]) - thr[u]);
        n_fnc += 1;
      }
      if (!lam || !std::isfinite(thr[u]) || !std::isfinite(lambda[u])) continue;
      const double e = double(lambda[u]) - thr[u];
      e_lam += std::fabs(e);
      n_lam += 1;
      lo = std::min(lo, e);
      hi = std::max(hi, e);
      if ((r0 + i) % stride == 0) scatter << thr[u] << "," << lambda[u] << "," << e << "\n";
    }
  }
  json mod;
  mod["exact"] = prf(sums[1], sums[2], sums[0]);
  mod["fnc"] = prf(sums[3], sums[4], sums[0]);
  mod["fnc"]["mean_abs_error"] = n_fnc > 0 ? e_fnc / n_fnc : 0.0;
  if (lam_counts) mod["glofnd"] = prf(sums[5], sums[6], sums[0]);
  if (!lam) return mod;
  if (!mod.contains("glofnd")) mod["glofnd"] = json::object();
  mod["glofnd"]["mean_abs_error"] = n_lam > 0 ? e_lam / n_lam : 0.0;

  // The error histogram over every anchor: a second pass, bins over [lo, hi].
  std::vector<int64_t> bins(kErrorBins, 0);
  if (n_lam > 0) {
    const double width = hi > lo ? (hi - lo) / kErrorBins : 1.0;
    for (int64_t r0 = 0; r0 < n; r0 += kStatsPiece) {
      const int64_t rn = std::min(kStatsPiece, n - r0);
      read_piece(r0, rn, false);
      for (int64_t i = 0; i < rn; ++i) {
        const auto u = static_cast<size_t>(i);
        if (!std::isfinite(thr[u]) || !std::isfinite(lambda[u])) continue;
        const double e = double(lambda[u]) - thr[u];
        ++bins[static_cast<size_t>(
            std::clamp<int64_t>(static_cast<int64_t>((e - lo) / width), 0, kErrorBins - 1))];
      }
    }
    std::ostringstream hist;
    hist << "lo,hi,count\n";
    for (int b = 0; b < kErrorBins; ++b)
      hist << lo + b * width << "," << lo + (b + 1) * width << "," << bins[size_t(b)] << "\n";
    write_file(data / ("lambda_error_" + s + ".csv"), hist.str());
  }
  const std::string csv_name = "lambda_" + s + ".csv";
  write_file(data / csv_name, scatter.str());
  const std::string shown =
      stride == 1 ? "every anchor"
                  : "1 in " + std::to_string(stride) + " of " + std::to_string(n) + " anchors";
  plots.push_back({{"file", "lambda_vs_exact_" + s + ".png"},
                   {"kind", "scatter"},
                   {"csv", csv_name},
                   {"x", "threshold"},
                   {"y", "lambda"},
                   {"diagonal", true},
                   {"title", "GloFND lambda vs exact threshold (" + s + " anchors; " + shown + ")"},
                   {"xlabel", "exact k-th largest similarity"},
                   {"ylabel", "lambda"}});
  if (n_lam > 0)
    plots.push_back({{"file", "lambda_error_" + s + ".png"},
                     {"kind", "histogram"},
                     {"csv", "lambda_error_" + s + ".csv"},
                     {"title", "lambda - exact threshold (" + s + " anchors)"},
                     {"xlabel", "error"},
                     {"ylabel", "anchors"}});
  return mod;
}

// FN table and lambda-vs-threshold data from STATS.h5 (and the run's lambda when present).
json stats_section(const std::string& stats, const std::string& emb_path, const fs::path& data,
                   json& plots, json& notes) {
  // The run's embeddings first (EmbeddingsFile takes the HDF5 lock itself); labels and lambda are
  // read a piece at a time.
  std::unique_ptr<data::EmbeddingsFile> emb;
  if (!emb_path.empty())
    emb =
        std::make_unique<data::EmbeddingsFile>(emb_path, data::EmbeddingsFile::Columns::kStreamed);
  std::unique_lock<std::mutex> lock(h5::global_mutex());
  h5::Handle f = h5::open_file(stats);
  json out;
  out["file"] = stats;
  out["alpha"] = h5::read_attr_double(f, "alpha", stats);
  out["quantile_error_bound"] = h5::read_attr_double(f, "quantile_error_bound", stats);
  const int64_t n = h5::read_attr_int(f, "n", stats);
  if (emb)
    FNVLP_CHECK(emb->size() == n, emb_path << " has " << emb->size() << " pairs, " << stats
                                           << " was computed over " << n);
  const bool lam = emb && emb->has_lambda();
  for (const char* m : {"image", "text"})
    out[m] = modality_stats(lock, f, stats, m, n, emb.get(), lam, data, plots);
  if (!lam)
    notes.push_back(
        "lambda vs exact threshold: skipped, the run's embeddings have no GloFND "
        "lambda (GloFND did not run)");
  return out;
}

}  // namespace

json campaign_table(const std::string& campaign_dir) {
  const fs::path tasks = fs::path(campaign_dir) / "tasks";
  FNVLP_CHECK(fs::is_directory(tasks), campaign_dir << ": no tasks/ directory (not a campaign)");
  std::vector<fs::path> dirs;
  for (const auto& e : fs::directory_iterator(tasks))
    if (e.is_directory()) dirs.push_back(e.path());
  std::sort(dirs.begin(), dirs.end());
  std::map<std::string, std::map<std::string, std::vector<double>>> by_method;
  std::map<std::string, std::vector<int64_t>> seeds;
  json missing = json::array();
  for (const auto& d : dirs) {
    const fs::path task_json = d / "task.json", eval_json = d / "eval.json";
    FNVLP_CHECK(fs::exists(task_json), task_json.string() << ": missing");
    json task;
    try {
      task = json::parse(std::ifstream(task_json));
    } catch (const std::exception& e) {
      FNVLP_FAIL(task_json.string() << ": not JSON: " << e.what());
    }
    FNVLP_CHECK(task.contains("method") && task["method"].is_string() && task.contains("seed"),
                task_json.string() << ": needs 'method' and 'seed'");
    const std::string method = task["method"];
    if (!fs::exists(eval_json)) {
      missing.push_back(d.filename().string());
      continue;
    }
    json ev;
    try {
      ev = json::parse(std::ifstream(eval_json));
    } catch (const std::exception& e) {
      FNVLP_FAIL(eval_json.string() << ": not JSON: " << e.what());
    }
    seeds[method].push_back(task["seed"].get<int64_t>());
    for (auto it = ev.begin(); it != ev.end(); ++it)
      if (it.value().is_number()) by_method[method][it.key()].push_back(it.value().get<double>());
  }
  json rows = json::array();
  for (const auto& [method, keys] : by_method) {
    json row;
    row["method"] = method;
    row["seeds"] = seeds[method];
    for (const auto& [key, vals] : keys) {
      double mean = 0;
      for (double v : vals) mean += v;
      mean /= double(vals.size());
      double var = 0;
      for (double v : vals) var += (v - mean) * (v - mean);
      const double sd = vals.size() > 1 ? std::sqrt(var / double(vals.size() - 1)) : 0.0;
      row[key] = {{"mean", mean}, {"std", sd}, {"n", vals.size()}};
    }
    rows.push_back(row);
  }
  return {{"dir", campaign_dir}, {"methods", rows}, {"missing_eval", missing}};
}

namespace {

// The papers' claims over a campaign: analysis/claims.py computes the verdicts and writes its
// plots' CSVs into `data`; their specs join `plots`, tagged with the claim they belong to.
json claims_section(const Options& opt, const fs::path& data, json& plots) {
  const fs::path script = !opt.claims_script.empty()
                              ? fs::path(opt.claims_script)
                              : fs::path(opt.plots_script).parent_path() / "claims.py";
  FNVLP_CHECK(fs::exists(script), "claims script " << script.string() << " not found");
  const fs::path out = data / "claims.json";
  const std::string cmd = "'" + opt.python + "' '" + script.string() + "' --campaign '" +
                          opt.campaign_dir + "' --out '" + out.string() + "' --md '" +
                          (data.parent_path() / "claims.md").string() + "' --plots '" +
                          data.string() + "' >/dev/null";
  const int rc = std::system(cmd.c_str());
  FNVLP_CHECK(rc == 0, "claims failed (exit " << rc << "): " << cmd);
  json doc;
  try {
    doc = json::parse(std::ifstream(out));
  } catch (const std::exception& e) {
    FNVLP_FAIL(out.string() << ": not JSON: " << e.what());
  }
  FNVLP_CHECK(doc.contains("claims") && doc["claims"].is_object(), out.string()
                                                                       << ": no 'claims' object");
  for (auto it = doc["claims"].begin(); it != doc["claims"].end(); ++it)
    if (it.value().contains("plot")) {
      json p = it.value()["plot"];
      p["claim"] = it.key();
      plots.push_back(p);
    }
  return doc;
}

// Mean of `key` over the training records of the last epoch that logged it (NaN if none).
double last_epoch_mean(const std::vector<json>& rows, const std::string& key) {
  int64_t epoch = -1;
  for (const auto& r : rows)
    if (std::isfinite(number_or_nan(r, key)) && r.contains("epoch"))
      epoch = std::max<int64_t>(epoch, r["epoch"].get<int64_t>());
  double sum = 0, n = 0;
  for (const auto& r : rows)
    if (r.contains("epoch") && r["epoch"].get<int64_t>() == epoch &&
        std::isfinite(number_or_nan(r, key))) {
      sum += r[key].get<double>();
      n += 1;
    }
  return n > 0 ? sum / n : std::numeric_limits<double>::quiet_NaN();
}

std::string config_string(const fs::path& run, const char* section, const char* key) {
  try {
    const YAML::Node root = YAML::LoadFile((run / "config.yaml").string());
    if (root[section] && root[section][key]) return root[section][key].as<std::string>();
  } catch (const std::exception&) {  // the summary says "unknown"; config_alpha names bad files
  }
  return "unknown";
}

// What ran and what it found, for the summary at the top of the page.
json run_facts(const fs::path& run, const std::vector<json>& rows, const json& summary) {
  json f;
  f["method"] = config_string(run, "negatives", "method");
  f["sampler"] = config_string(run, "sampler", "kind");
  for (const char* k : {"steps", "epochs_completed", "world_size", "samples_per_second", "status"})
    if (summary.contains(k)) f[k] = summary[k];
  const json* first = nullptr;
  const json* last = nullptr;
  const json* val = nullptr;
  const json* best = nullptr;
  for (const auto& r : rows) {
    if (r.contains("loss")) {
      if (!first) first = &r;
      last = &r;
    }
    if (std::isfinite(number_or_nan(r, "val_r_mean"))) {
      val = &r;
      if (!best || r["val_r_mean"].get<double>() > (*best)["val_r_mean"].get<double>()) best = &r;
    }
  }
  for (const char* k : {"loss", "itc", "itm", "mlm"})
    if (first && first->contains(k) && last->contains(k)) f["loss"][k] = {(*first)[k], (*last)[k]};
  if (first) f["loss_steps"] = {(*first)["step"], (*last)["step"]};
  if (val) {
    f["val_last"] = *val;
    f["val_best"] = *best;
    f["val_records"] = std::count_if(rows.begin(), rows.end(), [](const json& r) {
      return std::isfinite(number_or_nan(r, "val_r_mean"));
    });
  }
  for (const char* k :
       {"filtered_frac_i2t", "filtered_frac_t2i", "batch_fn_rate_label", "lambda_image_mean",
        "lambda_text_mean", "fn_precision", "fn_recall", "fn_f1", "q_mean"}) {
    const double v = last_epoch_mean(rows, k);
    if (std::isfinite(v)) f["last_epoch"][k] = v;
  }
  return f;
}

// The long-horizon summary (Options::horizon) as {"sentence", "table": absolute path}, or null.
json horizon_note(const Options& opt) {
  if (opt.horizon == "none") return nullptr;
  const fs::path file = !opt.horizon.empty() ? fs::path(opt.horizon)
                                             : fs::path(opt.plots_script).parent_path() /
                                                   "results" / "long_horizon.json";
  if (!fs::exists(file)) return nullptr;
  json doc;
  try {
    doc = json::parse(std::ifstream(file));
  } catch (const std::exception& e) {
    FNVLP_FAIL(file.string() << ": not JSON: " << e.what());
  }
  FNVLP_CHECK(doc.contains("sentence") && doc["sentence"].is_string() && doc.contains("table") &&
                  doc["table"].is_string(),
              file.string() << ": expected a 'sentence' and a 'table' (analysis/horizon.py)");
  const fs::path table = fs::absolute(file.parent_path() / doc["table"].get<std::string>());
  return {{"sentence", doc["sentence"]}, {"table", table.lexically_normal().string()}};
}

std::string horizon_html(const json& note) {
  return "A longer run: " + html_escape(note["sentence"].get<std::string>()) +
         " <a href=\"file://" + html_escape(note["table"].get<std::string>()) +
         "\">Table per epoch.</a>";
}

std::string summary_html(const json& report) {
  const json& f = report["run"]["facts"];
  std::ostringstream h;
  auto num = [](const json& v, int prec) { return fmt(v.get<double>(), prec); };
  h << "<h2>Summary</h2>\n<ul>\n<li>Ran: negatives <b>" << html_escape(f["method"])
    << "</b>, sampler <b>" << html_escape(f["sampler"]) << "</b>";
  if (f.contains("steps")) h << ", " << f["steps"] << " steps";
  if (f.contains("epochs_completed")) h << " (" << f["epochs_completed"] << " epochs completed)";
  if (f.contains("world_size")) h << " on " << f["world_size"] << " ranks";
  if (f.contains("samples_per_second"))
    h << ", " << num(f["samples_per_second"], 1) << " samples/s";
  if (f.contains("status")) h << "; status " << html_escape(f["status"]);
  h << ".</li>\n";
  if (f.contains("loss")) {
    h << "<li>Training loss from step " << f["loss_steps"][0] << " to " << f["loss_steps"][1]
      << ":";
    const char* sep = " ";
    for (const auto& [k, v] : f["loss"].items()) {
      h << sep << k << " " << num(v[0], 3) << " &rarr; " << num(v[1], 3);
      sep = ", ";
    }
    h << ".</li>\n";
  }
  if (f.contains("val_last")) {
    const json& v = f["val_last"];
    // A validation record may lack keys (older runs): those print as n/a.
    auto val = [&v](const char* k, int prec) {
      return v.contains(k) && v[k].is_number() ? fmt(v[k].get<double>(), prec) : "n/a";
    };
    h << "<li>Zero-shot retrieval on the validation split (" << val("val_pairs", 0) << " pairs, "
      << f["val_records"] << " evaluations): r_mean <b>" << val("val_r_mean", 2) << "</b> at step "
      << v["step"] << " (text R@1/5/10 " << val("val_txt_r1", 1) << "/" << val("val_txt_r5", 1)
      << "/" << val("val_txt_r10", 1) << ", image " << val("val_img_r1", 1) << "/"
      << val("val_img_r5", 1) << "/" << val("val_img_r10", 1) << "); best "
      << num(f["val_best"]["val_r_mean"], 2) << " at step " << f["val_best"]["step"] << ".</li>\n";
  }
  const json le = f.value("last_epoch", json::object());
  if (le.contains("filtered_frac_i2t") && le.contains("filtered_frac_t2i")) {
    h << "<li>Negatives filtered as false negatives per anchor in the last epoch: "
      << num(le["filtered_frac_i2t"], 4) << " (image anchors), " << num(le["filtered_frac_t2i"], 4)
      << " (text)";
    if (report["run"].contains("alpha")) h << " against alpha " << num(report["run"]["alpha"], 4);
    h << ".</li>\n";
  }
  // GloFND's numbers of a short run are far from alpha and from the exact quantile: what a run at
  // the paper's epoch count found goes beside them.
  const bool glofnd =
      f["method"] == "glofnd" || (report.contains("stats") && report["stats"].contains("image") &&
                                  report["stats"]["image"].contains("glofnd"));
  if (glofnd && report.contains("horizon"))
    h << "<li>" << horizon_html(report["horizon"]) << "</li>\n";
  if (report.contains("stats")) {
    const json& s = report["stats"];
    for (const char* m : {"image", "text"}) {
      if (!s.contains(m)) continue;
      const json& x = s[m];
      h << "<li>" << (std::string(m) == "image" ? "Image" : "Text")
        << " anchors, against the exact per-anchor (1-alpha)-quantile (alpha " << num(s["alpha"], 4)
        << "): ";
      if (x.contains("glofnd") && x["glofnd"].contains("mean_abs_error"))
        h << "GloFND's lambda off by " << num(x["glofnd"]["mean_abs_error"], 4) << " on average, ";
      h << "FNC's in-batch threshold by " << num(x["fnc"]["mean_abs_error"], 4)
        << ". False-negative F1 against the labels:";
      const char* sep = " ";
      for (const char* method : {"glofnd", "fnc", "exact"})
        if (x.contains(method) && x[method].contains("f1")) {
          h << sep << method << " " << num(x[method]["f1"], 3) << " (P "
            << num(x[method]["precision"], 3) << ", R " << num(x[method]["recall"], 3) << ")";
          sep = "; ";
        }
      h << ".</li>\n";
    }
  }
  if (le.contains("batch_fn_rate_label"))
    h << "<li>In-batch rate of known false negatives (same-label negatives) drawn by the sampler, "
         "last epoch: "
      << num(le["batch_fn_rate_label"], 4) << ".</li>\n";
  if (le.contains("q_mean"))
    h << "<li>Mean hardness quantile q drawn in the last epoch: " << num(le["q_mean"], 3)
      << ".</li>\n";
  h << "</ul>\n";
  return h.str();
}

}  // namespace

namespace {

void check_options(const Options& opt) {
  FNVLP_CHECK(!opt.out_dir.empty(), "--out is required");
  FNVLP_CHECK(!opt.run_dir.empty() || !opt.campaign_dir.empty(),
              "give --run RUN_DIR and/or --campaign DIR");
  FNVLP_CHECK(opt.stats.empty() || !opt.run_dir.empty(), "--stats needs --run");
  // Plotting tool first: a missing one is a clear error before any work.
  FNVLP_CHECK(fs::exists(opt.python), "plotting needs " << opt.python
                                                        << " with matplotlib (Debian: apt-get "
                                                           "install python3 python3-matplotlib)");
  FNVLP_CHECK(fs::exists(opt.plots_script), "plot script " << opt.plots_script << " not found");
}

// The run's section (metrics.jsonl, summary.json, config) and its series plots; with --stats, the
// false-negative identification section.
void add_run(const Options& opt, const fs::path& data, json& report, json& plots, json& notes) {
  const fs::path run(opt.run_dir);
  const auto rows = read_metrics(run / "metrics.jsonl");
  report["run"] = {{"dir", opt.run_dir}, {"records", rows.size()}};
  if (fs::exists(run / "summary.json")) {
    try {
      report["run"]["summary"] = json::parse(std::ifstream(run / "summary.json"));
    } catch (const std::exception& e) {
      FNVLP_FAIL((run / "summary.json").string() << ": not JSON: " << e.what());
    }
  }
  const double alpha = config_alpha(run);
  if (std::isfinite(alpha)) report["run"]["alpha"] = alpha;
  json last;
  for (const auto& r : rows)
    for (auto it = r.begin(); it != r.end(); ++it) last[it.key()] = it.value();
  report["run"]["last"] = last;
  report["run"]["facts"] = run_facts(run, rows, report["run"].value("summary", json::object()));
  for (const auto& sp : kSeries) {
    const std::string csv =
        std::string(sp.file).substr(0, std::string(sp.file).size() - 4) + ".csv";
    const auto present = write_series_csv(rows, sp.keys, data / csv);
    if (present.empty()) {
      notes.push_back(std::string(sp.file) + ": skipped, metrics.jsonl has none of the keys");
      continue;
    }
    size_t points = 0;
    for (const auto& k : present)
      points = std::max<size_t>(points, std::count_if(rows.begin(), rows.end(), [&](const json& r) {
                                  return std::isfinite(number_or_nan(r, k));
                                }));
    if (points < 2) {
      notes.push_back(std::string(sp.file) + ": skipped, a single logged point");
      continue;
    }
    json p = {{"file", sp.file}, {"kind", "lines"},   {"csv", csv},       {"x", "step"},
              {"y", present},    {"title", sp.title}, {"xlabel", "step"}, {"ylabel", sp.ylabel}};
    if (sp.alpha_line && std::isfinite(alpha)) p["hline"] = {{"y", alpha}, {"label", "alpha"}};
    plots.push_back(p);
  }
  if (!opt.stats.empty())
    report["stats"] =
        stats_section(opt.stats, store::newest_epoch_embeddings(run.string()), data, plots, notes);
}

// plots.py reads data/plots.json and writes the PNGs into the report directory. Returns the
// figures of the "Plots" section (file, caption): those not shown under their claim.
std::vector<std::pair<std::string, std::string>> render_plots(const Options& opt,
                                                              const fs::path& out,
                                                              const fs::path& data,
                                                              const json& plots) {
  std::vector<std::pair<std::string, std::string>> figures;
  write_file(data / "plots.json",
             json({{"out", out.string()}, {"data", data.string()}, {"plots", plots}}).dump(2));
  if (plots.empty()) return figures;
  const std::string cmd =
      "'" + opt.python + "' '" + opt.plots_script + "' '" + (data / "plots.json").string() + "'";
  const int rc = std::system(cmd.c_str());
  FNVLP_CHECK(rc == 0, "plotting failed (exit " << rc << "): " << cmd
                                                << " (needs Debian's python3-matplotlib)");
  for (const auto& p : plots) {
    FNVLP_CHECK(fs::exists(out / p["file"].get<std::string>()),
                "plots.py did not write " << (out / p["file"].get<std::string>()).string());
    if (!p.contains("claim"))
      figures.emplace_back(p["file"].get<std::string>(), p["title"].get<std::string>());
  }
  return figures;
}

void stats_html(std::ostream& h, const json& s) {
  h << "<h2>False-negative identification (STATS.h5, alpha " << s["alpha"]
    << ")</h2>\n<table><tr><th>anchors</th><th>method</th><th>flagged</th><th>precision</th>"
       "<th>recall</th><th>F1</th><th>mean |threshold error|</th></tr>\n";
  for (const char* m : {"image", "text"})
    for (const char* method : {"exact", "glofnd", "fnc"}) {
      if (!s[m].contains(method) || !s[m][method].contains("precision")) continue;
      const json& r = s[m][method];
      h << "<tr><td>" << m << "</td><td>" << method << "</td><td>" << r["flagged"] << "</td><td>"
        << fmt(r["precision"]) << "</td><td>" << fmt(r["recall"]) << "</td><td>" << fmt(r["f1"])
        << "</td><td>"
        << (r.contains("mean_abs_error") ? fmt(r["mean_abs_error"].get<double>()) : "-")
        << "</td></tr>\n";
    }
  h << "</table>\n";
}

void claims_html(std::ostream& h, const json& report) {
  h << "<h2>The papers' false-negative claims</h2>\n<p>Each verdict is judged seed by seed: "
       "held when every seed's value lies on the claimed side of every seed's value of the "
       "other method, not held when every one lies on the other side, otherwise "
       "inconclusive at this spread.</p>\n";
  for (const auto& [cid, c] : report["claims"]["claims"].items()) {
    h << "<h3>(" << html_escape(cid) << ") " << html_escape(c["claim"].get<std::string>())
      << "</h3>\n<p><b>Verdict: " << html_escape(c["verdict"].get<std::string>()) << "</b>";
    if (c.contains("horizon"))
      h << "; judged at every epoch: " << html_escape(c["horizon"]["verdict"].get<std::string>());
    h << "</p>\n";
    if ((cid == "a" || cid == "b") && report.contains("horizon"))
      h << "<p>" << horizon_html(report["horizon"]) << "</p>\n";
    if (const json table = c.value("table", json::array()); !table.empty()) {
      h << "<table><tr><th>quantity</th><th>mean &plusmn; std</th><th>per seed</th></tr>\n";
      for (const auto& t : table) {
        std::string seeds;
        for (const auto& [s, v] : t["seeds"].items())
          seeds += (seeds.empty() ? "" : ", ") + ("s" + s + " " + fmt(v.get<double>()));
        h << "<tr><td style=\"text-align:left\">" << html_escape(t["quantity"].get<std::string>())
          << "</td><td>" << fmt(t["mean"].get<double>()) << " &plusmn; "
          << fmt(t["std"].get<double>()) << "</td><td>" << seeds << "</td></tr>\n";
      }
      h << "</table>\n";
    }
    if (c.contains("plot"))
      h << "<img src=\"" << html_escape(c["plot"]["file"].get<std::string>()) << "\" alt=\""
        << html_escape(c["plot"]["title"].get<std::string>()) << "\">\n";
  }
}

void campaign_html(std::ostream& h, const json& c) {
  const std::vector<std::string> keys = {"txt_r1", "txt_r5",  "txt_r10", "img_r1",
                                         "img_r5", "img_r10", "r_mean"};
  h << "<h2>Campaign retrieval (mean &plusmn; std over seeds)</h2>\n<table><tr><th>method</th>"
       "<th>seeds</th>";
  for (const auto& k : keys) h << "<th>" << k << "</th>";
  h << "</tr>\n";
  for (const auto& row : c["methods"]) {
    h << "<tr><td>" << html_escape(row["method"].get<std::string>()) << "</td><td>"
      << row["seeds"].size() << "</td>";
    for (const auto& k : keys)
      h << "<td>"
        << (row.contains(k) ? fmt(row[k]["mean"], 2) + " &plusmn; " + fmt(row[k]["std"], 2) : "-")
        << "</td>";
    h << "</tr>\n";
  }
  h << "</table>\n";
  if (!c.value("missing_eval", json::array()).empty())
    h << "<p>Tasks without eval.json: " << html_escape(c["missing_eval"].dump()) << "</p>\n";
}

// One row per metric (nested ones such as phase_ms flattened): a laptop window holds it.
void last_metrics_html(std::ostream& h, const json& last) {
  h << "<h2>Last logged value of every metric</h2>\n<table><tr><th>metric</th><th>value</th>"
       "</tr>\n";
  for (const auto& [k, v] : last.items()) {
    if (v.is_number())
      h << "<tr><td style=\"text-align:left\">" << html_escape(k) << "</td><td>"
        << fmt(v.get<double>()) << "</td></tr>\n";
    else if (v.is_object())
      for (const auto& [k2, v2] : v.items())
        if (v2.is_number())
          h << "<tr><td style=\"text-align:left\">" << html_escape(k + "." + k2) << "</td><td>"
            << fmt(v2.get<double>()) << "</td></tr>\n";
  }
  h << "</table>\n";
}

// report.html: self-contained apart from the PNGs next to it (relative links).
std::string report_html(const Options& opt, const json& report,
                        const std::vector<std::pair<std::string, std::string>>& figures,
                        const json& notes) {
  std::ostringstream h;
  h << "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>fnvlp report</title>\n"
    << "<style>body{font-family:sans-serif;max-width:1100px;margin:auto}table{border-collapse:"
       "collapse}td,th{border:1px solid #999;padding:3px 8px;text-align:right}"
       "img{max-width:48%;margin:4px}</style></head><body>\n<h1>fnvlp report</h1>\n";
  if (report.contains("run")) {
    h << "<p>Run: <code>" << html_escape(opt.run_dir) << "</code>, " << report["run"]["records"]
      << " metric records.</p>\n"
      << summary_html(report);
  }
  if (report.contains("stats")) stats_html(h, report["stats"]);
  if (report.contains("claims")) claims_html(h, report);
  if (report.contains("campaign")) campaign_html(h, report["campaign"]);
  if (!figures.empty()) {
    h << "<h2>Plots</h2>\n";
    for (const auto& [file, caption] : figures)
      h << "<img src=\"" << file << "\" alt=\"" << html_escape(caption) << "\">\n";
  }
  if (report.contains("run") && !report["run"]["last"].empty())
    last_metrics_html(h, report["run"]["last"]);
  if (!notes.empty()) {
    h << "<details><summary>Notes (" << notes.size() << ")</summary><ul>\n";
    for (const auto& n : notes) h << "<li>" << html_escape(n.get<std::string>()) << "</li>\n";
    h << "</ul></details>\n";
  }
  h << "</body></html>\n";
  return h.str();
}

}  // namespace

json build_report(const Options& opt) {
  check_options(opt);
  const fs::path out(opt.out_dir), data = out / "data";
  fs::create_directories(data);
  json report, plots = json::array(), notes = json::array();
  if (!opt.run_dir.empty()) add_run(opt, data, report, plots, notes);
  if (!opt.campaign_dir.empty()) {
    report["campaign"] = campaign_table(opt.campaign_dir);
    report["claims"] = claims_section(opt, data, plots);
  }
  if (const json note = horizon_note(opt); !note.is_null()) report["horizon"] = note;
  const auto figures = render_plots(opt, out, data, plots);
  report["plots"] = plots;
  report["notes"] = notes;
  write_file(out / "report.json", report.dump(2) + "\n");
  write_file(out / "report.html", report_html(opt, report, figures, notes));
  return report;
}

}  // namespace fnvlp::report
