#include <gtest/gtest.h>

#include "fnvlp/core/error.hpp"
#include "fnvlp/core/sha256.hpp"
#include "fnvlp/data/h5.hpp"

namespace {

TEST(Error, CheckCarriesMessageConditionAndLocation) {
  try {
    const int n = 3;
    FNVLP_CHECK(n == 4, "expected four, got " << n);
    FAIL() << "FNVLP_CHECK did not throw";
  } catch (const fnvlp::Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("expected four, got 3"), std::string::npos) << what;
    EXPECT_NE(what.find("n == 4"), std::string::npos) << what;
    EXPECT_NE(what.find("test_error.cpp:"), std::string::npos) << what;
    EXPECT_GT(e.line(), 0);
  }
}

TEST(Error, CheckPassesSilently) { EXPECT_NO_THROW(FNVLP_CHECK(1 + 1 == 2, "unreachable")); }

TEST(Error, H5CheckNamesContextAndHdf5Reason) {
  fnvlp::h5::quiet();
  try {
    H5_CHECK(H5Fopen("/nonexistent/x.h5", H5F_ACC_RDONLY, H5P_DEFAULT), "opening x.h5");
    FAIL() << "H5_CHECK did not throw";
  } catch (const fnvlp::Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("opening x.h5"), std::string::npos) << what;
    EXPECT_NE(what.find("hdf5:"), std::string::npos) << what;
  }
}

TEST(Sha256, KnownVectors) {
  // FIPS 180-2 test vectors.
  EXPECT_EQ(fnvlp::sha256_hex("abc", 3),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(fnvlp::sha256_hex("", 0),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  fnvlp::Sha256 h;
  h.update("a", 1);
  h.update("bc", 2);
  EXPECT_EQ(h.hex(), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(Sha256, MissingFileIsNamed) {
  EXPECT_THROW(
      {
        try {
          fnvlp::sha256_file("/nonexistent/file.bin");
        } catch (const fnvlp::Error& e) {
          EXPECT_NE(std::string(e.what()).find("/nonexistent/file.bin"), std::string::npos);
          throw;
        }
      },
      fnvlp::Error);
}

}  // namespace
