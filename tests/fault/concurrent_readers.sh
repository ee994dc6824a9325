#!/usr/bin/env bash
# Guarantee 6: shards on a file system whose locks fail (NFS without a lock daemon: flock() gives
# ENOLCK) are readable by the jobs, and two jobs read the same shards at once. Every process of
# this test runs with a preloaded flock() that fails so:
#  1. with HDF5's default locking (libhdf5 1.10.8's best effort forgives only ENOSYS), opening a
#     shard fails ("unable to lock file, errno = 37"): the failure the setting exists for, shown
#     here so that the test below can fail;
#  2. with the environment the SLURM jobs get (env/mpi-env.sh, sourced by slurm/common.sh), two
#     pretraining runs and a --verify read the shards concurrently, and both runs equal a run
#     made alone.
# shellcheck source=tests/fault/lib.sh
source "$(dirname "$0")/lib.sh"
make_data
printf '#include <errno.h>\nint flock(int fd, int op) { (void)fd; (void)op; errno = ENOLCK; return -1; }\n' >"$work/noflock.c"
cc -shared -fPIC -o "$work/noflock.so" "$work/noflock.c"
export LD_PRELOAD=$work/noflock.so

echo "== 1. HDF5's default file locking, locks failing: the shards cannot be opened"
set +e
env -u HDF5_USE_FILE_LOCKING "$bin/data_prep/fnvlp-shard" --verify "$work/shards" >"$work/locked.txt" 2>&1
rc=$?
set -e
[ "$rc" -ne 0 ] || fail "--verify succeeded with default locking and flock() failing: the preload had no effect"
expect_output "unable to lock file, errno = 37" "$work/locked.txt"
echo "  --verify exit $rc: $(grep -m1 -o 'unable to lock file[^)]*' "$work/locked.txt")"

echo "== 2. the jobs' environment (env/mpi-env.sh): concurrent readers on the same file system"
unset HDF5_USE_FILE_LOCKING
# shellcheck source=env/mpi-env.sh
source "$src/env/mpi-env.sh"
echo "  HDF5_USE_FILE_LOCKING=${HDF5_USE_FILE_LOCKING:-<unset>} from env/mpi-env.sh"
pretrain --out "$work/alone" >"$work/alone.txt" 2>&1 || { tail "$work/alone.txt"; fail "run alone"; }
pretrain --out "$work/x" >"$work/x.txt" 2>&1 &
px=$!
pretrain --out "$work/y" >"$work/y.txt" 2>&1 &
py=$!
"${mpirun[@]}" "$bin/data_prep/fnvlp-shard" --verify "$work/shards" >"$work/v.txt" 2>&1 || { tail "$work/v.txt"; fail "verify beside the runs"; }
wait $px || { tail "$work/x.txt"; fail "concurrent run x"; }
wait $py || { tail "$work/y.txt"; fail "concurrent run y"; }
same_metrics "$work/alone" "$work/x"
same_metrics "$work/alone" "$work/y"
echo "  two concurrent runs and a --verify: both runs equal the lone run"
echo "PASS"
