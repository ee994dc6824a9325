#include "fnvlp/similarity/simstat.hpp"

#include <cblas.h>
#include <dlfcn.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <random>

#include "fnvlp/core/progress.hpp"
#include "fnvlp/data/embeddings.hpp"
#include "fnvlp/data/h5.hpp"
#include "fnvlp/similarity/block_steps.hpp"
#include "fnvlp/similarity/device_path.hpp"
#include "fnvlp/similarity/kernels.hpp"
#include "fnvlp/similarity/spaces.hpp"
#include "fnvlp/store/run_dir.hpp"

namespace fnvlp::similarity {

namespace {

// Rows [0, n) of a host column where the kernels read it: the vector itself on a host space, else
// a copy into `dev` (allocated once for the largest tile).
template <typename Space, typename T>
auto tile_view(const std::vector<T>& host, int64_t n, const View1<T, Space>& dev) {
  const HostUnmanaged1<const T> h(host.data(), static_cast<size_t>(n));
  if constexpr (kOnHost<Space>) {
    (void)dev;
    return h;
  } else {
    const auto d = Kokkos::subview(dev, std::make_pair(int64_t{0}, n));
    Kokkos::deep_copy(d, h);
    return d;
  }
}

template <typename View>
auto first_rows(const View& v, int64_t n) {
  return Kokkos::subview(v, std::make_pair(int64_t{0}, n), Kokkos::ALL);
}

// Starting thresholds tau0 (kernels.hpp) of a block's anchors [0, rows) (global rows row0 + i, with
// target rank k[i] among n_neg[i] negatives), from their similarities to the sample candidates
// `cols` that are negatives of them (another image_id), m_i of them. The number X of sample values
// above the anchor's k-th largest is hypergeometric with mean below mu = m_i k / n_neg, so the
// sample value of rank r = ceil(mu + z sqrt(mu + 1) + 3) lies at or below the k-th largest unless
// X >= r, whose probability Chernoff's bound puts below exp(-t^2 / (2 (mu + t / 3))), t = r - mu:
// about 4e-9 at mu = 20 (alpha = 1%, m = 2048) and z = 7. -inf when the sample has fewer than r
// negatives of the anchor. sims_of(r0, nr, out) writes anchors [r0, r0 + nr)'s similarities to the
// sample (nr x m, nr <= kGemmRows) as the stream computes them, so that tau0 is a value it sees.
// `ids` are the sample's image_ids, `self` the anchors'.
using SampleSims = std::function<void(int64_t r0, int64_t nr, float* out)>;
std::vector<float> start_thresholds(int64_t rows, const SampleSims& sims_of,
                                    const std::vector<int64_t>& ids, const int64_t* self_ids,
                                    const int64_t* k, const int64_t* n_neg, double z) {
  const auto m = static_cast<int64_t>(ids.size());
  std::vector<float> tau0(static_cast<size_t>(rows), -std::numeric_limits<float>::infinity());
  std::vector<float> sims(static_cast<size_t>(kGemmRows * m)), heap;
  const std::greater<float> above;
  for (int64_t r0 = 0; r0 < rows; r0 += kGemmRows) {
    const int64_t nr = std::min(kGemmRows, rows - r0);
    sims_of(r0, nr, sims.data());
    for (int64_t i = r0; i < r0 + nr; ++i) {
      if (k[i] == 0) continue;
      const int64_t self = self_ids[i];
      const float* s = sims.data() + (i - r0) * m;
      int64_t m_i = 0;
      for (int64_t j = 0; j < m; ++j) m_i += ids[static_cast<size_t>(j)] != self;
      const double mu =
          static_cast<double>(m_i) * static_cast<double>(k[i]) / static_cast<double>(n_neg[i]);
      const double r = std::max(1.0, std::ceil(mu + z * std::sqrt(mu + 1.0) + 3.0));
      if (r > static_cast<double>(m_i)) continue;
      // The r largest in a min-heap: r is a few percent of m, so after the first r values almost
      // every value is turned away by one comparison (an nth_element costs several times more).
      const auto rank = static_cast<size_t>(r);
      heap.clear();
      for (int64_t j = 0; j < m; ++j) {
        if (ids[static_cast<size_t>(j)] == self) continue;
        if (heap.size() < rank) {
          heap.push_back(s[j]);
          std::push_heap(heap.begin(), heap.end(), above);
        } else if (s[j] > heap.front()) {
          std::pop_heap(heap.begin(), heap.end(), above);
          heap.back() = s[j];
          std::push_heap(heap.begin(), heap.end(), above);
        }
      }
      tau0[static_cast<size_t>(i)] = heap.front();
    }
  }
  return tau0;
}

// OpenBLAS divides one GEMM among its threads in a way that changes the last bits of some products,
// and so thresholds and counts, with OPENBLAS_NUM_THREADS (unset: the node's cores; measured in
// tests/bench/README.md). simstat's GEMMs run on one OpenBLAS thread each; the caller's thread
// count comes back after (pretraining calls exact_thresholds mid-run). Other BLAS libraries:
// unchanged.
class OneBlasThread {
 public:
  OneBlasThread() {
    if (get_ && set_ && (previous_ = get_()) > 1) set_(1);
  }
  ~OneBlasThread() {
    if (previous_ > 1) set_(previous_);
  }
  OneBlasThread(const OneBlasThread&) = delete;
  OneBlasThread& operator=(const OneBlasThread&) = delete;

 private:
  using Get = int (*)();
  using Set = void (*)(int);
  static inline const Get get_ =
      reinterpret_cast<Get>(dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
  static inline const Set set_ =
      reinterpret_cast<Set>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
  int previous_ = 0;
};

}  // namespace

int64_t start_sample_size(const Params& p, int64_t n) {
  if (p.start_sample >= 0) return std::min(p.start_sample, n);
  return n / 64 >= 256 ? std::min<int64_t>(n / 64, 8192) : 0;
}

void similarity_blocks(const float* a, int64_t rows, const float* c, int64_t cols, int64_t dim,
                       const BlockFn& fn, int64_t row_base, int64_t col_base) {
  const OneBlasThread one_thread;
  constexpr int64_t kGroup = kFoldCols / kGemmCols;  // GEMM blocks per fold group
  // Scratch of the fixed GEMM shape; thread_local so concurrent callers never share it.
  thread_local std::vector<float> pa, pc[kGroup], ps;
  pa.resize(static_cast<size_t>(kGemmRows * dim));
  for (auto& v : pc) v.resize(static_cast<size_t>(kGemmCols * dim));
  ps.resize(static_cast<size_t>(kGemmRows * kFoldCols));
  // Rows [lo, hi) of src (global indices; src holds [base, ...)) at their places in the aligned
  // block [blk, blk + full): in place when they fill it, else copied into zero-padded scratch.
  const auto place = [dim](const float* src, int64_t base, int64_t blk, int64_t lo, int64_t hi,
                           int64_t full, std::vector<float>& pad) {
    if (lo == blk && hi == blk + full) return src + (lo - base) * dim;
    std::fill(pad.begin(), pad.end(), 0.0f);
    std::copy(src + (lo - base) * dim, src + (hi - base) * dim, pad.begin() + (lo - blk) * dim);
    return static_cast<const float*>(pad.data());
  };
  // A threaded host backend (OpenMP) runs a group's GEMMs side by side, each on one BLAS thread:
  // every block keeps its bits (one call, one shape, whichever thread makes it).
  const bool side_by_side = Kokkos::is_initialized() && HostSpace().concurrency() > 1;
  const int64_t row_end = row_base + rows, col_end = col_base + cols;
  for (int64_t rb = row_base / kGemmRows * kGemmRows; rb < row_end; rb += kGemmRows) {
    const int64_t lo = std::max(rb, row_base), hi = std::min(rb + kGemmRows, row_end);
    const float* ablk = place(a, row_base, rb, lo, hi, kGemmRows, pa);
    // Fold groups of kFoldCols aligned columns; only the first and last can be partial.
    for (int64_t fb = col_base / kGemmCols * kGemmCols; fb < col_end; fb += kFoldCols) {
      const int64_t f_lo = std::max(fb, col_base), f_hi = std::min(fb + kFoldCols, col_end);
      const int64_t blocks = (f_hi - fb + kGemmCols - 1) / kGemmCols;
      const float* cblk[kGroup];
      for (int64_t g = 0; g < blocks; ++g) {
        const int64_t cb = fb + g * kGemmCols;
        cblk[g] = place(c, col_base, cb, std::max(cb, col_base), std::min(cb + kGemmCols, col_end),
                        kGemmCols, pc[g]);
      }
      // Block g of the group, contiguous: a BLAS with a wider leading dimension than the block
      // zeroes it (beta = 0) with a strided loop, several times slower than memset. The lambda
      // sees the scratch through a plain pointer: on another thread `ps` names that thread's own.
      float* const sims = ps.data();
      const auto gemm = [&, sims](int64_t g) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, kGemmRows, kGemmCols,
                    static_cast<int>(dim), 1.0f, ablk, static_cast<int>(dim), cblk[g],
                    static_cast<int>(dim), 0.0f, sims + g * kGemmRows * kGemmCols, kGemmCols);
      };
      if (side_by_side && blocks > 1)
        Kokkos::parallel_for("fnvlp::similarity::gemm_blocks",
                             Kokkos::RangePolicy<HostSpace>(0, blocks), gemm);
      else
        for (int64_t g = 0; g < blocks; ++g) gemm(g);
      fn(lo - row_base, hi - lo, f_lo - col_base, f_hi - f_lo, ps.data() + (lo - rb) * kGemmCols,
         f_lo - fb);
    }
  }
}

void similarity_tile(const float* a, int64_t rows, const float* c, int64_t cols, int64_t dim,
                     float* out) {
  similarity_blocks(
      a, rows, c, cols, dim,
      [&](int64_t r0, int64_t nr, int64_t c0, int64_t nc, float* s, int64_t co) {
        for (int64_t i = 0; i < nr; ++i)
          for (int64_t j = 0, len = 0; j < nc; j += len) {
            const int64_t g = j + co;  // the run of columns in g's GEMM block
            len = std::min(nc - j, kGemmCols - g % kGemmCols);
            std::copy_n(s + g / kGemmCols * kGemmRows * kGemmCols + i * kGemmCols + g % kGemmCols,
                        len, out + (r0 + i) * cols + c0 + j);
          }
      });
}

std::vector<int64_t> fnc_batches(int64_t n, int64_t batch, uint64_t seed) {
  std::vector<int64_t> out(static_cast<size_t>(n), -1);
  if (batch <= 0) return out;
  std::vector<int64_t> perm(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) perm[static_cast<size_t>(i)] = i;
  // Fisher-Yates with an explicit generator: the same batches on every platform and rank.
  std::mt19937_64 rng(seed);
  for (int64_t i = n - 1; i > 0; --i) {
    const auto j = static_cast<int64_t>(rng() % static_cast<uint64_t>(i + 1));
    std::swap(perm[static_cast<size_t>(i)], perm[static_cast<size_t>(j)]);
  }
  for (int64_t p = 0; p < n; ++p)
    out[static_cast<size_t>(perm[static_cast<size_t>(p)])] = p / batch;
  return out;
}

namespace {

// The candidate stream of anchor_stats's host paths for one block of anchors at a time. The fast
// path (kFast: a host space, generic path not forced) folds the blocks of the host BLAS GEMM
// straight from cache with the AVX2 chunk test. The generic path copies the anchors and each
// candidate tile to Space's memory, computes the similarities there (similarity_kernel) and folds
// them with the portable chunk test. Both give exact results for their similarities.
template <typename Space, bool kGeneric>
class HostStream {
 public:
  static constexpr bool kFast = !kGeneric && kOnHost<Space>;

  HostStream(const float* anchors, int64_t row0, int64_t dim,
             const CandidateReader& read_candidates, int64_t n_cols,
             const ColumnReader& read_columns, const Params& p, const AnchorColumns& cols,
             const BlockState<Space>& bs, int64_t block_rows, std::vector<float> sample)
      : anchors_(anchors),
        row0_(row0),
        dim_(dim),
        n_cols_(n_cols),
        tile_(std::min(p.tile, std::max<int64_t>(n_cols, 1))),
        read_candidates_(read_candidates),
        read_columns_(read_columns),
        p_(p),
        cols_(cols),
        bs_(bs),
        sample_(std::move(sample)),
        cand_(static_cast<size_t>(tile_ * dim)),
        tile_id_(static_cast<size_t>(tile_)),
        tile_batch_(tile_id_.size()),
        tile_label_(tile_id_.size()) {
    if constexpr (!kOnHost<Space>) {
      tile_id_dev_ = View1<int64_t, Space>("fnvlp::similarity::tile_image_id", tile_);
      tile_label_dev_ = View1<int32_t, Space>("fnvlp::similarity::tile_label", tile_);
    }
    if (!kFast && block_rows > 0) allocate_generic(block_rows);
  }

  // The generic path's anchors of the block [b0, b0 + rb) into Space's memory.
  void load_anchors(int64_t b0, int64_t rb) const {
    if (!kFast)
      Kokkos::deep_copy(first_rows(a_dev_, rb),
                        HostUnmanaged2<const float>(anchors_ + b0 * dim_, static_cast<size_t>(rb),
                                                    static_cast<size_t>(dim_)));
  }

  // Starting thresholds of the block's anchors (start_thresholds), from the sample's similarities
  // computed as the stream computes them (dot_in_double on the generic path), so that a start is
  // one of the values the stream will see.
  std::vector<float> start_of(int64_t b0, int64_t rb) const {
    const int64_t m = cols_.sample;
    if (m == 0) return std::vector<float>(static_cast<size_t>(rb), -kInf);
    const SampleSims sims_of = [&](int64_t r0, int64_t nr, float* s) {
      if constexpr (kFast) {
        similarity_tile(anchors_ + (b0 + r0) * dim_, nr, sample_.data(), m, dim_, s);
      } else {
        const auto a = Kokkos::subview(a_dev_, std::make_pair(r0, r0 + nr), Kokkos::ALL);
        similarity_kernel(Space(), a, nr, sample_dev_, m, sample_sims_);
        Kokkos::deep_copy(HostUnmanaged2<float>(s, static_cast<size_t>(nr), static_cast<size_t>(m)),
                          first_rows(sample_sims_, nr));
      }
    };
    return start_thresholds(rb, sims_of, cols_.sample_ids, cols_.id.data() + b0,
                            cols_.k.data() + b0, n_neg_ + b0, p_.start_sigmas);
  }
  void set_n_neg(const int64_t* n_neg) { n_neg_ = n_neg; }

  // One pass of every candidate tile through the block's rows [b0, b0 + rb); the first pass of the
  // first block checks the candidates are finite.
  void stream(int64_t b0, int64_t rb, bool check) {
    for (int64_t c0 = 0; c0 < n_cols_; c0 += tile_) {
      progress("simstat: candidate tiles");
      const int64_t tc = std::min(tile_, n_cols_ - c0);
      read_candidates_(c0, tc, cand_.data());
      if (check) check_finite(cand_.data(), tc, dim_, c0, "candidate");
      if (!p_.gemm_only)
        read_columns_(c0, tc, tile_id_.data(), tile_label_.data(), tile_batch_.data());
      if constexpr (kFast)
        fold_fast(b0, rb, c0, tc);
      else
        fold_generic(rb, c0, tc);
    }
  }

 private:
  static constexpr float kInf = std::numeric_limits<float>::infinity();

  // The block's anchors, a candidate tile and up to kGemmRows x tile similarities in Space's
  // memory. A tile's similarities start at column c0 % kChunk of the segment, so that the chunks
  // of accumulate_tile are aligned to global multiples of kChunk as on the fast path (the values
  // tested at a chunk's start, and so the scalar-path count, are then the same); the segment width
  // is a multiple of kChunk, as accumulate_tile wants.
  void allocate_generic(int64_t r) {
    a_dev_ = View2<float, Space>(
        Kokkos::ViewAllocateWithoutInitializing("fnvlp::similarity::anchors"), r, dim_);
    c_dev_ = View2<float, Space>(
        Kokkos::ViewAllocateWithoutInitializing("fnvlp::similarity::candidates"), tile_, dim_);
    s_dev_ =
        View3<float, Space>(Kokkos::ViewAllocateWithoutInitializing("fnvlp::similarity::sims"), 1,
                            std::min(r, kGemmRows), (tile_ + 2 * kChunk - 2) / kChunk * kChunk);
    const int64_t m = cols_.sample;
    if (m == 0) return;
    sample_dev_ = View2<float, Space>(
        Kokkos::ViewAllocateWithoutInitializing("fnvlp::similarity::sample"), m, dim_);
    Kokkos::deep_copy(sample_dev_,
                      HostUnmanaged2<const float>(sample_.data(), static_cast<size_t>(m),
                                                  static_cast<size_t>(dim_)));
    sample_sims_ = View2<float, Space>(
        Kokkos::ViewAllocateWithoutInitializing("fnvlp::similarity::sample_sims"),
        std::min(r, kGemmRows), m);
  }

  // Each GEMM block is folded into the row state while it is in cache: no rows x tile matrix goes
  // through memory.
  void fold_fast(int64_t b0, int64_t rb, int64_t c0, int64_t tc) const {
    const auto col_ids = tile_view<Space>(tile_id_, tc, tile_id_dev_);
    const auto col_labels = tile_view<Space>(tile_label_, tc, tile_label_dev_);
    similarity_blocks(
        anchors_ + b0 * dim_, rb, cand_.data(), tc, dim_,
        [&](int64_t r0, int64_t nr, int64_t j0, int64_t nc, float* s, int64_t co) {
          if (p_.gemm_only) return;
          const HostUnmanaged3<float> sv(s, static_cast<size_t>(kFoldCols / kGemmCols),
                                         static_cast<size_t>(kGemmRows),
                                         static_cast<size_t>(kGemmCols));
          const auto cols = std::make_pair(j0, j0 + nc);
          accumulate_tile(Space(), sv, nc, c0 + j0, Kokkos::subview(col_ids, cols),
                          Kokkos::subview(col_labels, cols), bs_.pos_cols, bs_.bat_cols, bs_.st, r0,
                          nr, co);
        },
        row0_ + b0, c0);
  }

  void fold_generic(int64_t rb, int64_t c0, int64_t tc) const {
    const auto col_ids = tile_view<Space>(tile_id_, tc, tile_id_dev_);
    const auto col_labels = tile_view<Space>(tile_label_, tc, tile_label_dev_);
    Kokkos::deep_copy(first_rows(c_dev_, tc),
                      HostUnmanaged2<const float>(cand_.data(), static_cast<size_t>(tc),
                                                  static_cast<size_t>(dim_)));
    const auto cols = std::make_pair(int64_t{0}, tc);
    const int64_t off = c0 % kChunk;
    const auto s2 = Kokkos::subview(s_dev_, 0, Kokkos::ALL, std::make_pair(off, off + tc));
    const auto step = static_cast<int64_t>(s_dev_.extent(1));
    for (int64_t r0 = 0; r0 < rb; r0 += step) {
      const int64_t nr = std::min(step, rb - r0);
      similarity_kernel(Space(), Kokkos::subview(a_dev_, std::make_pair(r0, r0 + nr), Kokkos::ALL),
                        nr, c_dev_, tc, s2);
      if (!p_.gemm_only)
        accumulate_tile<true>(Space(), s_dev_, tc, c0, Kokkos::subview(col_ids, cols),
                              Kokkos::subview(col_labels, cols), bs_.pos_cols, bs_.bat_cols, bs_.st,
                              r0, nr, off);
    }
  }

  const float* anchors_;
  int64_t row0_, dim_, n_cols_, tile_;
  const CandidateReader& read_candidates_;
  const ColumnReader& read_columns_;
  const Params& p_;
  const AnchorColumns& cols_;
  const BlockState<Space>& bs_;
  std::vector<float> sample_, cand_;
  std::vector<int64_t> tile_id_, tile_batch_;
  std::vector<int32_t> tile_label_;
  const int64_t* n_neg_ = nullptr;
  View1<int64_t, Space> tile_id_dev_;
  View1<int32_t, Space> tile_label_dev_;
  View2<float, Space> a_dev_, c_dev_, sample_dev_, sample_sims_;
  View3<float, Space> s_dev_;
};

// Finishes a pass over a block's rows [0, rb): finalize_rows, the scalar-path count, and the rows
// whose start was above their k-th largest (their tau0 back to -inf). Returns how many restart.
template <typename Space>
int64_t finish_pass(const BlockState<Space>& bs, int64_t rb, std::vector<float>& tau0,
                    RowStats& out) {
  const Space space;
  finalize_rows(space, bs.st, bs.res, rb);
  space.fence();
  const auto restart = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), bs.res.restart);
  const auto scalar = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), bs.st.scalar_n);
  int64_t again = 0;
  for (int64_t i = 0; i < rb; ++i) {
    out.scalar_values += scalar(i);
    if (!restart(i)) continue;
    tau0[static_cast<size_t>(i)] = -std::numeric_limits<float>::infinity();
    ++again;
  }
  return again;
}

// anchor_stats on a host space (HostStream), the generic path on any space.
template <typename Space, bool kGeneric>
RowStats anchor_stats_on(const float* anchors, int64_t row0, int64_t rows, int64_t dim,
                         const CandidateReader& read_candidates, int64_t n_cols,
                         const ColumnReader& read_columns, const float* lambda, const Params& p,
                         const StridedReader& read_strided) {
  check_params(p, dim);
  FNVLP_CHECK(Kokkos::is_initialized(), "anchor_stats needs Kokkos (a KokkosRuntime in main)");
  FNVLP_CHECK(row0 >= 0 && rows >= 0 && row0 + rows <= n_cols, "anchor rows outside the pairs");
  FNVLP_CHECK(n_cols < (int64_t{1} << 31), "histogram counts are int32: at most 2^31 candidates");
  RowStats out;
  out.row0 = row0;
  out.rows = rows;
  out.m = p.quantiles;
  const int64_t tile = std::min(p.tile, std::max<int64_t>(n_cols, 1));
  const int64_t m = p.gemm_only || rows == 0 ? 0 : start_sample_size(p, n_cols);
  const AnchorColumns cols = scan_columns(row0, rows, n_cols, tile, m, read_columns, p, out);
  // Per row the histogram, the reservoir (capacity 2 k_max), the FNC buffer and its embedding.
  const int64_t capacity = std::max<int64_t>(2 * cols.k_max, 64);
  const int64_t fnc_cap = std::max<int64_t>(p.fnc_batch, 1);
  const BlockPlan plan =
      plan_blocks(p, row0, rows, 4 * p.bins + 5 * capacity + 5 * fnc_cap + 4 * dim + 128,
                  p.memory_mb * (int64_t{1} << 20) - 4 * tile * dim);
  const int64_t r = p.gemm_only || rows == 0 ? 0 : std::min(plan.block, rows);
  const BlockState<Space> bs(cols, r, p.bins, p.quantiles, capacity, fnc_cap);
  check_finite(anchors, rows, dim, row0, "anchor");
  HostStream<Space, kGeneric> stream(
      anchors, row0, dim, read_candidates, n_cols, read_columns, p, cols, bs,
      rows > 0 ? std::min(plan.block, rows) : 0,
      read_sample(m, cols.stride, dim, read_candidates, read_strided));
  stream.set_n_neg(out.n_neg.data());
  out.start_sample = m;
  const Space space;
  for (int64_t b0 = 0, rb; b0 < rows; b0 += rb) {
    rb = plan.rows_at(b0);
    stream.load_anchors(b0, rb);
    if (!p.gemm_only) bs.upload_rows(cols, lambda, b0, rb);
    std::vector<float> tau0 = stream.start_of(b0, rb);
    for (int pass = 0;; ++pass) {
      if (!p.gemm_only) {
        upload<float>(bs.st.tau0, tau0.data(), rb);
        reset_rows(space, bs.st, rb);
      }
      stream.stream(b0, rb, b0 == 0 && pass == 0);
      if (p.gemm_only) break;
      const int64_t again = finish_pass(bs, rb, tau0, out);
      if (again == 0) break;
      // At most once: a row restarts only from a finite tau0.
      out.restarted_rows += again;
      spdlog::info(
          "simstat: {} of anchors {}..{} started above their k-th largest similarity "
          "(sample of {}); streaming the block again",
          again, row0 + b0, row0 + b0 + rb - 1, m);
    }
    if (p.gemm_only) continue;
    batch_topk(space, bs.st, p.alpha, bs.fnc_thr, bs.fnc_counts, rb);
    space.fence();
    bs.download_rows(rb, lambda != nullptr, out);
  }
  return out;
}

}  // namespace

RowStats anchor_stats(const float* anchors, int64_t row0, int64_t rows, int64_t dim,
                      const CandidateReader& read_candidates, int64_t n_cols,
                      const ColumnReader& read_columns, const float* lambda, const Params& p,
                      const StridedReader& read_strided) {
  const bool on_device = kDeviceBuild && !p.host;
  if (p.generic_path)
    return on_device
               ? anchor_stats_on<ExecSpace, true>(anchors, row0, rows, dim, read_candidates, n_cols,
                                                  read_columns, lambda, p, read_strided)
               : anchor_stats_on<HostSpace, true>(anchors, row0, rows, dim, read_candidates, n_cols,
                                                  read_columns, lambda, p, read_strided);
  if (on_device || p.device_path)
    return anchor_stats_device(anchors, row0, rows, dim, read_candidates, n_cols, read_columns,
                               lambda, p);
  return anchor_stats_on<HostSpace, false>(anchors, row0, rows, dim, read_candidates, n_cols,
                                           read_columns, lambda, p, read_strided);
}

bool takes_generic_path(const Params& p) {
  return p.generic_path || p.device_path || (kDeviceBuild && !p.host);
}

RowStats anchor_stats(const float* anchors, int64_t row0, int64_t rows, int64_t dim,
                      const CandidateReader& read_candidates, int64_t n_cols,
                      const std::vector<int64_t>& image_id, const std::vector<int32_t>& label,
                      const std::vector<int64_t>& batch, const float* lambda, const Params& p,
                      const StridedReader& read_strided) {
  FNVLP_CHECK(static_cast<int64_t>(image_id.size()) == n_cols &&
                  static_cast<int64_t>(label.size()) == n_cols &&
                  static_cast<int64_t>(batch.size()) == n_cols,
              "image_id/label/batch must cover all " << n_cols << " candidates");
  const ColumnReader columns = [&](int64_t c0, int64_t n, int64_t* id, int32_t* lab, int64_t* bat) {
    std::copy_n(image_id.data() + c0, n, id);
    std::copy_n(label.data() + c0, n, lab);
    std::copy_n(batch.data() + c0, n, bat);
  };
  return anchor_stats(anchors, row0, rows, dim, read_candidates, n_cols, columns, lambda, p,
                      read_strided);
}

std::string resolve_lambda_source(const std::string& from) {
  namespace fs = std::filesystem;
  if (from.empty()) return {};
  if (fs::is_regular_file(from)) return from;
  FNVLP_CHECK(fs::is_directory(from),
              "--lambda-from " << from << ": no such file or run directory");
  const fs::path dir = fs::path(from) / "embeddings";
  FNVLP_CHECK(fs::is_directory(dir),
              "--lambda-from " << from << ": run directory has no embeddings/");
  const std::string newest = store::newest_epoch_embeddings(from);
  FNVLP_CHECK(!newest.empty(), "--lambda-from " << from << ": no embeddings/epoch-*.h5 in the run");
  return newest;
}

namespace {

struct Modality {
  const char* name;  // "image": image anchors against all texts
  bool image;
};
constexpr Modality kModalities[] = {{"image", true}, {"text", false}};

nlohmann::json prf(int64_t flagged, int64_t true_fn, int64_t label_negatives) {
  nlohmann::json j;
  j["flagged"] = flagged;
  j["true_fn"] = true_fn;
  const double pr = flagged > 0 ? double(true_fn) / double(flagged) : 0.0;
  const double rc = label_negatives > 0 ? double(true_fn) / double(label_negatives) : 0.0;
  j["precision"] = pr;
  j["recall"] = rc;
  j["f1"] = pr + rc > 0 ? 2 * pr * rc / (pr + rc) : 0.0;
  return j;
}

// Global summary of one modality: integer sums are exact; means are double sums over ranks.
nlohmann::json summarise(const Comm& comm, const RowStats& s, const std::vector<int32_t>& label,
                         bool has_lambda, const std::vector<float>& lambda) {
  std::vector<int64_t> c(12, 0);
  std::vector<double> d(6, 0.0);
  c[10] = s.restarted_rows;
  c[11] = s.scalar_values;
  for (int64_t i = 0; i < s.rows; ++i) {
    const auto u = static_cast<size_t>(i);
    const bool labelled = label[static_cast<size_t>(s.row0 + i)] >= 0;
    c[0] += 1;
    c[1] += s.n_neg[u] > 0;
    if (labelled) {
      c[2] += 1;
      c[3] += s.n_label[u];
      c[4] += s.count[u];
      c[5] += s.count_label[u];
      c[6] += s.count_lambda[u];
      c[7] += s.count_lambda_label[u];
      c[8] += s.count_fnc[u];
      c[9] += s.count_fnc_label[u];
    }
    const float t = s.threshold[u];
    if (std::isfinite(t)) {
      d[0] += t;
      d[1] += 1;
      if (has_lambda && std::isfinite(lambda[u])) {
        d[2] += std::fabs(double(lambda[u]) - t);
        d[3] += 1;
      }
      if (std::isfinite(s.fnc_threshold[u])) {
        d[4] += std::fabs(double(s.fnc_threshold[u]) - t);
        d[5] += 1;
      }
    }
  }
  comm.allreduce_sum(c);
  comm.allreduce_sum(d);
  nlohmann::json j;
  j["anchors"] = c[0];
  j["anchors_with_negatives"] = c[1];
  j["labelled_anchors"] = c[2];
  j["label_negatives"] = c[3];
  j["mean_threshold"] = d[1] > 0 ? d[0] / d[1] : 0.0;
  j["exact"] = prf(c[4], c[5], c[3]);
  if (has_lambda) {
    j["glofnd"] = prf(c[6], c[7], c[3]);
    j["glofnd"]["mean_abs_error"] = d[3] > 0 ? d[2] / d[3] : 0.0;
  }
  j["fnc"] = prf(c[8], c[9], c[3]);
  j["fnc"]["mean_abs_error"] = d[5] > 0 ? d[4] / d[5] : 0.0;
  // Cost diagnostics (kernels.hpp): the starting-threshold sample, the anchors streamed twice
  // because their start was too high, and the values that took the scalar path.
  j["start_sample"] = s.start_sample;
  j["restarted_anchors"] = c[10];
  j["scalar_path_values"] = c[11];
  return j;
}

void create_stats_file(const std::string& path, int64_t n, const Params& p, bool has_lambda,
                       const std::string& lambda_source, const std::string& embeddings) {
  std::lock_guard<std::mutex> lock(h5::global_mutex());
  h5::Handle f = h5::create_file(path);
  const hsize_t hn = static_cast<hsize_t>(n), hm = static_cast<hsize_t>(p.quantiles);
  const hsize_t rows = std::min<hsize_t>(std::max<hsize_t>(hn, 1), 4096);
  const hsize_t qrows = std::max<hsize_t>(1, std::min<hsize_t>(rows, (1u << 20) / (4 * hm)));
  auto make = [&](const std::string& name, hid_t type, bool matrix) {
    h5::DatasetSpec spec;
    spec.dims = matrix ? std::vector<hsize_t>{hn, hm} : std::vector<hsize_t>{hn};
    spec.chunk = matrix ? std::vector<hsize_t>{qrows, hm} : std::vector<hsize_t>{rows};
    h5::create_dataset(f, name, type, spec, path).close(path + ":/" + name);
  };
  make("pair_id", H5T_STD_I64LE, false);
  for (const auto& m : kModalities) {
    const std::string s = m.name;
    make("threshold_" + s, H5T_IEEE_F32LE, false);
    make("quantiles_" + s, H5T_IEEE_F32LE, true);
    make("fnc_threshold_" + s, H5T_IEEE_F32LE, false);
    for (const char* c : {"n_neg_", "n_label_", "count_exact_", "count_exact_label_", "count_fnc_",
                          "count_fnc_label_", "n_batch_label_"})
      make(c + s, H5T_STD_I64LE, false);
    if (has_lambda) {
      make("count_lambda_" + s, H5T_STD_I64LE, false);
      make("count_lambda_label_" + s, H5T_STD_I64LE, false);
    }
  }
  h5::write_attr_int(f, "fnvlp_schema", 1);
  h5::write_attr_int(f, "n", n);
  h5::write_attr_int(f, "quantiles", p.quantiles);
  h5::write_attr_int(f, "bins", p.bins);
  h5::write_attr_double(f, "alpha", p.alpha);
  h5::write_attr_double(f, "quantile_error_bound", 2.0 / p.bins);
  h5::write_attr_int(f, "fnc_batch", p.fnc_batch);
  h5::write_attr_int(f, "fnc_seed", static_cast<int64_t>(p.fnc_seed));
  h5::write_attr_string(f, "embeddings", embeddings);
  h5::write_attr_string(f, "lambda_source", lambda_source);
  h5::write_attr_string(f, "threshold_convention",
                        "k-th largest similarity over the anchor's negatives (pairs with another "
                        "image_id), k = clamp(ceil(alpha * n_neg), 1, n_neg); NaN if n_neg = 0");
  h5::write_attr_string(f, "quantile_convention",
                        "quantiles[:, j] = value of ascending rank 1 + floor(j * (n_neg - 1) / "
                        "(m - 1)), j = 0..m-1; j = 0 and m-1 exact, others from a histogram of "
                        "`bins` bins over [-1, 1], |error| < quantile_error_bound");
  h5::write_attr_string(f, "count_convention",
                        "count_X = negatives with similarity >= threshold X; *_label_ = of those, "
                        "sharing the anchor's label (anchors with label -1 count 0)");
  f.close(path);
}

void write_rows_of(const std::string& path, const RowStats& st, const char* modality, bool first,
                   bool has_lambda) {
  std::lock_guard<std::mutex> lock(h5::global_mutex());
  h5::Handle f = h5::open_file(path, true);
  const auto row = static_cast<hsize_t>(st.row0), n = static_cast<hsize_t>(st.rows);
  auto put = [&](const std::string& name, hid_t type, const void* data) {
    h5::Handle ds = h5::open_dataset(f, name, path);
    if (n > 0) h5::write_rows(ds, type, data, row, n, false, path + ":/" + name);
    ds.close(path + ":/" + name);
  };
  const std::string s = modality;
  if (first) {
    std::vector<int64_t> ids(static_cast<size_t>(st.rows));
    for (int64_t i = 0; i < st.rows; ++i) ids[static_cast<size_t>(i)] = st.row0 + i;
    put("pair_id", H5T_NATIVE_INT64, ids.data());
  }
  put("threshold_" + s, H5T_NATIVE_FLOAT, st.threshold.data());
  put("quantiles_" + s, H5T_NATIVE_FLOAT, st.quantiles.data());
  put("fnc_threshold_" + s, H5T_NATIVE_FLOAT, st.fnc_threshold.data());
  put("n_neg_" + s, H5T_NATIVE_INT64, st.n_neg.data());
  put("n_label_" + s, H5T_NATIVE_INT64, st.n_label.data());
  put("count_exact_" + s, H5T_NATIVE_INT64, st.count.data());
  put("count_exact_label_" + s, H5T_NATIVE_INT64, st.count_label.data());
  put("count_fnc_" + s, H5T_NATIVE_INT64, st.count_fnc.data());
  put("count_fnc_label_" + s, H5T_NATIVE_INT64, st.count_fnc_label.data());
  put("n_batch_label_" + s, H5T_NATIVE_INT64, st.n_batch_label.data());
  if (has_lambda) {
    put("count_lambda_" + s, H5T_NATIVE_INT64, st.count_lambda.data());
    put("count_lambda_label_" + s, H5T_NATIVE_INT64, st.count_lambda_label.data());
  }
  f.close(path);
}

// STATS.h5: rank 0 creates every dataset, then each rank writes its rows in turn.
void write_stats(const Comm& comm, const JobOptions& opt, int64_t n,
                 const std::vector<RowStats>& stats, bool has_lambda,
                 const std::string& lambda_source) {
  comm.collective([&] {
    if (comm.is_root())
      create_stats_file(opt.out + ".tmp", n, opt.params, has_lambda, lambda_source, opt.embeddings);
  });
  for (int r = 0; r < comm.size(); ++r) {
    comm.collective([&] {
      if (comm.rank() != r) return;
      progress("simstat: writing STATS rows");
      for (size_t i = 0; i < stats.size(); ++i)
        write_rows_of(opt.out + ".tmp", stats[i], kModalities[i].name, i == 0, has_lambda);
    });
  }
  comm.collective([&] {
    if (comm.is_root())
      FNVLP_CHECK(std::rename((opt.out + ".tmp").c_str(), opt.out.c_str()) == 0,
                  "cannot rename " << opt.out << ".tmp to " << opt.out);
  });
}

}  // namespace

ExactThresholds exact_thresholds(const std::string& embeddings, int64_t row0, int64_t rows,
                                 double alpha) {
  static const KokkosRuntime runtime;  // no-op when the job initialised Kokkos itself
  (void)runtime;
  const data::EmbeddingsFile file(embeddings, data::EmbeddingsFile::Columns::kStreamed);
  const int64_t n = file.size(), dim = file.dim();
  FNVLP_CHECK(row0 >= 0 && rows >= 0 && row0 + rows <= n,
              embeddings << ": anchors [" << row0 << ", " << row0 + rows << ") outside its " << n
                         << " pairs");
  Params p;
  p.alpha = alpha;
  p.quantiles = 2;  // only the thresholds are kept
  p.fnc_batch = 0;
  const ColumnReader columns = [&](int64_t c0, int64_t cn, int64_t* id, int32_t* lab,
                                   int64_t* bat) {
    file.read_columns(c0, cn, id, lab);
    std::fill_n(bat, cn, int64_t{-1});
  };
  ExactThresholds out;
  for (const auto& m : kModalities) {
    std::vector<float> anchors(static_cast<size_t>(rows * dim));
    file.read_emb(m.image, row0, rows, anchors.data());
    const CandidateReader reader = [&](int64_t c0, int64_t cn, float* dst) {
      file.read_emb(!m.image, c0, cn, dst);
    };
    const StridedReader strided = [&](int64_t c0, int64_t stride, int64_t cn, float* dst) {
      file.read_emb(!m.image, c0, cn, dst, stride);
    };
    RowStats s;
    try {
      s = anchor_stats(anchors.data(), row0, rows, dim, reader, n, columns, nullptr, p, strided);
    } catch (const Error& e) {
      FNVLP_FAIL(embeddings << " (" << m.name << " anchors): " << e.message());
    }
    (m.image ? out.image : out.text) = std::move(s.threshold);
  }
  return out;
}

nlohmann::json run_simstat(const Comm& comm, const JobOptions& opt) {
  const auto t0 = std::chrono::steady_clock::now();
  FNVLP_CHECK(!opt.embeddings.empty() && !opt.out.empty(), "--embeddings and --out are required");
  std::unique_ptr<data::EmbeddingsFile> file, lam_file;
  std::string lambda_source;
  comm.collective([&] {
    file = std::make_unique<data::EmbeddingsFile>(opt.embeddings);
    FNVLP_CHECK(file->size() > 0, opt.embeddings << ": no pairs");
    check_params(opt.params, file->dim());
    lambda_source = resolve_lambda_source(opt.lambda_from);
    if (!lambda_source.empty()) {
      lam_file = std::make_unique<data::EmbeddingsFile>(lambda_source);
      FNVLP_CHECK(lam_file->has_lambda(),
                  lambda_source << ": no glofnd_lambda_image/glofnd_lambda_text (did GloFND run?)");
      FNVLP_CHECK(lam_file->size() == file->size(), lambda_source << ": " << lam_file->size()
                                                                  << " pairs, " << opt.embeddings
                                                                  << " has " << file->size());
    } else if (file->has_lambda()) {
      lambda_source = opt.embeddings;
    }
  });
  const data::EmbeddingsFile* lam =
      lam_file ? lam_file.get() : (file->has_lambda() ? file.get() : nullptr);
  const int64_t n = file->size(), dim = file->dim();
  const int64_t lo = n * comm.rank() / comm.size(), hi = n * (comm.rank() + 1) / comm.size();
  const auto batches = fnc_batches(n, opt.params.fnc_batch, opt.params.fnc_seed);
  if (comm.is_root())
    spdlog::info("fnvlp-simstat: {} pairs, dim {}, alpha {}, {} quantiles, {} ranks, lambda {}", n,
                 dim, opt.params.alpha, opt.params.quantiles, comm.size(),
                 lambda_source.empty() ? "none" : lambda_source);

  nlohmann::json summary;
  std::vector<RowStats> stats;
  std::vector<std::vector<float>> lambdas;
  for (const auto& m : kModalities) {
    const auto m0 = std::chrono::steady_clock::now();
    RowStats s;
    std::vector<float> lambda;
    comm.collective([&] {
      std::vector<float> anchors(static_cast<size_t>((hi - lo) * dim));
      file->read_emb(m.image, lo, hi - lo, anchors.data());
      if (lam) {
        lambda.resize(static_cast<size_t>(hi - lo));
        lam->read_lambda(m.image, lo, hi - lo, lambda.data());
      }
      const CandidateReader reader = [&](int64_t c0, int64_t cn, float* out) {
        file->read_emb(!m.image, c0, cn, out);
      };
      const StridedReader strided = [&](int64_t c0, int64_t stride, int64_t cn, float* out) {
        file->read_emb(!m.image, c0, cn, out, stride);
      };
      try {
        s = anchor_stats(anchors.data(), lo, hi - lo, dim, reader, n, file->image_id(),
                         file->label(), batches, lam ? lambda.data() : nullptr, opt.params,
                         strided);
      } catch (const Error& e) {
        FNVLP_FAIL(opt.embeddings << " (" << m.name << " anchors): " << e.message());
      }
    });
    summary[m.name] = summarise(comm, s, file->label(), lam != nullptr, lambda);
    // This modality's statistics on the slowest rank, and the largest rank's device buffers.
    summary[m.name]["seconds"] = comm.allreduce_max(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - m0).count());
    summary[m.name]["device_buffer_bytes"] = comm.allreduce_max(s.buffer_bytes);
    stats.push_back(std::move(s));
    lambdas.push_back(std::move(lambda));
  }
  write_stats(comm, opt, n, stats, lam != nullptr, lambda_source);
  summary["n"] = n;
  summary["dim"] = dim;
  summary["alpha"] = opt.params.alpha;
  summary["quantiles"] = opt.params.quantiles;
  summary["bins"] = opt.params.bins;
  summary["quantile_error_bound"] = 2.0 / opt.params.bins;
  summary["fnc_batch"] = opt.params.fnc_batch;
  summary["ranks"] = comm.size();
  // Where the kernels ran: the execution space and its concurrency per rank (threads or a
  // device's).
  summary["kokkos_space"] = ExecSpace::name();
  summary["path"] = opt.params.generic_path                                        ? "generic"
                    : opt.params.device_path || (kDeviceBuild && !opt.params.host) ? "device"
                                                                                   : "host";
  summary["kokkos_concurrency"] = ExecSpace().concurrency();
  summary["embeddings"] = opt.embeddings;
  summary["lambda_source"] = lambda_source;
  summary["epoch"] = file->epoch();
  summary["step"] = file->step();
  summary["seconds"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  comm.collective([&] {
    if (comm.is_root() && !opt.json.empty()) {
      std::ofstream os(opt.json);
      os << summary.dump(2) << "\n";
      FNVLP_CHECK(os.good(), "cannot write " << opt.json);
    }
  });
  return summary;
}

}  // namespace fnvlp::similarity
