#!/usr/bin/env bash
# fnvlp-synth must write the same bytes whatever the number of ranks: generate the same dataset
# with 1 and 3 ranks and compare the two trees. Usage: synth_ranks.sh BINARY_DIR
set -euo pipefail

bin_dir=${1:?usage: synth_ranks.sh BINARY_DIR}
synth=""
for candidate in "$bin_dir/fnvlp-synth" "$bin_dir/data_prep/fnvlp-synth"; do
  if [[ -x $candidate ]]; then synth=$candidate; break; fi
done
if [[ -z $synth ]]; then
  echo "synth_ranks: no fnvlp-synth under $bin_dir" >&2
  exit 2
fi

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
work=$(mktemp -d "${TMPDIR:-/tmp}/fnvlp_synth_ranks.XXXXXX")
trap 'rm -rf "$work"' EXIT

# 50 images do not divide by 3, so the ranks get unequal shares.
args=(--images 50 --captions-per-image 5 --classes 12 --image-size 32 --seed 42 --val-fraction 0.2)
mpirun --oversubscribe -np 1 "$synth" --out "$work/np1" "${args[@]}"
mpirun --oversubscribe -np 3 "$synth" --out "$work/np3" "${args[@]}"

if ! diff -r "$work/np1" "$work/np3"; then
  echo "synth_ranks: output differs between 1 and 3 ranks" >&2
  exit 1
fi
n=$(find "$work/np1/images" -name '*.png' | wc -l)
if [[ $n -ne 50 ]]; then
  echo "synth_ranks: expected 50 images, found $n" >&2
  exit 1
fi
echo "synth_ranks: 1 and 3 ranks wrote identical output ($n images)"
