#include "fnvlp/similarity/device_gemm.hpp"

#include <Kokkos_Core.hpp>  // KOKKOS_ENABLE_CUDA

#include "fnvlp/core/error.hpp"

#if defined(KOKKOS_ENABLE_CUDA)
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#endif

namespace fnvlp::similarity {

#if defined(KOKKOS_ENABLE_CUDA)

namespace {

void cuda_check(cudaError_t rc, const char* what) {
  FNVLP_CHECK(rc == cudaSuccess, "simstat device path: " << what << ": " << cudaGetErrorString(rc));
}

void cublas_check(cublasStatus_t rc, const char* what) {
  FNVLP_CHECK(rc == CUBLAS_STATUS_SUCCESS,
              "simstat device path: " << what << ": " << cublasGetStatusString(rc));
}

}  // namespace

bool cuda_queues_built() { return true; }

struct CudaQueues::Impl {
  cudaStream_t streams[2] = {nullptr, nullptr};
  cudaEvent_t events[kEvents] = {};
  cublasHandle_t blas = nullptr;
};

CudaQueues::CudaQueues() : impl_(std::make_unique<Impl>()) {
  for (auto& s : impl_->streams)
    cuda_check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  for (auto& e : impl_->events)
    cuda_check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
  cublas_check(cublasCreate(&impl_->blas), "cublasCreate");
  cublas_check(cublasSetStream(impl_->blas, impl_->streams[kGemm]), "cublasSetStream");
}

CudaQueues::~CudaQueues() {
  // Destructors do not throw: whatever failed was reported by the call that queued it.
  for (auto* s : impl_->streams) cudaStreamSynchronize(s);
  cublasDestroy(impl_->blas);
  for (auto* e : impl_->events) cudaEventDestroy(e);
  for (auto* s : impl_->streams) cudaStreamDestroy(s);
}

void* CudaQueues::stream(Stream s) const { return impl_->streams[s]; }

void CudaQueues::record(Event e, Stream s) {
  cuda_check(cudaEventRecord(impl_->events[e], impl_->streams[s]), "cudaEventRecord");
}

void CudaQueues::wait(Stream s, Event e) {
  cuda_check(cudaStreamWaitEvent(impl_->streams[s], impl_->events[e], 0), "cudaStreamWaitEvent");
}

void CudaQueues::host_wait(Event e) {
  cuda_check(cudaEventSynchronize(impl_->events[e]), "cudaEventSynchronize");
}

// Row-major s = a c^T is column-major s^T = c a^T: cuBLAS's C (cols x rows, ld lds) = op(c) op(a)
// with c seen column-major as dim x cols (transposed) and a as dim x rows.
void CudaQueues::gemm_f64(const double* a, int64_t rows, const double* c, int64_t cols, int64_t dim,
                          double* s, int64_t lds) {
  const double one = 1.0, zero = 0.0;
  cublas_check(cublasSetMathMode(impl_->blas, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
  cublas_check(
      cublasGemmEx(impl_->blas, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(cols),
                   static_cast<int>(rows), static_cast<int>(dim), &one, c, CUDA_R_64F,
                   static_cast<int>(dim), a, CUDA_R_64F, static_cast<int>(dim), &zero, s,
                   CUDA_R_64F, static_cast<int>(lds), CUBLAS_COMPUTE_64F, CUBLAS_GEMM_DEFAULT),
      "cublasGemmEx (double)");
}

void CudaQueues::gemm_tf32(const float* a, int64_t rows, const float* c, int64_t cols, int64_t dim,
                           float* s, int64_t lds) {
  const float one = 1.0f, zero = 0.0f;
  cublas_check(cublasSetMathMode(impl_->blas, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
  cublas_check(cublasGemmEx(impl_->blas, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(cols),
                            static_cast<int>(rows), static_cast<int>(dim), &one, c, CUDA_R_32F,
                            static_cast<int>(dim), a, CUDA_R_32F, static_cast<int>(dim), &zero, s,
                            CUDA_R_32F, static_cast<int>(lds), CUBLAS_COMPUTE_32F_FAST_TF32,
                            CUBLAS_GEMM_DEFAULT),
               "cublasGemmEx (TF32)");
}

#else

bool cuda_queues_built() { return false; }

struct CudaQueues::Impl {};

CudaQueues::CudaQueues() { FNVLP_FAIL("CudaQueues: this build's Kokkos has no CUDA backend"); }
CudaQueues::~CudaQueues() = default;
void* CudaQueues::stream(Stream) const { return nullptr; }
void CudaQueues::record(Event, Stream) {}
void CudaQueues::wait(Stream, Event) {}
void CudaQueues::host_wait(Event) {}
void CudaQueues::gemm_f64(const double*, int64_t, const double*, int64_t, int64_t, double*,
                          int64_t) {}
void CudaQueues::gemm_tf32(const float*, int64_t, const float*, int64_t, int64_t, float*, int64_t) {
}

#endif

}  // namespace fnvlp::similarity
