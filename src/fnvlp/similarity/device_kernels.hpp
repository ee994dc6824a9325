#pragma once
// Kernels of simstat's device path (device_path.hpp), portable Kokkos like kernels.hpp: they run
// on the GPU in a build against Kokkos on CUDA and on the host in the tests (Params::device_path).
//
// The device path computes the generic path's statistics (the same STATS bits: its similarity of
// anchor a and candidate c is f = dot_in_double(a, c), the double sum in ascending k rounded to
// float once) in two passes over the candidates, each a GEMM per tile and a fold of the tile:
//
// Pass 1, exact: a double GEMM (FP64 tensor cores on A100/H100/H200) gives d with
//   |d - (dot_in_double's double sum)| <= e = f64_error_factor(dim) |a| |c|,
// so f is the float both ends of [d - e, d + e] round to, where they round to the same float;
// where a float rounding boundary lies inside (mostly near-zero similarities, whose floats are
// closest together), f is recomputed by dot_in_double itself (exact_from_f64). Every value's exact
// f then goes into the row's histogram, minimum, maximum and lambda counts, and its FNC batch's
// values are gathered (fold_exact). Per row, the histogram names the bin b of the k-th largest
// negative f and the count `above` of values in higher bins (finalize_bins), as finalize_rows does
// for the reservoir, and gives the quantile profile.
//
// Pass 2, near the threshold: a TF32 GEMM (tensor cores) gives x with
//   |x - f| <= e32 = tf32_error_factor(dim) |a| |c|;
// a value with x - e32 above bin b is in a higher bin (its label counts), one with x + e32 below
// it is in a lower bin, and the others (a window of bin b's width + 2 e32 around it) are recomputed
// exactly: those in bin b are collected (filter_window).
// The k-th largest is the (k - above)-th largest of bin b's values, which only they decide
// (select_in_bucket). Every row's collected count must equal its bin's count from pass 1: a
// mismatch (a TF32 GEMM outside its bound) fails the job instead of giving a wrong threshold.
//
// Unlike the host paths' reservoir, nothing here depends on the order of the values, so a team of
// threads folds one anchor's row (histogram in team scratch memory, counts by team reductions).
// TF32 or bf16 cannot serve pass 1: their error (~2e-3 on unit vectors) is several histogram bins
// wide (2 / 4096), so every value would need the exact recomputation.
#include <cstdint>

#include "fnvlp/similarity/kernels.hpp"

namespace fnvlp::similarity {

// Bound factor of a double GEMM against dot_in_double, both on float inputs: the products are
// exact in double, so each is a sum of dim exact terms; any IEEE summation order is within
// (dim - 1) u sum |a_k c_k| (u = 2^-53) of the exact sum, so the two within 2 (dim - 1) u |a| |c|
// (Cauchy-Schwarz). Twice that, for rounding of the norms and of d -+ e.
KOKKOS_INLINE_FUNCTION double f64_error_factor(int64_t dim) {
  return 4.0 * static_cast<double>(dim + 1) * 0x1p-53;
}

// Bound factor of a TF32 GEMM (operands rounded or truncated to 10 mantissa bits: 2^-10 each;
// products exact in float; float accumulation, allowed 4x the round-to-nearest error) against
// dot_in_double's float (itself within 2^-24 |a| |c| of the exact sum): twice the sum of those.
KOKKOS_INLINE_FUNCTION double tf32_error_factor(int64_t dim) {
  return 2.0 * (0x1p-9 + 0x1p-20 + static_cast<double>(dim + 3) * 0x1p-22);
}

// dot_in_double(a, c, dim) from a double product d within e of its double sum (see above).
// `rechecked` counts the recomputations. Bits decide, not values: -0 and +0 differ.
template <typename T>
KOKKOS_INLINE_FUNCTION float exact_from_f64(double d, double e, const T* a, const T* c, int64_t dim,
                                            int64_t& rechecked) {
  const float lo = static_cast<float>(d - e), hi = static_cast<float>(d + e);
  if (order_key(lo) == order_key(hi)) return lo;
  ++rechecked;
  return dot_in_double(a, c, dim);
}

// The floats of histogram bin b: [bin_low(b), bin_high(b)], by bisection over the order keys of
// sim_bin itself (so they are exactly what sim_bin does, rounding included). Bin 0 starts at -inf
// and the last bin ends at +inf.
KOKKOS_INLINE_FUNCTION float bin_first_float(int32_t b, int32_t bins) {
  // The smallest float whose bin is >= b.
  int64_t lo = order_key(-Kokkos::Experimental::infinity<float>::value);
  int64_t hi = order_key(Kokkos::Experimental::infinity<float>::value);
  if (sim_bin(from_order_key(static_cast<int32_t>(lo)), bins) >= b)
    return from_order_key(static_cast<int32_t>(lo));
  while (hi - lo > 1) {  // bin(lo) < b <= bin(hi)
    const int64_t mid = lo + (hi - lo) / 2;
    if (sim_bin(from_order_key(static_cast<int32_t>(mid)), bins) >= b)
      hi = mid;
    else
      lo = mid;
  }
  return from_order_key(static_cast<int32_t>(hi));
}
KOKKOS_INLINE_FUNCTION float bin_low(int32_t b, int32_t bins) {
  return b == 0 ? -Kokkos::Experimental::infinity<float>::value : bin_first_float(b, bins);
}
KOKKOS_INLINE_FUNCTION float bin_high(int32_t b, int32_t bins) {
  if (b >= bins - 1) return Kokkos::Experimental::infinity<float>::value;
  return from_order_key(order_key(bin_first_float(b + 1, bins)) - 1);
}

// What the device path keeps per row besides RowState (kernels.hpp: ids, k, lambda, histogram,
// minimum and maximum, lambda counts, FNC buffer, column cursors; the reservoir unused).
template <typename Space>
struct DeviceRows {
  View1<double, Space> err64, err32;   // per row: f64 / tf32 bound factor x |a| x max |c|
  View1<int32_t, Space> bin;           // bin of the k-th largest (-1: no negatives)
  View1<float, Space> bin_lo, bin_hi;  // its floats
  View1<int64_t, Space> above;         // values in higher bins
  View1<int64_t, Space> above_label;   // ... sharing the anchor's label (pass 2)
  View1<int64_t, Space> need;          // values in the bin (pass 1's histogram)
  View1<int64_t, Space> got;           // ... collected by pass 2
  View1<int64_t, Space> offset;        // start of the row's values in the bucket

  DeviceRows() = default;
  explicit DeviceRows(int64_t rows)
      : err64("fnvlp::similarity::err64", rows),
        err32("fnvlp::similarity::err32", rows),
        bin("fnvlp::similarity::bin", rows),
        bin_lo("fnvlp::similarity::bin_lo", rows),
        bin_hi("fnvlp::similarity::bin_hi", rows),
        above("fnvlp::similarity::above", rows),
        above_label("fnvlp::similarity::above_label", rows),
        need("fnvlp::similarity::need", rows),
        got("fnvlp::similarity::got", rows),
        offset("fnvlp::similarity::offset", rows) {}
};

// Threads per team: a GPU's 256 (8 warps, so that a 4,096-bin histogram per team still lets 8
// teams share a multiprocessor's shared memory); on the host the threads Kokkos has, so that a
// threaded backend's tests run the team code concurrently.
template <typename Space>
int team_threads() {
  if constexpr (kOnHost<Space>)
    return Space().concurrency() > 1 ? Space().concurrency() : 1;
  else
    return 256;
}

// The team scratch level that holds `bytes` (0: a multiprocessor's shared memory).
template <typename Space>
int scratch_level(size_t bytes) {
  return bytes <= static_cast<size_t>(Kokkos::TeamPolicy<Space>::scratch_size_max(0)) ? 0 : 1;
}

template <typename Space>
using ScratchInts = Kokkos::View<int32_t*, typename Space::scratch_memory_space,
                                 Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

// Pass 1 over one tile: rows [0, rows) x candidates [c0, c0 + cols) of the block, from the double
// GEMM's sims (rows x >= cols, row-major) of the anchors `a` and the tile's candidates `c` (both
// double copies of the floats; c's row j is candidate c0 + j). Positives (the anchor's image_id,
// found through pos_cols as in accumulate_tile) are marked NaN in sims and left out. image_id and
// label: every candidate's.
template <typename Space>
void fold_exact(const Space& space, const View2<double, Space>& sims, int64_t cols, int64_t c0,
                const View2<double, Space>& a, const View2<double, Space>& c,
                const View1<int64_t, Space>& image_id, const View1<int32_t, Space>& label,
                const View1<const int64_t, Space>& pos_cols,
                const View1<const int64_t, Space>& bat_cols, const RowState<Space>& st,
                const DeviceRows<Space>& dr, int64_t rows) {
  using Policy = Kokkos::TeamPolicy<Space>;
  const int32_t bins = st.bins();
  const int64_t dim = static_cast<int64_t>(a.extent(1)), c1 = c0 + cols;
  const size_t scratch = ScratchInts<Space>::shmem_size(static_cast<size_t>(bins));
  const int level = scratch_level<Space>(scratch);
  const auto policy =
      Policy(space, rows, team_threads<Space>()).set_scratch_size(level, Kokkos::PerTeam(scratch));
  Kokkos::parallel_for(
      "fnvlp::similarity::fold_exact", policy,
      KOKKOS_LAMBDA(const typename Policy::member_type& t) {
        const int64_t i = t.league_rank();
        if (st.k(i) == 0) return;  // no negatives: nothing to count (the whole team returns)
        const ScratchInts<Space> h(t.team_scratch(level), bins);
        Kokkos::single(Kokkos::PerTeam(t), [&]() {
          int64_t pc = st.pos_cur(i);
          for (const int64_t pe = st.pos_end(i); pc < pe && pos_cols(pc) < c1; ++pc)
            sims(i, pos_cols(pc) - c0) = static_cast<double>(quiet_nan());
          st.pos_cur(i) = pc;
        });
        Kokkos::parallel_for(Kokkos::TeamThreadRange(t, bins), [&](const int32_t b) { h(b) = 0; });
        t.team_barrier();
        const int32_t lab = st.label(i);
        const float lam = st.lambda(i);  // NaN when absent: s >= lam is then always false
        const double e = dr.err64(i);
        const double* ai = &a(i, 0);
        // Minimum and maximum as order keys: integer reductions, and -0 below +0 whatever the
        // order.
        int32_t lo = order_key(Kokkos::Experimental::infinity<float>::value);
        int32_t hi = order_key(-Kokkos::Experimental::infinity<float>::value);
        int64_t lam_n = 0, lam_lab = 0, rechecked = 0;
        Kokkos::parallel_for(Kokkos::TeamThreadRange(t, cols), [&](const int64_t j) {
          const double d = sims(i, j);
          if (d != d) return;  // a positive
          const float s = exact_from_f64(d, e, ai, &c(j, 0), dim, rechecked);
          Kokkos::atomic_increment(&h(sim_bin(s, bins)));
          const int32_t key = order_key(s);
          lo = key < lo ? key : lo;
          hi = key > hi ? key : hi;
          if (s >= lam) {
            ++lam_n;
            lam_lab += (lab >= 0 && label(c0 + j) == lab) ? 1 : 0;
          }
        });
        // A barrier after each: Kokkos 3.4's CUDA team_reduce keeps its partial results in one
        // static shared array per value type, which a fast warp's next reduction would overwrite
        // while others still read it.
        t.team_reduce(Kokkos::Min<int32_t>(lo));
        t.team_barrier();
        t.team_reduce(Kokkos::Max<int32_t>(hi));
        t.team_barrier();
        t.team_reduce(Kokkos::Sum<int64_t>(lam_n));
        t.team_barrier();
        t.team_reduce(Kokkos::Sum<int64_t>(lam_lab));
        t.team_barrier();
        t.team_reduce(Kokkos::Sum<int64_t>(rechecked));
        t.team_barrier();
        Kokkos::parallel_for(Kokkos::TeamThreadRange(t, bins), [&](const int32_t b) {
          if (h(b) != 0) st.hist(i, b) += h(b);
        });
        Kokkos::single(Kokkos::PerTeam(t), [&]() {
          const float vlo = from_order_key(lo), vhi = from_order_key(hi);
          if (order_key(vlo) < order_key(st.vmin(i))) st.vmin(i) = vlo;
          if (order_key(vhi) > order_key(st.vmax(i))) st.vmax(i) = vhi;
          st.lam_n(i) += lam_n;
          st.lam_lab(i) += lam_lab;
          // FNC batch: this tile's columns of the anchor's batch, positives left out.
          const int64_t self = st.image_id(i), cap = static_cast<int64_t>(st.bat_val.extent(1));
          int64_t nb = st.bat_n(i), bc = st.bat_cur(i), more = 0;
          for (const int64_t be = st.bat_end(i); nb < cap && bc < be && bat_cols(bc) < c1; ++bc) {
            const int64_t j = bat_cols(bc) - c0;
            if (image_id(c0 + j) == self) continue;
            st.bat_val(i, nb) = exact_from_f64(sims(i, j), e, ai, &c(j, 0), dim, more);
            st.bat_lab(i, nb) = (lab >= 0 && label(c0 + j) == lab) ? 1 : 0;
            ++nb;
          }
          st.bat_cur(i) = bc;
          st.bat_n(i) = nb;
          st.scalar_n(i) += rechecked + more;
        });
      });
}

// After pass 1, per row [0, rows): the bin of the k-th largest, the values above it and in it,
// its floats, and the quantile profile (as finalize_rows; the threshold and counts come from
// select_in_bucket). Positions the positives' cursors for pass 2.
template <typename Space>
void finalize_bins(const Space& space, const RowState<Space>& st, const DeviceRows<Space>& dr,
                   const RowResult<Space>& out, int64_t rows) {
  const int32_t bins = st.bins();
  const int64_t m = static_cast<int64_t>(out.quantiles.extent(1));
  Kokkos::parallel_for(
      "fnvlp::similarity::finalize_bins", Kokkos::RangePolicy<Space>(space, 0, rows),
      KOKKOS_LAMBDA(const int64_t i) {
        const int64_t k = st.k(i);
        out.restart(i) = 0;
        st.pos_cur(i) = st.pos_begin(i);
        dr.above_label(i) = dr.got(i) = 0;
        if (k == 0) {
          dr.bin(i) = -1;
          dr.need(i) = dr.above(i) = 0;
          out.threshold(i) = quiet_nan();
          out.count(i) = out.count_lab(i) = 0;
          for (int64_t j = 0; j < m; ++j) out.quantiles(i, j) = quiet_nan();
          return;
        }
        const int32_t* hist = &st.hist(i, 0);
        int32_t b = sim_bin(st.vmax(i), bins);
        int64_t above = 0;
        while (above + hist[b] < k) above += hist[b--];
        dr.bin(i) = b;
        dr.above(i) = above;
        dr.need(i) = hist[b];
        dr.bin_lo(i) = bin_low(b, bins);
        dr.bin_hi(i) = bin_high(b, bins);
        quantile_profile(hist, bins, st.vmin(i), st.vmax(i), out.quantiles, i);
      });
}

// Pass 2 over one tile for rows [r0, r0 + rows) of the block, from the TF32 GEMM's sims (rows x
// >= cols: row r - r0 is block row r) of the float anchors a (block rows) and the float
// candidates c (all; the tile is [c0, c0 + cols)): bin-b values into the bucket at dr.offset,
// labels above bin b into dr.above_label. label: every candidate's.
template <typename Space>
void filter_window(const Space& space, const View2<float, Space>& sims, int64_t cols, int64_t c0,
                   const View2<float, Space>& a, const View2<float, Space>& c,
                   const View1<int32_t, Space>& label, const View1<const int64_t, Space>& pos_cols,
                   const RowState<Space>& st, const DeviceRows<Space>& dr,
                   const View1<float, Space>& bucket_val, const View1<uint8_t, Space>& bucket_lab,
                   int64_t r0, int64_t rows) {
  using Policy = Kokkos::TeamPolicy<Space>;
  const int32_t bins = st.bins();
  const int64_t dim = static_cast<int64_t>(a.extent(1)), c1 = c0 + cols;
  Kokkos::parallel_for(
      "fnvlp::similarity::filter_window", Policy(space, rows, team_threads<Space>()),
      KOKKOS_LAMBDA(const typename Policy::member_type& t) {
        const int64_t i = r0 + t.league_rank(), r = t.league_rank();
        if (dr.bin(i) < 0) return;
        Kokkos::single(Kokkos::PerTeam(t), [&]() {
          int64_t pc = st.pos_cur(i);
          for (const int64_t pe = st.pos_end(i); pc < pe && pos_cols(pc) < c1; ++pc)
            sims(r, pos_cols(pc) - c0) = quiet_nan();
          st.pos_cur(i) = pc;
        });
        t.team_barrier();
        const int32_t lab = st.label(i), bin = dr.bin(i);
        const double e = dr.err32(i), lo = dr.bin_lo(i), hi = dr.bin_hi(i);
        const float* ai = &a(i, 0);
        const int64_t base = dr.offset(i);
        int64_t above_label = 0, rechecked = 0;
        Kokkos::parallel_for(Kokkos::TeamThreadRange(t, cols), [&](const int64_t j) {
          const float x = sims(r, j);
          if (x != x) return;  // a positive
          const double xd = x;
          if (xd + e < lo) return;  // below the bin
          const uint8_t same = (lab >= 0 && label(c0 + j) == lab) ? 1 : 0;
          if (xd - e > hi) {  // above it
            above_label += same;
            return;
          }
          ++rechecked;
          const float f = dot_in_double(ai, &c(c0 + j, 0), dim);
          const int32_t b = sim_bin(f, bins);
          if (b > bin) {
            above_label += same;
          } else if (b == bin) {
            const int64_t slot = Kokkos::atomic_fetch_add(&dr.got(i), int64_t{1});
            if (slot < dr.need(i)) {  // more would break the bound: counted, not stored
              bucket_val(base + slot) = f;
              bucket_lab(base + slot) = same;
            }
          }
        });
        t.team_reduce(Kokkos::Sum<int64_t>(above_label));
        t.team_barrier();  // as in fold_exact
        t.team_reduce(Kokkos::Sum<int64_t>(rechecked));
        t.team_barrier();
        Kokkos::single(Kokkos::PerTeam(t), [&]() {
          dr.above_label(i) += above_label;
          st.scalar_n(i) += rechecked;
        });
      });
}

// After pass 2, rows [r0, r0 + rows): the threshold, the (k - above)-th largest of the row's bin
// values, and the counts of values >= it (the values above the bin and those of the bin).
template <typename Space>
void select_in_bucket(const Space& space, const RowState<Space>& st, const DeviceRows<Space>& dr,
                      const View1<float, Space>& bucket_val,
                      const View1<uint8_t, Space>& bucket_lab, const RowResult<Space>& out,
                      int64_t r0, int64_t rows) {
  Kokkos::parallel_for(
      "fnvlp::similarity::select_in_bucket", Kokkos::RangePolicy<Space>(space, r0, r0 + rows),
      KOKKOS_LAMBDA(const int64_t i) {
        const int64_t n = dr.need(i);
        if (dr.bin(i) < 0 || dr.got(i) != n) return;  // no negatives, or checked by the caller
        float* vals = &bucket_val(dr.offset(i));
        uint8_t* flags = &bucket_lab(dr.offset(i));
        const float v = select_kth_largest(vals, flags, n, st.k(i) - dr.above(i)).value;
        int64_t count = dr.above(i), same = dr.above_label(i);
        for (int64_t t = 0; t < n; ++t) {
          count += vals[t] >= v;
          same += vals[t] >= v ? flags[t] : 0;
        }
        out.threshold(i) = v;
        out.count(i) = count;
        out.count_lab(i) = same;
      });
}

// dst(i, k) = src(r0 + i, k) for i < rows: the double copies of float rows the double GEMM reads.
template <typename Space>
void rows_to_double(const Space& space, const View2<float, Space>& src, int64_t r0, int64_t rows,
                    const View2<double, Space>& dst) {
  const auto dim = static_cast<int64_t>(src.extent(1));
  Kokkos::parallel_for(
      "fnvlp::similarity::rows_to_double", Kokkos::RangePolicy<Space>(space, 0, rows * dim),
      KOKKOS_LAMBDA(const int64_t u) { dst(u / dim, u % dim) = src(r0 + u / dim, u % dim); });
}

// The host's stand-ins for the device's GEMMs (device_gemm.hpp), as Kokkos kernels: s(i, j) for
// i < rows, j < cols, as wrong as the device path lets a GEMM be, so that the tests exercise its
// re-checks. f64: the double sum in descending k (another order than dot_in_double's) moved by up
// to half the bound pass 1 allows (f64_error_factor |a| |c| / 2). tf32: both operands truncated to
// TF32's 10 mantissa bits, products and sums in float, moved by up to 0.4 of pass 2's bound. A
// hash of (i, j) chooses each move.
KOKKOS_INLINE_FUNCTION double standin_move(int64_t i, int64_t j) {
  uint64_t h = static_cast<uint64_t>(i) * 0x9E3779B97F4A7C15ull ^ static_cast<uint64_t>(j);
  h ^= h >> 31;
  h *= 0xBF58476D1CE4E5B9ull;
  h ^= h >> 29;
  return static_cast<double>(h >> 11) * 0x1p-52 - 1.0;  // in [-1, 1)
}

template <typename Space>
void gemm_f64_standin(const Space& space, const View2<double, Space>& a, int64_t rows,
                      const View2<double, Space>& c, int64_t cols, const View2<double, Space>& s) {
  const auto dim = static_cast<int64_t>(a.extent(1));
  Kokkos::parallel_for(
      "fnvlp::similarity::gemm_f64_standin", Kokkos::RangePolicy<Space>(space, 0, rows * cols),
      KOKKOS_LAMBDA(const int64_t t) {
        const int64_t i = t / cols, j = t % cols;
        double acc = 0.0, na = 0.0, nc = 0.0;
        for (int64_t k = dim - 1; k >= 0; --k) {
          acc += a(i, k) * c(j, k);
          na += a(i, k) * a(i, k);
          nc += c(j, k) * c(j, k);
        }
        const double bound = f64_error_factor(dim) * kmath::sqrt(na) * kmath::sqrt(nc);
        s(i, j) = acc + 0.5 * bound * standin_move(i, j);
      });
}

KOKKOS_INLINE_FUNCTION float truncate_to_tf32(float v) {
  uint32_t bits;
  memcpy(&bits, &v, sizeof bits);
  bits &= 0xffffe000u;
  float out;
  memcpy(&out, &bits, sizeof out);
  return out;
}

template <typename Space>
void gemm_tf32_standin(const Space& space, const View2<float, Space>& a, int64_t rows,
                       const View2<float, Space>& c, int64_t cols, const View2<float, Space>& s) {
  const auto dim = static_cast<int64_t>(a.extent(1));
  Kokkos::parallel_for(
      "fnvlp::similarity::gemm_tf32_standin", Kokkos::RangePolicy<Space>(space, 0, rows * cols),
      KOKKOS_LAMBDA(const int64_t t) {
        const int64_t i = t / cols, j = t % cols;
        float acc = 0.0f;
        double na = 0.0, nc = 0.0;
        for (int64_t k = 0; k < dim; ++k) {
          acc += truncate_to_tf32(a(i, k)) * truncate_to_tf32(c(j, k));
          na += static_cast<double>(a(i, k)) * a(i, k);
          nc += static_cast<double>(c(j, k)) * c(j, k);
        }
        const double bound = tf32_error_factor(dim) * kmath::sqrt(na) * kmath::sqrt(nc);
        s(i, j) = static_cast<float>(acc + 0.4 * bound * standin_move(i, j));
      });
}

}  // namespace fnvlp::similarity
