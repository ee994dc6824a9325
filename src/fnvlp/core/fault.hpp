#pragma once
// Fault injection for the reliability tests (tests/fault/README.md). Compiled into every build
// and off by default: without the environment variable FNVLP_FAULT each point() is one relaxed
// atomic load and returns false.
//
// Grammar (whitespace ignored):
//   FNVLP_FAULT = entry { "," entry }
//   entry       = SITE ":" WHEN [ ":" RANK [ ":" ARG ] ]
//   WHEN        = K | K "-" M | "*"     the event numbers it fires on (inclusive range; * = all)
//   RANK        = R | "*"               the MPI rank it fires on (default *: every rank)
//   ARG         = a number, the site's parameter (step.sleep: seconds, default 3600)
// The event number is the `event` the call site passes (the training step, the checkpoint's
// step), or, for sites that pass none, the 1-based count of that site's calls in this process.
// Example: FNVLP_FAULT="step.kill:7:1,checkpoint.write:10" kills rank 1 at step 7 and fails the
// checkpoint write of step 10 on every rank.
//
// Sites and what they do when they fire (the action follows from the site's last word):
//   checkpoint.write  throws "cannot write '<file>': No space left on device (injected ...)"
//                     while a checkpoint file is being written (every checked write goes through)
//   checkpoint.kill   SIGKILL of this process after its checkpoint files are written and before
//                     the commit (the marker, the renames and `latest`)
//   step.kill         SIGKILL of this process at the start of the step
//   step.sleep        sleeps ARG seconds at the start of the step (a stalled rank)
//   step.throw        throws fnvlp::Error at the start of the step
//   step.oom          runs out of memory at the start of the step: throws std::bad_alloc, or
//                     does what set_out_of_memory() installed (train/device.cpp, on a CUDA
//                     device: an allocation larger than the device, CUDA's own out-of-memory)
//   step.nan          the caller makes this step's loss NaN
//   step.stop         the caller raises SIGUSR1 after the step (a preemption: checkpoint, exit 3)
//   step.export       the caller raises SIGUSR2 after the step (an embedding export on demand)
//   shard.read        throws an I/O error naming the shard file and dataset at an image read
//   startup.sleep     sleeps ARG seconds in the trainer's start-up (after the shards are opened)
//   export.sleep      sleeps ARG seconds in an embedding export (event: the epoch)
//   comm.sleep        sleeps ARG seconds before a rank starts its last gradient buckets
//                     (train/grad_buckets.hpp: a rank that never joins the all-reduce; event: the
//                     process's count of backward passes)
//   progress.sleep    sleeps ARG seconds at a progress report (core/progress.hpp: a tool's loops,
//                     fnvlp-shard, -eval, -simstat; event: the process's count of reports)
// An unknown site or a malformed entry throws fnvlp::Error naming FNVLP_FAULT at the first point()
// (a typo must not silently test nothing).
// A configuration may add entries of its own (set_configured: fnvlp-pretrain's fault.* settings),
// so the call sites are the one mechanism and messages name where an entry came from.
#include <cstdint>
#include <functional>
#include <string>

namespace fnvlp::fault {

inline constexpr const char* kEnvVar = "FNVLP_FAULT";

// Sets the rank matched against RANK (job_main calls it; otherwise the launcher's environment
// OMPI_COMM_WORLD_RANK / PMIX_RANK / PMI_RANK / SLURM_PROCID, else 0).
void set_rank(int rank);

// Call site hook. Returns true when the site fired and the caller must act (step.nan); the other
// actions (kill, sleep, throw) happen inside. `event` < 0: the site's own call count is used.
// `context` (a file name, "file:/dataset") goes into the messages.
bool point(const char* site, int64_t event = -1, const std::string& context = "");

// The start-of-step sites in one call: step.kill, step.sleep, step.throw, step.oom at `step`.
void at_step(int64_t step);

// What step.oom does instead of throwing std::bad_alloc (empty: restore that); it should throw.
void set_out_of_memory(std::function<void()> fn);

// True when FNVLP_FAULT is set and non-empty (parsed at first use).
bool enabled();

// Entries in the grammar above from another source than FNVLP_FAULT, `origin` naming it in the
// messages; they replace the previous configured ones and join FNVLP_FAULT's. Throws
// fnvlp::Error on a malformed entry.
void set_configured(const std::string& entries, const std::string& origin);

// Re-reads FNVLP_FAULT (tests that change the variable in-process); resets the call counters.
void reload();

}  // namespace fnvlp::fault
