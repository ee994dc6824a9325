#include "fnvlp/similarity/row_quantiles.hpp"

#include <algorithm>
#include <cmath>

#include "fnvlp/core/error.hpp"
#include "fnvlp/similarity/spaces.hpp"

namespace fnvlp::similarity {
namespace {

// Ascending in-place heap sort: O(n log n), no recursion and no allocation, so it runs inside a
// kernel on any backend (std::sort would not on a device).
KOKKOS_INLINE_FUNCTION void sift_down(float* a, int64_t root, int64_t n) {
  while (true) {
    int64_t child = 2 * root + 1;
    if (child >= n) return;
    if (child + 1 < n && a[child] < a[child + 1]) ++child;
    if (!(a[root] < a[child])) return;
    const float t = a[root];
    a[root] = a[child];
    a[child] = t;
    root = child;
  }
}

KOKKOS_INLINE_FUNCTION void heap_sort(float* a, int64_t n) {
  for (int64_t i = n / 2 - 1; i >= 0; --i) sift_down(a, i, n);
  for (int64_t end = n - 1; end > 0; --end) {
    const float t = a[0];
    a[0] = a[end];
    a[end] = t;
    sift_down(a, 0, end);
  }
}

}  // namespace

void row_order_statistics(const float* S, int64_t M, const std::vector<int64_t>& ranks,
                          float* out) {
  FNVLP_CHECK(M >= 2, "row order statistics of a " << M << " x " << M << " matrix (needs M >= 2)");
  for (const int64_t r : ranks)
    FNVLP_CHECK(r >= 0 && r <= M - 2,
                "order statistic rank " << r << " outside the " << M - 1 << " off-diagonal values");
  FNVLP_CHECK(std::none_of(S, S + M * M, [](float v) { return std::isnan(v); }),
              "row order statistics: the similarity matrix holds NaN");
  static const KokkosRuntime runtime;  // no-op when the job initialised Kokkos itself
  (void)runtime;
  using Space = ExecSpace;
  const Space space;
  const auto R = static_cast<int64_t>(ranks.size());
  // S, the ranks and the output in the execution space's memory: the host buffers themselves on a
  // host space, copies on a device.
  const auto sim = Kokkos::create_mirror_view_and_copy(
      Mem<Space>(), HostUnmanaged2<const float>(S, static_cast<size_t>(M), static_cast<size_t>(M)));
  const auto rk = Kokkos::create_mirror_view_and_copy(
      Mem<Space>(), HostUnmanaged1<const int64_t>(ranks.data(), static_cast<size_t>(R)));
  const HostUnmanaged2<float> host_res(out, static_cast<size_t>(M), static_cast<size_t>(R));
  const auto res = Kokkos::create_mirror_view(Mem<Space>(), host_res);
  // Rows in blocks so the scratch stays small (M = 28,320, FALCON's largest |M|: 256 rows x 113
  // KB).
  const int64_t block = std::min<int64_t>(M, 256);
  View2<float, Space> scratch(
      Kokkos::ViewAllocateWithoutInitializing("fnvlp::similarity::row_scratch"), block, M - 1);
  for (int64_t r0 = 0; r0 < M; r0 += block) {
    const int64_t rows = std::min(block, M - r0);
    Kokkos::parallel_for(
        "fnvlp::similarity::row_order_statistics", Kokkos::RangePolicy<Space>(space, 0, rows),
        KOKKOS_LAMBDA(const int64_t b) {
          const int64_t i = r0 + b;
          float* row = &scratch(b, 0);
          int64_t n = 0;
          for (int64_t j = 0; j < M; ++j)
            if (j != i) row[n++] = sim(i, j);
          heap_sort(row, n);
          for (int64_t l = 0; l < R; ++l) res(i, l) = row[rk(l)];
        });
  }
  Kokkos::deep_copy(space, host_res, res);  // no copy where res is host_res
  space.fence();
}

}  // namespace fnvlp::similarity
