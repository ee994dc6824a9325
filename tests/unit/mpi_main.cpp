// GoogleTest main for test binaries that use Comm: MPI lives for the whole test run.
#include <gtest/gtest.h>

#include "fnvlp/comm/comm.hpp"
#include "fnvlp/data/h5.hpp"

int main(int argc, char** argv) {
  fnvlp::MpiRuntime mpi(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  fnvlp::h5::quiet();
  return RUN_ALL_TESTS();
}
