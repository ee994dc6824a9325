#include "fnvlp/kernels/malloc_tuning.hpp"

#include <cstdlib>
#include <cstring>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace fnvlp {

bool keep_freed_memory() {
#if defined(__GLIBC__)
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if (tunables && std::strstr(tunables, "glibc.malloc.")) return false;
  // 32 MiB is glibc's largest mmap threshold on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX); setting it
  // also turns off the dynamic threshold, hence the explicit trim threshold beside it.
  const bool mmap_ok = mallopt(M_MMAP_THRESHOLD, 32 << 20) == 1;
  const bool trim_ok = mallopt(M_TRIM_THRESHOLD, -1) == 1;  // -1: never trim
  return mmap_ok && trim_ok;
#else
  return false;
#endif
}

}  // namespace fnvlp
