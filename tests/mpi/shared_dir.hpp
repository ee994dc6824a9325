#pragma once
// Scratch directories of the MPI tests: one fresh directory, the same on every rank (ctest may run
// np 1, 2 and 4 side by side), removed by rank 0 once every rank is done with it.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <string>

#include "fnvlp/comm/comm.hpp"

namespace fnvlp::testing {

inline std::string shared_temp_dir(const Comm& comm, const std::string& tag) {
  std::string dir;
  if (comm.is_root()) {
    std::string templ = ::testing::TempDir() + "/fnvlp_" + tag + "_XXXXXX";
    char* made = mkdtemp(templ.data());
    EXPECT_NE(made, nullptr);
    dir = templ;
  }
  comm.bcast(dir);
  return dir;
}

inline void remove_shared(const Comm& comm, const std::string& dir) {
  comm.barrier();
  if (comm.is_root()) std::filesystem::remove_all(dir);
}

}  // namespace fnvlp::testing
