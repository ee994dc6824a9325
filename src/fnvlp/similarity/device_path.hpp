#pragma once
// simstat's device path (anchor_stats in a build against Kokkos on CUDA; Params::device_path on
// the host for tests): the generic path's statistics, the same bits (thresholds, quantiles, counts,
// FNC; its similarities are dot_in_double's), from a double GEMM and a TF32 GEMM per candidate
// tile with exact re-checks, folded by teams of threads (device_kernels.hpp).
//
// The candidates (N x dim floats) and their image ids and labels are loaded into the execution
// space's memory once per call, tile by tile with the host's reads and the copies overlapped;
// then every block of anchors runs its two passes over them without the host. Device memory:
// N x (4 dim + 12) bytes, plus per block of R anchors (at most row_block, within
// device_memory_mb) two slots of R x device_tile doubles and floats (the GEMMs' tiles), the
// histograms (R x bins) and the rows' state; never N x N. The cost diagnostics differ from the
// host paths': no starting thresholds or restarts, and scalar_values counts the values recomputed
// by dot_in_double.
#include "fnvlp/similarity/simstat.hpp"

namespace fnvlp::similarity {

RowStats anchor_stats_device(const float* anchors, int64_t row0, int64_t rows, int64_t dim,
                             const CandidateReader& read_candidates, int64_t n_cols,
                             const ColumnReader& read_columns, const float* lambda,
                             const Params& p);

}  // namespace fnvlp::similarity
