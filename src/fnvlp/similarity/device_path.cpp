#include "fnvlp/similarity/device_path.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <type_traits>
#include <vector>

#include "fnvlp/core/error.hpp"
#include "fnvlp/core/progress.hpp"
#include "fnvlp/similarity/block_steps.hpp"
#include "fnvlp/similarity/device_gemm.hpp"
#include "fnvlp/similarity/device_kernels.hpp"
#include "fnvlp/similarity/spaces.hpp"

#if defined(KOKKOS_ENABLE_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace fnvlp::similarity {

namespace {

// Where the host stages what it copies to Space: pinned memory for a GPU (so that a copy runs
// asynchronously, beside the read of the next tile), plain memory for a host space.
#if defined(KOKKOS_ENABLE_CUDA)
template <typename Space>
using Staging = std::conditional_t<kOnHost<Space>, Kokkos::HostSpace, Kokkos::CudaHostPinnedSpace>;
#else
template <typename Space>
using Staging = Kokkos::HostSpace;
#endif

template <typename View>
int64_t bytes_of(const View& v) {
  return static_cast<int64_t>(v.span() * sizeof(typename View::value_type));
}

// The device path's two in-order queues, one for the GEMMs and copies and one for the folds: on a
// GPU two CUDA streams ordered by events per buffer slot (CudaQueues), so that the GEMM of the next
// tile overlaps the fold of this one; on a host space both are the host, in order, and the GEMMs
// are the stand-ins of device_kernels.hpp.
template <typename Space>
class Queues {
 public:
  Queues() {
#if defined(KOKKOS_ENABLE_CUDA)
    if constexpr (!kOnHost<Space>) {
      cuda_ = std::make_unique<CudaQueues>();
      gemm_ = Space(static_cast<cudaStream_t>(cuda_->stream(CudaQueues::kGemm)));
      fold_ = Space(static_cast<cudaStream_t>(cuda_->stream(CudaQueues::kFold)));
    }
#endif
  }
  const Space& gemm() const { return gemm_; }
  const Space& fold() const { return fold_; }

  // Buffer slot `slot` (0, 1): the GEMM stream waits until the folds that read it are done, and
  // the fold stream until the GEMM that wrote it is.
  void gemm_after_fold(int slot) { on(&CudaQueues::wait, CudaQueues::kGemm, fold_done(slot)); }
  void gemm_done(int slot) { on(&CudaQueues::record, gemm_done_event(slot), CudaQueues::kGemm); }
  void fold_after_gemm(int slot) {
    on(&CudaQueues::wait, CudaQueues::kFold, gemm_done_event(slot));
  }
  void fold_done_now(int slot) { on(&CudaQueues::record, fold_done(slot), CudaQueues::kFold); }
  // A host staging slot: its copy queued, and the host waiting for it before refilling the slot.
  void copy_queued(int slot) { on(&CudaQueues::record, copy_done(slot), CudaQueues::kGemm); }
  void staging_free(int slot) {
    if (cuda_) cuda_->host_wait(copy_done(slot));
  }
  void fence() const {
    gemm_.fence();
    fold_.fence();
  }

  // s(i, j) = a(i, :) . c(j, :) for i < rows, j < cols on the GEMM queue.
  template <typename A, typename C, typename S>
  void gemm_f64(const A& a, int64_t rows, const C& c, int64_t cols, const S& s) {
    if constexpr (kOnHost<Space>)
      gemm_f64_standin(gemm_, View2<double, Space>(a), rows, View2<double, Space>(c), cols,
                       View2<double, Space>(s));
    else
      cuda_->gemm_f64(a.data(), rows, c.data(), cols, static_cast<int64_t>(a.extent(1)), s.data(),
                      static_cast<int64_t>(s.extent(1)));
  }
  template <typename A, typename C, typename S>
  void gemm_tf32(const A& a, int64_t rows, const C& c, int64_t cols, const S& s) {
    if constexpr (kOnHost<Space>)
      gemm_tf32_standin(gemm_, View2<float, Space>(a), rows, View2<float, Space>(c), cols,
                        View2<float, Space>(s));
    else
      cuda_->gemm_tf32(a.data(), rows, c.data(), cols, static_cast<int64_t>(a.extent(1)), s.data(),
                       static_cast<int64_t>(s.extent(1)));
  }

 private:
  static CudaQueues::Event gemm_done_event(int slot) {
    return slot == 0 ? CudaQueues::kGemmDone0 : CudaQueues::kGemmDone1;
  }
  static CudaQueues::Event fold_done(int slot) {
    return slot == 0 ? CudaQueues::kFoldDone0 : CudaQueues::kFoldDone1;
  }
  static CudaQueues::Event copy_done(int slot) {
    return slot == 0 ? CudaQueues::kCopyDone0 : CudaQueues::kCopyDone1;
  }
  template <typename Fn, typename A, typename B>
  void on(Fn fn, A a, B b) {
    if (cuda_) ((*cuda_).*fn)(a, b);
  }

  std::unique_ptr<CudaQueues> cuda_;
  Space gemm_, fold_;
};

// An upper bound of the Euclidean norm of a float vector: the double sum of exact squares, its
// square root, and a margin for their roundings.
double norm_bound(const float* v, int64_t dim) {
  double s = 0.0;
  for (int64_t k = 0; k < dim; ++k) s += static_cast<double>(v[k]) * static_cast<double>(v[k]);
  return std::sqrt(s) * (1.0 + 0x1p-40);
}

// anchor_stats on Space by the device path (device_path.hpp, device_kernels.hpp).
template <typename Space>
class DevicePath {
 public:
  DevicePath(const float* anchors, int64_t row0, int64_t rows, int64_t dim,
             const CandidateReader& read_candidates, int64_t n_cols,
             const ColumnReader& read_columns, const float* lambda, const Params& p)
      : anchors_(anchors),
        row0_(row0),
        rows_(rows),
        dim_(dim),
        n_cols_(n_cols),
        io_tile_(std::min(p.tile, std::max<int64_t>(n_cols, 1))),
        tile_(std::min(p.device_tile, std::max<int64_t>(n_cols, 1))),
        read_candidates_(read_candidates),
        read_columns_(read_columns),
        lambda_(lambda),
        p_(p) {}

  RowStats run() {
    check_params(p_, dim_);
    FNVLP_CHECK(Kokkos::is_initialized(), "anchor_stats needs Kokkos (a KokkosRuntime in main)");
    FNVLP_CHECK(row0_ >= 0 && rows_ >= 0 && row0_ + rows_ <= n_cols_,
                "anchor rows outside the pairs");
    FNVLP_CHECK(n_cols_ < (int64_t{1} << 31),
                "histogram counts are int32: at most 2^31 candidates");
    out_.row0 = row0_;
    out_.rows = rows_;
    out_.m = p_.quantiles;
    cols_ = scan_columns(row0_, rows_, n_cols_, io_tile_, 0, read_columns_, p_, out_);
    if (rows_ == 0) return out_;
    check_finite(anchors_, rows_, dim_, row0_, "anchor");
    load_candidates();
    allocate();
    for (int64_t b0 = 0, rb; b0 < rows_; b0 += rb) {
      rb = plan_.rows_at(b0);
      load_block(b0, rb);
      pass_exact(rb);
      if (p_.gemm_only) continue;
      pass_window(rb);
      finish_block(rb);
    }
    out_.buffer_bytes = bytes_ + bucket_bytes_;
    return out_;
  }

 private:
  // The candidates, their image ids and labels into Space's memory, io_tile_ rows at a time: the
  // host reads a tile into one staging slot while the other's copy runs.
  void load_candidates() {
    c32_ = View2<float, Space>(Kokkos::ViewAllocateWithoutInitializing("fnvlp::similarity::c32"),
                               n_cols_, dim_);
    image_id_ = View1<int64_t, Space>("fnvlp::similarity::col_image_id", n_cols_);
    label_ = View1<int32_t, Space>("fnvlp::similarity::col_label", n_cols_);
    bytes_ += bytes_of(c32_) + bytes_of(image_id_) + bytes_of(label_);
    using Stage2 = Kokkos::View<float**, Kokkos::LayoutRight, Staging<Space>>;
    using StageIds = Kokkos::View<int64_t*, Staging<Space>>;
    using StageLabels = Kokkos::View<int32_t*, Staging<Space>>;
    Stage2 emb[2] = {Stage2("fnvlp::similarity::stage_emb0", io_tile_, dim_),
                     Stage2("fnvlp::similarity::stage_emb1", io_tile_, dim_)};
    StageIds ids[2] = {StageIds("fnvlp::similarity::stage_id0", io_tile_),
                       StageIds("fnvlp::similarity::stage_id1", io_tile_)};
    StageLabels labels[2] = {StageLabels("fnvlp::similarity::stage_label0", io_tile_),
                             StageLabels("fnvlp::similarity::stage_label1", io_tile_)};
    std::vector<int64_t> batch(static_cast<size_t>(io_tile_));
    Kokkos::fence();
    for (int64_t c0 = 0, q = 0; c0 < n_cols_; c0 += io_tile_, ++q) {
      progress("simstat: loading candidates");
      const int64_t tc = std::min(io_tile_, n_cols_ - c0);
      const int slot = static_cast<int>(q % 2);
      queues_.staging_free(slot);
      read_candidates_(c0, tc, emb[slot].data());
      check_finite(emb[slot].data(), tc, dim_, c0, "candidate");
      for (int64_t j = 0; j < tc; ++j) cmax_ = std::max(cmax_, norm_bound(&emb[slot](j, 0), dim_));
      read_columns_(c0, tc, ids[slot].data(), labels[slot].data(), batch.data());
      const auto rows = std::make_pair(c0, c0 + tc), first = std::make_pair(int64_t{0}, tc);
      Kokkos::deep_copy(queues_.gemm(), Kokkos::subview(c32_, rows, Kokkos::ALL),
                        Kokkos::subview(emb[slot], first, Kokkos::ALL));
      Kokkos::deep_copy(queues_.gemm(), Kokkos::subview(image_id_, rows),
                        Kokkos::subview(ids[slot], first));
      Kokkos::deep_copy(queues_.gemm(), Kokkos::subview(label_, rows),
                        Kokkos::subview(labels[slot], first));
      queues_.copy_queued(slot);
    }
    queues_.fence();
  }

  // Blocks of anchors within the device memory budget: per row the histogram, the FNC buffer,
  // the float and double anchors and two slots of the GEMMs' tiles (double and float).
  void allocate() {
    const int64_t fnc_cap = std::max<int64_t>(p_.fnc_batch, 1);
    const int64_t per_row = 4 * p_.bins + 5 * fnc_cap + 12 * dim_ + 24 * tile_ + 256;
    plan_ = plan_blocks(p_, row0_, rows_, per_row,
                        p_.device_memory_mb * (int64_t{1} << 20) - 16 * tile_ * dim_);
    const int64_t r = std::min(plan_.block, rows_);
    bs_.emplace(cols_, r, p_.bins, p_.quantiles, 1, fnc_cap);  // the reservoir is not used
    dr_ = DeviceRows<Space>(r);
    const auto raw = [](const char* label) {
      return Kokkos::ViewAllocateWithoutInitializing(label);
    };
    a32_ = View2<float, Space>(raw("fnvlp::similarity::a32"), r, dim_);
    a64_ = View2<double, Space>(raw("fnvlp::similarity::a64"), r, dim_);
    bytes_ += bytes_of(a32_) + bytes_of(a64_) + bytes_of(bs_->st.hist) + bytes_of(bs_->st.bat_val) +
              bytes_of(bs_->st.bat_lab);
    for (int slot = 0; slot < 2; ++slot) {
      c64_[slot] = View2<double, Space>(raw("fnvlp::similarity::c64"), tile_, dim_);
      s64_[slot] = View2<double, Space>(raw("fnvlp::similarity::s64"), r, tile_);
      s32_[slot] = View2<float, Space>(raw("fnvlp::similarity::s32"), r, tile_);
      bytes_ += bytes_of(c64_[slot]) + bytes_of(s64_[slot]) + bytes_of(s32_[slot]);
    }
    spdlog::debug(
        "simstat device path on {}: {} candidates resident, blocks of {} anchors, tiles "
        "of {}, {:.2f} GiB of buffers",
        Space::name(), n_cols_, plan_.block, tile_, bytes_ / double(1 << 30));
  }

  // The block's anchors (float and double), their error bounds and row state.
  void load_block(int64_t b0, int64_t rb) {
    Kokkos::deep_copy(Kokkos::subview(a32_, std::make_pair(int64_t{0}, rb), Kokkos::ALL),
                      HostUnmanaged2<const float>(anchors_ + b0 * dim_, static_cast<size_t>(rb),
                                                  static_cast<size_t>(dim_)));
    rows_to_double(Space(), a32_, 0, rb, a64_);
    std::vector<double> err64(static_cast<size_t>(rb)), err32(err64.size());
    for (int64_t i = 0; i < rb; ++i) {
      const double bound = norm_bound(anchors_ + (b0 + i) * dim_, dim_) * cmax_;
      err64[static_cast<size_t>(i)] = f64_error_factor(dim_) * bound;
      err32[static_cast<size_t>(i)] = tf32_error_factor(dim_) * bound;
    }
    upload<double>(dr_.err64, err64.data(), rb);
    upload<double>(dr_.err32, err32.data(), rb);
    bs_->upload_rows(cols_, lambda_, b0, rb);
    const std::vector<float> start(static_cast<size_t>(rb),
                                   -std::numeric_limits<float>::infinity());
    upload<float>(bs_->st.tau0, start.data(), rb);
    reset_rows(Space(), bs_->st, rb);
    Kokkos::fence();
  }

  // Pass 1: the double GEMM and the exact fold of every tile.
  void pass_exact(int64_t rb) {
    const auto rows = std::make_pair(int64_t{0}, rb);
    for (int64_t c0 = 0, t = 0; c0 < n_cols_; c0 += tile_, ++t) {
      progress("simstat: device tiles");
      const int64_t tc = std::min(tile_, n_cols_ - c0);
      const int slot = static_cast<int>(t % 2);
      queues_.gemm_after_fold(slot);
      rows_to_double(queues_.gemm(), c32_, c0, tc, c64_[slot]);
      queues_.gemm_f64(Kokkos::subview(a64_, rows, Kokkos::ALL), rb, c64_[slot], tc, s64_[slot]);
      queues_.gemm_done(slot);
      if (p_.gemm_only) continue;
      queues_.fold_after_gemm(slot);
      fold_exact(queues_.fold(), s64_[slot], tc, c0, a64_, c64_[slot], image_id_, label_,
                 bs_->pos_cols, bs_->bat_cols, bs_->st, dr_, rb);
      queues_.fold_done_now(slot);
    }
    queues_.fence();
  }

  // Pass 2 in groups of rows whose bins' values fit the bucket: the TF32 GEMM and the window's
  // exact re-checks of every tile, then the selection in each row's bin.
  void pass_window(int64_t rb) {
    finalize_bins(queues_.fold(), bs_->st, dr_, bs_->res, rb);
    queues_.fence();
    const auto need = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), dr_.need);
    const int64_t budget =
        std::max<int64_t>(p_.device_memory_mb * (int64_t{1} << 20) / 5 / 8, int64_t{1});
    std::vector<int64_t> offset(static_cast<size_t>(rb));
    std::vector<std::pair<int64_t, int64_t>> groups;  // rows [first, second)
    int64_t widest = 0;
    for (int64_t r0 = 0, r1; r0 < rb; r0 = r1) {
      int64_t total = 0;
      for (r1 = r0; r1 < rb && (r1 == r0 || total + need(r1) <= budget); ++r1) {
        offset[static_cast<size_t>(r1)] = total;
        total += need(r1);
      }
      groups.emplace_back(r0, r1);
      widest = std::max(widest, total);
    }
    upload<int64_t>(dr_.offset, offset.data(), rb);
    if (static_cast<int64_t>(bucket_val_.extent(0)) < widest) {
      bucket_val_ = View1<float, Space>("fnvlp::similarity::bucket_val", widest);
      bucket_lab_ = View1<uint8_t, Space>("fnvlp::similarity::bucket_lab", widest);
      bucket_bytes_ = std::max(bucket_bytes_, 5 * widest);
    }
    for (const auto& [r0, r1] : groups) {
      window_tiles(r0, r1 - r0);
      select_in_bucket(queues_.fold(), bs_->st, dr_, bucket_val_, bucket_lab_, bs_->res, r0,
                       r1 - r0);
      queues_.fence();
      check_bins_complete(r0, r1);
    }
  }

  void window_tiles(int64_t r0, int64_t nr) {
    const auto rows = std::make_pair(r0, r0 + nr);
    for (int64_t c0 = 0, t = 0; c0 < n_cols_; c0 += tile_, ++t) {
      progress("simstat: device tiles");
      const int64_t tc = std::min(tile_, n_cols_ - c0);
      const int slot = static_cast<int>(t % 2);
      queues_.gemm_after_fold(slot);
      queues_.gemm_tf32(Kokkos::subview(a32_, rows, Kokkos::ALL), nr,
                        Kokkos::subview(c32_, std::make_pair(c0, c0 + tc), Kokkos::ALL), tc,
                        s32_[slot]);
      queues_.gemm_done(slot);
      queues_.fold_after_gemm(slot);
      filter_window(queues_.fold(), s32_[slot], tc, c0, a32_, c32_, label_, bs_->pos_cols, bs_->st,
                    dr_, bucket_val_, bucket_lab_, r0, nr);
      queues_.fold_done_now(slot);
    }
  }

  // Every row's values in its bin, found by pass 2, must be the ones pass 1 counted: fewer or more
  // means a TF32 product outside its bound (device_kernels.hpp), and a threshold that could be
  // wrong is not written.
  void check_bins_complete(int64_t r0, int64_t r1) const {
    const auto need = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), dr_.need);
    const auto got = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), dr_.got);
    for (int64_t i = r0; i < r1; ++i)
      FNVLP_CHECK(got(i) == need(i), "simstat device path: anchor "
                                         << row0_ + i << ": the TF32 window found " << got(i)
                                         << " values in the threshold's histogram bin, the "
                                            "exact pass "
                                         << need(i) << " (a GEMM outside its error bound)");
  }

  void finish_block(int64_t rb) {
    batch_topk(queues_.fold(), bs_->st, p_.alpha, bs_->fnc_thr, bs_->fnc_counts, rb);
    queues_.fence();
    const auto scalar = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), bs_->st.scalar_n);
    for (int64_t i = 0; i < rb; ++i) out_.scalar_values += scalar(i);
    bs_->download_rows(rb, lambda_ != nullptr, out_);
  }

  const float* anchors_;
  int64_t row0_, rows_, dim_, n_cols_, io_tile_, tile_;
  const CandidateReader& read_candidates_;
  const ColumnReader& read_columns_;
  const float* lambda_;
  const Params& p_;
  RowStats out_;
  AnchorColumns cols_;
  Queues<Space> queues_;
  double cmax_ = 0.0;
  int64_t bytes_ = 0, bucket_bytes_ = 0;
  View2<float, Space> c32_, a32_;
  View1<int64_t, Space> image_id_;
  View1<int32_t, Space> label_;
  BlockPlan plan_;
  std::optional<BlockState<Space>> bs_;
  DeviceRows<Space> dr_;
  View2<double, Space> a64_, c64_[2], s64_[2];
  View2<float, Space> s32_[2];
  View1<float, Space> bucket_val_;
  View1<uint8_t, Space> bucket_lab_;
};

}  // namespace

RowStats anchor_stats_device(const float* anchors, int64_t row0, int64_t rows, int64_t dim,
                             const CandidateReader& read_candidates, int64_t n_cols,
                             const ColumnReader& read_columns, const float* lambda,
                             const Params& p) {
  if constexpr (kDeviceBuild) {
    if (!p.host)
      return DevicePath<ExecSpace>(anchors, row0, rows, dim, read_candidates, n_cols, read_columns,
                                   lambda, p)
          .run();
  }
  return DevicePath<HostSpace>(anchors, row0, rows, dim, read_candidates, n_cols, read_columns,
                               lambda, p)
      .run();
}

}  // namespace fnvlp::similarity
