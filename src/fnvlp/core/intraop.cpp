#include "fnvlp/core/intraop.hpp"

#include <ATen/Parallel.h>

#include <algorithm>
#include <mutex>
#include <set>

#include "fnvlp/core/intraop_loops.hpp"

namespace fnvlp {

int intraop_threads() {
  const int64_t n = std::max(at::get_num_threads(), 1);
  std::mutex mutex;
  std::set<int> seen;
  at::parallel_for(0, n, 1, [&](int64_t, int64_t) {
    std::lock_guard<std::mutex> lock(mutex);
    seen.insert(at::get_thread_num());
  });
  return static_cast<int>(seen.size());
}

}  // namespace fnvlp
