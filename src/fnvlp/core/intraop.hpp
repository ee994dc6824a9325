#pragma once
// fnvlp's own intra-op loops (augmentation, LayerNorm, GELU, attention, MLM loss, AdamW, bias
// gradients) run through at::parallel_for on libtorch's OpenMP threads.

namespace fnvlp {

// Threads one of those loops runs on when called from this thread: torch::set_num_threads's
// count when they are built with OpenMP on libtorch's runtime, 1 when they run serially. Counted,
// not assumed: a parallel_for over that many items records the distinct threads that ran it.
int intraop_threads();

}  // namespace fnvlp
