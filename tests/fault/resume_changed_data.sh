#!/usr/bin/env bash
# A resume onto other data is refused (issue 63): GloFND at 2 ranks, 12 steps with a checkpoint,
# then --resume auto with --data on another synthetic set of the same size (same pair count,
# other captions and images). Every rank exits 2 before anything loads, one message naming the
# checkpoint's data directory and digest and the new ones; no step runs. A copy of the same shards
# in another directory is the same data: that resume continues. (Changed settings:
# resume_changed_config.sh.)
source "$(dirname "$0")/lib.sh"
make_data
"${mpirun[@]}" "$bin/data_prep/fnvlp-synth" --out "$work/synth2" --images 240 \
  --captions-per-image 5 --classes 8 --image-size 64 --seed 4 --val-fraction 0.1 >/dev/null
"${mpirun[@]}" "$bin/data_prep/fnvlp-shard" --input "$work/synth2/captions.json" \
  --image-root "$work/synth2" --split-file "$work/synth2/splits.json" --split train \
  --vocab "$vocab" --out "$work/shards2" --image-size 64 --shard-size 300 >/dev/null
n1=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["num_pairs"])' "$work/shards/manifest.json")
n2=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["num_pairs"])' "$work/shards2/manifest.json")
[ "$n1" = "$n2" ] || fail "the two sets differ in size ($n1, $n2): the test needs the same pair_id space"
glofnd=(--set negatives.method=glofnd --set checkpoint.every_steps=6)

echo "== GloFND, 12 steps on the first set"
pretrain --out "$work/run" "${glofnd[@]}" --set train.max_steps=12 >"$work/first.txt" 2>&1 ||
  { tail -20 "$work/first.txt"; fail "the first run failed"; }
lines=$(grep -c '"itc"' "$work/run/metrics.jsonl")

echo "== resumed on the second set (same size): refused"
data=$work/shards2 expect_failure pretrain --out "$work/run" "${glofnd[@]}" \
  --set train.max_steps=18 --resume auto
[ "$rc" -eq 2 ] || { tail -20 "$work/out.txt"; fail "exit $rc, expected 2"; }
expect_output "the checkpoint .*step-0000012 was written on the data in $work/shards \(manifest digest [0-9a-f]{64}, $n1 pairs"
expect_output "\-\-data $work/shards2 holds other data \(manifest digest [0-9a-f]{64}"
[ "$(grep -c 'holds other data' "$work/out.txt")" -eq 1 ] || fail "the error was reported more than once"
! grep -q "resumed from" "$work/out.txt" || fail "a rank resumed"
[ "$(grep -c '"itc"' "$work/run/metrics.jsonl")" -eq "$lines" ] || fail "a step ran on the other data"

echo "== resumed on a copy of the first set elsewhere: continues"
cp -r "$work/shards" "$work/shards_copy"
data=$work/shards_copy pretrain --out "$work/run" "${glofnd[@]}" --set train.max_steps=18 \
  --resume auto >"$work/copy.txt" 2>&1 || { tail -20 "$work/copy.txt"; fail "the resume on a copy failed"; }
expect_output "resumed from .*step-0000012" "$work/copy.txt"
echo "PASS"
