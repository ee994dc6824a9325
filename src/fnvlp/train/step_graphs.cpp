#include "fnvlp/train/step_graphs.hpp"

#include <spdlog/spdlog.h>

#include <exception>
#include <map>
#include <string>
#include <utility>

#include "fnvlp/core/error.hpp"

#if FNVLP_WITH_CUDA
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#endif

namespace fnvlp::train {

struct StepGraphs::Impl {
  int64_t graphs = 0, replays = 0, eager = 0;
#if FNVLP_WITH_CUDA
  struct Entry {
    int64_t calls = 0;
    std::unique_ptr<at::cuda::CUDAGraph> graph;
  };
  std::map<int64_t, Entry> entries;
  decltype(at::cuda::graph_pool_handle()) pool{0, 0};  // shared by every graph, made at first use

  // `side` waits for the work queued on `current` so far (the staged inputs of this step).
  static void order_after(const c10::cuda::CUDAStream& current, const c10::cuda::CUDAStream& side) {
    cudaEvent_t ready = nullptr;
    FNVLP_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming) == cudaSuccess,
                "cuda_graphs: cudaEventCreate failed");
    const cudaError_t rc = cudaEventRecord(ready, current.stream()) == cudaSuccess
                               ? cudaStreamWaitEvent(side.stream(), ready, 0)
                               : cudaErrorUnknown;
    cudaEventDestroy(ready);
    FNVLP_CHECK(rc == cudaSuccess,
                "cuda_graphs: ordering the capture stream failed: " << cudaGetErrorString(rc));
  }

  // Captures `step` for `key` into e.graph on a side stream; throws, with the capture ended, on
  // any failure inside it (an operation that synchronises, a shape that changes, ...).
  void capture(int64_t key, const std::string& what, Entry& e, const std::function<void()>& step) {
    const c10::cuda::CUDAStream current = c10::cuda::getCurrentCUDAStream();
    const c10::cuda::CUDAStream side =
        c10::cuda::getStreamFromPool(/*isHighPriority=*/false, current.device_index());
    c10::cuda::device_synchronize();  // nothing of earlier steps still running into the capture
    order_after(current, side);
    if (pool.first == 0 && pool.second == 0) pool = at::cuda::graph_pool_handle();
    e.graph = std::make_unique<at::cuda::CUDAGraph>();
    {
      const c10::cuda::CUDAStreamGuard on_side(side);
      e.graph->capture_begin(pool, cudaStreamCaptureModeThreadLocal);
      try {
        step();
        e.graph->capture_end();
      } catch (const std::exception& ex) {
        cudaGraph_t partial = nullptr;
        (void)cudaStreamEndCapture(side.stream(), &partial);  // leave the stream usable
        if (partial) (void)cudaGraphDestroy(partial);
        (void)cudaGetLastError();
        e.graph.release();  // its capture never ended: its destructor would misreport
        FNVLP_FAIL("train.cuda_graphs: capturing " << what << " (shapes " << key
                                                   << ") failed: " << ex.what()
                                                   << "; run with train.cuda_graphs=false");
      }
    }
    order_after(side, current);
    ++graphs;
    spdlog::info("cuda_graphs: captured {} for shapes {} ({} graph{})", what, key, graphs,
                 graphs == 1 ? "" : "s");
  }
#endif
};

StepGraphs::StepGraphs(bool enabled, std::string what)
    : enabled_(enabled), what_(std::move(what)), impl_(std::make_unique<Impl>()) {
#if !FNVLP_WITH_CUDA
  FNVLP_CHECK(!enabled, "train.cuda_graphs needs the CUDA build (FNVLP_GPU=1 env/build.sh)");
#endif
}

StepGraphs::~StepGraphs() = default;

void StepGraphs::run(int64_t key, const std::function<void()>& step) {
  Impl& im = *impl_;
#if FNVLP_WITH_CUDA
  if (enabled_) {
    Impl::Entry& e = im.entries[key];
    if (!e.graph && e.calls++ > 0) im.capture(key, what_, e, step);
    if (e.graph) {
      e.graph->replay();  // the capture ran nothing: its first replay is this step
      ++im.replays;
      return;
    }
  }
#endif
  ++im.eager;
  step();
}

int64_t StepGraphs::graphs() const { return impl_->graphs; }
int64_t StepGraphs::replays() const { return impl_->replays; }
int64_t StepGraphs::eager() const { return impl_->eager; }

}  // namespace fnvlp::train
