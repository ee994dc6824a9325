#pragma once
// glibc malloc settings for jobs that allocate and free the same large buffers every step.

namespace fnvlp {

// By default glibc serves blocks above a threshold (128 KiB, raised to the largest block freed so
// far) with mmap, and gives the top of the heap back to the kernel once more than twice that
// threshold is free there. libtorch frees every step's activations and gradients at the end of
// the step, so the kernel takes those pages back and the next step faults them in again, zeroed,
// page by page (tiny preset, 2 ranks, 40 steps: 1.96 M minor faults and 15% of the CPU time in
// the kernel; see tests/bench/README.md). This fixes the mmap threshold at its maximum (32 MiB)
// and never trims the heap, so freed memory is reused by the next step. The cost is that a job's
// resident set stays at its peak. Returns false, changing nothing, where the user set glibc's
// malloc tunables (GLIBC_TUNABLES=glibc.malloc....) or where the C library is not glibc.
bool keep_freed_memory();

}  // namespace fnvlp
