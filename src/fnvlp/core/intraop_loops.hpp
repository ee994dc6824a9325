#pragma once
// Included by every source with an at::parallel_for loop: that inline template forks threads only
// where _OPENMP is defined, and runs the whole range on the calling thread otherwise.
#ifndef _OPENMP
#error "this source's at::parallel_for loops need -fopenmp (CMakeLists.txt: FNVLP_INTRAOP_SOURCES)"
#endif
