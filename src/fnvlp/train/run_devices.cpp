#include "fnvlp/train/run_devices.hpp"

#include <spdlog/spdlog.h>

#include "fnvlp/comm/tensors.hpp"
#include "fnvlp/core/blas.hpp"
#include "fnvlp/core/host.hpp"
#include "fnvlp/core/intraop.hpp"

namespace fnvlp::train {

RunDevices::RunDevices(const Comm& comm, const TrainConfig& train, const CommConfig& cfg)
    : comm_(comm) {
  torch::set_num_threads(static_cast<int>(train.threads));
  set_blas_threads(static_cast<int>(train.threads));
  if (const int cpus = usable_cpus(); cpus > 0 && train.threads > cpus)
    spdlog::warn(
        "rank {}: train.threads is {} but this process may run on {} CPU(s) (its affinity mask, "
        "from the launcher's binding): the threads and the loader share them. Give each rank "
        "train.threads CPUs: srun --cpus-per-task, mpirun --bind-to none or --map-by slot:PE=N",
        comm.rank(), train.threads, cpus);
  if (const int team = intraop_threads(); team != train.threads)
    spdlog::warn(
        "rank {}: fnvlp's own loops (augmentation, LayerNorm, GELU, attention, MLM loss, AdamW) "
        "run on {} thread(s), not train.threads {}: this build's OpenMP runtime is not the one "
        "torch::set_num_threads sets (CMakeLists.txt: FNVLP_INTRAOP_SOURCES)",
        comm.rank(), team, train.threads);
  choice = choose_device(comm, train.device);
  upload = BatchUpload(choice.device);
  check_precision(comm, train.precision, choice.device);
  configure_cuda_math(choice.device, train.deterministic);
  model::set_attention_kernel(train.attention);
  model::set_norm_kernel(train.norm_kernel);
  nccl = make_device_comm(comm, choice, cfg.backend, cfg.timeout_s);
  set_device_collectives(comm, nccl.get());
  if (comm.is_root())
    spdlog::info("pretrain: device {}, precision {}, device collectives {}, add + LayerNorm {}",
                 choice.describe(), config::enum_to_name(train.precision),
                 nccl ? "nccl" : (choice.device.is_cuda() ? "mpi (host copies)" : "mpi"),
                 choice.device.is_cuda() ? config::enum_to_name(train.norm_kernel) : "aten (cpu)");
}

RunDevices::~RunDevices() { set_device_collectives(comm_, nullptr); }

}  // namespace fnvlp::train
