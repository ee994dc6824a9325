#!/usr/bin/env bash
# Guarantee 6: with HDF5_USE_FILE_LOCKING=FALSE two jobs read the same shards at once (two
# pretraining runs and a --verify, concurrently) and both runs equal a run made alone.
source "$(dirname "$0")/lib.sh"
make_data
[ "$HDF5_USE_FILE_LOCKING" = FALSE ]
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
echo "PASS"
