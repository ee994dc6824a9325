#pragma once
// Preemption: SLURM sends SIGUSR1 ahead of the time limit (`--signal=B:USR1@120`, forwarded by the
// batch script) and SIGTERM on scancel or preemption. The handlers only record the signal in a
// lock-free atomic (async-signal-safe); the trainer polls it once per step through agree_stop(),
// so every rank stops after the same step, saves a checkpoint and exits with kExitRequeue.
//
// Under mpirun, OpenMPI forwards SIGUSR1/SIGUSR2 to the ranks but answers SIGTERM by killing the
// job; under SLURM (srun) every task receives the signal itself. Scripts should therefore signal
// the ranks with USR1 (the batch script's trap forwards it) and treat SIGTERM as the fallback.
#include <csignal>

#include "fnvlp/comm/comm.hpp"

namespace fnvlp::train {

// Exit code of a run that stopped on request after saving a committed checkpoint: the SLURM
// scripts requeue the job on it (`scontrol requeue`), and the next run resumes with
// `--resume auto`. Distinct from 1 (failure) and kExitUsage = 2 (bad command line).
inline constexpr int kExitRequeue = 3;

class StopRequest {
 public:
  // Installs the SIGUSR1 and SIGTERM handlers, and SIGUSR2 for agree_export (idempotent); the
  // previous ones are kept so that uninstall() can restore them.
  static void install();
  static void uninstall();
  static bool installed();

  // True once SIGUSR1 or SIGTERM arrived in this process (local: see agree_stop).
  static bool pending();
  // The signal that set the flag (the last one to arrive), 0 if none.
  static int signal_number();
  // Forgets a pending request (tests; or a trainer that chose to ignore it).
  static void clear();
  // Test helper: delivers `sig` to this process synchronously (std::raise), as SLURM would.
  static void raise_for_test(int sig = SIGUSR1);
};

// Collective, once per step on every rank: true on every rank when any rank has a pending stop
// request (allreduce max of the flag), so all ranks stop after the same step. Logs the first time
// it becomes true.
bool agree_stop(const Comm& comm);

// On-demand embedding export: SIGUSR2 (`scancel --signal=USR2 JOB`, or `kill -USR2` to mpirun,
// which forwards it) asks the trainer to export the embeddings of every pair after the current
// step and go on training. The handler, installed by StopRequest::install(), only sets a flag.
// Collective, once per step on every rank: true on every rank when any rank received SIGUSR2
// since the last agreement (which consumes the local requests), so all ranks export after the
// same step.
bool agree_export(const Comm& comm);

}  // namespace fnvlp::train
