#pragma once
// A minimal fork-join loop for per-rank helper threads (image decoding, checksums). MPI ranks
// stay the main unit of parallelism; threads only fill cores a rank would leave idle.
#include <cstddef>
#include <functional>

namespace fnvlp {

// Calls fn(i) for every i in [0, n) on up to `threads` threads, the caller being one of them.
// Indices are handed out dynamically (uneven costs balance). The first exception thrown by any
// call is rethrown here after all threads have stopped.
void parallel_for(size_t n, int threads, const std::function<void(size_t)>& fn);

}  // namespace fnvlp
