#pragma once
// The GPU side of simstat's device path (device_path.cpp): cuBLAS's GEMMs and two CUDA streams, one
// for the GEMMs (and the candidates' copies), one for the folds, ordered by events per buffer slot
// so that the GEMM of tile t + 1 runs while tile t is folded. Only in a build against Kokkos on
// CUDA (cuda_queues_built()); the device path on a host space runs the host stand-ins
// (device_kernels.hpp) in order instead. Free of Kokkos and CUDA headers.
#include <cstdint>
#include <memory>

namespace fnvlp::similarity {

// Whether this build has CudaQueues (a Kokkos on CUDA).
bool cuda_queues_built();

class CudaQueues {
 public:
  // Events: per buffer slot (0, 1), the GEMM stream's work done, the fold stream's, and a host
  // staging buffer's copy.
  enum Event { kGemmDone0, kGemmDone1, kFoldDone0, kFoldDone1, kCopyDone0, kCopyDone1, kEvents };
  enum Stream { kGemm, kFold };

  // Two streams, the events and a cuBLAS handle on the current device (Kokkos's).
  CudaQueues();
  ~CudaQueues();
  CudaQueues(const CudaQueues&) = delete;
  CudaQueues& operator=(const CudaQueues&) = delete;

  // The stream (a cudaStream_t) for Kokkos execution space instances.
  void* stream(Stream s) const;
  void record(Event e, Stream s);
  void wait(Stream s, Event e);  // work queued on s after this waits for e's last record
  void host_wait(Event e);       // the host waits for e's last record

  // On the GEMM stream: s (rows x lds, row-major) = a (rows x dim) c^T (c: cols x dim), all
  // row-major device arrays. f64: cuBLAS's double GEMM (FP64 tensor cores where the GPU has them,
  // never its fixed-point emulation); tf32: float operands, TF32 tensor cores, float results.
  void gemm_f64(const double* a, int64_t rows, const double* c, int64_t cols, int64_t dim,
                double* s, int64_t lds);
  void gemm_tf32(const float* a, int64_t rows, const float* c, int64_t cols, int64_t dim, float* s,
                 int64_t lds);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fnvlp::similarity
