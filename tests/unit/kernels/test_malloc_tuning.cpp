#include <gtest/gtest.h>
#include <malloc.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#include "fnvlp/kernels/malloc_tuning.hpp"

namespace {

constexpr size_t kBlock = 1u << 20, kBlocks = 64;

// In a child process (malloc settings are process-wide and one-way): optionally tune, then
// allocate and touch 64 MiB in 1 MiB blocks, as a training step allocates its activations, and
// free them all. Exit code bit 0: none of the blocks was mmapped; bit 1: the freed 64 MiB are
// still in the heap afterwards, ready for the next step without new page faults.
int heap_behaviour(bool tune) {
  const pid_t pid = fork();
  if (pid == 0) {
    if (tune && !fnvlp::keep_freed_memory()) _exit(100);
    const size_t mapped_before = mallinfo2().hblkhd;
    std::vector<char*> blocks;
    for (size_t i = 0; i < kBlocks; ++i) {
      blocks.push_back(static_cast<char*>(std::malloc(kBlock)));
      std::memset(blocks.back(), 1, kBlock);
    }
    const bool from_heap = mallinfo2().hblkhd == mapped_before;
    for (char* p : blocks) std::free(p);
    const bool kept = mallinfo2().fordblks >= kBlock * kBlocks;
    _exit((from_heap ? 1 : 0) | (kept ? 2 : 0));
  }
  int status = 0;
  EXPECT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status));
  return WEXITSTATUS(status);
}

}  // namespace

TEST(MallocTuning, FreedStepBuffersStayInTheHeap) {
  // Precondition that makes the check meaningful: glibc's defaults mmap the blocks or give the
  // freed memory back to the kernel.
  EXPECT_NE(heap_behaviour(false), 3) << "glibc's defaults already keep the blocks";
  EXPECT_EQ(heap_behaviour(true), 3) << "(100: keep_freed_memory refused)";
}

TEST(MallocTuning, GlibcTunablesOfTheUserWin) {
  const pid_t pid = fork();
  if (pid == 0) {
    setenv("GLIBC_TUNABLES", "glibc.malloc.trim_threshold=1048576", 1);
    _exit(fnvlp::keep_freed_memory() ? 1 : 0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_EQ(WEXITSTATUS(status), 0) << "mallopt applied over the user's GLIBC_TUNABLES";
}
