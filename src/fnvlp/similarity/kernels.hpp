#pragma once
// Kokkos kernels of the offline similarity statistics (ARCHITECTURE.md §11): per-row exact k-th
// largest over a stream of similarity tiles, a fine histogram for the m-quantile profile, and
// counts above per-row thresholds. Every kernel takes its execution space first, is labelled
// "fnvlp::similarity::...", and only touches views of that space's memory.
//
// Exact k-th largest without the N x N matrix (the "threshold reservoir"): each row keeps every
// value strictly above a running threshold tau in a buffer of capacity C >= 2k, plus the number of
// values equal to tau (and how many of those share the anchor's label). When the buffer fills, a
// selection finds its k-th largest v, which becomes the new tau: the values > v stay (fewer than
// k), the values == v become the tie count, everything below v can never be among the k largest.
// Memory is O(C) per row whatever N is, and the amortised cost per value is O(1).
//
// Starting threshold: from tau = -inf, a stream in random order offers about k (1 + ln(N / k))
// values to the reservoir (a value is offered when it is among the k largest seen so far): 5.6% of
// all at alpha = 1%, each through the scalar path. A row may instead start at tau0, an estimate
// of a value a little below its k-th largest (simstat.cpp takes it from a sample of the
// candidates); only the values above it are offered. Nothing else depends on tau0: the histogram,
// min/max and lambda counts see every value. If tau0 was in fact above the k-th largest, the row
// ends with fewer than k values >= tau; finalize_rows flags it, and the caller streams the block
// again from -inf. So the results are exact whatever tau0 is; a good tau0 only makes them cheaper.
//
// Device portability (spaces.hpp): the kernels use only KOKKOS_INLINE_FUNCTION helpers and the
// views of their space. The host-only fast paths (AVX2 chunk test, BLAS GEMM) are compile-time
// branches on kOnHost; the generic path a device takes (portable chunk test, similarity_kernel) can
// be forced on the host (accumulate_tile<true>, Params::generic_path) to test it here.
#include <cstdint>
#include <cstring>

#include "fnvlp/similarity/classify.hpp"
#include "fnvlp/similarity/spaces.hpp"

namespace fnvlp::similarity {

// Result of a selection: the k-th largest value v of a[0, n) and the layout it leaves behind:
// a[0, gt) > v, a[gt, ge) == v, a[ge, n) < v.
struct Selection {
  float value;
  int64_t gt;
  int64_t ge;
};

// Swaps entries i and j of `a` and of `flag` alongside (std::swap is not a device function).
KOKKOS_INLINE_FUNCTION void swap_entries(float* a, uint8_t* flag, int64_t i, int64_t j) {
  const float t = a[i];
  a[i] = a[j];
  a[j] = t;
  const uint8_t f = flag[i];
  flag[i] = flag[j];
  flag[j] = f;
}

// In-place quickselect of the k-th largest (1-based) with a three-way partition, so runs of ties
// cost one pass. `flag` is permuted alongside `a`. Deterministic (median-of-three pivot).
KOKKOS_INLINE_FUNCTION Selection select_kth_largest(float* a, uint8_t* flag, int64_t n, int64_t k) {
  int64_t l = 0, r = n;  // the k-th largest lies in [l, r); [0, l) > it, [r, n) < it
  while (true) {
    const float x = a[l], y = a[l + (r - l) / 2], z = a[r - 1];
    const float p = (x < y) ? ((y < z) ? y : ((x < z) ? z : x)) : ((x < z) ? x : ((y < z) ? z : y));
    // Dutch-flag partition of [l, r) into > p | == p | < p.
    int64_t lt = l, i = l, gt = r;
    while (i < gt) {
      if (a[i] > p) {
        swap_entries(a, flag, i++, lt++);
      } else if (a[i] < p) {
        swap_entries(a, flag, i, --gt);
      } else {
        ++i;
      }
    }
    if (k - 1 < lt)
      r = lt;
    else if (k - 1 >= gt)
      l = gt;
    else
      return {p, lt, gt};
  }
}

// k = ceil(alpha * n), clamped to [1, n] (0 when n == 0): the rank of the exact (1 -
// alpha)-quantile threshold GloFND tracks (GloFND §3.1: lambda_i is the (1 - alpha)-quantile of
// anchor i's negative similarities), computed in double.
KOKKOS_INLINE_FUNCTION int64_t target_rank(double alpha, int64_t n) {
  if (n <= 0) return 0;
  const auto k = static_cast<int64_t>(kmath::ceil(alpha * static_cast<double>(n)));
  return k < 1 ? 1 : (k > n ? n : k);
}

// A signed integer whose order is the order of the non-NaN float v (-0 just below +0), and back:
// the magnitude bits of a negative float are flipped so that larger magnitudes sort lower.
KOKKOS_INLINE_FUNCTION int32_t order_key(float v) {
  int32_t b;
  memcpy(&b, &v, sizeof b);
  return b ^ ((b >> 31) & 0x7fffffff);
}
KOKKOS_INLINE_FUNCTION float from_order_key(int32_t key) {
  const int32_t b = key ^ ((key >> 31) & 0x7fffffff);
  float v;
  memcpy(&v, &b, sizeof v);
  return v;
}

// Makes room in a full reservoir (n values > tau, eq_n values == tau; cap >= 2k) by raising tau,
// keeping the invariant: every value seen that is > tau is in vals[0, n), eq_n / eq_lab count the
// seen values == tau, and tau is below the k-th largest value seen.
// First try, cheaply, a histogram cut: from the top bin down, the bin b of the (k + pending)-th
// largest value counted so far, where `pending` is how many values the histogram already counts
// but the reservoir has not been offered yet (the rest of the current chunk: without them in the
// rank, the cut would keep fewer than k at the first cut of every row and fall back); every
// reservoir value in a lower bin is below the k-th largest, so the largest of them becomes tau. It
// costs O(bins scanned + n) with no data-dependent branches, against a quickselect that mispredicts
// about every other comparison. It is taken when it keeps at least k values (else the k-th largest
// could be lost among ties at tau) and frees at least a quarter of the buffer; otherwise (ties,
// very few distinct bins, small k) the exact selection raises tau to the k-th largest itself.
KOKKOS_INLINE_FUNCTION void shrink_reservoir(float* vals, uint8_t* flags, int64_t& n, int64_t k,
                                             float& tau, int64_t& eq_n, int64_t& eq_lab,
                                             const int32_t* hist, int32_t bins, float hi,
                                             int64_t pending) {
  int32_t b = sim_bin(hi, bins);
  for (int64_t above = hist[b]; b > 0 && above < k + pending;) above += hist[--b];
  // The largest value in a bin below b, as the maximum of order keys: an integer maximum
  // vectorises (a float one does not without -ffast-math), and this scan over the whole reservoir
  // was a quarter of accumulate_tile's time as a scalar loop with a mispredicted branch.
  const int32_t none = order_key(-Kokkos::Experimental::infinity<float>::value);
  int64_t keep = 0;
  int32_t cut_key = none;
  for (int64_t u = 0; u < n; ++u) {
    const float v = vals[u];
    const bool kept = sim_bin(v, bins) >= b;
    keep += kept;
    const int32_t c = kept ? none : order_key(v);
    cut_key = c > cut_key ? c : cut_key;
  }
  const float cut = from_order_key(cut_key);
  if (b > 0 && keep >= k && keep <= n - n / 4) {
    // Bins are monotone in the value: the kept values are exactly those > cut.
    int64_t w = 0, ties = 0, ties_lab = 0;
    for (int64_t u = 0; u < n; ++u) {
      const float v = vals[u];
      const uint8_t f = flags[u];
      vals[w] = v;
      flags[w] = f;
      w += v > cut;
      ties += v == cut;
      ties_lab += (v == cut) ? f : 0;
    }
    tau = cut;
    eq_n = ties;
    eq_lab = ties_lab;
    n = w;
    return;
  }
  const Selection sel = select_kth_largest(vals, flags, n, k);
  tau = sel.value;
  eq_n = sel.ge - sel.gt;
  eq_lab = 0;
  for (int64_t u = sel.gt; u < sel.ge; ++u) eq_lab += flags[u];
  n = sel.gt;
}

// Per-row streaming state for one block of anchors (R rows).
template <typename Space>
struct RowState {
  View1<int64_t, Space> image_id;  // anchor's image_id (its positives are excluded)
  View1<int32_t, Space> label;     // anchor's label, -1 unknown
  View1<int64_t, Space> k;         // target rank (k-th largest), 0 when the row has no negatives
  View1<float, Space> lambda;      // GloFND threshold, NaN when absent
  View2<int32_t, Space> hist;      // R x bins
  View2<float, Space> res_val;     // R x C: values > tau
  View2<uint8_t, Space> res_lab;   // R x C: ... sharing the anchor's label
  View1<int64_t, Space> res_n;
  View1<float, Space> tau;
  View1<float, Space> tau0;              // starting threshold (-inf: none), set by the caller
  View1<int64_t, Space> eq_n, eq_lab;    // values == tau, of which same label
  View1<int64_t, Space> lam_n, lam_lab;  // values >= lambda, of which same label
  View1<float, Space> vmin, vmax;
  View1<int64_t, Space> scalar_n;  // values that took the scalar path (a cost diagnostic)
  // FNC simulation: the anchor's similarities to its random batch's negatives, picked out of the
  // same stream (no second GEMM).
  View2<float, Space> bat_val;    // R x batch_size
  View2<uint8_t, Space> bat_lab;  // R x batch_size
  View1<int64_t, Space> bat_n;
  // The anchor's positives (same image_id) and its FNC batch as ranges [begin, end) of column
  // lists sorted by column (ColumnGroups), with a cursor that the tiles advance.
  View1<int64_t, Space> pos_begin, pos_end, pos_cur, bat_begin, bat_end, bat_cur;

  RowState() = default;
  RowState(int64_t rows, int32_t bins, int64_t capacity, int64_t batch_size)
      : image_id("fnvlp::similarity::image_id", rows),
        label("fnvlp::similarity::label", rows),
        k("fnvlp::similarity::k", rows),
        lambda("fnvlp::similarity::lambda", rows),
        hist("fnvlp::similarity::hist", rows, bins),
        res_val(Kokkos::ViewAllocateWithoutInitializing("fnvlp::similarity::res_val"), rows,
                capacity),
        res_lab(Kokkos::ViewAllocateWithoutInitializing("fnvlp::similarity::res_lab"), rows,
                capacity),
        res_n("fnvlp::similarity::res_n", rows),
        tau("fnvlp::similarity::tau", rows),
        tau0("fnvlp::similarity::tau0", rows),
        eq_n("fnvlp::similarity::eq_n", rows),
        eq_lab("fnvlp::similarity::eq_lab", rows),
        lam_n("fnvlp::similarity::lam_n", rows),
        lam_lab("fnvlp::similarity::lam_lab", rows),
        vmin("fnvlp::similarity::vmin", rows),
        vmax("fnvlp::similarity::vmax", rows),
        scalar_n("fnvlp::similarity::scalar_n", rows),
        bat_val(Kokkos::ViewAllocateWithoutInitializing("fnvlp::similarity::bat_val"), rows,
                batch_size),
        bat_lab(Kokkos::ViewAllocateWithoutInitializing("fnvlp::similarity::bat_lab"), rows,
                batch_size),
        bat_n("fnvlp::similarity::bat_n", rows),
        pos_begin("fnvlp::similarity::pos_begin", rows),
        pos_end("fnvlp::similarity::pos_end", rows),
        pos_cur("fnvlp::similarity::pos_cur", rows),
        bat_begin("fnvlp::similarity::bat_begin", rows),
        bat_end("fnvlp::similarity::bat_end", rows),
        bat_cur("fnvlp::similarity::bat_cur", rows) {}
  int64_t rows() const { return static_cast<int64_t>(res_n.extent(0)); }
  int32_t bins() const { return static_cast<int32_t>(hist.extent(1)); }
  int64_t capacity() const { return static_cast<int64_t>(res_val.extent(1)); }
};

// Clears the streaming part of the state (ids, k, lambda, tau0 and the column ranges are filled by
// the caller). A row's histogram is non-zero only in bin 0 (NaN) and in the bins its values span,
// and a fresh RowState is all zeros, so only those bins are cleared: a few hundred of 4,096 on
// real embeddings (clearing all 16 KB of a row cost about as much as folding 2,000 similarities).
template <typename Space>
void reset_rows(const Space& space, const RowState<Space>& st, int64_t rows) {
  const int32_t bins = st.bins();
  Kokkos::parallel_for(
      "fnvlp::similarity::reset_rows", Kokkos::RangePolicy<Space>(space, 0, rows),
      KOKKOS_LAMBDA(const int64_t i) {
        // A value that never took the scalar path was below min(tau, lambda) <= the final tau
        // when it came, so max(vmax, tau) bounds every value even where vmax is not the maximum
        // (a row that started above all its values). Fresh state: vmin = vmax = tau = 0.
        const float hi = st.vmax(i) > st.tau(i) ? st.vmax(i) : st.tau(i);
        st.hist(i, 0) = 0;
        for (int32_t b = sim_bin(st.vmin(i), bins), b1 = sim_bin(hi, bins); b <= b1; ++b)
          st.hist(i, b) = 0;
        st.res_n(i) = 0;
        st.bat_n(i) = 0;
        st.pos_cur(i) = st.pos_begin(i);
        st.bat_cur(i) = st.bat_begin(i);
        st.tau(i) = st.tau0(i);
        st.eq_n(i) = st.eq_lab(i) = st.lam_n(i) = st.lam_lab(i) = st.scalar_n(i) = 0;
        st.vmin(i) = Kokkos::Experimental::infinity<float>::value;
        st.vmax(i) = -Kokkos::Experimental::infinity<float>::value;
      });
}

// Folds one tile of similarities into the row state of rows [row0, row0 + rows): histogram,
// min/max, counts >= lambda, and the threshold reservoir. The tile is stored in segments of
// W = sims.extent(2) columns (a multiple of kChunk, the GEMM blocks' layout), from column `off` of
// the first: sims(g / W, i - row0, g % W), g = off + j, is anchor i against candidate c0 + j, for
// j < `cols`; every row must see its tiles in ascending column order.
//
// Cost per similarity is what decides simstat's speed against the GEMM (a few ns per value each),
// so the per-value work is only what every value needs, 64 values at a time (classify.hpp, SIMD on
// the host): its bin, its histogram increment, and a bit of a mask for a comparison with
// min(tau, lambda) and the running minimum. The rest is moved off it:
// - positives (the anchor's own image_id, a handful per row) are overwritten with NaN in the tile
//   first, found through `pos_cols` (column ids grouped by image_id, sorted by column); NaN fails
//   every comparison and lands in bin 0, from which they are taken back out;
// - the FNC batch is gathered through `bat_cols` (columns grouped by batch), O(batch) per row;
// - values that reach tau or lambda or a new minimum (about k log(N / k) + alpha N + log N per row
//   from tau = -inf, fewer from a starting tau0) take the scalar path (min/max, label, reservoir,
//   tie and lambda counts) in column order, so the results are the same bits as a plain loop over
//   the row.
// S is the caller's scratch tile and is modified. kGeneric = true forces the portable chunk test
// (what a device runs) on a host space; the results are the same bits either way.
template <bool kGeneric = false, typename Space, typename SimView, typename IdView,
          typename LabelView, typename ColView>
void accumulate_tile(const Space& space, const SimView& sims, int64_t cols, int64_t c0,
                     const IdView& col_image_id, const LabelView& col_label,
                     const ColView& pos_cols, const ColView& bat_cols, const RowState<Space>& st,
                     int64_t row0, int64_t rows, int64_t off = 0) {
  static_assert(Kokkos::SpaceAccessibility<Space, typename SimView::memory_space>::accessible,
                "similarity tile must be accessible from the execution space");
  static_assert(
      Kokkos::SpaceAccessibility<Space, typename IdView::memory_space>::accessible &&
          Kokkos::SpaceAccessibility<Space, typename LabelView::memory_space>::accessible &&
          Kokkos::SpaceAccessibility<Space, typename ColView::memory_space>::accessible,
      "column ids, labels and groups must be accessible from the execution space");
  constexpr bool kHostSimd = !kGeneric && kOnHost<Space>;
  if (sims.extent(2) % kChunk != 0)
    Kokkos::abort("fnvlp::similarity::accumulate_tile: segment width not a multiple of kChunk");
  const int64_t c1 = c0 + cols;
  const int32_t bins = st.bins();
  const int64_t cap = st.capacity();
  Kokkos::parallel_for(
      "fnvlp::similarity::accumulate_tile", Kokkos::RangePolicy<Space>(space, row0, row0 + rows),
      KOKKOS_LAMBDA(const int64_t i) {
        const int64_t k = st.k(i);
        if (k == 0) return;  // no negatives at all: nothing to select
        const int64_t self = st.image_id(i);
        const int32_t lab = st.label(i);
        const float lam = st.lambda(i);  // NaN when absent: s >= lam is then always false
        const int64_t r = i - row0;
        const int64_t seg = static_cast<int64_t>(sims.extent(2));
        // Positives out of the stream.
        int64_t pc = st.pos_cur(i), marked = 0;
        const int64_t pe = st.pos_end(i);
        for (; pc < pe && pos_cols(pc) < c1; ++pc, ++marked) {
          const int64_t g = off + pos_cols(pc) - c0;
          sims(g / seg, r, g % seg) = quiet_nan();
        }
        st.pos_cur(i) = pc;

        float tau = st.tau(i), lo = st.vmin(i), hi = st.vmax(i);
        int64_t n = st.res_n(i), eq_n = st.eq_n(i), eq_lab = st.eq_lab(i);
        int64_t lam_n = st.lam_n(i), lam_lab = st.lam_lab(i);
        float* vals = &st.res_val(i, 0);
        uint8_t* flags = &st.res_lab(i, 0);
        int32_t* hist = &st.hist(i, 0);
        int32_t bin[kChunk];
        int64_t scalar = 0;
        // Chunks aligned in the segments (a first short one where off is not a multiple of
        // kChunk), so that a chunk never spans two.
        for (int64_t j0 = 0, len = 0; j0 < cols; j0 += len) {
          const int64_t g = off + j0;
          len = kChunk - g % kChunk < cols - j0 ? kChunk - g % kChunk : cols - j0;
          const float* x = &sims(g / seg, r, g % seg);
          // Bins, and which values reach tau or lambda or go below the minimum (the maximum needs
          // no test of its own: it is never below tau), as a bit mask.
          const float thr = lam < tau ? lam : tau;  // lam NaN: tau
          uint64_t hot = classify_chunk_on<kHostSimd>(x, len, thr, lo, bins, bin);
          for (int64_t t = 0; t < len; ++t) ++hist[bin[t]];
          // tau and lo only move inwards within the chunk, so a value that was not hot against
          // their values at its start cannot matter now.
          for (; hot != 0; hot &= hot - 1) {
            const int64_t t = lowest_bit(hot);
            ++scalar;
            const float s = x[t];  // NaN (a positive) is never hot
            lo = s < lo ? s : lo;
            hi = s > hi ? s : hi;
            if (!(s >= tau) && !(s >= lam)) continue;
            const uint8_t same = (lab >= 0 && col_label(j0 + t) == lab) ? 1 : 0;
            if (s >= lam) {
              ++lam_n;
              lam_lab += same;
            }
            if (s > tau) {
              vals[n] = s;
              flags[n] = same;
              if (++n == cap)
                shrink_reservoir(vals, flags, n, k, tau, eq_n, eq_lab, hist, bins, hi, len - 1 - t);
            } else if (s == tau) {
              ++eq_n;
              eq_lab += same;
            }
          }
        }
        hist[0] -= static_cast<int32_t>(marked);  // the NaN positives
        // FNC batch: this tile's columns of the anchor's batch, positives left out (by image_id:
        // their values are NaN by now). Gathered after the stream, while the row is still in L1:
        // before it, each random column was a cache miss.
        const int64_t batch_cap = static_cast<int64_t>(st.bat_val.extent(1));
        int64_t nb = st.bat_n(i), bc = st.bat_cur(i);
        const int64_t be = st.bat_end(i);
        for (; nb < batch_cap && bc < be && bat_cols(bc) < c1; ++bc) {  // full: never read again
          const int64_t j = bat_cols(bc) - c0, g = off + j;
          if (col_image_id(j) == self) continue;
          st.bat_val(i, nb) = sims(g / seg, r, g % seg);
          st.bat_lab(i, nb) = (lab >= 0 && col_label(j) == lab) ? 1 : 0;
          ++nb;
        }
        st.bat_cur(i) = bc;
        st.bat_n(i) = nb;
        st.tau(i) = tau;
        st.vmin(i) = lo;
        st.vmax(i) = hi;
        st.res_n(i) = n;
        st.eq_n(i) = eq_n;
        st.eq_lab(i) = eq_lab;
        st.lam_n(i) = lam_n;
        st.lam_lab(i) = lam_lab;
        st.scalar_n(i) += scalar;
      });
}

// Per-row results of a finished block.
template <typename Space>
struct RowResult {
  View1<float, Space> threshold;           // exact k-th largest (NaN without negatives)
  View1<int64_t, Space> count, count_lab;  // values >= threshold, of which same label
  View2<float, Space> quantiles;           // R x m
  View1<uint8_t, Space> restart;           // 1: tau0 was above the k-th largest, stream again

  RowResult() = default;
  RowResult(int64_t rows, int64_t m)
      : threshold("fnvlp::similarity::threshold", rows),
        count("fnvlp::similarity::count", rows),
        count_lab("fnvlp::similarity::count_lab", rows),
        quantiles("fnvlp::similarity::quantiles", rows, m),
        restart("fnvlp::similarity::restart", rows) {}
};

// Ascending 1-based rank of quantile j of m over n values: 1 + floor(j (n - 1) / (m - 1)), so
// j = 0 is the minimum and j = m - 1 the maximum (exact order statistics, no interpolation).
KOKKOS_INLINE_FUNCTION int64_t quantile_rank(int64_t j, int64_t m, int64_t n) {
  return m > 1 ? 1 + (j * (n - 1)) / (m - 1) : n;
}

// a * b rounded once, never fused with a following add: nvcc contracts a * b + c into an FMA by
// default (host code here has no FMA), which would give a device other bits than the host.
KOKKOS_INLINE_FUNCTION float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

// Row i's quantile profile from its histogram `hist` (bins counts; bin 0 may hold values only where
// vmin is in it) and its exact minimum lo and maximum hi: quantiles(i, j) for j < m. Each estimate
// lies in the bin of the true order statistic, so |error| < 2 / bins; j = 0 and m - 1 are exact.
// The walk goes up the histogram once for all m ascending ranks. Outside bin 0 only the bins of
// [lo, hi] are non-zero, so it jumps from bin 0 to lo's: a few hundred bins of 4,096 on real
// embeddings.
template <typename Quantiles>
KOKKOS_INLINE_FUNCTION void quantile_profile(const int32_t* hist, int32_t bins, float lo, float hi,
                                             const Quantiles& quantiles, int64_t i) {
  const int64_t m = static_cast<int64_t>(quantiles.extent(1));
  const float width = 2.0f / static_cast<float>(bins);
  const int32_t b_lo = sim_bin(lo, bins), b_hi = sim_bin(hi, bins);
  int64_t total = b_lo > 0 ? hist[0] : 0;
  for (int32_t b = b_lo; b <= b_hi; ++b) total += hist[b];
  int64_t below = 0;
  int32_t b = 0;
  for (int64_t j = 0; j < m; ++j) {
    const int64_t a = quantile_rank(j, m, total);
    while (below + hist[b] < a) {
      below += hist[b];
      b = b < b_lo ? b_lo : b + 1;
    }
    // Midpoint rule inside the bin: the (a - below)-th of hist values spread evenly.
    const float frac = (static_cast<float>(a - below) - 0.5f) / static_cast<float>(hist[b]);
    float q = -1.0f + mul_rn(width, static_cast<float>(b) + frac);
    q = q < lo ? lo : (q > hi ? hi : q);
    if (a == 1) q = lo;
    if (a == total) q = hi;
    quantiles(i, j) = q;
  }
}

// Exact thresholds and counts from the reservoir; quantiles from the histogram (quantile_profile).
// A row whose tau0 turned out too high gets restart = 1 and no threshold or counts.
template <typename Space>
void finalize_rows(const Space& space, const RowState<Space>& st, const RowResult<Space>& out,
                   int64_t rows) {
  const int32_t bins = st.bins();
  const int64_t m = static_cast<int64_t>(out.quantiles.extent(1));
  Kokkos::parallel_for(
      "fnvlp::similarity::finalize_rows", Kokkos::RangePolicy<Space>(space, 0, rows),
      KOKKOS_LAMBDA(const int64_t i) {
        const float nan = quiet_nan();
        const int64_t k = st.k(i);
        float* vals = &st.res_val(i, 0);
        uint8_t* flags = &st.res_lab(i, 0);
        const int64_t n = st.res_n(i);
        // Fewer than k values >= tau0: unknown until streamed again (and vmax may not be the
        // maximum).
        out.restart(i) = k > 0 && n + st.eq_n(i) < k;
        if (k == 0 || out.restart(i)) {  // no negatives, or a restart: no results
          out.threshold(i) = nan;
          out.count(i) = out.count_lab(i) = 0;
          for (int64_t j = 0; j < m; ++j) out.quantiles(i, j) = nan;
          return;
        }
        if (n >= k) {
          // The k-th largest v is above tau, so every value in a bin above v's is in the
          // reservoir: the histogram, scanned down from the maximum's bin, names v's bin b and
          // how many values lie above it (a < k). Only the reservoir values of bin b (a handful at
          // 4,096 bins) go through the selection, for the (k - a)-th largest; a quickselect over
          // the whole reservoir mispredicts about every other comparison.
          const int32_t* hist = &st.hist(i, 0);
          int32_t b = sim_bin(st.vmax(i), bins);
          int64_t above = 0;
          while (above + hist[b] < k) above += hist[b--];
          int64_t w = 0;  // bin-b values moved to the front
          for (int64_t t = 0; t < n; ++t) {
            if (sim_bin(vals[t], bins) != b) continue;
            const float v = vals[t];
            const uint8_t f = flags[t];
            vals[t] = vals[w];
            flags[t] = flags[w];
            vals[w] = v;
            flags[w] = f;
            ++w;
          }
          const float v = select_kth_largest(vals, flags, w, k - above).value;
          int64_t count = 0, same = 0;
          for (int64_t t = 0; t < n; ++t) {
            count += vals[t] >= v;
            same += vals[t] >= v ? flags[t] : 0;
          }
          out.threshold(i) = v;
          out.count(i) = count;
          out.count_lab(i) = same;
        } else {
          // Fewer than k values above tau: the k-th largest is one of the ties at tau.
          out.threshold(i) = st.tau(i);
          out.count(i) = n + st.eq_n(i);
          int64_t same = st.eq_lab(i);
          for (int64_t t = 0; t < n; ++t) same += flags[t];
          out.count_lab(i) = same;
        }
        // vmax is the maximum here (no restart).
        quantile_profile(&st.hist(i, 0), bins, st.vmin(i), st.vmax(i), out.quantiles, i);
      });
}

// FNC-style in-batch detection (FNC, Huynh et al. 2022, the batch-wise baseline of GloFND §4): each
// anchor's top ceil(alpha * nb) negatives of its batch (nb = negatives in the batch) are flagged,
// i.e. every value >= the kb-th largest. Writes the batch threshold (NaN without batch negatives)
// and counts(i, :) = {flagged, flagged with the anchor's label, same-label negatives in the batch}.
template <typename Space>
void batch_topk(const Space& space, const RowState<Space>& st, double alpha,
                const View1<float, Space>& threshold, const View2<int64_t, Space>& counts,
                int64_t rows) {
  Kokkos::parallel_for(
      "fnvlp::similarity::batch_topk", Kokkos::RangePolicy<Space>(space, 0, rows),
      KOKKOS_LAMBDA(const int64_t i) {
        float* vals = &st.bat_val(i, 0);
        uint8_t* flags = &st.bat_lab(i, 0);
        const int64_t nb = st.bat_n(i);
        int64_t n_lab = 0;
        for (int64_t t = 0; t < nb; ++t) n_lab += flags[t];
        counts(i, 2) = n_lab;
        if (nb == 0) {
          threshold(i) = quiet_nan();
          counts(i, 0) = counts(i, 1) = 0;
          return;
        }
        const Selection sel = select_kth_largest(vals, flags, nb, target_rank(alpha, nb));
        threshold(i) = sel.value;
        int64_t same = 0;
        for (int64_t t = 0; t < sel.ge; ++t) same += flags[t];
        counts(i, 0) = sel.ge;
        counts(i, 1) = same;
      });
}

// The generic path's similarity <a, c> of two dim-vectors: products and sums in double in
// ascending k, rounded to float once. A product of two floats is exact in double, so a fused
// multiply-add (which nvcc forms by default) rounds exactly as a multiply and an add: the bits
// depend on the two embeddings alone, on any backend and any decomposition (the fast path gets the
// same guarantee from the GEMM places of similarity_blocks). They can differ from the BLAS GEMM's
// float32 sums in the last bits; where every partial sum is exact in float they are equal.
// T is float, or double holding floats (the device path's copies): the same products either way.
template <typename T>
KOKKOS_INLINE_FUNCTION float dot_in_double(const T* a, const T* c, int64_t dim) {
  double s = 0.0;
  for (int64_t k = 0; k < dim; ++k) s += static_cast<double>(a[k]) * static_cast<double>(c[k]);
  return static_cast<float>(s);
}

// out(i, j) = dot_in_double(a(i, :), c(j, :)) for i < rows, j < cols: the generic path's GEMM, one
// thread per similarity (adjacent threads share the anchor). a and c are contiguous row-major
// [*, dim] views of the execution space.
template <typename Space, typename AView, typename CView, typename OutView>
void similarity_kernel(const Space& space, const AView& a, int64_t rows, const CView& c,
                       int64_t cols, const OutView& out) {
  static_assert(Kokkos::SpaceAccessibility<Space, typename AView::memory_space>::accessible &&
                    Kokkos::SpaceAccessibility<Space, typename CView::memory_space>::accessible &&
                    Kokkos::SpaceAccessibility<Space, typename OutView::memory_space>::accessible,
                "embeddings and similarities must be accessible from the execution space");
  const auto dim = static_cast<int64_t>(a.extent(1));
  if (rows == 0 || cols == 0) return;
  Kokkos::parallel_for(
      "fnvlp::similarity::similarity_kernel", Kokkos::RangePolicy<Space>(space, 0, rows * cols),
      KOKKOS_LAMBDA(const int64_t t) {
        const int64_t i = t / cols, j = t % cols;
        out(i, j) = dot_in_double(&a(i, 0), &c(j, 0), dim);
      });
}

}  // namespace fnvlp::similarity
