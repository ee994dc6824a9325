#pragma once
// The steps of anchor_stats (simstat.hpp) that its host paths (simstat.cpp) and its device path
// (device_path.cpp) share: one pass over the columns' ids, labels and batches for what the anchors
// need of them, the anchors' blocks, and the per-block state uploaded to and results downloaded
// from the execution space.
#include <cstdint>
#include <unordered_map>
#include <utility>
#include <vector>

#include "fnvlp/similarity/kernels.hpp"
#include "fnvlp/similarity/simstat.hpp"
#include "fnvlp/similarity/spaces.hpp"

namespace fnvlp::similarity {

void check_params(const Params& p, int64_t dim);

// A NaN would silently fall out of every comparison and break the counts: reject it by row.
void check_finite(const float* v, int64_t rows, int64_t dim, int64_t row0, const char* what);

// Column ids grouped by a key (image_id, FNC batch), each group sorted by column: a row's positives
// and its batch become one range [begin, end) that the tiles walk in order (accumulate_tile).
struct ColumnGroups {
  std::vector<int64_t> cols;
  std::unordered_map<int64_t, std::pair<int64_t, int64_t>> range;
  std::pair<int64_t, int64_t> of(int64_t key) const {
    const auto it = range.find(key);
    return it == range.end() ? std::pair<int64_t, int64_t>{0, 0} : it->second;
  }
};

// What the anchors [row0, row0 + rows) need of the columns, from one pass over them a tile at a
// time: their own ids, labels and batches, their target ranks k (out.n_neg and out.n_label are
// filled on the way), their positives and FNC batches as column groups (unless gemm_only), and
// the image_ids of the starting-threshold sample (`sample` candidates 0, stride, 2 stride, ...).
struct AnchorColumns {
  std::vector<int64_t> id, batch, k;
  std::vector<int32_t> label;
  int64_t k_max = 1;
  int64_t sample = 0, stride = 1;
  std::vector<int64_t> sample_ids;
  ColumnGroups by_id, by_batch;
};
AnchorColumns scan_columns(int64_t row0, int64_t rows, int64_t n_cols, int64_t tile, int64_t sample,
                           const ColumnReader& read_columns, const Params& p, RowStats& out);

// The anchors' blocks: at most `block` rows each. A block of at least kGemmRows rows is a whole
// number of GEMM blocks and ends at a global multiple of its size (a rank's first may be
// shorter), so that only a rank's first and last GEMM blocks are partial (similarity_blocks).
struct BlockPlan {
  int64_t row0 = 0, rows = 0, block = 1;
  bool whole = false;
  // Rows of the block that starts at anchor b0 (relative to row0).
  int64_t rows_at(int64_t b0) const {
    const int64_t g = row0 + b0;
    const int64_t end = whole ? (g / block + 1) * block : g + block;
    return std::min(end, row0 + rows) - g;
  }
};
// Rows per block within budget_bytes at per_row_bytes each, at most p.row_block.
BlockPlan plan_blocks(const Params& p, int64_t row0, int64_t rows, int64_t per_row_bytes,
                      int64_t budget_bytes);

// The starting-threshold sample's embeddings (candidates 0, stride, ...; `m` of them).
std::vector<float> read_sample(int64_t m, int64_t stride, int64_t dim,
                               const CandidateReader& read_candidates,
                               const StridedReader& read_strided);

// Copies a host range into a view of the execution space (a no-op copy on Serial).
template <typename T, typename View>
void upload(const View& dst, const T* src, int64_t n) {
  auto mirror = Kokkos::create_mirror_view(dst);
  for (int64_t i = 0; i < n; ++i) mirror(i) = src[i];
  Kokkos::deep_copy(dst, mirror);
}

template <typename T, typename View>
void download_append(std::vector<T>& dst, const View& src, int64_t n) {
  auto mirror = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), src);
  for (int64_t i = 0; i < n; ++i) dst.push_back(mirror(i));
}

// A host vector in the memory of Space: the vector itself where Space is a host space, else a copy.
template <typename Space, typename T>
auto to_space(const std::vector<T>& v) {
  return Kokkos::create_mirror_view_and_copy(Mem<Space>(),
                                             HostUnmanaged1<const T>(v.data(), v.size()));
}

// The per-block state and results in Space's memory: one block's rows of RowState (reservoir of
// `capacity` values, FNC buffer of fnc_cap), RowResult and the FNC results, and the column groups.
template <typename Space>
struct BlockState {
  RowState<Space> st;
  RowResult<Space> res;
  View1<float, Space> fnc_thr;
  View2<int64_t, Space> fnc_counts;
  View1<const int64_t, Space> pos_cols, bat_cols;

  BlockState(const AnchorColumns& cols, int64_t rows, int32_t bins, int64_t m, int64_t capacity,
             int64_t fnc_cap)
      : st(rows, bins, capacity, fnc_cap),
        res(rows, m),
        fnc_thr("fnvlp::similarity::fnc_threshold", rows),
        fnc_counts("fnvlp::similarity::fnc_counts", rows, 3),
        pos_cols(to_space<Space>(cols.by_id.cols)),
        bat_cols(to_space<Space>(cols.by_batch.cols)) {}

  // The rows [b0, b0 + rb) of the anchors: ids, labels, k, lambda (NaN: none) and their positives'
  // and FNC batches' column ranges.
  void upload_rows(const AnchorColumns& cols, const float* lambda, int64_t b0, int64_t rb) const {
    upload<int64_t>(st.image_id, cols.id.data() + b0, rb);
    upload<int32_t>(st.label, cols.label.data() + b0, rb);
    upload<int64_t>(st.k, cols.k.data() + b0, rb);
    const std::vector<float> none(static_cast<size_t>(lambda ? 0 : rb), quiet_nan());
    upload<float>(st.lambda, lambda ? lambda + b0 : none.data(), rb);
    std::vector<int64_t> ranges(static_cast<size_t>(4 * rb));
    for (int64_t i = 0; i < rb; ++i) {
      const auto g = static_cast<size_t>(b0 + i);
      const auto pos = cols.by_id.of(cols.id[g]), bat = cols.by_batch.of(cols.batch[g]);
      ranges[static_cast<size_t>(i)] = pos.first;
      ranges[static_cast<size_t>(rb + i)] = pos.second;
      ranges[static_cast<size_t>(2 * rb + i)] = bat.first;
      ranges[static_cast<size_t>(3 * rb + i)] = bat.second;
    }
    upload<int64_t>(st.pos_begin, ranges.data(), rb);
    upload<int64_t>(st.pos_end, ranges.data() + rb, rb);
    upload<int64_t>(st.bat_begin, ranges.data() + 2 * rb, rb);
    upload<int64_t>(st.bat_end, ranges.data() + 3 * rb, rb);
  }

  // Appends the finished rows [0, rb) of the block (finalize_rows and batch_topk have run) to out.
  void download_rows(int64_t rb, bool has_lambda, RowStats& out) const {
    download_append(out.threshold, res.threshold, rb);
    download_append(out.count, res.count, rb);
    download_append(out.count_label, res.count_lab, rb);
    download_append(out.fnc_threshold, fnc_thr, rb);
    const auto q = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), res.quantiles);
    const auto fc = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), fnc_counts);
    const auto lam_n = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), st.lam_n);
    const auto lam_lab = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), st.lam_lab);
    const auto m = static_cast<int64_t>(res.quantiles.extent(1));
    for (int64_t i = 0; i < rb; ++i) {
      for (int64_t j = 0; j < m; ++j) out.quantiles.push_back(q(i, j));
      out.count_fnc.push_back(fc(i, 0));
      out.count_fnc_label.push_back(fc(i, 1));
      out.n_batch_label.push_back(fc(i, 2));
      out.count_lambda.push_back(has_lambda ? lam_n(i) : 0);
      out.count_lambda_label.push_back(has_lambda ? lam_lab(i) : 0);
    }
  }
};

}  // namespace fnvlp::similarity
