#pragma once
// The most elements one MPI call of Comm carries (MPI counts are int: 2^31 - 1); a longer buffer
// goes in chunks of it. Settable so that the tests reach the chunked path with small buffers.
#include <cstddef>

namespace fnvlp {

size_t max_count_per_call();
void set_max_count_per_call(size_t n);

}  // namespace fnvlp
