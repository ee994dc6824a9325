// GoogleTest main for test binaries that use Comm: MPI lives for the whole test run.
#include <gtest/gtest.h>

#include "fnvlp/comm/comm.hpp"
#include "fnvlp/core/blas.hpp"
#include "fnvlp/data/h5.hpp"

int main(int argc, char** argv) {
  fnvlp::use_best_blas_kernels(argv);  // as every job does (comm/job_main.cpp)
  fnvlp::MpiRuntime mpi(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  fnvlp::h5::quiet();
  return RUN_ALL_TESTS();
}
