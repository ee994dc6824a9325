#!/usr/bin/env bash
# kokkos.cuda_arch (a build against Kokkos on CUDA) and kernels.cuda_arch (any CUDA build): the GPUs
# users run on are A100s (sm_80) and H100/H200s (sm_90), and Kokkos 3.4 aborts at start-up unless
# its probe kernel runs code of the device's major compute capability (env/kokkos/3.4.01-sm90.patch).
# Every FILE given (the Kokkos library, fnvlp-simstat, fnvlp-pretrain with fnvlp's own kernels), and
# in an archive every member that holds device code, must carry sm_80 and sm_90 machine code, and
# each FILE compute_90 PTX (for newer GPUs' drivers to compile).
# Usage: kokkos_cuda_arch.sh CUOBJDUMP FILE...   Exit 0 when all do, 1 naming what lacks what.
set -uo pipefail
cuobjdump=$1
shift
[ -x "$cuobjdump" ] ||
  { echo "FAIL: no cuobjdump at '$cuobjdump' (the GPU build's venv has one)"; exit 1; }
status=0
for f in "$@"; do
  elf=$("$cuobjdump" --list-elf "$f" 2>&1) ||
    { echo "FAIL: $f: cuobjdump: $elf"; status=1; continue; }
  ptx=$("$cuobjdump" --list-ptx "$f" 2>&1)
  # Per member (one "member" line before each in an archive; none in an executable), the
  # architectures of its cubins, e.g. "lib.a:x.o sm_80 sm_90".
  report=$(awk '/^member /{name=$2; next}
    /ELF file/{n = split($NF, p, "."); arch[name] = arch[name] " " p[n - 1]}
    END {for (m in arch) print (m == "" ? "-" : m), arch[m]}' <<<"$elf")
  [ -n "$report" ] || { echo "FAIL: $f: no device code at all"; status=1; continue; }
  members=0 bad=0
  while read -r member archs; do
    members=$((members + 1))
    for want in sm_80 sm_90; do
      [[ " $archs " == *" $want "* ]] ||
        { echo "FAIL: $f: ${member/#-/the file} lacks $want machine code (has: $archs)"; bad=1; }
    done
  done <<<"$report"
  grep -q 'PTX file.*\.sm_90\.ptx' <<<"$ptx" || { echo "FAIL: $f: no compute_90 PTX"; bad=1; }
  [ "$bad" -eq 0 ] || { status=1; continue; }
  echo "OK: $f: sm_80 and sm_90 code in all $members object(s) with device code, compute_90 PTX"
done
exit "$status"
