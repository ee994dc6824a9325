#!/usr/bin/env bash
# ctest lint.conventions: the ARCHITECTURE.md §12 rules a compiler does not check.
#  1. mpi.h is included only inside src/fnvlp/comm/, and no MPI_ name is used outside it (Comm's
#     own tests, tests/mpi/test_comm.cpp, excepted).
#  2. Rooms include only the rooms below them (ROOM_DEPS); train/ and eval/ meet in store/, and
#     train/ reads eval/ only through eval/retrieval.hpp (pure metrics on vectors).
#  3. A .cpp with a header of its own includes it first, so that header compiles on its own; the
#     headers without a .cpp get a translation unit each in target fnvlp_header_check.
set -euo pipefail
src=$1
cd "$src"
fail=0
problem() {
  echo "$1"
  fail=1
}

mapfile -t code < <(find src jobs data_prep analysis tests -type f \( -name '*.cpp' -o -name '*.hpp' \) | sort)

# --- 1. MPI stays in comm/ ------------------------------------------------------------------------
for f in "${code[@]}"; do
  case $f in src/fnvlp/comm/* | tests/mpi/test_comm.cpp) continue ;; esac
  # Code only: comment lines and trailing // comments may name MPI calls.
  hits=$(sed -e 's#//.*$##' -e '/^[[:space:]]*\*/d' "$f" | grep -nE '#include[[:space:]]*<mpi\.h>|\bMPI_[A-Za-z_]+' || true)
  [ -z "$hits" ] || problem "$f: MPI outside src/fnvlp/comm/ (use Comm and ReduceOp): $hits"
done

# --- 2. the room graph --------------------------------------------------------------------------
declare -A ROOM_DEPS=(
  [core]=""
  [kernels]="core"
  [comm]="core kernels"
  [data]="core kernels comm"
  [model]="core kernels comm data"
  [loss]="core kernels comm data model"
  [store]="core kernels comm data model"
  [similarity]="core kernels comm data store"
  [negatives]="core kernels comm data model loss similarity store"
  [report]="core kernels comm data store"
  [eval]="core kernels comm data model loss store"
  [train]="core kernels comm data model loss negatives similarity store"
  [finetune]="core kernels comm data model loss negatives similarity store train eval"
)
# The declared interfaces across the train/eval line: "room:header".
ALLOWED_EXTRA=" train:eval/retrieval.hpp "
for f in "${code[@]}"; do
  case $f in src/fnvlp/*/*) ;; *) continue ;; esac
  room=${f#src/fnvlp/}
  room=${room%%/*}
  if [ -z "${ROOM_DEPS[$room]+set}" ]; then
    problem "$f: room $room/ is not in ROOM_DEPS of $0 (ARCHITECTURE.md §3 lists the rooms)"
    continue
  fi
  while read -r inc; do
    to=${inc%%/*}
    [ "$to" = "$room" ] && continue
    [[ " ${ROOM_DEPS[$room]} " == *" $to "* ]] && continue
    [[ "$ALLOWED_EXTRA" == *" $room:$inc "* ]] && continue
    problem "$f: $room/ includes fnvlp/$inc ($room/ may include: ${ROOM_DEPS[$room]:-nothing})"
  done < <(sed -n 's/^#include "fnvlp\/\(.*\)"$/\1/p' "$f" | grep / || true)
done

# --- 3. own header first --------------------------------------------------------------------------
for f in "${code[@]}"; do
  case $f in src/fnvlp/*.cpp) ;; *) continue ;; esac
  h=${f%.cpp}.hpp
  [ -f "$h" ] || continue
  first=$(grep -m1 '^#include' "$f" || true)
  [ "$first" = "#include \"${h#src/}\"" ] || problem "$f: first include is '$first', not its own ${h#src/}"
done

if [ "$fail" = 0 ]; then
  echo "conventions: ${#code[@]} files OK (MPI in comm/, room graph, own header first)"
fi
exit "$fail"
