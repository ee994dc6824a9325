#include "fnvlp/report/report.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
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

// FN table and lambda-vs-threshold data from STATS.h5 (and the run's lambda when present).
json stats_section(const std::string& stats, const std::string& emb_path, const fs::path& data,
                   json& plots, json& notes) {
  // The run's embeddings first (EmbeddingsFile takes the HDF5 lock itself).
  std::unique_ptr<data::EmbeddingsFile> emb;
  if (!emb_path.empty()) emb = std::make_unique<data::EmbeddingsFile>(emb_path);
  std::map<std::string, std::vector<float>> lambdas;
  if (emb && emb->has_lambda())
    for (const char* m : {"image", "text"}) {
      lambdas[m].resize(static_cast<size_t>(emb->size()));
      emb->read_lambda(std::string(m) == "image", 0, emb->size(), lambdas[m].data());
    }
  std::lock_guard<std::mutex> lock(h5::global_mutex());
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
  for (const char* m : {"image", "text"}) {
    const std::string s = m;
    auto i64 = [&](const std::string& name) { return h5::read_dataset<int64_t>(f, name, stats); };
    const auto thr = h5::read_dataset<float>(f, "threshold_" + s, stats);
    const auto fnc_thr = h5::read_dataset<float>(f, "fnc_threshold_" + s, stats);
    const auto n_label = i64("n_label_" + s), c_exact = i64("count_exact_" + s),
               c_exact_l = i64("count_exact_label_" + s), c_fnc = i64("count_fnc_" + s),
               c_fnc_l = i64("count_fnc_label_" + s);
    FNVLP_CHECK(static_cast<int64_t>(thr.size()) == n,
                stats << ":/threshold_" << s << " is not [" << n << "]");
    std::vector<int32_t> label;
    if (emb) label = emb->label();
    auto sum_labelled = [&](const std::vector<int64_t>& v) {
      int64_t t = 0;
      for (int64_t i = 0; i < n; ++i)
        if (label.empty() || label[static_cast<size_t>(i)] >= 0) t += v[static_cast<size_t>(i)];
      return t;
    };
    const int64_t ln = sum_labelled(n_label);
    json mod;
    mod["exact"] = prf(sum_labelled(c_exact), sum_labelled(c_exact_l), ln);
    mod["fnc"] = prf(sum_labelled(c_fnc), sum_labelled(c_fnc_l), ln);
    double e_fnc = 0, n_fnc = 0;
    for (int64_t i = 0; i < n; ++i) {
      const auto u = static_cast<size_t>(i);
      if (std::isfinite(thr[u]) && std::isfinite(fnc_thr[u])) {
        e_fnc += std::fabs(double(fnc_thr[u]) - thr[u]);
        n_fnc += 1;
      }
    }
    mod["fnc"]["mean_abs_error"] = n_fnc > 0 ? e_fnc / n_fnc : 0.0;
    if (lam && h5::exists(f, "count_lambda_" + s)) {
      mod["glofnd"] = prf(sum_labelled(i64("count_lambda_" + s)),
                          sum_labelled(i64("count_lambda_label_" + s)), ln);
    }
    if (lam) {
      const std::vector<float>& lambda = lambdas[s];
      std::ostringstream csv;
      csv << "threshold,lambda,error\n";
      double e = 0, cnt = 0;
      for (int64_t i = 0; i < n; ++i) {
        const auto u = static_cast<size_t>(i);
        if (!std::isfinite(thr[u]) || !std::isfinite(lambda[u])) continue;
        csv << thr[u] << "," << lambda[u] << "," << (double(lambda[u]) - thr[u]) << "\n";
        e += std::fabs(double(lambda[u]) - thr[u]);
        cnt += 1;
      }
      if (!mod.contains("glofnd")) mod["glofnd"] = json::object();
      mod["glofnd"]["mean_abs_error"] = cnt > 0 ? e / cnt : 0.0;
      const std::string csv_name = "lambda_" + s + ".csv";
      write_file(data / csv_name, csv.str());
      plots.push_back({{"file", "lambda_vs_exact_" + s + ".png"},
                       {"kind", "scatter"},
                       {"csv", csv_name},
                       {"x", "threshold"},
                       {"y", "lambda"},
                       {"diagonal", true},
                       {"title", "GloFND lambda vs exact threshold (" + s + " anchors)"},
                       {"xlabel", "exact k-th largest similarity"},
                       {"ylabel", "lambda"}});
      plots.push_back({{"file", "lambda_error_" + s + ".png"},
                       {"kind", "hist"},
                       {"csv", csv_name},
                       {"column", "error"},
                       {"title", "lambda - exact threshold (" + s + " anchors)"},
                       {"xlabel", "error"},
                       {"ylabel", "anchors"}});
    }
    out[m] = mod;
  }
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

json build_report(const Options& opt) {
  FNVLP_CHECK(!opt.out_dir.empty(), "--out is required");
  FNVLP_CHECK(!opt.run_dir.empty() || !opt.campaign_dir.empty(),
              "give --run RUN_DIR and/or --campaign DIR");
  FNVLP_CHECK(opt.stats.empty() || !opt.run_dir.empty(), "--stats needs --run");
  // Plotting tool first: a missing one is a clear error before any work.
  FNVLP_CHECK(fs::exists(opt.python), "plotting needs " << opt.python
                                                        << " with matplotlib (Debian: apt-get "
                                                           "install python3 python3-matplotlib)");
  FNVLP_CHECK(fs::exists(opt.plots_script), "plot script " << opt.plots_script << " not found");
  const fs::path out(opt.out_dir), data = out / "data";
  fs::create_directories(data);
  json report, plots = json::array(), notes = json::array();
  std::vector<std::pair<std::string, std::string>> figures;  // file, caption

  if (!opt.run_dir.empty()) {
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
    for (const auto& sp : kSeries) {
      const std::string csv =
          std::string(sp.file).substr(0, std::string(sp.file).size() - 4) + ".csv";
      const auto present = write_series_csv(rows, sp.keys, data / csv);
      if (present.empty()) {
        notes.push_back(std::string(sp.file) + ": skipped, metrics.jsonl has none of the keys");
        continue;
      }
      json p = {{"file", sp.file}, {"kind", "lines"},   {"csv", csv},       {"x", "step"},
                {"y", present},    {"title", sp.title}, {"xlabel", "step"}, {"ylabel", sp.ylabel}};
      if (sp.alpha_line && std::isfinite(alpha)) p["hline"] = {{"y", alpha}, {"label", "alpha"}};
      plots.push_back(p);
    }
    if (!opt.stats.empty())
      report["stats"] = stats_section(opt.stats, store::newest_epoch_embeddings(run.string()), data,
                                      plots, notes);
  }
  if (!opt.campaign_dir.empty()) report["campaign"] = campaign_table(opt.campaign_dir);

  // Render: plots.py reads data/plots.json and writes the PNGs into REPORT_DIR.
  write_file(data / "plots.json",
             json({{"out", out.string()}, {"data", data.string()}, {"plots", plots}}).dump(2));
  if (!plots.empty()) {
    const std::string cmd =
        "'" + opt.python + "' '" + opt.plots_script + "' '" + (data / "plots.json").string() + "'";
    const int rc = std::system(cmd.c_str());
    FNVLP_CHECK(rc == 0, "plotting failed (exit " << rc << "): " << cmd
                                                  << " (needs Debian's python3-matplotlib)");
    for (const auto& p : plots) {
      FNVLP_CHECK(fs::exists(out / p["file"].get<std::string>()),
                  "plots.py did not write " << (out / p["file"].get<std::string>()).string());
      figures.emplace_back(p["file"].get<std::string>(), p["title"].get<std::string>());
    }
  }
  report["plots"] = plots;
  report["notes"] = notes;
  write_file(out / "report.json", report.dump(2) + "\n");

  // report.html: self-contained apart from the PNGs next to it (relative links).
  std::ostringstream h;
  h << "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>fnvlp report</title>\n"
    << "<style>body{font-family:sans-serif;max-width:1100px;margin:auto}table{border-collapse:"
       "collapse}td,th{border:1px solid #999;padding:3px 8px;text-align:right}"
       "img{max-width:48%;margin:4px}</style></head><body>\n<h1>fnvlp report</h1>\n";
  if (report.contains("run")) {
    h << "<p>Run: <code>" << html_escape(opt.run_dir) << "</code>, " << report["run"]["records"]
      << " metric records.</p>\n";
    const json& last = report["run"]["last"];
    if (!last.empty()) {
      h << "<h2>Final metrics</h2><table><tr>";
      for (auto it = last.begin(); it != last.end(); ++it)
        h << "<th>" << html_escape(it.key()) << "</th>";
      h << "</tr><tr>";
      for (auto it = last.begin(); it != last.end(); ++it)
        h << "<td>"
          << (it.value().is_number() ? fmt(it.value().get<double>())
                                     : html_escape(it.value().dump()))
          << "</td>";
      h << "</tr></table>\n";
    }
  }
  if (report.contains("stats")) {
    const json& s = report["stats"];
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
  if (report.contains("campaign")) {
    const json& c = report["campaign"];
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
    if (!c["missing_eval"].empty())
      h << "<p>Tasks without eval.json: " << html_escape(c["missing_eval"].dump()) << "</p>\n";
  }
  if (!figures.empty()) {
    h << "<h2>Plots</h2>\n";
    for (const auto& [file, caption] : figures)
      h << "<img src=\"" << file << "\" alt=\"" << html_escape(caption) << "\">\n";
  }
  if (!notes.empty()) {
    h << "<h2>Notes</h2><ul>\n";
    for (const auto& n : notes) h << "<li>" << html_escape(n.get<std::string>()) << "</li>\n";
    h << "</ul>\n";
  }
  h << "</body></html>\n";
  write_file(out / "report.html", h.str());
  return report;
}

}  // namespace fnvlp::report
