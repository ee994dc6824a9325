// Device code built for sm_80 alone (tests/CMakeLists.txt), what the Kokkos library held before
// env/kokkos/3.4.01-sm90.patch: kokkos.cuda_arch_refuses_sm80_only checks that
// tests/env/kokkos_cuda_arch.sh names the missing sm_90 code.
__global__ void fnvlp_cuda_arch_fixture(int* out) {
#if defined(__CUDA_ARCH__)
  *out = __CUDA_ARCH__;
#endif
}
