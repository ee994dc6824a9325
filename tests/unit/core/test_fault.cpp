#include "fnvlp/core/fault.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <new>

#include "fnvlp/core/error.hpp"

namespace {

using namespace fnvlp;

// Sets FNVLP_FAULT for one test and restores "off" afterwards.
class FaultEnv : public ::testing::Test {
 protected:
  void set(const char* value) {
    ::setenv(fault::kEnvVar, value, 1);
    fault::reload();
  }
  void TearDown() override {
    ::unsetenv(fault::kEnvVar);
    fault::set_configured("", "test");
    fault::set_rank(0);
    fault::reload();
  }
};

TEST_F(FaultEnv, OffByDefault) {
  ::unsetenv(fault::kEnvVar);
  fault::reload();
  EXPECT_FALSE(fault::enabled());
  EXPECT_FALSE(fault::point("step.nan", 3));
  EXPECT_NO_THROW(fault::at_step(3));
}

TEST_F(FaultEnv, EventRangesAndRanks) {
  fault::set_rank(1);
  set(" step.nan:3-5:1 , step.throw:7 ");
  EXPECT_TRUE(fault::enabled());
  EXPECT_FALSE(fault::point("step.nan", 2));
  EXPECT_TRUE(fault::point("step.nan", 3));
  EXPECT_TRUE(fault::point("step.nan", 5));
  EXPECT_FALSE(fault::point("step.nan", 6));
  EXPECT_NO_THROW(fault::at_step(6));
  try {
    fault::at_step(7);
    FAIL() << "step.throw did not fire";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("step.throw event 7 on rank 1"), std::string::npos)
        << e.what();
  }
  fault::set_rank(0);  // the nan entry names rank 1 only
  EXPECT_FALSE(fault::point("step.nan", 4));
}

TEST_F(FaultEnv, CallCountWithoutEventAndWildcards) {
  set("shard.read:2,step.nan:*:*");
  EXPECT_NO_THROW(fault::point("shard.read", -1, "a.h5:/images"));
  try {
    fault::point("shard.read", -1, "a.h5:/images");
    FAIL() << "the second read did not fail";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("read error in a.h5:/images"), std::string::npos);
  }
  EXPECT_NO_THROW(fault::point("shard.read", -1, "a.h5:/images"));
  EXPECT_TRUE(fault::point("step.nan", 12345));
}

TEST_F(FaultEnv, WriteFailureNamesTheFileAndEnospc) {
  set("checkpoint.write:10");
  EXPECT_NO_THROW(fault::point("checkpoint.write", 9, "/x/step-9.tmp/model.pt"));
  try {
    fault::point("checkpoint.write", 10, "/x/step-10.tmp/model.pt");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "cannot write '/x/step-10.tmp/model.pt': No space left on device"),
              std::string::npos)
        << e.what();
  }
}

TEST_F(FaultEnv, OutOfMemoryIsBadAllocOrTheInstalledAction) {
  set("step.oom:4:0");
  EXPECT_NO_THROW(fault::at_step(3));
  EXPECT_THROW(fault::at_step(4), std::bad_alloc);
  struct DeviceOom {};  // what train/device.cpp installs: CUDA's own error
  fault::set_out_of_memory([] { throw DeviceOom(); });
  EXPECT_THROW(fault::at_step(4), DeviceOom);
  fault::set_out_of_memory({});
  EXPECT_THROW(fault::at_step(4), std::bad_alloc);
}

TEST_F(FaultEnv, SleepStallsForItsArgument) {
  set("step.sleep:1:*:0.05");
  EXPECT_TRUE(fault::point("step.sleep", 1));
}

TEST_F(FaultEnv, MalformedSpecificationsAreErrors) {
  for (const char* bad : {"step.nan", "step.nope:1", "step.nan:x", "step.nan:5-3", "step.nan:1:r",
                          "step.sleep:1:0:-2", "step.nan:1:0:1:9"}) {
    set(bad);
    EXPECT_THROW(fault::point("step.nan", 1), Error) << bad;
  }
}

// The configuration's knobs (fnvlp-pretrain's fault.*) go through the same sites: they fire beside
// FNVLP_FAULT's, survive a reload of the variable, name their origin, and a bad one is an error.
TEST_F(FaultEnv, ConfiguredEntriesJoinTheVariablesAndNameTheirOrigin) {
  set("step.nan:2");
  fault::set_configured("step.throw:4:0,step.stop:6:0", "fault.* of the test");
  EXPECT_TRUE(fault::point("step.nan", 2));
  EXPECT_TRUE(fault::point("step.stop", 6));
  EXPECT_FALSE(fault::point("step.stop", 5));
  fault::reload();  // a test changing FNVLP_FAULT keeps the configured entries
  try {
    fault::at_step(4);
    FAIL() << "the configured step.throw did not fire";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("step.throw event 4 on rank 0 (injected by fault.* of "
                                         "the test)"),
              std::string::npos)
        << e.what();
  }
  fault::set_configured("", "test");
  EXPECT_TRUE(fault::point("step.nan", 2));  // FNVLP_FAULT's own entry stays
  EXPECT_FALSE(fault::point("step.stop", 6));
  EXPECT_THROW(fault::set_configured("step.stop:x", "fault.* of the test"), Error);
}

}  // namespace
