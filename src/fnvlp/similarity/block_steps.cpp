#include "fnvlp/similarity/block_steps.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <unordered_set>

#include "fnvlp/core/error.hpp"
#include "fnvlp/core/progress.hpp"

namespace fnvlp::similarity {

namespace {

// Groups (key, column) pairs collected in ascending column order: a stable sort by key keeps each
// group's columns sorted.
ColumnGroups group_columns(std::vector<std::pair<int64_t, int64_t>> keyed) {
  std::stable_sort(keyed.begin(), keyed.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  ColumnGroups g;
  const auto n = static_cast<int64_t>(keyed.size());
  g.cols.resize(keyed.size());
  for (int64_t b = 0, e; b < n; b = e) {
    const int64_t v = keyed[static_cast<size_t>(b)].first;
    for (e = b; e < n && keyed[static_cast<size_t>(e)].first == v; ++e)
      g.cols[static_cast<size_t>(e)] = keyed[static_cast<size_t>(e)].second;
    g.range[v] = {b, e};
  }
  return g;
}

}  // namespace

void check_params(const Params& p, int64_t dim) {
  FNVLP_CHECK(p.alpha > 0.0 && p.alpha <= 1.0, "--alpha must be in (0, 1], got " << p.alpha);
  FNVLP_CHECK(p.quantiles >= 2, "--quantiles must be >= 2, got " << p.quantiles);
  FNVLP_CHECK(p.bins >= 2, "histogram bins must be >= 2, got " << p.bins);
  FNVLP_CHECK(p.tile >= 1 && p.row_block >= 1, "tile and row block must be >= 1");
  FNVLP_CHECK(p.device_tile >= 1 && p.device_memory_mb >= 1,
              "device tile and device memory budget must be >= 1");
  FNVLP_CHECK(p.memory_mb >= 1, "memory budget must be >= 1 MiB");
  FNVLP_CHECK(dim >= 1, "embedding dimension must be >= 1");
}

void check_finite(const float* v, int64_t rows, int64_t dim, int64_t row0, const char* what) {
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t k = 0; k < dim; ++k)
      FNVLP_CHECK(std::isfinite(v[i * dim + k]), what << " embedding of pair " << row0 + i
                                                      << " has a non-finite value at column " << k);
}

AnchorColumns scan_columns(int64_t row0, int64_t rows, int64_t n_cols, int64_t tile, int64_t sample,
                           const ColumnReader& read_columns, const Params& p, RowStats& out) {
  AnchorColumns a;
  a.id.resize(static_cast<size_t>(rows));
  a.batch.resize(a.id.size());
  a.label.resize(a.id.size());
  if (rows > 0) read_columns(row0, rows, a.id.data(), a.label.data(), a.batch.data());
  a.sample = sample;
  a.stride = sample > 0 ? n_cols / sample : 1;
  a.sample_ids.resize(static_cast<size_t>(sample));
  // Counts of the anchors' own ids and labels only, their positives and FNC batches as column
  // lists, and the sample's ids.
  std::unordered_map<int64_t, int64_t> per_id;
  std::unordered_map<int32_t, int64_t> per_label;
  std::map<std::pair<int64_t, int32_t>, int64_t> per_id_label;
  std::unordered_set<int64_t> own_batches;
  for (int64_t i = 0; i < rows; ++i) {
    const auto u = static_cast<size_t>(i);
    per_id[a.id[u]] = 0;
    if (a.label[u] >= 0) {
      per_label[a.label[u]] = 0;
      per_id_label[{a.id[u], a.label[u]}] = 0;
    }
    if (a.batch[u] >= 0) own_batches.insert(a.batch[u]);
  }
  std::vector<int64_t> tile_id(static_cast<size_t>(tile)), tile_batch(tile_id.size());
  std::vector<int32_t> tile_label(tile_id.size());
  std::vector<std::pair<int64_t, int64_t>> pos_keyed, bat_keyed;  // (image_id | batch, column)
  for (int64_t c0 = 0; rows > 0 && c0 < n_cols; c0 += tile) {
    progress("simstat: counting negatives");
    const int64_t tc = std::min(tile, n_cols - c0);
    read_columns(c0, tc, tile_id.data(), tile_label.data(), tile_batch.data());
    for (int64_t j = 0; j < tc; ++j) {
      const auto u = static_cast<size_t>(j);
      const int64_t c = c0 + j, id = tile_id[u];
      const int32_t lab = tile_label[u];
      const auto it = per_id.find(id);
      if (it != per_id.end()) {
        ++it->second;
        pos_keyed.emplace_back(id, c);
        if (lab >= 0) {
          const auto il = per_id_label.find({id, lab});
          if (il != per_id_label.end()) ++il->second;
        }
      }
      if (lab >= 0) {
        const auto il = per_label.find(lab);
        if (il != per_label.end()) ++il->second;
      }
      if (tile_batch[u] >= 0 && own_batches.count(tile_batch[u]))
        bat_keyed.emplace_back(tile_batch[u], c);
      if (sample > 0 && c % a.stride == 0 && c / a.stride < sample)
        a.sample_ids[static_cast<size_t>(c / a.stride)] = id;
    }
  }
  a.k.resize(static_cast<size_t>(rows));
  for (int64_t i = 0; i < rows; ++i) {
    const auto u = static_cast<size_t>(i);
    const int64_t n_neg = n_cols - per_id[a.id[u]];
    const int64_t n_lab =
        a.label[u] >= 0 ? per_label[a.label[u]] - per_id_label[{a.id[u], a.label[u]}] : 0;
    out.n_neg.push_back(n_neg);
    out.n_label.push_back(n_lab);
    a.k[u] = target_rank(p.alpha, n_neg);
    a.k_max = std::max(a.k_max, a.k[u]);
  }
  if (!p.gemm_only) {
    a.by_id = group_columns(std::move(pos_keyed));
    a.by_batch = group_columns(std::move(bat_keyed));
  }
  return a;
}

BlockPlan plan_blocks(const Params& p, int64_t row0, int64_t rows, int64_t per_row_bytes,
                      int64_t budget_bytes) {
  BlockPlan b;
  b.row0 = row0;
  b.rows = rows;
  b.block = std::clamp<int64_t>(budget_bytes / per_row_bytes, 1, std::max<int64_t>(p.row_block, 1));
  b.whole = b.block >= kGemmRows;
  if (b.whole) b.block = b.block / kGemmRows * kGemmRows;
  return b;
}

std::vector<float> read_sample(int64_t m, int64_t stride, int64_t dim,
                               const CandidateReader& read_candidates,
                               const StridedReader& read_strided) {
  std::vector<float> sample(static_cast<size_t>(m * dim));
  if (m == 0) return sample;
  if (read_strided)
    read_strided(0, stride, m, sample.data());
  else
    for (int64_t j = 0; j < m; ++j) read_candidates(j * stride, 1, sample.data() + j * dim);
  for (int64_t j = 0; j < m; ++j)
    check_finite(sample.data() + j * dim, 1, dim, j * stride, "candidate");
  return sample;
}

}  // namespace fnvlp::similarity
