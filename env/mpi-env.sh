# shellcheck shell=bash
# Sourced by the scripts: settings every fnvlp MPI run needs on this kind of machine.
# OpenMPI refuses to run as root (containers, CI) without explicit consent.
if [ "$(id -u)" -eq 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
# HDF5 file locks break on many shared filesystems; shards are read-only once written anyway.
export HDF5_USE_FILE_LOCKING=FALSE
# One BLAS/OpenMP thread per rank: ranks are the unit of parallelism (ARCHITECTURE.md §13).
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}
