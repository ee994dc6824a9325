#pragma once
// fnvlp-simstat: offline false-negative statistics over an embeddings file (ARCHITECTURE.md §2,
// §11): per anchor (image against all texts, text against all images; a pair sharing the anchor's
// image_id is a positive, never a negative):
//   threshold  the exact k-th largest negative similarity, k = ceil(alpha * n_neg) clamped to
//              [1, n_neg] (the exact (1 - alpha)-quantile GloFND's lambda approximates); NaN
//              when the anchor has no negatives;
//   quantiles  m evenly spaced order statistics: column j (0..m-1) is the value of ascending rank
//              1 + floor(j (n_neg - 1) / (m - 1)) (j = 0 the minimum, j = m - 1 the maximum,
//              both exact); the others come from a histogram of `bins` bins over [-1, 1] and lie
//              within 2 / bins of the exact order statistic;
//   counts     negatives with similarity >= threshold / >= GloFND's lambda / >= the FNC batch
//              threshold, and how many of each share the anchor's label (label >= 0), plus the
//              anchor's same-label negatives overall and within its batch.
// FNC is simulated on random batches: a permutation of 0..N-1 (seeded) cut into consecutive
// batches of `fnc_batch`; each anchor flags its batch's top ceil(alpha * nb) negatives.
//
// Rows are split into one block per rank; every rank streams all candidate rows from the HDF5
// file in tiles through a GEMM and keeps per-row selection state (kernels.hpp), never N x N.
// Results do not depend on the rank count or the tile size.
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "fnvlp/comm/comm.hpp"

namespace fnvlp::similarity {

struct Params {
  double alpha = 0.01;
  int64_t quantiles = 100;   // m >= 2
  int32_t bins = 4096;       // histogram bins over [-1, 1]
  int64_t tile = 4096;       // candidate columns per GEMM
  int64_t row_block = 4096;  // most anchors per block (the memory budget may lower it)
  int64_t memory_mb = 1024;  // budget for one block's selection state and GEMM tile
  int64_t fnc_batch = 256;   // FNC simulation batch size (0: skip the simulation)
  uint64_t fnc_seed = 0;
  bool gemm_only = false;  // benchmarks: stream and multiply, skip the statistics
  // Starting thresholds (kernels.hpp, "Starting threshold"): each anchor's tau0 is an order
  // statistic of its similarities to `start_sample` evenly strided candidates (-1: N / 64, at most
  // 8192, none when that is below 256; 0: none), at a rank `start_sigmas` standard deviations
  // above the expected count of sample values above the anchor's k-th largest, so that tau0 lies
  // below it but for a tail probability (below 1e-6 at the default, by Chernoff; a row above it is
  // streamed again, so the results never depend on these two).
  int64_t start_sample = -1;
  double start_sigmas = 7.0;
  // Run the generic path (similarities from a Kokkos kernel accumulated in double, dot_in_double,
  // folded row by row with the portable chunk test: kernels.hpp) on the default execution space
  // (the device in a device build), the reference the device path is checked against. For tests.
  bool generic_path = false;
  // Run the device path (device_path.hpp: the generic path's similarities through a double GEMM
  // and a TF32 GEMM with exact re-checks, folded by teams of threads) on the host execution space,
  // with host stand-ins for the device's GEMMs. For tests; in a device build it is the default.
  bool device_path = false;
  // Candidate columns per GEMM and fold on the device path (its host I/O reads `tile` at a time),
  // and its budget for one block's buffers in device memory (the resident candidates come on top).
  int64_t device_tile = 32768;
  int64_t device_memory_mb = 8192;
  // Run on the host execution space even where the default one is a device: the host's results,
  // which a device's are checked against. No effect in a host build.
  bool host = false;
};

// Whether anchor_stats with these parameters computes its similarities as dot_in_double does
// (kernels.hpp): the generic path, or the device path (forced, or on a device).
bool takes_generic_path(const Params& p);

// Per-anchor results for rows [row0, row0 + rows) of one modality.
struct RowStats {
  int64_t row0 = 0, rows = 0, m = 0;
  std::vector<float> threshold, quantiles, fnc_threshold;
  std::vector<int64_t> n_neg, n_label, count, count_label, count_lambda, count_lambda_label,
      count_fnc, count_fnc_label, n_batch_label;
  // Cost diagnostics: candidates in the starting-threshold sample, anchors whose tau0 was above
  // their k-th largest (their block was streamed again), and values that took the scalar path (on
  // the device path: that dot_in_double recomputed); bytes of the device path's buffers.
  int64_t start_sample = 0, restarted_rows = 0, scalar_values = 0, buffer_bytes = 0;
};

// S = A C^T for A (rows x dim) and C (cols x dim), row-major into out (rows x cols). Every BLAS
// call has the same fixed shape (kGemmRows x kGemmCols, zero-padded), and every anchor and
// candidate has a fixed place in it: its global index (row_base + i, col_base + j) modulo the
// block size. Both are needed for the bits of a similarity to depend on its two embeddings alone,
// and so for the exact thresholds to be the same on any decomposition (rank count, row block,
// tile): BLAS libraries pick kernels (summation orders) by matrix size, and within one call some
// compute an element by an order that depends on its place (OpenBLAS 0.3.21's Haswell SGEMM, which
// it runs on AVX2 CPUs without AVX-512, AMD Zen included: moving the operands by a few rows or
// columns changed the last bits of 0.3-6.5% of the products at dim 24 and 256; the other rows'
// contents never did). Checked by Simstat.SimilarityBlocksFixAPairsPlace, which ctest also runs on
// those kernels wherever the CPU can (tests/env/haswell_kernels.sh).
// 1,024 rows rather than 256: OpenBLAS packs both operands on every call, (rows + cols) x dim
// values for 2 rows x cols x dim flops, and at 256 rows that cost the GEMM 8-10% of its rate
// (84-92 against 93-98 GFLOP/s single-threaded at 1,024, d = 256). A rank's first and last row
// blocks pad to the aligned blocks around them (at most 1,023 zero rows each).
inline constexpr int64_t kGemmRows = 1024;
inline constexpr int64_t kGemmCols = 1024;
void similarity_tile(const float* a, int64_t rows, const float* c, int64_t cols, int64_t dim,
                     float* out);
// The same products handed over while they are still in cache: fn(r0, nr, c0, nc, s, co) gets
// rows [r0, r0 + nr) x columns [c0, c0 + nc) of S (indices into a and c), nc <= kFoldCols - co,
// rows outer, columns in ascending order, as the GEMM blocks that cover them, each contiguous:
// S(r0 + i, c0 + j) is s[(g / kGemmCols) * kGemmRows * kGemmCols + i * kGemmCols + g % kGemmCols]
// with g = co + j (co > 0 only where the columns start inside a GEMM block: col_base + c0 not a
// multiple of kGemmCols). Handing over kFoldCols columns (16 MiB at kGemmRows rows, in L3) rather
// than one block lets a row's statistics (its histogram lines, evicted by every GEMM) serve 4,096
// values per fetch instead of 1,024. `s` is scratch: fn may overwrite it.
inline constexpr int64_t kFoldCols = 4 * kGemmCols;
using BlockFn =
    std::function<void(int64_t r0, int64_t nr, int64_t c0, int64_t nc, float* s, int64_t co)>;
void similarity_blocks(const float* a, int64_t rows, const float* c, int64_t cols, int64_t dim,
                       const BlockFn& fn, int64_t row_base = 0, int64_t col_base = 0);

// Reads candidate rows [c0, c0 + n) (n * dim floats) into out.
using CandidateReader = std::function<void(int64_t c0, int64_t n, float* out)>;
// Reads candidate rows first, first + stride, ... (n rows, n * dim floats) into out.
using StridedReader = std::function<void(int64_t first, int64_t stride, int64_t n, float* out)>;

// FNC batch of every pair: a seeded permutation cut into batches of `batch` (-1 when batch <= 0).
std::vector<int64_t> fnc_batches(int64_t n, int64_t batch, uint64_t seed);

// Reads image_id, label and FNC batch (-1: none) of pairs [c0, c0 + n) into the three arrays.
using ColumnReader =
    std::function<void(int64_t c0, int64_t n, int64_t* image_id, int32_t* label, int64_t* batch)>;

// Statistics of anchors rows [row0, row0 + rows) (`anchors` is rows x dim) against all n_cols
// candidates; lambda is null or `rows` values. Needs an initialised Kokkos (KokkosRuntime). The
// starting-threshold sample is read through `read_strided` when given (one strided read), else row
// by row through `read_candidates`. The columns' ids, labels and batches are read tile by tile
// like the embeddings (at most Params::tile pairs at a time): memory is O(rows + tile + the
// anchors' positives and batches), never O(n_cols), so a training rank can call it on its block.
RowStats anchor_stats(const float* anchors, int64_t row0, int64_t rows, int64_t dim,
                      const CandidateReader& read_candidates, int64_t n_cols,
                      const ColumnReader& read_columns, const float* lambda, const Params& p,
                      const StridedReader& read_strided = {});
// The same with image_id, label and batch of all N pairs in memory (the offline tools, tests).
RowStats anchor_stats(const float* anchors, int64_t row0, int64_t rows, int64_t dim,
                      const CandidateReader& read_candidates, int64_t n_cols,
                      const std::vector<int64_t>& image_id, const std::vector<int32_t>& label,
                      const std::vector<int64_t>& batch, const float* lambda, const Params& p,
                      const StridedReader& read_strided = {});

// Sample size of the starting thresholds for n candidates (Params::start_sample resolved).
int64_t start_sample_size(const Params& p, int64_t n);

// GloFND's exact starting point (negatives.glofnd.exact_init): `threshold` above (the exact
// (1 - alpha)-quantile of each anchor's negatives) for anchors [row0, row0 + rows) of both
// modalities against every pair of an embeddings file, streamed from it tile by tile (embeddings,
// image ids and labels: O(rows + tile) memory, never O(N)). Not collective: each rank its own
// block. NaN for an anchor without negatives.
struct ExactThresholds {
  std::vector<float> image, text;
};
ExactThresholds exact_thresholds(const std::string& embeddings, int64_t row0, int64_t rows,
                                 double alpha);

struct JobOptions {
  std::string embeddings, out, lambda_from, json;
  Params params;
  int threads = 1;  // a threaded Kokkos host backend's threads per rank (simstat_main)
};

// Resolves --lambda-from: a FILE.h5, or a run directory (its newest embeddings/epoch-*.h5).
std::string resolve_lambda_source(const std::string& from);

// The whole job on every rank (Kokkos must be initialised: a KokkosRuntime in main): statistics of
// this rank's block of both modalities, STATS.h5 written rank by rank in pair_id order, the summary
// (identical on every rank) returned and written to opt.json by rank 0 when given.
nlohmann::json run_simstat(const Comm& comm, const JobOptions& opt);

}  // namespace fnvlp::similarity
